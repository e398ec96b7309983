//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// quickJobs makes claims short and polls frequent, so the tests below
// see a take-over in seconds; they wait for outcomes with generous
// bounds, not for the time to pass. The lease is still long enough that
// a gateway under the race detector on a loaded machine renews in time.
func quickJobs(c *stack.Config) {
	c.Responses.JobLease = 3 * time.Second
	c.Responses.JobPoll = 20 * time.Millisecond
}

// jobScale is the fleet's time scale for background tests: real time,
// so that a long answer is still running when the test acts on it.
const jobScale = 1

// longJob starts a background response on gw that runs for seconds.
func longJob(t *testing.T, gw openai.Client, tokens int64) *responses.Response {
	t.Helper()
	r, err := gw.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: defaultSimServedModel, Input: input("Tell me a long story."),
		MaxOutputTokens: openai.Int(tokens), Background: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRunning waits until gw reads response id in progress.
func waitRunning(t *testing.T, gw openai.Client, id string) {
	t.Helper()
	r := waitStatus(t, gw, id, 30*time.Second, func(s responses.ResponseStatus) bool { return s != responses.ResponseStatusQueued })
	if r.Status != responses.ResponseStatusInProgress {
		t.Fatalf("response %s: %s, want in_progress", id, r.Status)
	}
}

// waitEnd waits, for at most limit, until gw reads response id ended.
func waitEnd(t *testing.T, gw openai.Client, id string, limit time.Duration) *responses.Response {
	t.Helper()
	return waitStatus(t, gw, id, limit, func(s responses.ResponseStatus) bool {
		return s != responses.ResponseStatusQueued && s != responses.ResponseStatusInProgress
	})
}

// waitStatus reads response id through gw until done says its status is
// the one awaited, for at most limit.
func waitStatus(t *testing.T, gw openai.Client, id string, limit time.Duration, done func(responses.ResponseStatus) bool) *responses.Response {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r, err := gw.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if done(r.Status) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("response %s still %s after %v", id, r.Status, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestActiveActiveBackgroundCancel: a background response started on one
// gateway is cancelled through the other, which answers it cancelled;
// the first reads it cancelled too.
func TestActiveActiveBackgroundCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw, _ := startPairWith(t, jobScale, quickJobs)
	r := longJob(t, gw[0], 4000)
	waitRunning(t, gw[1], r.ID)
	got, err := gw[1].Responses.Cancel(t.Context(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != responses.ResponseStatusCancelled {
		t.Fatalf("cancel through gateway 1: %s, want cancelled", got.Status)
	}
	if a := waitEnd(t, gw[0], r.ID, 30*time.Second); a.Status != responses.ResponseStatusCancelled {
		t.Errorf("gateway 0 reads %s, want cancelled", a.Status)
	}
}

// TestActiveActiveBackgroundResume: a stream resumed from starting_after
// through the gateway that does not run the response follows it to its
// end, every event once and in order, and ends with the response the
// other gateway stored.
func TestActiveActiveBackgroundResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw, _ := startPairWith(t, jobScale, quickJobs)
	r := longJob(t, gw[0], 200)
	waitRunning(t, gw[1], r.ID)
	const after = 2
	stream := gw[1].Responses.GetStreaming(t.Context(), r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(after)})
	var seqs []int64
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
		seqs = append(seqs, last.SequenceNumber)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seqs) == 0 || seqs[0] != after+1 {
		t.Fatalf("sequence numbers %v: want from %d", seqs, after+1)
	}
	for i, s := range seqs {
		if s != seqs[0]+int64(i) {
			t.Fatalf("sequence numbers %v: a gap or a repeat at %d", seqs, i)
		}
	}
	if last.Type != "response.completed" && last.Type != "response.incomplete" {
		t.Fatalf("the stream through gateway 1 ended with %s", last.Type)
	}
	stored, err := gw[0].Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if last.Response.ID != r.ID || last.Response.OutputText() != stored.OutputText() || stored.OutputText() == "" {
		t.Errorf("streamed end %q, stored %q", last.Response.OutputText(), stored.OutputText())
	}
}

// childEnv names what a child gateway (TestActiveActiveGatewayChild)
// serves: the Redis URL and the pool, as JSON.
const childEnv = "TURNPIKE_TEST_CHILD_GATEWAY"

type childSpec struct {
	Redis string
	Pool  pools.PoolConfig
}

// TestActiveActiveGatewayChild is a gateway in a process of its own,
// for TestActiveActiveKill to kill -9: it prints its address and serves
// until killed. Without the environment variable it does nothing.
func TestActiveActiveGatewayChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the child gateway of TestActiveActiveKill")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	st, err := startStack(context.Background(), gatewayConfig(t, spec.Redis, spec.Pool, quickJobs), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("addr " + st.Addr() + "\n")
	select {}
}

// TestActiveActiveKill: a gateway killed with SIGKILL while it runs a
// background response leaves its claim to run out; the other gateway
// then takes the response over and completes it.
func TestActiveActiveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet, a gateway and a child process")
	}
	srv, pool := startShared(t, jobScale)
	a, kill := startChildGateway(t, srv.URL(), pool)
	b, _ := startGateway(t, srv.URL(), pool, quickJobs)

	r := longJob(t, a, 300)
	waitRunning(t, b, r.ID)
	kill()
	if got, _ := b.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{}); got.Status != responses.ResponseStatusInProgress {
		t.Fatalf("at the kill: %s, want in_progress (a longer answer is needed)", got.Status)
	}
	got := waitEnd(t, b, r.ID, 2*time.Minute)
	if got.Status != responses.ResponseStatusCompleted && got.Status != responses.ResponseStatusIncomplete {
		t.Fatalf("after the kill: %s %+v, want run to its end by the other gateway", got.Status, got.Error)
	}
	if got.OutputText() == "" {
		t.Error("the taken-over response has no output")
	}
}

// startChildGateway starts a gateway on redisURL and pool in a child
// process (TestActiveActiveGatewayChild) and returns an SDK client of it
// and a kill that ends it with SIGKILL and waits for it.
func startChildGateway(t *testing.T, redisURL string, pool pools.PoolConfig) (openai.Client, func()) {
	t.Helper()
	spec, _ := json.Marshal(childSpec{Redis: redisURL, Pool: pool})
	child := exec.Command(os.Args[0], "-test.run=^TestActiveActiveGatewayChild$")
	// The child's temporary directories go under one of this test's: a
	// child killed with SIGKILL runs no cleanup of its own.
	child.Env = append(os.Environ(), childEnv+"="+string(spec), "TMPDIR="+t.TempDir())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if killed {
			return
		}
		killed = true
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		child.Wait()
	}
	t.Cleanup(kill)
	addr := ""
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the child gateway did not start")
	}
	return sdkClient(addr), kill
}
