package stack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/turnpike-gateway/turnpike/pools"
)

// TestScaleFromZero: a turn sent to a pool with no endpoint
// and a wake hook is held, not refused; the hook is called once however
// many turns arrive; the replica the hook starts joins through
// discovery, and every held turn is answered by it.
func TestScaleFromZero(t *testing.T) {
	const model = "m"
	cm := &configMapDir{t: t, dir: t.TempDir()}
	cm.write()
	var calls atomic.Int64
	var engine atomic.Pointer[countingEngine]
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Pool   string   `json:"pool"`
			Models []string `json:"models"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Pool != "p" || len(body.Models) != 1 || body.Models[0] != model {
			t.Errorf("the wake hook was posted %+v (%v)", body, err)
		}
		if calls.Add(1) == 1 {
			// Started as a platform would: the replica comes up, then
			// discovery lists it.
			e := startCountingEngine(t, model)
			engine.Store(e)
			cm.write(e)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)

	st, client := startPoolGateway(t, pools.PoolConfig{Name: "p", ServedModels: []string{model},
		Discovery: &pools.DiscoveryConfig{Kind: pools.DiscoveryFile, Path: cm.path()},
		Wake:      &pools.WakeConfig{URL: hook.URL}},
		func(cfg *Config) { cfg.Fleet.ScrapeInterval = 50 * time.Millisecond }, Options{})
	if n := len(st.Registry().Endpoints()); n != 0 {
		t.Fatalf("%d endpoints before the wake", n)
	}

	const turns = 4
	errs := make(chan error, turns)
	for range turns {
		go func() {
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:     model,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Wake up and say hello.")},
				MaxTokens: openai.Int(8),
			})
			errs <- err
		}()
	}
	for range turns {
		if err := <-errs; err != nil {
			t.Errorf("a turn sent to the pool at zero: %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the wake hook was called %d times, want once", n)
	}
	if e := engine.Load(); e == nil || e.turns.Load() != turns {
		t.Errorf("the woken replica answered %v turns, want %d", e, turns)
	}
}
