package stack

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/turnpike-gateway/turnpike/internal/kubetest"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestKubernetesDiscoveryUnderLoad (issue 34) runs a gateway whose pool is
// an InferencePool on a real kube-apiserver, its pods simulated engines on
// loopback addresses, under the load of 8 agents speaking the OpenAI API: a
// pod turned NotReady is drained and no turn fails; a new pod takes turns;
// the pool deleted, a turn is answered 503 at once.
func TestKubernetesDiscoveryUnderLoad(t *testing.T) {
	const model = "m"
	cp := kubetest.Start(t)
	ls, port := kubetest.PodListeners(t, 5)
	e := make([]*countingEngine, len(ls))
	for i, l := range ls {
		e[i] = serveCountingEngine(t, model, l)
	}
	podIP := func(i int) string { return "127.0.0." + strconv.Itoa(i+1) }
	id := func(i int) string { return podIP(i) + ":" + strconv.Itoa(port) }

	k := cp.Namespace(t, "models")
	k.InferencePool("llama", map[string]any{"app": "vllm"}, port)
	for i := range 4 {
		k.Pod(fmt.Sprintf("vllm-%d", i), podIP(i), map[string]string{"app": "vllm"})
	}

	st, client := startDiscoveryGateway(t, pools.PoolConfig{Name: "llama", ServedModels: []string{model}, Discovery: &pools.DiscoveryConfig{
		Kind: pools.DiscoveryKubernetes, Kubeconfig: cp.Kubeconfig, InferencePool: &pools.InferencePoolRef{Namespace: k.Name, Name: "llama"},
	}})
	ids := func() map[string]bool { return endpointIDs(st) }
	// An InferencePool of 4 → 4 endpoints.
	if got := ids(); len(got) != 4 || !got[id(0)] || !got[id(1)] || !got[id(2)] || !got[id(3)] {
		t.Fatalf("endpoints %v, want the pool's 4 pods", got)
	}
	done, stopAgents := runAgents(client, model, 8)
	progress := agentProgress(t, done)
	progress("turns on the pool's pods", 40)

	// A pod turned NotReady: its turns in flight end there, then it takes
	// none.
	k.SetReady("vllm-1", false)
	eventually(t, "the NotReady pod to leave", func() bool { return !ids()[id(1)] })
	progress("the turns in flight to end", 20)
	left := e[1].turns.Load()
	progress("turns after the pod left", 80)
	if n := e[1].turns.Load(); n != left {
		t.Errorf("the NotReady pod took %d more turns", n-left)
	}

	// A new pod takes turns.
	k.Pod("vllm-4", podIP(4), map[string]string{"app": "vllm"})
	eventually(t, "the new pod to join", func() bool { return ids()[id(4)] })
	eventually(t, "the new pod to take turns", func() bool { return e[4].turns.Load() > 0 })

	if failures := stopAgents(); len(failures) > 0 {
		t.Fatalf("%d of %d turns failed while the pool changed; first: %v", len(failures), done.Load()+int64(len(failures)), failures[0])
	}

	// The pool deleted: no endpoint, and a turn refused as unavailable
	// rather than held.
	k.DeleteInferencePool("llama")
	eventually(t, "no endpoints without the pool", func() bool { return len(ids()) == 0 })
	refusedUnavailable(t, client, model)
}
