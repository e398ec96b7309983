package pools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/turnpike-gateway/turnpike/internal/kubetest"
)

// TestWakeScalesADeployment runs a pool's wake hook against a real
// kube-apiserver: a turn for a pool at zero scales its Deployment to one
// replica through the scale subresource, once within the cooldown.
func TestWakeScalesADeployment(t *testing.T) {
	cp := kubetest.Start(t)
	k := cp.Namespace(t, "tp-wake")
	zero := int32(0)
	labels := map[string]string{"app": "vllm"}
	_, err := k.Client.AppsV1().Deployments(k.Name).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(empty, []byte("endpoints: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry([]PoolConfig{
		{Name: "p", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{Kind: DiscoveryFile, Path: empty},
			Wake: &WakeConfig{Deployment: k.Name + "/vllm", Kubeconfig: cp.Kubeconfig}},
		{Name: "q", ServedModels: []string{"other"}, Discovery: &DiscoveryConfig{Kind: DiscoveryFile, Path: empty}},
	}, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())

	if r.Wake("other") {
		t.Error("a pool without a wake hook said it wakes")
	}
	for range 3 {
		if !r.Wake("m") {
			t.Fatal("the pool with a wake hook did not say it wakes")
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := k.Client.AppsV1().Deployments(k.Name).GetScale(t.Context(), "vllm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.Replicas == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment still has %d replicas a minute after the wake", s.Spec.Replicas)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Close(context.Background()) // waits for the wake's call to be counted
	if n := testutil.ToFloat64(r.metrics.wakes.WithLabelValues("p", "ok")); n != 1 {
		t.Errorf("%v wakes counted for three turns within the cooldown, want 1", n)
	}
}

// TestWakeConfigErrors: a wake hook's config names what is wrong with it.
func TestWakeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		wake WakeConfig
		want string
	}{
		{WakeConfig{}, "pools[0].wake.url: a wake hook needs url or deployment"},
		{WakeConfig{URL: "http://h/wake", Deployment: "d"}, "pools[0].wake.deployment: a wake hook is url or deployment, not both"},
		{WakeConfig{URL: "ftp://h"}, `pools[0].wake.url: "ftp://h" is not an http or https URL`},
		{WakeConfig{Deployment: "a/b/c"}, `pools[0].wake.deployment: "a/b/c" is not name or namespace/name`},
		{WakeConfig{URL: "http://h", Cooldown: -time.Second}, "pools[0].wake.cooldown: -1s is negative"},
	} {
		err := ValidatePools([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://127.0.0.1:1"}}, Wake: &tc.wake}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.wake, err, tc.want)
		}
	}
}
