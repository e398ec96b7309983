package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/internal/heaptest"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestGatewayMemoryAtManySessions drives agent sessions of about 50k
// tokens (200 KB bodies), two turns each, through a gateway in front of
// 32 endpoints that answer at once and keep nothing, and logs the
// gateway's live heap: what it keeps of the sessions (KV index, memo,
// hand-off prompts, session store) once they are all idle.
// docs/memory.md quotes it:
//
//	TURNPIKE_MEMORY_SESSIONS=1000 go test ./stack -run TestGatewayMemoryAtManySessions -v -count=1
//
// By default it runs 100 sessions; TURNPIKE_MEMORY_KV_INDEX_MAX_BLOCKS sets
// routing.kvIndexMaxBlocks.
func TestGatewayMemoryAtManySessions(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	sessions := 100
	if s := os.Getenv("TURNPIKE_MEMORY_SESSIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		sessions = n
	}
	const endpoints = 32
	answer := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":50000,"completion_tokens":1,"total_tokens":50001}}`)
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.Header().Set("Content-Type", "application/json")
			w.Write(answer)
		}
	})
	pool := pools.PoolConfig{Name: "p", ServedModels: []string{"m"}}
	for range endpoints {
		srv := httptest.NewServer(engine)
		t.Cleanup(srv.Close)
		pool.Endpoints = append(pool.Endpoints, pools.EndpointConfig{URL: srv.URL})
	}
	kvBlocks := 0 // routing.kvIndexMaxBlocks: its default unless set
	if s := os.Getenv("TURNPIKE_MEMORY_KV_INDEX_MAX_BLOCKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		kvBlocks = n
	}
	st, _ := startPoolGateway(t, pool, func(cfg *Config) {
		cfg.Server.ShutdownDelay = -1
		cfg.Routing.KVIndexMaxBlocks = kvBlocks
	}, Options{Logger: slog.New(slog.DiscardHandler)})
	url := "http://" + st.Addr() + "/v1/chat/completions"

	body := func(s, turn int) []byte {
		system := fmt.Sprintf("Agent %d. ", s%10) + strings.Repeat("You are a coding agent. Read before you edit. ", 40)
		task := strings.Repeat(fmt.Sprintf("session %d: a line of a tool's result; ", s), 4600)
		b := fmt.Appendf(nil, `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}`, system, task)
		for i := range turn {
			b = fmt.Appendf(b, `,{"role":"assistant","content":"step %d"},{"role":"user","content":"go on"}`, i)
		}
		return append(b, "]}"...)
	}
	post := func(s, turn int) error {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body(s, turn)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", fmt.Sprint("session-", s))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("session %d turn %d: %s", s, turn, resp.Status)
		}
		return nil
	}
	liveHeap := heaptest.Live
	// One session first, so that pools and buffers are made.
	if err := post(sessions, 0); err != nil {
		t.Fatal(err)
	}
	before, _ := liveHeap()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	sem := make(chan struct{}, 8)
	for s := range sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for turn := range 2 {
				if err := post(s, turn); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after, inuse := liveHeap()
	if path := os.Getenv("TURNPIKE_MEMORY_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	live := int64(after) - int64(before)
	t.Logf("%d sessions of 2 turns of %d KB on %d endpoints: live heap +%.1f MiB (%.0f KB a session), HeapInuse %.1f MiB, peak RSS of the test process %s, KV index %d blocks",
		sessions, len(body(0, 1))>>10, endpoints, float64(live)/(1<<20), float64(live)/float64(sessions)/1e3, float64(inuse)/(1<<20), peakRSS(), st.index.Len())
}

// peakRSS is the process's peak resident set (VmHWM), as Linux reports it;
// "unknown" elsewhere.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
