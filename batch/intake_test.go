package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

type intakeResult struct {
	code   string
	status int
	body   string
}

// intakeRig is a fixture with a Redis intake on a real redis-server.
type intakeRig struct {
	*fixture
	rdb *redis.Client
	cfg batch.IntakeConfig
	// last is the id of the last result read.
	last string
}

func newIntakeRig(t *testing.T, eng *engine) *intakeRig {
	srv := redistest.Start(t)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	r := &intakeRig{fixture: newFixture(t, eng, fixtureOptions{}), rdb: rdb, cfg: batch.IntakeConfig{URL: srv.URL(), Consumer: "gw-1"}, last: "0"}
	return r
}

func (r *intakeRig) start(t *testing.T) *batch.Intake {
	t.Helper()
	in, err := batch.NewIntake(r.svc, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	return in
}

func (r *intakeRig) add(t *testing.T, fields ...any) {
	t.Helper()
	if err := r.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: batch.DefaultIntakeStream, Values: fields}).Err(); err != nil {
		t.Fatal(err)
	}
}

func chatBody(content string) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, testModel, content)
}

// results reads the result stream until it has n more results, by id.
func (r *intakeRig) results(t *testing.T, n int) map[string]intakeResult {
	t.Helper()
	out := map[string]intakeResult{}
	for len(out) < n {
		streams, err := r.rdb.XRead(t.Context(), &redis.XReadArgs{Streams: []string{batch.DefaultResultsStream, r.last}, Block: time.Second}).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range streams[0].Messages {
			r.last = m.ID
			id := m.Values["id"].(string)
			if _, dup := out[id]; dup {
				t.Errorf("two results for %s", id)
			}
			status, _ := strconv.Atoi(m.Values["status_code"].(string))
			out[id] = intakeResult{code: m.Values["code"].(string), status: status, body: m.Values["body"].(string)}
		}
	}
	return out
}

// TestIntakeAnswersEveryRequestByID: requests from the stream are run and
// answered on the result stream under their ids, each with its code.
func TestIntakeAnswersEveryRequestByID(t *testing.T) {
	eng := newEngine(t)
	r := newIntakeRig(t, eng)
	r.start(t)
	r.add(t, "id", "ok-1", "tenant", "acme", "body", chatBody("one"))
	r.add(t, "id", "ok-2", "priority", "standard", "deadline", time.Now().Add(time.Hour).Format(time.RFC3339), "body", chatBody("two"))
	r.add(t, "id", "refused", "body", chatBody("refuse"))
	r.add(t, "id", "no-model", "body", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`)
	r.add(t, "id", "no-body")
	r.add(t, "id", "bad-priority", "priority", "interactive", "body", chatBody("x"))
	r.add(t, "id", "late", "deadline", strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10), "body", chatBody("late"))
	got := r.results(t, 7)
	want := map[string]struct {
		code   string
		status int
	}{
		"ok-1": {batch.CodeCompleted, 200}, "ok-2": {batch.CodeCompleted, 200},
		"refused": {batch.CodeRefused, 400}, "no-model": {batch.CodeInvalidRequest, 404},
		"no-body": {batch.CodeInvalidRequest, 400}, "bad-priority": {batch.CodeInvalidRequest, 400},
		"late": {batch.CodeDeadline, 408},
	}
	for id, w := range want {
		g := got[id]
		if g.code != w.code || g.status != w.status || !json.Valid([]byte(g.body)) {
			t.Errorf("%s: %+v, want %s %d", id, g, w.code, w.status)
		}
	}
	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(got["ok-2"].body), &answer) != nil || len(answer.Choices) != 1 || answer.Choices[0].Message.Content != "answer to two" {
		t.Errorf("ok-2 answered %s", got["ok-2"].body)
	}
	pending, err := r.rdb.XPending(t.Context(), batch.DefaultIntakeStream, batch.DefaultIntakeGroup).Result()
	if err != nil || pending.Count != 0 {
		t.Errorf("%+v pending after every answer (%v)", pending, err)
	}
}

// TestIntakeCancel: a cancel entry stops a request in flight, which is
// answered cancelled.
func TestIntakeCancel(t *testing.T) {
	eng := newEngine(t)
	release := eng.block(0)
	defer release()
	r := newIntakeRig(t, eng)
	r.start(t)
	r.add(t, "id", "long", "body", chatBody("long"))
	for eng.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	r.add(t, "cancel", "long")
	if got := r.results(t, 1)["long"]; got.code != batch.CodeCancelled {
		t.Fatalf("long: %+v", got)
	}
}

// TestIntakeResumesPendingAfterRestart: a request in flight when the
// intake stops stays pending and is answered, once, by the next start.
func TestIntakeResumesPendingAfterRestart(t *testing.T) {
	eng := newEngine(t)
	release := eng.block(0)
	r := newIntakeRig(t, eng)
	in := r.start(t)
	r.add(t, "id", "p1", "body", chatBody("pending"))
	for eng.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	release()
	if n, _ := r.rdb.XLen(t.Context(), batch.DefaultResultsStream).Result(); n != 0 {
		t.Fatalf("%d results before the restart", n)
	}
	r.start(t)
	if got := r.results(t, 1)["p1"]; got.code != batch.CodeCompleted {
		t.Fatalf("p1: %+v", got)
	}
}
