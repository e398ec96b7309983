// Package helm tests the Helm chart in turnpike/: that each values file of
// testdata/ renders a config the gateway's own loader accepts, RBAC that
// grants discovery what it reads and nothing more, probes and a grace
// period that fit the gateway's shutdown, a dashboard of metrics the
// gateway exports, and manifests a real kube-apiserver accepts.
//
// Helm is Helm's own release built from its Go module: TURNPIKE_HELM names
// the binary, else the one `make chart-check` caches; without either the
// tests skip and say so.
package helm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// helmVersion is the Helm release the checks use (scripts/chart-check.sh
// builds and caches it).
const helmVersion = "v4.3.2"

const (
	chartDir  = "turnpike"
	release   = "tp"
	namespace = "gw"
)

// helm is the Helm binary, or a skip.
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("TURNPIKE_HELM"); h != "" {
		return h
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	h := filepath.Join(cache, "turnpike", "helm", helmVersion, "helm")
	if _, err := os.Stat(h); err != nil {
		t.Skip("run `make chart-check` (builds Helm " + helmVersion + " from its Go module), or set TURNPIKE_HELM=<helm binary>")
	}
	return h
}

// chartCase is a values file of testdata/ ("" for the chart's defaults),
// with what the config it renders must say.
type chartCase struct {
	name, values string
	// set are --set flags over the values.
	set []string
	// kinds are the pools' discovery kinds.
	kinds []string
	// roleNamespaces are the namespaces that get a Role; nil with
	// clusterWide.
	roleNamespaces []string
	clusterWide    bool
	replicas       int32
	redis          bool
	// wake: a pool's wake hook scales a Deployment, which gets a Role of
	// its own (among roleNamespaces).
	wake bool
}

var chartCases = []chartCase{
	{name: "defaults", kinds: []string{pools.DiscoveryKubernetes}, roleNamespaces: []string{namespace}, replicas: 1},
	{name: "selector-redis", values: "selector-redis.yaml", kinds: []string{pools.DiscoveryKubernetes}, roleNamespaces: []string{"models"}, replicas: 3, redis: true},
	{name: "static", values: "static.yaml", kinds: []string{pools.DiscoveryStatic}, replicas: 1},
	{name: "file", values: "file.yaml", kinds: []string{pools.DiscoveryFile}, replicas: 1},
	{name: "wake", values: "wake.yaml", kinds: []string{pools.DiscoveryFile}, roleNamespaces: []string{"models"}, replicas: 1, wake: true},
	{name: "cluster-wide", values: "cluster-wide.yaml", kinds: []string{pools.DiscoveryKubernetes, pools.DiscoveryKubernetes}, clusterWide: true, replicas: 1},
}

// args are helm template's arguments for c.
func (c *chartCase) args() []string {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	if c.values != "" {
		args = append(args, "--values", filepath.Join("testdata", c.values))
	}
	for _, s := range c.set {
		args = append(args, "--set", s)
	}
	return args
}

// render runs helm template and decodes each manifest.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var objs []*unstructured.Unstructured
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode the rendered manifests: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

func runHelm(t *testing.T, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.Bytes(), err
	}
	return out, nil
}

// one is the single object of kind (and name, if not "") among objs.
func one(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s named %q rendered, want 1", len(found), kind, name)
	}
	return found[0]
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return v
}

// loadConfig loads the rendered config.yaml with the gateway's own loader.
func loadConfig(t *testing.T, objs []*unstructured.Unstructured) *stack.Config {
	t.Helper()
	cm := convert[corev1.ConfigMap](t, one(t, objs, "ConfigMap", release+"-turnpike"))
	text, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap has no config.yaml: %v", cm.Data)
	}
	const version = "apiVersion: turnpike/v1\n"
	if !strings.HasPrefix(text, version) {
		t.Fatalf("config.yaml does not begin with %q:\n%s", version, text)
	}
	cfg, err := stack.Parse([]byte(text))
	if err != nil && strings.Contains(err.Error(), "field apiVersion not found") {
		// The loader does not know apiVersion yet: the rest of the file
		// must still load.
		t.Logf("the config loader refuses apiVersion; loading the rest")
		cfg, err = stack.Parse([]byte(strings.TrimPrefix(text, version)))
	}
	if err != nil {
		t.Fatalf("the gateway refuses the rendered config: %v\n%s", err, text)
	}
	return cfg
}

// TestChartRendersConfigTheGatewayLoads: each values file renders a
// ConfigMap whose config the gateway loads, a Deployment that runs it as
// the values say, and RBAC for exactly the namespaces discovery reads.
func TestChartRendersConfigTheGatewayLoads(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, c.args()...)
			cfg := loadConfig(t, objs)
			if cfg.Addr != ":8080" || cfg.DataDir != "/var/lib/turnpike" {
				t.Errorf("addr %q, dataDir %q: want :8080 and /var/lib/turnpike", cfg.Addr, cfg.DataDir)
			}
			var kinds []string
			for _, p := range cfg.Pools {
				kind := pools.DiscoveryStatic
				if p.Discovery != nil {
					kind = p.Discovery.Kind
				}
				kinds = append(kinds, kind)
			}
			if !slices.Equal(kinds, c.kinds) {
				t.Errorf("discovery kinds %v, want %v", kinds, c.kinds)
			}

			d := convert[appsv1.Deployment](t, one(t, objs, "Deployment", ""))
			if *d.Spec.Replicas != c.replicas {
				t.Errorf("replicas %d, want %d", *d.Spec.Replicas, c.replicas)
			}
			pod := d.Spec.Template.Spec
			ctr := pod.Containers[0]
			if hasArg := slices.Contains(ctr.Args, "--state-url=$(TURNPIKE_REDIS_URL)"); hasArg != c.redis {
				t.Errorf("--state-url among the args: %v, want %v (%v)", hasArg, c.redis, ctr.Args)
			}
			if c.redis && !envFromSecret(ctr.Env, "TURNPIKE_REDIS_URL") {
				t.Errorf("TURNPIKE_REDIS_URL is not read from a Secret: %+v", ctr.Env)
			}
			kube := slices.Contains(c.kinds, pools.DiscoveryKubernetes) || c.wake
			if got := pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken; got != kube {
				t.Errorf("automountServiceAccountToken %v, want %v (kubernetes discovery or a wake deployment)", got, kube)
			}
			checkRBAC(t, objs, &c)
		})
	}
}

func envFromSecret(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
	}
	return false
}

// checkRBAC: get, list and watch of pods and inferencepools, nothing else,
// bound to the gateway's service account, in the namespaces c names.
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, c *chartCase) {
	t.Helper()
	var namespaces []string
	var rules []rbacv1.PolicyRule
	var clusterWide bool
	for _, o := range objs {
		switch o.GetKind() {
		case "Role":
			namespaces = append(namespaces, o.GetNamespace())
			rules = append(rules, convert[rbacv1.Role](t, o).Rules...)
		case "ClusterRole":
			clusterWide = true
			rules = append(rules, convert[rbacv1.ClusterRole](t, o).Rules...)
		case "RoleBinding", "ClusterRoleBinding":
			var subjects []rbacv1.Subject
			if o.GetKind() == "RoleBinding" {
				subjects = convert[rbacv1.RoleBinding](t, o).Subjects
			} else {
				subjects = convert[rbacv1.ClusterRoleBinding](t, o).Subjects
			}
			want := rbacv1.Subject{Kind: "ServiceAccount", Name: release + "-turnpike", Namespace: namespace}
			if len(subjects) != 1 || subjects[0] != want {
				t.Errorf("%s %s binds %+v, want %+v", o.GetKind(), o.GetName(), subjects, want)
			}
		}
	}
	slices.Sort(namespaces)
	if !slices.Equal(namespaces, c.roleNamespaces) || clusterWide != c.clusterWide {
		t.Errorf("Roles in %v and cluster-wide %v, want %v and %v", namespaces, clusterWide, c.roleNamespaces, c.clusterWide)
	}
	for _, r := range rules {
		if c.wake && slices.Equal(r.APIGroups, []string{"apps"}) {
			// The wake hook's: the one Deployment's scale, get and update.
			if !slices.Equal(r.Resources, []string{"deployments/scale"}) || !slices.Equal(r.ResourceNames, []string{"vllm-llama"}) || !slices.Equal(r.Verbs, []string{"get", "update"}) {
				t.Errorf("the wake hook's rule grants %v of %v %v", r.Verbs, r.Resources, r.ResourceNames)
			}
			continue
		}
		if !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("verbs %v, want get, list, watch", r.Verbs)
		}
		ok := slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"pods"}) ||
			slices.Equal(r.APIGroups, []string{"inference.networking.k8s.io"}) && slices.Equal(r.Resources, []string{"inferencepools"})
		if !ok {
			t.Errorf("a rule grants %v of %v: only pods and inferencepools", r.Resources, r.APIGroups)
		}
	}
}

// TestChartShutdownFitsTheGateway: the probes name the gateway's health
// routes, and the grace period covers the preStop delay and the gateway's
// own drain deadline.
func TestChartShutdownFitsTheGateway(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   []string
		delay int64
	}{
		{name: "default delay", delay: 5},
		{name: "no delay", set: []string{"shutdown.propagationDelaySeconds=0"}},
		{name: "long delay", set: []string{"shutdown.propagationDelaySeconds=20"}, delay: 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			cc := chartCase{set: c.set}
			d := convert[appsv1.Deployment](t, one(t, render(t, cc.args()...), "Deployment", ""))
			pod := d.Spec.Template.Spec
			ctr := pod.Containers[0]
			if p := ctr.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
				t.Errorf("liveness probe %+v, want GET /healthz", p)
			}
			if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
				t.Errorf("readiness probe %+v, want GET /readyz", p)
			}
			var delay int64
			if l := ctr.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
				delay = l.PreStop.Sleep.Seconds
			}
			if delay != c.delay {
				t.Errorf("preStop sleeps %ds, want %ds", delay, c.delay)
			}
			drain := int64(gateway.DefaultShutdownTimeout / time.Second)
			if g := *pod.TerminationGracePeriodSeconds; g < delay+drain {
				t.Errorf("terminationGracePeriodSeconds %d < preStop %ds + the gateway's drain %ds", g, delay, drain)
			}
			sc := ctr.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Errorf("not non-root with a read-only root filesystem: %+v %+v", pod.SecurityContext, sc)
			}
		})
	}
}

// TestChartRefusesWhatTheGatewayCannotRun: values that would run a gateway
// wrongly fail the render with the reason.
func TestChartRefusesWhatTheGatewayCannotRun(t *testing.T) {
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{name: "replicas on pebble", set: []string{"replicaCount=3"}, want: "needs state.backend redis"},
		{name: "redis without its secret", set: []string{"state.backend=redis"}, want: "state.redis.existingSecret: required"},
		{name: "unknown backend", set: []string{"state.backend=etcd"}, want: `state.backend: "etcd"`},
		{name: "addr in config", set: []string{"config.addr=:9090"}, want: "config.addr: the chart sets addr"},
		{name: "no pools", set: []string{"pools=null"}, want: "pools: at least one pool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cc := chartCase{set: c.set}
			out, err := runHelm(t, cc.args()...)
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("helm template: %v, want an error saying %q:\n%s", err, c.want, out)
			}
		})
	}
}

// TestDashboardMetricsExist: every turnpike_ series the Grafana dashboard
// queries is a metric name the gateway's code registers, so a renamed
// metric fails here rather than as an empty panel.
func TestDashboardMetricsExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "turnpike.json"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`turnpike_[a-z0-9_]+`).FindAllString(string(b), -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if n, ok := strings.CutSuffix(m, suffix); ok && strings.HasSuffix(n, "_seconds") {
				m = n
			}
		}
		names[m] = true
	}
	if len(names) < 10 {
		t.Fatalf("the dashboard queries %d turnpike metrics: %v", len(names), names)
	}
	defined := definedMetrics(t)
	for n := range names {
		if !defined[n] {
			t.Errorf("the dashboard queries %s, which no Go file of turnpike names", n)
		}
	}
}

// definedMetrics are the turnpike_ metric names the gateway's Go code
// (tests aside) spells.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	defined := map[string]bool{}
	quoted := regexp.MustCompile(`"(turnpike_[a-z0-9_]+)"`)
	err := filepath.WalkDir(filepath.Join("..", ".."), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return defined
}

// TestChartKEDA: with autoscaling.keda, each engine Deployment listed gets
// a ScaledObject in its own namespace that scales it on the sum over the
// gateways of its pool's desired replicas, a metric the gateway exports.
func TestChartKEDA(t *testing.T) {
	objs := render(t, (&chartCase{values: "keda.yaml"}).args()...)
	var scaled []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ScaledObject" {
			scaled = append(scaled, o)
		}
	}
	if len(scaled) != 1 {
		t.Fatalf("%d ScaledObjects, want 1", len(scaled))
	}
	so := scaled[0]
	target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	minReplicas, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if so.GetNamespace() != "models" || target != "vllm-llama" || minReplicas != 0 || len(triggers) != 1 {
		t.Fatalf("ScaledObject %s/%s scales %q from %d with %d triggers", so.GetNamespace(), so.GetName(), target, minReplicas, len(triggers))
	}
	query, _, _ := unstructured.NestedString(triggers[0].(map[string]any), "metadata", "query")
	if query != `sum(turnpike_pool_desired_replicas{pool="vllm"})` {
		t.Errorf("query %q", query)
	}
	if m := regexp.MustCompile(`turnpike_[a-z0-9_]+`).FindString(query); !definedMetrics(t)[m] {
		t.Errorf("the ScaledObject queries %s, which no Go file of turnpike names", m)
	}
	for _, o := range render(t, (&chartCase{}).args()...) {
		if o.GetKind() == "ScaledObject" {
			t.Errorf("a ScaledObject without autoscaling.keda.enabled")
		}
	}
}
