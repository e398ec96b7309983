package batch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

const testModel = "test-model"

// engine answers chat completions with "answer to <last user message>";
// a message "refuse" gets a 400, and while gate is set every request
// waits on it.
type engine struct {
	*httptest.Server
	hits atomic.Int64
	gate atomic.Pointer[chan struct{}]
	// blockAfter, when > 0, makes requests past that many wait on gate.
	blockAfter atomic.Int64
}

func newEngine(t *testing.T) *engine {
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		n := e.hits.Add(1)
		if g := e.gate.Load(); g != nil && (e.blockAfter.Load() == 0 || n > e.blockAfter.Load()) {
			select {
			case <-*g:
			case <-r.Context().Done():
				return
			}
		}
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		last := req.Messages[len(req.Messages)-1].Content
		w.Header().Set("Content-Type", "application/json")
		if last == "refuse" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"This request is refused.","type":"invalid_request_error","param":"messages","code":"refused"}}`)
			return
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`, testModel, "answer to "+last)
	}))
	t.Cleanup(e.Close)
	return e
}

// block makes requests wait (past the first n, if n > 0) until the
// returned function is called.
func (e *engine) block(n int64) (release func()) {
	g := make(chan struct{})
	e.blockAfter.Store(n)
	e.gate.Store(&g)
	return func() { e.gate.Store(nil); close(g) }
}

type fixture struct {
	svc     *batch.Service
	client  openai.Client
	front   *httptest.Server
	metrics *prometheus.Registry
}

type fixtureOptions struct {
	db    *state.DB
	opts  batch.Options
	flow  *turns.FlowControl
	quota turns.Quota
}

func newFixture(t *testing.T, eng *engine, fo fixtureOptions) *fixture {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel}, Endpoints: []pools.EndpointConfig{{URL: eng.URL}}}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)}) // fresh for the test's span
	}
	metrics := prometheus.NewRegistry()
	dopts := dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: log, Metrics: metrics}
	if fo.flow != nil {
		fc := *fo.flow
		fc.EnsureDefaults()
		flow, err := turns.New(turns.Config{FlowControl: fc, Tenants: []turns.Tenant{{Name: "acme", Weight: 1, Quota: fo.quota}}}, turns.WithRegisterer(metrics))
		if err != nil {
			t.Fatal(err)
		}
		flow.Start(context.Background())
		t.Cleanup(func() { flow.Close(context.Background()) })
		dopts.Flow = flow
	}
	d, err := dispatch.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	db := fo.db
	if db == nil {
		db = state.NewMemory()
		t.Cleanup(func() { db.Close() })
	}
	opts := fo.opts
	opts.DB, opts.Dispatch, opts.Logger, opts.Metrics = db.Namespace("batch/"), d, log, metrics
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff, opts.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	}
	svc, err := batch.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var ae *apierror.Error
		if !errors.As(err, &ae) {
			var he *echo.HTTPError
			if errors.As(err, &he) {
				ae = apierror.New(he.Code, "", "%v", he.Message)
			} else {
				ae = apierror.Internal(err)
			}
		}
		ae.Write(c.Response())
	}
	// The tenant is the API key, as the gateway's authentication would
	// make it.
	svc.Register(e.Group("/v1"), func(c echo.Context) string {
		return strings.TrimPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
	})
	front := httptest.NewServer(e)
	t.Cleanup(front.Close)
	return &fixture{svc: svc, front: front, metrics: metrics, client: clientFor(front.URL, "acme")}
}

func clientFor(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func chatLine(id, content string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":%q}]}}`, id, testModel, content)
}

func (f *fixture) upload(t *testing.T, content string) *openai.FileObject {
	t.Helper()
	file, err := f.client.Files.New(t.Context(), openai.FileNewParams{
		File:    openai.File(strings.NewReader(content), "requests.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	return file
}

func (f *fixture) create(t *testing.T, fileID string) *openai.Batch {
	t.Helper()
	b, err := f.client.Batches.New(t.Context(), openai.BatchNewParams{
		InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata:         map[string]string{"job": "nightly"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// poll gets the batch until cond holds (the test's own timeout bounds it).
func (f *fixture) poll(t *testing.T, id string, cond func(*openai.Batch) bool) *openai.Batch {
	t.Helper()
	for {
		b, err := f.client.Batches.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(b) {
			return b
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ended(b *openai.Batch) bool {
	switch b.Status {
	case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusCancelled, openai.BatchStatusExpired:
		return true
	}
	return false
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// download reads an output or error file by custom_id; "" reads nothing.
func (f *fixture) download(t *testing.T, id string) map[string]outLine {
	t.Helper()
	out := map[string]outLine{}
	if id == "" {
		return out
	}
	resp, err := f.client.Files.Content(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		if _, dup := out[l.CustomID]; dup {
			t.Errorf("custom_id %s appears twice", l.CustomID)
		}
		out[l.CustomID] = l
	}
	return out
}

func answerOf(t *testing.T, l outLine) string {
	t.Helper()
	var body struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if l.Response == nil || json.Unmarshal(l.Response.Body, &body) != nil || len(body.Choices) == 0 {
		t.Fatalf("%s: no chat completion in %+v", l.CustomID, l)
	}
	return body.Choices[0].Message.Content
}

func lines(n int) (string, []string) {
	var sb strings.Builder
	var ids []string
	for i := range n {
		id := fmt.Sprintf("req-%03d", i)
		ids = append(ids, id)
		sb.WriteString(chatLine(id, "question "+id) + "\n")
	}
	return sb.String(), ids
}

// TestBatchRoundTrip: the OpenAI SDK uploads a file, creates a batch,
// polls it to completion and downloads an answer for every custom_id.
func TestBatchRoundTrip(t *testing.T) {
	eng := newEngine(t)
	f := newFixture(t, eng, fixtureOptions{opts: batch.Options{Config: batch.Config{Concurrency: 4}}})
	content, ids := lines(25)
	file := f.upload(t, content)
	if file.Purpose != openai.FileObjectPurposeBatch || file.Bytes != int64(len(content)) || file.Filename != "requests.jsonl" {
		t.Fatalf("file: %+v", file)
	}
	b := f.create(t, file.ID)
	if b.Status != openai.BatchStatusValidating || b.InputFileID != file.ID || b.Metadata["job"] != "nightly" || b.ExpiresAt-b.CreatedAt != 24*3600 {
		t.Fatalf("created: %+v", b)
	}
	b = f.poll(t, b.ID, ended)
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("status %s, errors %+v", b.Status, b.Errors)
	}
	if rc := b.RequestCounts; rc.Total != 25 || rc.Completed != 25 || rc.Failed != 0 {
		t.Fatalf("request_counts %+v", rc)
	}
	if b.ErrorFileID != "" || b.OutputFileID == "" || b.CompletedAt == 0 || b.InProgressAt == 0 || b.FinalizingAt == 0 {
		t.Fatalf("batch %+v", b)
	}
	if b.Usage.InputTokens != 250 || b.Usage.OutputTokens != 75 {
		t.Errorf("usage %+v", b.Usage)
	}
	out := f.download(t, b.OutputFileID)
	if len(out) != len(ids) {
		t.Fatalf("%d output lines, want %d", len(out), len(ids))
	}
	for _, id := range ids {
		l := out[id]
		if l.Response == nil || l.Response.StatusCode != 200 || l.Error != nil || !strings.HasPrefix(l.ID, "batch_req_") || l.Response.RequestID == "" {
			t.Fatalf("%s: %+v", id, l)
		}
		if got := answerOf(t, l); got != "answer to question "+id {
			t.Errorf("%s answered %q", id, got)
		}
	}
	outFile, err := f.client.Files.Get(t.Context(), b.OutputFileID)
	if err != nil || outFile.Purpose != openai.FileObjectPurposeBatchOutput {
		t.Fatalf("output file %+v, %v", outFile, err)
	}
	page, err := f.client.Batches.List(t.Context(), openai.BatchListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != b.ID {
		t.Fatalf("list: %+v, %v", page, err)
	}
	if got := testutil.ToFloat64(counter(t, f.metrics, "turnpike_batch_requests_total", "completed")); got != 25 {
		t.Errorf("turnpike_batch_requests_total{completed} = %v", got)
	}

	t.Run("another tenant sees none of it", func(t *testing.T) {
		other := clientFor(f.front.URL, "umbrella")
		_, err := other.Batches.Get(t.Context(), b.ID)
		wantStatus(t, err, http.StatusNotFound, "batch_id")
		_, err = other.Files.Content(t.Context(), b.OutputFileID)
		wantStatus(t, err, http.StatusNotFound, "file_id")
		page, err := other.Batches.List(t.Context(), openai.BatchListParams{})
		if err != nil || len(page.Data) != 0 {
			t.Fatalf("list: %+v, %v", page, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		del, err := f.client.Files.Delete(t.Context(), file.ID)
		if err != nil || !del.Deleted || del.ID != file.ID {
			t.Fatalf("delete: %+v, %v", del, err)
		}
		_, err = f.client.Files.Get(t.Context(), file.ID)
		wantStatus(t, err, http.StatusNotFound, "file_id")
	})
}

func counter(t *testing.T, reg *prometheus.Registry, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetValue() == label {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return nil
}

func wantStatus(t *testing.T, err error, status int, param string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want an API error %d", err, status)
	}
	if ae.StatusCode != status || ae.Param != param || ae.Message == "" {
		t.Fatalf("error %d param %q (%s), want %d param %q", ae.StatusCode, ae.Param, ae.Message, status, param)
	}
}

// TestRequestsRefusedGoToTheErrorFile: requests the gateway or the engine
// refuses are answered in the error file, with their status and an
// OpenAI error body; the rest in the output file.
func TestRequestsRefusedGoToTheErrorFile(t *testing.T) {
	eng := newEngine(t)
	f := newFixture(t, eng, fixtureOptions{})
	content := strings.Join([]string{
		chatLine("good", "hello"),
		chatLine("refused", "refuse"),
		`{"custom_id":"no-messages","method":"POST","url":"/v1/chat/completions","body":{"model":"test-model"}}`,
		`{"custom_id":"no-model","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"streamed","method":"POST","url":"/v1/chat/completions","body":{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}}`,
	}, "\n")
	b := f.poll(t, f.create(t, f.upload(t, content).ID).ID, ended)
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 1 || b.RequestCounts.Failed != 4 {
		t.Fatalf("batch %+v", b)
	}
	if out := f.download(t, b.OutputFileID); len(out) != 1 || answerOf(t, out["good"]) != "answer to hello" {
		t.Fatalf("output %+v", out)
	}
	errs := f.download(t, b.ErrorFileID)
	for id, want := range map[string]struct {
		status int
		code   string
	}{"refused": {400, "refused"}, "no-messages": {400, "missing_required_parameter"}, "no-model": {404, "model_not_found"}, "streamed": {400, "invalid_value"}} {
		l := errs[id]
		if l.Response == nil || l.Response.StatusCode != want.status {
			t.Errorf("%s: %+v", id, l)
			continue
		}
		var body struct {
			Error struct{ Code, Message, Type string } `json:"error"`
		}
		if json.Unmarshal(l.Response.Body, &body) != nil || body.Error.Code != want.code || body.Error.Message == "" || body.Error.Type == "" {
			t.Errorf("%s: body %s, want code %s", id, l.Response.Body, want.code)
		}
	}
}

// TestMalformedInputFailsTheBatch: an input file with lines that are not
// requests for the batch's endpoint fails validation, naming each line.
func TestMalformedInputFailsTheBatch(t *testing.T) {
	eng := newEngine(t)
	f := newFixture(t, eng, fixtureOptions{})
	content := strings.Join([]string{
		chatLine("a", "hi"),
		`not json`,
		chatLine("a", "again"),
		`{"custom_id":"c","method":"POST","url":"/v1/embeddings","body":{}}`,
		``,
		`{"method":"POST","url":"/v1/chat/completions","body":{}}`,
	}, "\n")
	b := f.poll(t, f.create(t, f.upload(t, content).ID).ID, ended)
	if b.Status != openai.BatchStatusFailed || b.FailedAt == 0 {
		t.Fatalf("batch %+v", b)
	}
	var got []string
	for _, e := range b.Errors.Data {
		got = append(got, fmt.Sprintf("%d:%s", e.Line, e.Code))
	}
	want := "2:invalid_json_line 3:duplicate_custom_id 4:mismatched_endpoint 6:missing_required_parameter"
	if strings.Join(got, " ") != want {
		t.Fatalf("errors %v, want %s", got, want)
	}
	if eng.hits.Load() != 0 {
		t.Errorf("the engine got %d requests of a failed batch", eng.hits.Load())
	}
}

// TestBadRequestsAreOpenAIShaped400s: the Files and Batch API refuse bad
// input as OpenAI does.
func TestBadRequestsAreOpenAIShaped400s(t *testing.T) {
	eng := newEngine(t)
	f := newFixture(t, eng, fixtureOptions{opts: batch.Options{Config: batch.Config{MaxFileBytes: 1024}}})
	file := f.upload(t, chatLine("a", "hi"))
	ctx := t.Context()
	newBatch := func(p openai.BatchNewParams) error {
		_, err := f.client.Batches.New(ctx, p)
		return err
	}
	cases := []struct {
		name   string
		err    error
		status int
		param  string
	}{
		{"purpose", func() error {
			_, err := f.client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("x"), "a.jsonl", "application/jsonl"), Purpose: openai.FilePurposeFineTune})
			return err
		}(), 400, "purpose"},
		{"too large", func() error {
			_, err := f.client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(strings.Repeat("x", 2000)), "a.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
			return err
		}(), 400, "file"},
		{"endpoint", newBatch(openai.BatchNewParams{InputFileID: file.ID, Endpoint: openai.BatchNewParamsEndpointV1Embeddings, CompletionWindow: "24h"}), 400, "endpoint"},
		{"window", newBatch(openai.BatchNewParams{InputFileID: file.ID, Endpoint: "/v1/chat/completions", CompletionWindow: "1h"}), 400, "completion_window"},
		{"no file", newBatch(openai.BatchNewParams{InputFileID: "file-missing", Endpoint: "/v1/chat/completions", CompletionWindow: "24h"}), 404, "input_file_id"},
		{"metadata", newBatch(openai.BatchNewParams{InputFileID: file.ID, Endpoint: "/v1/chat/completions", CompletionWindow: "24h", Metadata: map[string]string{strings.Repeat("k", 65): "v"}}), 400, "metadata"},
		{"unknown batch", func() error { _, err := f.client.Batches.Get(ctx, "batch_missing"); return err }(), 404, "batch_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantStatus(t, c.err, c.status, c.param) })
	}
	t.Run("not multipart", func(t *testing.T) {
		resp, err := http.Post(f.front.URL+"/v1/files", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !bytes.Contains(body, []byte(`"type":"invalid_request_error"`)) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
}

// TestCancel: a cancelled batch stops its requests and ends cancelled,
// with an error line for every request that did not run.
func TestCancel(t *testing.T) {
	eng := newEngine(t)
	release := eng.block(2)
	defer release()
	f := newFixture(t, eng, fixtureOptions{opts: batch.Options{Config: batch.Config{Concurrency: 2}}})
	content, ids := lines(10)
	b := f.create(t, f.upload(t, content).ID)
	f.poll(t, b.ID, func(b *openai.Batch) bool { return b.RequestCounts.Completed == 2 })
	for eng.hits.Load() < 4 {
		time.Sleep(time.Millisecond) // two more requests are waiting in the engine
	}
	c, err := f.client.Batches.Cancel(t.Context(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != openai.BatchStatusCancelling && c.Status != openai.BatchStatusCancelled {
		t.Fatalf("after cancel: %s", c.Status)
	}
	b = f.poll(t, b.ID, ended)
	if b.Status != openai.BatchStatusCancelled || b.CancelledAt == 0 || b.CancellingAt == 0 {
		t.Fatalf("batch %+v", b)
	}
	out, errs := f.download(t, b.OutputFileID), f.download(t, b.ErrorFileID)
	if len(out) != 2 || len(errs) != 8 {
		t.Fatalf("%d answers and %d errors, want 2 and 8", len(out), len(errs))
	}
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		if l := errs[id]; l.Error == nil || l.Error.Code != "batch_cancelled" || l.Response != nil {
			t.Errorf("%s: %+v", id, l)
		}
	}
	_, err = f.client.Batches.Cancel(t.Context(), b.ID)
	if err != nil {
		t.Errorf("cancelling a cancelled batch: %v", err)
	}
}

// TestExpiredBatch: a batch whose window passes before its requests run
// ends expired, each request an error line batch_expired.
func TestExpiredBatch(t *testing.T) {
	eng := newEngine(t)
	f := newFixture(t, eng, fixtureOptions{opts: batch.Options{Window: time.Nanosecond}})
	content, ids := lines(3)
	b := f.poll(t, f.create(t, f.upload(t, content).ID).ID, ended)
	if b.Status != openai.BatchStatusExpired || b.ExpiredAt == 0 || b.OutputFileID != "" {
		t.Fatalf("batch %+v", b)
	}
	errs := f.download(t, b.ErrorFileID)
	for _, id := range ids {
		if l := errs[id]; l.Error == nil || l.Error.Code != "batch_expired" {
			t.Errorf("%s: %+v", id, l)
		}
	}
}

// TestShedRequestsAreRetried: flow control sheds a tenant's requests past
// its concurrency quota; the batch waits out each Retry-After and every
// request is answered.
func TestShedRequestsAreRetried(t *testing.T) {
	eng := newEngine(t)
	fc := turns.FlowControl{RetryAfter: 10 * time.Millisecond}
	f := newFixture(t, eng, fixtureOptions{opts: batch.Options{Config: batch.Config{Concurrency: 4}}, flow: &fc, quota: turns.Quota{Concurrent: 1}})
	content, ids := lines(12)
	// The engine holds the first request, which takes the tenant's one
	// concurrent turn, until another has been shed and retried: the
	// retry is exercised however the machine schedules the workers.
	release := eng.block(0)
	id := f.create(t, f.upload(t, content).ID).ID
	retried := func() bool {
		return testutil.ToFloat64(counter(t, f.metrics, "turnpike_batch_retries_total", "shed")) > 0
	}
	deadline := time.Now().Add(time.Minute)
	for !retried() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	release()
	if !retried() {
		t.Fatal("no request was shed and retried in a minute while the first one was held")
	}
	b := f.poll(t, id, ended)
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 12 {
		t.Fatalf("batch %+v", b)
	}
	out := f.download(t, b.OutputFileID)
	for _, id := range ids {
		if answerOf(t, out[id]) != "answer to question "+id {
			t.Errorf("%s: %+v", id, out[id])
		}
	}
}

// TestBatchResumesAfterRestart: a batch in progress when its gateway
// stops goes on when the next one starts on the same store, and runs
// each request once to a result.
func TestBatchResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	db, err := state.OpenPebble(dir, state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	eng := newEngine(t)
	release := eng.block(3)
	f := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Config: batch.Config{Concurrency: 1}}})
	content, ids := lines(8)
	b := f.create(t, f.upload(t, content).ID)
	f.poll(t, b.ID, func(b *openai.Batch) bool { return b.RequestCounts.Completed == 3 })
	if err := f.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	release()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	hitsBefore := eng.hits.Load()

	db, err = state.OpenPebble(dir, state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f = newFixture(t, eng, fixtureOptions{db: db})
	b = f.poll(t, b.ID, ended)
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 8 || b.RequestCounts.Failed != 0 {
		t.Fatalf("batch %+v", b)
	}
	out := f.download(t, b.OutputFileID)
	for _, id := range ids {
		if answerOf(t, out[id]) != "answer to question "+id {
			t.Errorf("%s: %+v", id, out[id])
		}
	}
	// The 3 answered before the restart are not asked again; the one
	// abandoned in flight is.
	if again := eng.hits.Load() - hitsBefore; again != 5 {
		t.Errorf("%d requests after the restart, want 5", again)
	}
}
