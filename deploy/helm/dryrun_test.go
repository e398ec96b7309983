package helm

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/turnpike-gateway/turnpike/internal/kubetest"
)

// TestChartServerSideDryRun applies the rendered manifests to a real
// kube-apiserver with server-side apply and dry run, so that its schemas
// and admission judge them; then it applies the service account and RBAC
// for real and asks the apiserver what the gateway's service account may
// do. The ServiceMonitor is left off: its CRD belongs to the Prometheus
// Operator.
func TestChartServerSideDryRun(t *testing.T) {
	helm(t)
	cp := kubetest.Start(t)
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	ctx := context.Background()
	for _, ns := range []string{namespace, "models", "models-a", "models-b"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	apply := func(t *testing.T, o *unstructured.Unstructured, dryRun bool) {
		t.Helper()
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		opts := metav1.ApplyOptions{FieldManager: "turnpike-chart-test", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o, opts); err != nil {
			t.Errorf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}

	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			c.set = append(c.set, "metrics.serviceMonitor.enabled=false")
			for _, o := range render(t, c.args()...) {
				apply(t, o, true)
			}
		})
	}

	// The defaults' RBAC, for real: discovery may read pods and
	// InferencePools in its namespace, and nothing else anywhere.
	for _, o := range render(t, (&chartCase{}).args()...) {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			apply(t, o, false)
		}
	}
	sa := "system:serviceaccount:" + namespace + ":" + release + "-turnpike"
	allowed := func(ns, verb, group, resource string) (*authorizationv1.SubjectAccessReview, error) {
		return client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
		}}, metav1.CreateOptions{})
	}
	// The RBAC authorizer reads Roles through an informer: wait until it
	// has the new one.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := allowed(namespace, "list", "", "pods")
		return err == nil && r.Status.Allowed, err
	})
	if err != nil {
		t.Fatalf("the service account is never allowed to list pods: %v", err)
	}
	for _, c := range []struct {
		ns, verb, group, resource string
		allowed                   bool
	}{
		{namespace, "list", "", "pods", true},
		{namespace, "watch", "", "pods", true},
		{namespace, "get", "", "pods", true},
		{namespace, "list", "inference.networking.k8s.io", "inferencepools", true},
		{namespace, "watch", "inference.networking.k8s.io", "inferencepools", true},
		{namespace, "update", "", "pods", false},
		{namespace, "get", "", "secrets", false},
		{namespace, "list", "", "configmaps", false},
		{namespace, "delete", "inference.networking.k8s.io", "inferencepools", false},
		{"kube-system", "list", "", "pods", false},
	} {
		r, err := allowed(c.ns, c.verb, c.group, c.resource)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.allowed {
			t.Errorf("%s may %s %s in %s: %v, want %v (%s)", sa, c.verb, c.resource, c.ns, r.Status.Allowed, c.allowed, r.Status.Reason)
		}
	}
}
