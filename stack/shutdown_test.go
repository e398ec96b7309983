package stack

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnpike-gateway/turnpike/pools"
)

// startHeldShutdown starts a gateway of model on a counting engine whose
// shutdown delay is the test's to end: Shutdown sends the delay it waits
// on delay, then waits until release closes.
func startHeldShutdown(t *testing.T, model string) (st *Stack, delay chan time.Duration, release chan time.Time) {
	t.Helper()
	e := startCountingEngine(t, model)
	delay, release = make(chan time.Duration, 1), make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time { delay <- d; return release }
	pool := pools.PoolConfig{Name: "p", ServedModels: []string{model}, Endpoints: []pools.EndpointConfig{{URL: "http://" + e.host + ":" + e.port}}}
	st, _ = startPoolGateway(t, pool, func(cfg *Config) { cfg.Server.ShutdownDelay = time.Hour }, Options{After: after})
	return st, delay, release
}

// TestShutdownFailsReadyFirst (issue 34): at Shutdown (SIGTERM) /readyz
// answers 503 at once while a new turn is still answered 200, for as long
// as the shutdown delay lasts; then the gateway drains, and a stream in
// flight since before the signal ends whole.
func TestShutdownFailsReadyFirst(t *testing.T) {
	const model = "m"
	st, delay, release := startHeldShutdown(t, model)
	base := "http://" + st.Addr()
	ready := func() int {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, "the gateway to be ready", func() bool { return ready() == http.StatusOK })

	body := `{"model":"` + model + `","stream":true,"max_tokens":64,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
	stream, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	br := bufio.NewReader(stream.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	shut := make(chan error, 1)
	go func() { shut <- st.Shutdown(context.Background()) }()
	if d := <-delay; d != time.Hour {
		t.Fatalf("shutdown waits %v, want server.shutdownDelay 1h", d)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during the shutdown delay: %d, want 503", got)
	}
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("still there?")}, MaxTokens: openai.Int(4)}); err != nil {
		t.Fatalf("a turn during the shutdown delay: %v", err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || strings.Contains(string(rest), `"error"`) {
		t.Fatalf("a stream in flight at shutdown ended with %q", rest)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestShutdownClosesKeepAlives (issue 35): a client holding a keep-alive
// connection from before SIGTERM gets its next answer, during the
// shutdown delay, with Connection: close, and the gateway closes that
// connection after it; /readyz fails before, and the gateway still
// accepts new connections until the delay ends.
func TestShutdownClosesKeepAlives(t *testing.T) {
	const model = "m"
	st, delay, release := startHeldShutdown(t, model)

	conn, err := net.Dial("tcp", st.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	// get sends GET path on the kept connection and reads the answer whole.
	get := func(path string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	eventually(t, "the gateway to be ready", func() bool { return get("/readyz").StatusCode == http.StatusOK })
	// A response read says Connection: close as Close.
	if r := get("/healthz"); r.Close {
		t.Fatal("before shutdown: Connection: close, want the connection kept")
	}

	shut := make(chan error, 1)
	go func() { shut <- st.Shutdown(context.Background()) }()
	<-delay
	// Readiness fails first, on a connection of its own: the gateway
	// still accepts new ones.
	ready, err := http.Get("http://" + st.Addr() + "/readyz")
	if err != nil {
		t.Fatalf("a new connection during the shutdown delay: %v", err)
	}
	ready.Body.Close()
	if ready.StatusCode != http.StatusServiceUnavailable || !ready.Close {
		t.Fatalf("/readyz during the shutdown delay: %d, close %v; want 503 and Connection: close", ready.StatusCode, ready.Close)
	}
	if r := get("/healthz"); r.StatusCode != http.StatusOK || !r.Close {
		t.Fatalf("the kept connection's next answer: %d, close %v; want 200 and Connection: close", r.StatusCode, r.Close)
	}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer with Connection: close the connection reads %v, %v; want EOF", n, err)
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
