package affinity

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestLoRAPlacement runs the specification of adapter placement in
// testdata/lora.
//
//	fleet n=N slots=S adapters=a,b,…   a pool of N endpoints serving m, its adapters, S slots each
//	engine ep=I [running=a,b] [waiting=c] [queue=W]  the engine's report (vllm:lora_requests_info, waiting)
//	record ep=I model=M prompt=R       the index learns the endpoint holds R of model M
//	route model=M [prompt=R] [times=N] route, then ready the endpoint as dispatch does
//	                                   (pools.Registry.EnsureAdapter: the adapter counts as loading there)
func TestLoRAPlacement(t *testing.T) {
	datadriven.Walk(t, "testdata/lora", func(t *testing.T, path string) {
		clock := t0
		var (
			reg   *pools.Registry
			index *kv.Index
			pol   Policy
			slots int
			ctx   = context.Background()
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "fleet":
				var n int
				var adapters string
				d.ScanArgs(t, "n", &n)
				d.ScanArgs(t, "slots", &slots)
				d.ScanArgs(t, "adapters", &adapters)
				var eps []pools.EndpointConfig
				for i := range n {
					eps = append(eps, pools.EndpointConfig{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1)})
				}
				pc := pools.PoolConfig{Name: "p", ServedModels: []string{"m"}, Endpoints: eps, MaxLoRA: slots}
				for _, a := range strings.Split(adapters, ",") {
					pc.Adapters = append(pc.Adapters, pools.AdapterConfig{Name: a})
				}
				var err error
				if reg, err = pools.NewRegistry([]pools.PoolConfig{pc}, pools.Options{}, nil); err != nil {
					t.Fatal(err)
				}
				index = kv.NewIndex(kv.IndexOptions{})
				pol, err = NewPolicy(Config{}, Deps{Index: index, Metrics: prometheus.NewRegistry(),
					Rand: seqRand(1), Now: func() time.Time { return clock }})
				if err != nil {
					t.Fatal(err)
				}
				for _, ep := range reg.Endpoints() {
					setLoad(ep, 0, 0, clock)
				}
				return ""
			case "engine":
				var i, queue int
				var running, waiting string
				d.ScanArgs(t, "ep", &i)
				d.MaybeScanArgs(t, "running", &running)
				d.MaybeScanArgs(t, "waiting", &waiting)
				d.MaybeScanArgs(t, "queue", &queue)
				reg.Endpoints()[i].SetLoad(pools.Load{Waiting: queue, ScrapedAt: clock,
					LoRA: pools.LoRALoad{Reported: true, MaxLoRA: slots, Running: running, Waiting: waiting}})
				return ""
			case "record":
				var i int
				var model, r string
				d.ScanArgs(t, "ep", &i)
				d.ScanArgs(t, "model", &model)
				d.ScanArgs(t, "prompt", &r)
				index.Record(i, kv.HBM, seeded(model, parseBlocks(t, r)))
				return ""
			case "route":
				var model, r string
				times := 1
				d.ScanArgs(t, "model", &model)
				d.MaybeScanArgs(t, "prompt", &r)
				d.MaybeScanArgs(t, "times", &times)
				var out []string
				for range times {
					req := &Request{Model: model, Tenant: "t", PromptTokens: 1}
					if r != "" {
						req.Hashes = seeded(model, parseBlocks(t, r))
					}
					ep, err := pol.Pick(ctx, req, reg.Serving(model))
					if err != nil {
						return err.Error()
					}
					if err := reg.EnsureAdapter(ctx, ep, model, clock); err != nil {
						t.Fatal(err)
					}
					pol.Done(req, ep, Outcome{})
					used, n := ep.AdapterSlots(clock)
					out = append(out, fmt.Sprintf("ep%d (slots %d/%d)", ep.Index, used, n))
				}
				return strings.Join(out, "\n")
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// seeded offsets block numbers by model, as the hash seed does: an
// adapter's blocks are not the base model's.
func seeded(model string, hs []kv.BlockHash) []kv.BlockHash {
	if model == "m" {
		return hs
	}
	off := kv.BlockHash(1000 * (1 + int(model[0])))
	out := make([]kv.BlockHash, len(hs))
	for i, h := range hs {
		out[i] = h + off
	}
	return out
}

// The filter costs a base-model request nothing: no allocation, no lock
// per candidate; an adapter held by a replica none either.
func TestLoRAAffinityAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, MaxLoRA: 2,
		Adapters:  []pools.AdapterConfig{{Name: "a"}},
		Endpoints: []pools.EndpointConfig{{URL: "http://10.0.0.1:8000"}, {URL: "http://10.0.0.2:8000"}}}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := reg.Endpoints()
	eps[1].SetLoad(pools.Load{ScrapedAt: t0, LoRA: pools.LoRALoad{Reported: true, MaxLoRA: 2, Running: "a"}})
	f := LoRAAffinity{}
	buf := make([]*pools.Endpoint, len(eps))
	for _, model := range []string{"m", "a"} {
		req := &Request{Model: model}
		c := newCycle(req, eps, t0)
		if n := testing.AllocsPerRun(100, func() {
			copy(buf, eps)
			f.Filter(c, buf)
		}); n != 0 {
			t.Errorf("%s: %v allocations a request", model, n)
		}
		if got := f.Filter(c, append(buf[:0], eps...)); model == "a" && (len(got) != 1 || got[0] != eps[1]) {
			t.Errorf("adapter a: kept %v, want the replica running it", got)
		}
		c.release()
	}
}
