package pools

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/internal/kubetest"
)

// loopbackEngines starts an engine on each of 127.0.0.1 … 127.0.0.n, all
// on one port, as the replicas of a Deployment listen on one port of
// their pod IPs. It returns the port.
func loopbackEngines(t *testing.T, n int) int {
	t.Helper()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprintln(w, "vllm:num_requests_running 0")
		}
	})
	ls, port := kubetest.PodListeners(t, n)
	for _, l := range ls {
		s := &http.Server{Handler: handler}
		go s.Serve(l)
		t.Cleanup(func() { s.Close() })
	}
	return port
}

// TestKubernetesDiscovery runs discovery against a real kube-apiserver:
// an InferencePool's Ready pods become endpoints and follow the pods and
// the pool.
func TestKubernetesDiscovery(t *testing.T) {
	cp := kubetest.Start(t)
	kubeconfig := cp.Kubeconfig
	port := loopbackEngines(t, 6)
	id := func(i int) string { return "127.0.0." + strconv.Itoa(i) + ":" + strconv.Itoa(port) }
	opts := Options{ScrapeInterval: 20 * time.Millisecond, HealthInterval: 50 * time.Millisecond}

	t.Run("inference pool", func(t *testing.T) {
		k := cp.Namespace(t, "tp-pool")
		vllm := map[string]string{"app": "vllm", PodLabelTemplateHash: "abc123"}
		k.InferencePool("llama", map[string]any{"app": "vllm"}, port)
		for i := 1; i <= 4; i++ {
			labels := maps(vllm)
			if i == 4 {
				labels["track"] = "canary"
				labels[PodLabelRole] = RoleDecode
			}
			k.Pod(fmt.Sprintf("vllm-%d", i), fmt.Sprintf("127.0.0.%d", i), labels)
		}
		// A pod of another app, Ready, is not the pool's.
		k.Pod("other", "127.0.0.6", map[string]string{"app": "sglang"})

		r, err := NewRegistry([]PoolConfig{{Name: "llama", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{
			Kind: DiscoveryKubernetes, Kubeconfig: kubeconfig, InferencePool: &InferencePoolRef{Namespace: k.Name, Name: "llama"},
		}}}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())

		// An InferencePool of 4 → 4 endpoints, each taking traffic after
		// its first scrape.
		if got, want := ids(r), sorted(id(1), id(2), id(3), id(4)); !slices.Equal(got, want) {
			t.Fatalf("endpoints %v, want %v", got, want)
		}
		for _, ep := range r.Endpoints() {
			eventually(t, ep.ID+" to take traffic", ep.Available)
		}
		e4, _ := r.Endpoint(id(4))
		if e4.Role() != RoleDecode || e4.Labels().Revision != "abc123" {
			t.Errorf("%s: role %s, revision %q", e4.ID, e4.Role(), e4.Labels().Revision)
		}
		if e1, _ := r.Endpoint(id(1)); e1.Role() != RoleBoth {
			t.Errorf("%s: role %s, want the pool's", e1.ID, e1.Role())
		}

		// A pod turned NotReady → drained.
		e2, _ := r.Endpoint(id(2))
		k.SetReady("vllm-2", false)
		eventually(t, "the NotReady pod to leave", func() bool { return slices.Equal(ids(r), sorted(id(1), id(3), id(4))) })
		eventually(t, "the NotReady pod to drain", func() bool { return isClosed(e2.Drained()) })
		if e2.Available() {
			t.Error("a drained endpoint is available")
		}

		// A new pod → taking traffic.
		k.Pod("vllm-5", "127.0.0.5", maps(vllm, "track", "canary"))
		eventually(t, "the new pod to join", func() bool { return slices.Equal(ids(r), sorted(id(1), id(3), id(4), id(5))) })
		e5, _ := r.Endpoint(id(5))
		eventually(t, "the new pod to take traffic", e5.Available)
		if got := r.EndpointsFor(nil, "m"); !slices.Contains(got, e5) {
			t.Error("the new pod is not a candidate for its model")
		}

		// The selector changed → the set follows.
		k.InferencePool("llama", map[string]any{"app": "vllm", "track": "canary"}, port)
		eventually(t, "the set to follow the selector", func() bool { return slices.Equal(ids(r), sorted(id(4), id(5))) })

		// The pool deleted → none.
		k.DeleteInferencePool("llama")
		eventually(t, "no endpoints without the pool", func() bool { return len(r.Endpoints()) == 0 })
		if got := r.EndpointsFor(nil, "m"); len(got) != 0 {
			t.Errorf("candidates %v without the pool", got)
		}
	})

	t.Run("selector", func(t *testing.T) {
		k := cp.Namespace(t, "tp-selector")
		k.Pod("sglang-1", "127.0.0.1", map[string]string{"app": "sglang", PodLabelRole: RolePrefill, "release": "r7"})
		k.Pod("sglang-2", "127.0.0.2", map[string]string{"app": "sglang", PodLabelRole: "bogus"})
		// A pod that says what it serves, and on what.
		k.Pod("sglang-3", "127.0.0.3", map[string]string{"app": "sglang", DefaultPodModelsLabel: "small", "gpu": "h100"})
		r, err := NewRegistry([]PoolConfig{
			{Name: "decode", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://" + id(6)}}},
			{Name: "sglang", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{
				Kind: DiscoveryKubernetes, Kubeconfig: kubeconfig, Namespace: k.Name, Selector: "app=sglang", Ports: []int{port}, RevisionLabel: "release", AcceleratorLabel: "gpu",
			}},
		}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		if got, want := ids(r), sorted(id(1), id(3), id(6)); !slices.Equal(got, want) {
			t.Fatalf("endpoints %v, want %v (the pod with a bad role skipped)", got, want)
		}
		e1, _ := r.Endpoint(id(1))
		if e1.Role() != RolePrefill || e1.Labels().Revision != "r7" {
			t.Errorf("role %s, revision %q", e1.Role(), e1.Labels().Revision)
		}
		if got := r.PrefillEndpointsFor(nil, "m"); len(got) != 1 || got[0] != e1 {
			t.Errorf("prefill candidates %v", got)
		}
		if l := e1.Labels(); l.Models != nil || l.Accelerator != "" {
			t.Errorf("%s without model or accelerator labels: models %v, accelerator %q", e1.ID, l.Models, l.Accelerator)
		}

		// Served models from the pod's llm-d.ai/model label, or from the
		// annotation of that key, which can hold names a label cannot.
		e3, _ := r.Endpoint(id(3))
		if l := e3.Labels(); !slices.Equal(l.Models, []string{"small"}) || l.Accelerator != "h100" || e3.Serves("m") {
			t.Errorf("%s: models %v, accelerator %q, serves m %v", e3.ID, l.Models, l.Accelerator, e3.Serves("m"))
		}
		k.Annotate("sglang-3", map[string]string{DefaultPodModelsLabel: "org/small, org/large"})
		eventually(t, "the annotated models", func() bool {
			e3, _ := r.Endpoint(id(3))
			return e3 != nil && e3.Serves("org/large") && e3.Serves("org/small") && !e3.Serves("small")
		})
		if n := testutil.ToFloat64(r.metrics.badEntries.WithLabelValues("sglang")); n != 1 {
			t.Errorf("bad pods counted %v, want 1", n)
		}
		k.DeletePod("sglang-1")
		eventually(t, "the deleted pod to leave", func() bool { return slices.Equal(ids(r), sorted(id(3), id(6))) })
	})
}

// maps copies m and sets the key-value pairs kv.
func maps(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
