package kubetest

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// inferencePools is the InferencePool's API resource
// (inference.networking.k8s.io/v1).
var inferencePools = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Namespace is one namespace of a control plane, where a test makes pods
// and InferencePools and, as a kubelet would, writes the pods' status.
type Namespace struct {
	t       testing.TB
	Name    string
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
}

// Namespace creates the namespace name, with the default service account
// that pods are admitted with (no controller-manager makes it).
func (cp *ControlPlane) Namespace(t testing.TB, name string) *Namespace {
	t.Helper()
	n := &Namespace{t: t, Name: name}
	var err error
	if n.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	if n.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Pod creates a pod with labels and writes its status: Running, Ready and
// with ip as its pod IP.
func (n *Namespace) Pod(name, ip string, labels map[string]string) {
	n.t.Helper()
	ctx := n.t.Context()
	no := false
	p, err := n.Client.CoreV1().Pods(n.Name).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "engine", Image: "vllm"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
	}
	if _, err := n.Client.CoreV1().Pods(n.Name).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// SetReady writes the pod's Ready condition.
func (n *Namespace) SetReady(name string, ready bool) {
	n.t.Helper()
	ctx := n.t.Context()
	p, err := n.Client.CoreV1().Pods(n.Name).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if _, err := n.Client.CoreV1().Pods(n.Name).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// Annotate sets annotations on the pod.
func (n *Namespace) Annotate(name string, annotations map[string]string) {
	n.t.Helper()
	ctx := n.t.Context()
	p, err := n.Client.CoreV1().Pods(n.Name).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		p.Annotations[k] = v
	}
	if _, err := n.Client.CoreV1().Pods(n.Name).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// DeletePod deletes the pod at once.
func (n *Namespace) DeletePod(name string) {
	n.t.Helper()
	if err := n.Client.CoreV1().Pods(n.Name).Delete(n.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// InferencePool creates or updates the InferencePool name: the pods
// matchLabels selects, on ports.
func (n *Namespace) InferencePool(name string, matchLabels map[string]any, ports ...int) {
	n.t.Helper()
	ctx := n.t.Context()
	var targets []any
	for _, p := range ports {
		targets = append(targets, map[string]any{"number": int64(p)})
	}
	res := n.Dynamic.Resource(inferencePools).Namespace(n.Name)
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
		n.t.Fatal(err)
	}
}

// DeleteInferencePool deletes the InferencePool name.
func (n *Namespace) DeleteInferencePool(name string) {
	n.t.Helper()
	if err := n.Dynamic.Resource(inferencePools).Namespace(n.Name).Delete(n.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// PodListeners listens on one port of each of 127.0.0.1 … 127.0.0.n, as
// the replicas of a Deployment listen on one port of their pod IPs: pods
// given those IPs reach the test's engines. The listeners close when the
// test ends, or when the server given them does.
func PodListeners(t testing.TB, n int) (ls []net.Listener, port int) {
	t.Helper()
retry:
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = first.Addr().(*net.TCPAddr).Port
		ls = []net.Listener{first}
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
		t.Cleanup(func() {
			for _, l := range ls {
				l.Close()
			}
		})
		return ls, port
	}
	t.Fatal("kubetest: no port free on every loopback address")
	return nil, 0
}
