package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/pools"
)

// countingEngine is a simulated engine on a loopback port of its own,
// counting the chat completions it is sent.
type countingEngine struct {
	host, port string
	turns      atomic.Int64
}

func startCountingEngine(t *testing.T, model string) *countingEngine {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveCountingEngine(t, model, l)
}

// serveCountingEngine serves a counting engine on l, which it closes when
// the test ends.
func serveCountingEngine(t *testing.T, model string, l net.Listener) *countingEngine {
	t.Helper()
	eng, err := sim.New(sim.Config{ServedModelName: model, TimeScale: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	ce := &countingEngine{}
	h := eng.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			ce.turns.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() { srv.Close(); eng.Close() })
	host, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ce.host, ce.port = host, port
	return ce
}

// configMapDir is a directory laid out as a mounted ConfigMap: path →
// ..data/endpoints.yaml, ..data → a directory of one generation; an update
// writes a new generation and renames a new ..data link over the old.
type configMapDir struct {
	t   *testing.T
	dir string
	gen int
}

func (c *configMapDir) path() string { return filepath.Join(c.dir, "endpoints.yaml") }

func (c *configMapDir) write(engines ...*countingEngine) {
	c.t.Helper()
	body := "endpoints:\n"
	if len(engines) == 0 {
		body = "endpoints: []\n"
	}
	for _, e := range engines {
		body += fmt.Sprintf("- {address: %s, port: %s}\n", e.host, e.port)
	}
	c.gen++
	gen := filepath.Join(c.dir, fmt.Sprintf("..gen%d", c.gen))
	if err := os.Mkdir(gen, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gen, "endpoints.yaml"), []byte(body), 0o644); err != nil {
		c.t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.gen == 1 {
		if err := os.Symlink(filepath.Join("..data", "endpoints.yaml"), c.path()); err != nil {
			c.t.Fatal(err)
		}
	}
}

// TestFileDiscoveryUnderLoad (issue 34): a gateway whose pool reads a
// ConfigMap-style endpoints file follows it under agent load: an engine
// added takes turns, one removed is drained, and no turn fails; with the
// file emptied, a turn is answered 503 at once (not held for its band's
// TTL), and with an engine listed again, served.
func TestFileDiscoveryUnderLoad(t *testing.T) {
	const model = "m"
	e := make([]*countingEngine, 4)
	for i := range e {
		e[i] = startCountingEngine(t, model)
	}
	cm := &configMapDir{t: t, dir: t.TempDir()}
	cm.write(e[0], e[1])

	st, client := startDiscoveryGateway(t, pools.PoolConfig{Name: "p", ServedModels: []string{model},
		Discovery: &pools.DiscoveryConfig{Kind: pools.DiscoveryFile, Path: cm.path()}})
	ids := func() map[string]bool { return endpointIDs(st) }

	done, stopAgents := runAgents(client, model, 8)
	progress := agentProgress(t, done)
	id := func(c *countingEngine) string { return c.host + ":" + c.port }

	progress("turns on the first two engines", 40)
	cm.write(e[0], e[1], e[2])
	eventually(t, "the third engine to join", func() bool { return ids()[id(e[2])] })
	progress("turns after the third joined", 80)
	eventually(t, "the third engine to take turns", func() bool { return e[2].turns.Load() > 0 })

	cm.write(e[1], e[2], e[3])
	eventually(t, "the first engine to leave", func() bool { return !ids()[id(e[0])] && ids()[id(e[3])] })
	// Turns it had been given before it left end there; then it takes none.
	progress("the turns in flight to end", 20)
	left := e[0].turns.Load()
	progress("turns after the first left", 80)
	if n := e[0].turns.Load(); n != left {
		t.Errorf("the engine that left took %d more turns", n-left)
	}
	if failures := stopAgents(); len(failures) > 0 {
		t.Fatalf("%d of %d turns failed while the set changed; first: %v", len(failures), done.Load()+int64(len(failures)), failures[0])
	}

	// No engine listed: the model's turns are refused as unavailable.
	cm.write()
	eventually(t, "the set to empty", func() bool { return len(ids()) == 0 })
	refusedUnavailable(t, client, model)
	cm.write(e[3])
	eventually(t, "an engine to be listed again", func() bool { return len(ids()) == 1 })
	eventually(t, "a turn to be served again", func() bool {
		_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4)})
		return err == nil
	})
}

// startDiscoveryGateway starts a gateway of the one pool, its endpoints
// discovered, scraped every 50ms, and returns it and a client of its
// OpenAI API.
func startDiscoveryGateway(t *testing.T, pool pools.PoolConfig) (*Stack, openai.Client) {
	t.Helper()
	return startPoolGateway(t, pool, func(cfg *Config) { cfg.Fleet.ScrapeInterval = 50 * time.Millisecond }, Options{})
}

// endpointIDs is the set of the gateway's endpoints.
func endpointIDs(st *Stack) map[string]bool {
	m := map[string]bool{}
	for _, ep := range st.Registry().Endpoints() {
		m[ep.ID] = true
	}
	return m
}

// agentProgress returns a wait for n more turns answered (done, of
// runAgents) than when it is called.
func agentProgress(t *testing.T, done *atomic.Int64) func(what string, n int64) {
	return func(what string, n int64) {
		t.Helper()
		want := done.Load() + n
		eventually(t, what, func() bool { return done.Load() >= want })
	}
}

// refusedUnavailable sends a turn for model and fails t unless it is
// answered 503 no_healthy_endpoint: no endpoint serves the model, and the
// turn is refused rather than held for its band's TTL.
func refusedUnavailable(t *testing.T, client openai.Client, model string) {
	t.Helper()
	_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "no_healthy_endpoint" {
		t.Fatalf("a turn with no endpoint: %v, want a 503 no_healthy_endpoint", err)
	}
}

// runAgents runs n agents on client: sessions of chat turns, each turn the
// whole history so far, until stop, which returns the turns that failed.
// done counts the turns answered.
func runAgents(client openai.Client, model string, n int) (done *atomic.Int64, stop func() []error) {
	done = new(atomic.Int64)
	var mu sync.Mutex
	var failures []error
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for a := range n {
		wg.Go(func() {
			for s := 0; ; s++ {
				msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are agent " + fmt.Sprint(a))}
				for turn := range 4 {
					select {
					case <-quit:
						return
					default:
					}
					msgs = append(msgs, openai.UserMessage(fmt.Sprintf("session %d turn %d: run the tests", s, turn)))
					resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
						Model: model, Messages: msgs, MaxTokens: openai.Int(8)})
					if err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
						continue
					}
					msgs = append(msgs, openai.AssistantMessage(resp.Choices[0].Message.Content))
					done.Add(1)
				}
			}
		})
	}
	return done, func() []error {
		close(quit)
		wg.Wait()
		return failures
	}
}

// eventually waits for cond, failing t after a minute: a condition, not a
// time budget, on a machine that may be loaded.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
