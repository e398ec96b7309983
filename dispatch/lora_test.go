package dispatch

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
)

// With loraLoading on-demand, a turn for an adapter the engine has not
// loaded (and would refuse: no runtime loading) is served: the gateway
// loads it first, once for the turns that arrive while it loads.
func TestLoRAOnDemandLoad(t *testing.T) {
	e := newSimEngine(t, sim.Config{MaxLoRAs: 2, TimeScale: 0.05, LoRAAdapters: []sim.LoRAAdapter{{Name: "sql"}}})
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel},
		LoRALoading: pools.LoRALoadingOnDemand, Adapters: []pools.AdapterConfig{{Name: "sql", Path: "/adapters/sql"}},
		Endpoints: []pools.EndpointConfig{{URL: e.URL}}}}, pools.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	d, err := New(Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := pdSpec(longPrompt(i, 100), false, "")
			spec.Model = "sql"
			spec.Body = []byte(strings.Replace(string(spec.Body), `"model":"m"`, `"model":"sql"`, 1))
			tr, err := d.Begin(t.Context(), spec)
			if err != nil {
				t.Errorf("turn for the adapter: %v", err)
				return
			}
			text, _ := readTurn(t, tr, false)
			tr.End(nil)
			if text == "" {
				t.Error("empty answer")
			}
		}()
	}
	wg.Wait()
	if got := strings.Join(e.eng.LoadedAdapters(), ","); got != "sql" {
		t.Errorf("engine holds %q, want sql", got)
	}
}
