package pools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/turnpike-gateway/turnpike/internal/kubetest"
)

// controlPlane starts a real kube-apiserver and etcd from
// KUBEBUILDER_ASSETS, with the InferencePool CRD installed, and returns a
// kubeconfig file for it and clients. It skips the test when the assets
// are not there.
func controlPlane(t *testing.T) (kubeconfig string, client kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	cp := kubetest.Start(t)
	var err error
	if client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	if dyn, err = dynamic.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	return cp.Kubeconfig, client, dyn
}

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
retry:
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{first}
		for i := 2; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
			if err != nil {
				for _, l := range ls {
					l.Close()
				}
				if errors.Is(err, syscall.EADDRINUSE) {
					continue retry
				}
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			s := &http.Server{Handler: handler}
			go s.Serve(l)
			t.Cleanup(func() { s.Close() })
		}
		return port
	}
	t.Fatal("no port free on every loopback address")
	return 0
}

// kubeTest is one namespace of the control plane, and its pods.
type kubeTest struct {
	t      *testing.T
	ns     string
	client kubernetes.Interface
	dyn    dynamic.Interface
}

func newKubeTest(t *testing.T, ns string, client kubernetes.Interface, dyn dynamic.Interface) *kubeTest {
	k := &kubeTest{t: t, ns: ns, client: client, dyn: dyn}
	ctx := t.Context()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller manager makes the namespace's default service
	// account, which pods are admitted with: the test does.
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return k
}

// pod creates a pod with labels and, as a kubelet would, writes its
// status: Running, Ready and with ip as its pod IP.
func (k *kubeTest) pod(name, ip string, labels map[string]string) {
	k.t.Helper()
	ctx := k.t.Context()
	no := false
	p, err := k.client.CoreV1().Pods(k.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "engine", Image: "vllm"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
	}
	if _, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// setReady writes the pod's Ready condition.
func (k *kubeTest) setReady(name string, ready bool) {
	k.t.Helper()
	ctx := k.t.Context()
	p, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if _, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// inferencePool creates or updates the InferencePool name.
func (k *kubeTest) inferencePool(name string, matchLabels map[string]any, ports ...int) {
	k.t.Helper()
	ctx := k.t.Context()
	var targets []any
	for _, p := range ports {
		targets = append(targets, map[string]any{"number": int64(p)})
	}
	res := k.dyn.Resource(InferencePoolResource).Namespace(k.ns)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": matchLabels},
			"targetPorts": targets,
			"endpointPickerRef": map[string]any{
				"name": "turnpike", "port": map[string]any{"number": int64(9002)},
			},
		},
	}}
	old, err := res.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		obj.SetResourceVersion(old.GetResourceVersion())
		_, err = res.Update(ctx, obj, metav1.UpdateOptions{})
	} else {
		_, err = res.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		k.t.Fatal(err)
	}
}

// TestKubernetesDiscovery runs discovery against a real kube-apiserver:
// an InferencePool's Ready pods become endpoints and follow the pods and
// the pool.
func TestKubernetesDiscovery(t *testing.T) {
	kubeconfig, client, dyn := controlPlane(t)
	port := loopbackEngines(t, 6)
	id := func(i int) string { return "127.0.0." + strconv.Itoa(i) + ":" + strconv.Itoa(port) }
	opts := Options{ScrapeInterval: 20 * time.Millisecond, HealthInterval: 50 * time.Millisecond}

	t.Run("inference pool", func(t *testing.T) {
		k := newKubeTest(t, "tp-pool", client, dyn)
		vllm := map[string]string{"app": "vllm", PodLabelTemplateHash: "abc123"}
		k.inferencePool("llama", map[string]any{"app": "vllm"}, port)
		for i := 1; i <= 4; i++ {
			labels := maps(vllm)
			if i == 4 {
				labels["track"] = "canary"
				labels[PodLabelRole] = RoleDecode
			}
			k.pod(fmt.Sprintf("vllm-%d", i), fmt.Sprintf("127.0.0.%d", i), labels)
		}
		// A pod of another app, Ready, is not the pool's.
		k.pod("other", "127.0.0.6", map[string]string{"app": "sglang"})

		r, err := NewRegistry([]PoolConfig{{Name: "llama", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{
			Kind: DiscoveryKubernetes, Kubeconfig: kubeconfig, InferencePool: &InferencePoolRef{Namespace: k.ns, Name: "llama"},
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
		k.setReady("vllm-2", false)
		eventually(t, "the NotReady pod to leave", func() bool { return slices.Equal(ids(r), sorted(id(1), id(3), id(4))) })
		eventually(t, "the NotReady pod to drain", func() bool { return isClosed(e2.Drained()) })
		if e2.Available() {
			t.Error("a drained endpoint is available")
		}

		// A new pod → taking traffic.
		k.pod("vllm-5", "127.0.0.5", maps(vllm, "track", "canary"))
		eventually(t, "the new pod to join", func() bool { return slices.Equal(ids(r), sorted(id(1), id(3), id(4), id(5))) })
		e5, _ := r.Endpoint(id(5))
		eventually(t, "the new pod to take traffic", e5.Available)
		if got := r.EndpointsFor(nil, "m"); !slices.Contains(got, e5) {
			t.Error("the new pod is not a candidate for its model")
		}

		// The selector changed → the set follows.
		k.inferencePool("llama", map[string]any{"app": "vllm", "track": "canary"}, port)
		eventually(t, "the set to follow the selector", func() bool { return slices.Equal(ids(r), sorted(id(4), id(5))) })

		// The pool deleted → none.
		if err := dyn.Resource(InferencePoolResource).Namespace(k.ns).Delete(t.Context(), "llama", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "no endpoints without the pool", func() bool { return len(r.Endpoints()) == 0 })
		if got := r.EndpointsFor(nil, "m"); len(got) != 0 {
			t.Errorf("candidates %v without the pool", got)
		}
	})

	t.Run("selector", func(t *testing.T) {
		k := newKubeTest(t, "tp-selector", client, dyn)
		k.pod("sglang-1", "127.0.0.1", map[string]string{"app": "sglang", PodLabelRole: RolePrefill, "release": "r7"})
		k.pod("sglang-2", "127.0.0.2", map[string]string{"app": "sglang", PodLabelRole: "bogus"})
		r, err := NewRegistry([]PoolConfig{
			{Name: "decode", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://" + id(6)}}},
			{Name: "sglang", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{
				Kind: DiscoveryKubernetes, Kubeconfig: kubeconfig, Namespace: k.ns, Selector: "app=sglang", Ports: []int{port}, RevisionLabel: "release",
			}},
		}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		if got, want := ids(r), sorted(id(1), id(6)); !slices.Equal(got, want) {
			t.Fatalf("endpoints %v, want %v (the pod with a bad role skipped)", got, want)
		}
		e1, _ := r.Endpoint(id(1))
		if e1.Role() != RolePrefill || e1.Labels().Revision != "r7" {
			t.Errorf("role %s, revision %q", e1.Role(), e1.Labels().Revision)
		}
		if got := r.PrefillEndpointsFor(nil, "m"); len(got) != 1 || got[0] != e1 {
			t.Errorf("prefill candidates %v", got)
		}
		if n := testutil.ToFloat64(r.metrics.badEntries.WithLabelValues("sglang")); n != 1 {
			t.Errorf("bad pods counted %v, want 1", n)
		}
		if err := client.CoreV1().Pods(k.ns).Delete(t.Context(), "sglang-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deleted pod to leave", func() bool { return slices.Equal(ids(r), []string{id(6)}) })
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
