package pools

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Discovery kinds: where a pool's endpoints come from.
const (
	// DiscoveryStatic is the pool's endpoints list in the config.
	DiscoveryStatic = "static"
	// DiscoveryFile is an endpoints file, watched for changes.
	DiscoveryFile = "file"
	// DiscoveryKubernetes is the Ready pods of an InferencePool or of a
	// label selector.
	DiscoveryKubernetes = "kubernetes"
)

// Endpoint label keys, as an endpoints file spells them. Kubernetes
// discovery derives the same labels from a pod (see KubernetesSource).
const (
	// LabelPool names the pool an entry belongs to. An entry naming
	// another pool is that pool's, so several pools can share one file;
	// an entry without it belongs to the pool that reads the file.
	LabelPool = "pool"
	// LabelRole is the endpoint's role (both, prefill, decode); default
	// the pool's.
	LabelRole = "role"
	// LabelRevision is the engine's revision (a rollout's generation).
	LabelRevision = "revision"
	// LabelModels are the model names the endpoint serves, comma
	// separated; default the pool's servedModels.
	LabelModels = "models"
	// LabelAccelerator is the endpoint's accelerator (a catalog name);
	// default the pool's.
	LabelAccelerator = "accelerator"
)

// Labels describe one endpoint beyond its address. The zero value means
// "as its pool says".
type Labels struct {
	// Pool is the name of the endpoint's pool.
	Pool string
	// Role is both, prefill or decode; "" means the pool's role.
	Role string
	// Revision is the engine's revision; "" when unknown.
	Revision string
	// Models are the served model names; nil means the pool's.
	Models []string
	// Accelerator is a catalog name; "" means the pool's.
	Accelerator string
}

func (l Labels) equal(o Labels) bool {
	return l.Pool == o.Pool && l.Role == o.Role && l.Revision == o.Revision &&
		l.Accelerator == o.Accelerator && slices.Equal(l.Models, o.Models)
}

// parseLabels reads an endpoints file's label map. Unknown keys are kept
// out: they label nothing turnpike routes by.
func parseLabels(m map[string]string) (Labels, error) {
	l := Labels{
		Pool:        m[LabelPool],
		Role:        m[LabelRole],
		Revision:    m[LabelRevision],
		Accelerator: m[LabelAccelerator],
	}
	switch l.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
	default:
		return Labels{}, fmt.Errorf("role %q is not both, prefill or decode", l.Role)
	}
	l.Models = splitModels(m[LabelModels])
	return l, nil
}

// splitModels reads a comma-separated list of model names; nil when it
// names none.
func splitModels(s string) []string {
	var models []string
	for name := range strings.SplitSeq(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			models = append(models, name)
		}
	}
	return models
}

// Target is one endpoint as a discovery source reports it.
type Target struct {
	// URL is the engine's base URL; its host:port is the endpoint's ID.
	URL *url.URL
	// KVEvents is the engine's KV event publisher address, or "".
	KVEvents string
	// BootstrapPort is the SGLang bootstrap port; 0 means the default.
	BootstrapPort int
	// Labels describe the endpoint.
	Labels Labels
}

// ID is the endpoint ID the target becomes: its URL's host:port.
func (t *Target) ID() string { return t.URL.Host }

func (t *Target) equal(o *Target) bool {
	return t.URL.String() == o.URL.String() && t.KVEvents == o.KVEvents &&
		t.BootstrapPort == o.BootstrapPort && t.Labels.equal(o.Labels)
}

// hostPortURL is scheme://address:port, the address an IP or a name.
func hostPortURL(scheme, address string, port int) (*url.URL, error) {
	if address == "" {
		return nil, fmt.Errorf("address required")
	}
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("port %d is not a port", port)
	}
	if strings.ContainsAny(address, "/?#@ ") {
		return nil, fmt.Errorf("address %q is not a host", address)
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(address, strconv.Itoa(port))}, nil
}

// Sink receives what a Source discovers for one pool. Its methods are safe
// for concurrent use, and return quickly: they publish a new fleet
// snapshot, nothing more.
type Sink interface {
	// Upsert adds the endpoint t names, or updates the labels of the one
	// of that ID. An endpoint that joins a running registry takes traffic
	// after its first good scrape.
	Upsert(t Target)
	// Delete removes the endpoint of that ID: it takes no new turns, its
	// in-flight turns finish, then its KV index entries and session pins
	// go (Registry.OnLeave).
	Delete(id string)
}

// A Source discovers a pool's endpoints and reports them to a Sink. Start
// reports the source's whole current set before it returns, then every
// change until Close; Close stops it and joins its goroutines, up to ctx.
// A source that cannot read its origin keeps the last set it reported,
// and says why in the log and a metric.
type Source interface {
	Start(ctx context.Context, sink Sink) error
	Close(ctx context.Context) error
}

// DiscoveryConfig says where a pool's endpoints come from.
type DiscoveryConfig struct {
	// Kind is "static" (default: the pool's endpoints list), "file" or
	// "kubernetes".
	Kind string `yaml:"kind" json:"kind"`
	// Path is kind file's endpoints file, YAML or JSON:
	// endpoints: [{address, port, labels: {role, revision, models, ...}}].
	// Required for kind file.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// Scheme of the discovered endpoints' URLs: "http" (default) or
	// "https".
	Scheme string `yaml:"scheme,omitempty" json:"scheme,omitempty"`
	// InferencePool names the InferencePool (inference.networking.k8s.io/v1)
	// whose selector and targetPorts give kind kubernetes its pods and
	// ports. Either it, or Selector and Ports.
	InferencePool *InferencePoolRef `yaml:"inferencePool,omitempty" json:"inferencePool,omitempty"`
	// Namespace of kind kubernetes's pods without an InferencePool.
	// Default the gateway's own namespace in a cluster, else "default".
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	// Selector is a label selector ("app=vllm,tier in (a,b)") of kind
	// kubernetes's pods without an InferencePool.
	Selector string `yaml:"selector,omitempty" json:"selector,omitempty"`
	// Ports are the engine ports of each selected pod, one endpoint per
	// port (data-parallel ranks). Required with Selector.
	Ports []int `yaml:"ports,omitempty" json:"ports,omitempty"`
	// RevisionLabel names the pod label that carries an endpoint's
	// revision. Default: the pod's pod-template-hash, else its
	// controller-revision-hash.
	RevisionLabel string `yaml:"revisionLabel,omitempty" json:"revisionLabel,omitempty"`
	// ModelsLabel names the pod label, or annotation, that lists the model
	// names a pod serves, comma separated; the annotation wins, as only it
	// can hold a name with a slash or a list. Default llm-d.ai/model; a
	// pod with neither serves the pool's servedModels.
	ModelsLabel string `yaml:"modelsLabel,omitempty" json:"modelsLabel,omitempty"`
	// AcceleratorLabel names the pod label that gives a pod's accelerator
	// (a catalog name). Default accelerator, the endpoints file's key; a
	// pod without it has the pool's.
	AcceleratorLabel string `yaml:"acceleratorLabel,omitempty" json:"acceleratorLabel,omitempty"`
	// Kubeconfig is a kubeconfig file for kind kubernetes. Default
	// $KUBECONFIG, else the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig,omitempty" json:"kubeconfig,omitempty"`
}

// InferencePoolRef names an InferencePool.
type InferencePoolRef struct {
	// Namespace of the InferencePool. Default as DiscoveryConfig.Namespace.
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	// Name of the InferencePool. Required.
	Name string `yaml:"name" json:"name"`
}

// kind is the config's kind with its default.
func (d *DiscoveryConfig) kind() string {
	if d == nil || d.Kind == "" {
		return DiscoveryStatic
	}
	return d.Kind
}

func (d *DiscoveryConfig) scheme() string {
	if d.Scheme == "" {
		return "http"
	}
	return d.Scheme
}

// validate reports every problem of a pool's discovery config; where is
// the pool's field path.
func (d *DiscoveryConfig) validate(where string, hasEndpoints bool, bad func(field, format string, args ...any)) {
	where += ".discovery"
	switch d.kind() {
	case DiscoveryStatic:
		if !hasEndpoints {
			bad(strings.TrimSuffix(where, ".discovery")+".endpoints", "at least one endpoint is required")
		}
		return
	case DiscoveryFile:
		if d.Path == "" {
			bad(where+".path", "required for kind file")
		}
	case DiscoveryKubernetes:
		for _, f := range [...]struct{ field, key string }{
			{"revisionLabel", d.RevisionLabel}, {"modelsLabel", d.ModelsLabel}, {"acceleratorLabel", d.AcceleratorLabel},
		} {
			if f.key == "" {
				continue
			}
			if err := validLabelKey(f.key); err != nil {
				bad(where+"."+f.field, "%v", err)
			}
		}
		switch {
		case d.InferencePool != nil:
			if d.InferencePool.Name == "" {
				bad(where+".inferencePool.name", "required")
			}
			if d.Selector != "" || len(d.Ports) > 0 {
				bad(where+".selector", "an InferencePool gives the selector and ports: set inferencePool or selector and ports, not both")
			}
		case d.Selector == "":
			bad(where, "kind kubernetes needs inferencePool: {namespace, name} or selector and ports")
		default:
			if err := validSelector(d.Selector); err != nil {
				bad(where+".selector", "%v", err)
			}
			if len(d.Ports) == 0 {
				bad(where+".ports", "at least one port is required with a selector")
			}
			for i, p := range d.Ports {
				if p <= 0 || p > 65535 {
					bad(fmt.Sprintf("%s.ports[%d]", where, i), "%d is not a port", p)
				}
			}
		}
	default:
		bad(where+".kind", "%q is not static, file or kubernetes", d.Kind)
		return
	}
	if hasEndpoints {
		bad(strings.TrimSuffix(where, ".discovery")+".endpoints", "kind %s discovers the endpoints: list none", d.kind())
	}
	switch d.Scheme {
	case "", "http", "https":
	default:
		bad(where+".scheme", "%q is not http or https", d.Scheme)
	}
}

// reconciler turns a source's successive full sets into upserts and
// deletes: what is new or changed is upserted, what is gone deleted.
// A source calls apply from one goroutine at a time.
type reconciler struct {
	sink Sink
	last map[string]Target
}

// apply reports the difference between the last set and want, and keeps
// want as the last set.
func (rc *reconciler) apply(want map[string]Target) (added, removed int) {
	for id, t := range want {
		if old, ok := rc.last[id]; !ok || !old.equal(&t) {
			rc.sink.Upsert(t)
			if !ok {
				added++
			}
		}
	}
	for id := range rc.last {
		if _, ok := want[id]; !ok {
			rc.sink.Delete(id)
			removed++
		}
	}
	rc.last = want
	return added, removed
}

// discoveryMetrics count what the sources saw. One set per registry.
type discoveryMetrics struct {
	badEntries *prometheus.CounterVec
	errors     *prometheus.CounterVec
	changes    *prometheus.CounterVec
	// adapterLoads counts the gateway's LoRA adapter loads.
	adapterLoads *prometheus.CounterVec
	// wakes counts the calls of pools' wake hooks.
	wakes *prometheus.CounterVec
}

func newDiscoveryMetrics() *discoveryMetrics {
	return &discoveryMetrics{
		badEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_discovery_bad_entries_total",
			Help: "Discovered entries skipped as invalid (an endpoints file's entry, a pod without a usable address), by pool.",
		}, []string{"pool"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_discovery_errors_total",
			Help: "Times a discovery source could not read its origin and kept the last good set, by pool.",
		}, []string{"pool"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_discovery_changes_total",
			Help: "Endpoints that joined or left a pool, by pool and change (join, leave).",
		}, []string{"pool", "change"}),
		adapterLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_lora_adapter_loads_total",
			Help: "LoRA adapter loads the gateway asked an engine for (loraLoading on-demand), by pool and result (ok, error).",
		}, []string{"pool", "result"}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_pool_wakes_total",
			Help: "Calls of a pool's wake hook (a turn arrived while it had no endpoint), by pool and result (ok, error).",
		}, []string{"pool", "result"}),
	}
}

func (m *discoveryMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.badEntries.Describe(ch)
	m.errors.Describe(ch)
	m.changes.Describe(ch)
	m.adapterLoads.Describe(ch)
	m.wakes.Describe(ch)
}

func (m *discoveryMetrics) Collect(ch chan<- prometheus.Metric) {
	m.badEntries.Collect(ch)
	m.errors.Collect(ch)
	m.changes.Collect(ch)
	m.adapterLoads.Collect(ch)
	m.wakes.Collect(ch)
}

// poolSink is the Sink of one pool's source.
type poolSink struct {
	r    *Registry
	pool *Pool
}

func (s poolSink) Upsert(t Target)  { s.r.upsert(s.pool, t) }
func (s poolSink) Delete(id string) { s.r.remove(s.pool, id) }

// staticSource is kind static: the pool's endpoints list. Its start
// reports the list; a reload of the config replaces it (set).
type staticSource struct {
	mu   sync.Mutex
	sink Sink
	// last is the list last reported, by ID.
	last map[string]Target
}

func newStaticSource(pc *PoolConfig) (*staticSource, error) {
	if _, err := staticTargets(pc.Name, pc.Endpoints); err != nil {
		return nil, err
	}
	return &staticSource{}, nil
}

// staticTargets are the targets of an endpoints list, in its order.
func staticTargets(pool string, ecs []EndpointConfig) ([]Target, error) {
	ts := make([]Target, 0, len(ecs))
	for _, ec := range ecs {
		u, err := url.Parse(ec.URL)
		if err != nil {
			return nil, fmt.Errorf("pools: endpoint %q: %w", ec.URL, err)
		}
		ts = append(ts, Target{URL: u, KVEvents: ec.KVEvents, BootstrapPort: ec.BootstrapPort, Labels: Labels{Pool: pool, Revision: ec.Revision}})
	}
	return ts, nil
}

// start reports pc's list to sink.
func (s *staticSource) start(pc *PoolConfig, sink Sink) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink = sink
	return s.setLocked(pc.Name, pc.Endpoints)
}

// set replaces the list: endpoints no longer listed leave, new ones join.
func (s *staticSource) set(pool string, ecs []EndpointConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setLocked(pool, ecs)
}

// setLocked reports what is new or changed in list order, so that the
// endpoints of a list take their indexes in its order, then what is gone.
func (s *staticSource) setLocked(pool string, ecs []EndpointConfig) error {
	ts, err := staticTargets(pool, ecs)
	if err != nil {
		return err
	}
	want := make(map[string]Target, len(ts))
	for _, t := range ts {
		want[t.ID()] = t
		if old, ok := s.last[t.ID()]; !ok || !old.equal(&t) {
			s.sink.Upsert(t)
		}
	}
	for id := range s.last {
		if _, ok := want[id]; !ok {
			s.sink.Delete(id)
		}
	}
	s.last = want
	return nil
}

// Start and Close are the Source's: the registry reports the list at New.
func (s *staticSource) Start(context.Context, Sink) error { return nil }
func (s *staticSource) Close(context.Context) error       { return nil }

var (
	_ Source = (*staticSource)(nil)
	_ Sink   = poolSink{}
)
