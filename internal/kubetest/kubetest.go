// Package kubetest runs a real control plane for tests: kube-apiserver and
// etcd from KUBEBUILDER_ASSETS (scripts/k8s-assets.sh builds them; `make
// k8s-assets` prints the directory), started by controller-runtime's
// envtest, with the InferencePool CRD of the Gateway API Inference
// Extension installed. There is no controller-manager: a test writes the
// status it needs (a pod's Ready and PodIP) itself.
//
// Start skips the test when KUBEBUILDER_ASSETS is unset, and stops the
// control plane when the test ends.
package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControlPlane is a running kube-apiserver and its etcd.
type ControlPlane struct {
	// Config reaches the apiserver as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file of the same user, for a client
	// that reads one (KUBECONFIG, kubectl).
	Kubeconfig string
}

// Start starts a control plane for t, with the InferencePool CRD and the
// CRD files named installed, or skips t when KUBEBUILDER_ASSETS is unset.
func Start(t testing.TB, crds ...string) *ControlPlane {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("run `make k8s-assets` and set KUBEBUILDER_ASSETS=<dir>")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: append([]string{InferencePoolCRD(t)}, crds...), ErrorIfPathMissing: true},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("kubetest: start the control plane from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubetest: stop the control plane: %v", err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "turnpike-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{Config: cfg, Kubeconfig: kubeconfig}
}

// InferencePoolCRD is the InferencePool CRD file, as the module that gives
// its Go types ships it.
func InferencePoolCRD(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Fatalf("kubetest: locate the InferencePool CRD's module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
}
