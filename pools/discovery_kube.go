package pools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// Pod labels Kubernetes discovery reads.
const (
	// PodLabelRole is llm-d's role label: prefill, decode or both.
	PodLabelRole = "llm-d.ai/role"
	// PodLabelTemplateHash and PodLabelControllerRevision are the
	// revision labels a Deployment's and a StatefulSet's or
	// LeaderWorkerSet's pods carry.
	PodLabelTemplateHash       = "pod-template-hash"
	PodLabelControllerRevision = "controller-revision-hash"
	// DefaultPodModelsLabel is DiscoveryConfig.ModelsLabel's default:
	// llm-d's label of the model a pod serves.
	DefaultPodModelsLabel = "llm-d.ai/model"
	// DefaultPodAcceleratorLabel is DiscoveryConfig.AcceleratorLabel's
	// default.
	DefaultPodAcceleratorLabel = LabelAccelerator
)

// DefaultKubernetesSyncTimeout bounds the wait at Start for the first
// list of pods (and of the InferencePool): an API server that cannot be
// reached fails the start rather than serving an empty pool.
const DefaultKubernetesSyncTimeout = 30 * time.Second

// InferencePoolResource is the InferencePool's API resource.
var InferencePoolResource = schema.GroupVersionResource{Group: inferencev1.GroupName, Version: "v1", Resource: "inferencepools"}

// KubernetesSource is kind kubernetes: the Ready pods with a pod IP that
// an InferencePool selects, one endpoint per pod IP and target port (the
// ports of a pod being its data-parallel ranks), or without the CRD the
// pods a label selector selects, on the ports the config lists. Pods and
// the InferencePool are watched with informers; every change recomputes
// the whole set, and the difference is reported. A pod being deleted, or
// no longer Ready, leaves at once and drains. A pool that does not exist
// (yet, or any more) has no endpoints.
//
// Each endpoint's role is the pod's llm-d.ai/role label (prefill, decode,
// both; the pool's role when absent), its revision the label
// DiscoveryConfig.RevisionLabel names, else pod-template-hash, else
// controller-revision-hash; the models it serves are those the annotation,
// else the label, DiscoveryConfig.ModelsLabel names lists (llm-d.ai/model;
// the pool's when absent), and its accelerator the label
// DiscoveryConfig.AcceleratorLabel names (accelerator; the pool's when
// absent).
type KubernetesSource struct {
	pool    string
	cfg     DiscoveryConfig
	log     *slog.Logger
	metrics *discoveryMetrics
	// RESTConfig, when set before Start, is the API server to use instead
	// of the config's kubeconfig, $KUBECONFIG or the in-cluster config.
	RESTConfig *rest.Config
	// SyncTimeout bounds the first sync at Start; default
	// DefaultKubernetesSyncTimeout.
	SyncTimeout time.Duration

	namespace string
	// selector is the pod selector of selector mode; nil with an
	// InferencePool, whose own selector is read at each recompute.
	selector labels.Selector

	rc        reconciler
	pods      cache.SharedIndexInformer
	infPools  cache.SharedIndexInformer
	kick      chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
	badLogged map[string]string // pod → the problem last logged
}

// NewKubernetesSource builds the Kubernetes source of the named pool from
// a validated discovery config. Nothing connects before Start.
func NewKubernetesSource(pool string, cfg DiscoveryConfig, log *slog.Logger, metrics *discoveryMetrics) (*KubernetesSource, error) {
	if log == nil {
		log = slog.Default()
	}
	if metrics == nil {
		metrics = newDiscoveryMetrics()
	}
	s := &KubernetesSource{pool: pool, cfg: cfg, metrics: metrics, kick: make(chan struct{}, 1), stop: make(chan struct{}), badLogged: map[string]string{}}
	s.namespace = cfg.Namespace
	if cfg.InferencePool != nil && cfg.InferencePool.Namespace != "" {
		s.namespace = cfg.InferencePool.Namespace
	}
	if s.namespace == "" {
		s.namespace = ownNamespace()
	}
	if cfg.InferencePool == nil {
		sel, err := labels.Parse(cfg.Selector)
		if err != nil {
			return nil, fmt.Errorf("pools: pool %q: selector: %w", pool, err)
		}
		s.selector = sel
	}
	what := "selector " + cfg.Selector
	if cfg.InferencePool != nil {
		what = "InferencePool " + s.namespace + "/" + cfg.InferencePool.Name
	}
	s.log = log.With("pool", pool, "discovery", "kubernetes", "source", what)
	return s, nil
}

// validSelector reports whether s parses as a label selector.
func validSelector(s string) error {
	_, err := labels.Parse(s)
	return err
}

// validLabelKey reports why s is not a label key, or nil.
func validLabelKey(s string) error {
	if errs := validation.IsQualifiedName(s); len(errs) > 0 {
		return fmt.Errorf("%q is not a label key: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

// ownNamespace is the namespace of the pod the gateway runs in, or
// "default" outside a cluster.
func ownNamespace() string {
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// restConfig is the API server's config: RESTConfig, the config's
// kubeconfig, $KUBECONFIG, or the in-cluster config, first found.
func (s *KubernetesSource) restConfig() (*rest.Config, error) {
	if s.RESTConfig != nil {
		return s.RESTConfig, nil
	}
	return kubeRESTConfig(s.cfg.Kubeconfig)
}

// Start connects, waits for the first lists of pods (and of the
// InferencePool), reports the set, and then follows changes until Close.
func (s *KubernetesSource) Start(ctx context.Context, sink Sink) error {
	s.rc.sink = sink
	rc, err := s.restConfig()
	if err != nil {
		return fmt.Errorf("pools: kubernetes discovery: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "turnpike"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("pools: kubernetes discovery: %w", err)
	}
	podOpts := []informers.SharedInformerOption{informers.WithNamespace(s.namespace)}
	if s.selector != nil {
		sel := s.selector.String()
		podOpts = append(podOpts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	}
	// Resync 0: every change comes as an event; recomputing on a timer
	// would find nothing new.
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, podOpts...)
	s.pods = podFactory.Core().V1().Pods().Informer()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	if _, err := s.pods.AddEventHandler(handler); err != nil {
		return fmt.Errorf("pools: kubernetes discovery: %w", err)
	}
	synced := []cache.InformerSynced{s.pods.HasSynced}
	podFactory.Start(s.stop)
	if ref := s.cfg.InferencePool; ref != nil {
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("pools: kubernetes discovery: %w", err)
		}
		name := ref.Name
		poolFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, s.namespace, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
		s.infPools = poolFactory.ForResource(InferencePoolResource).Informer()
		if _, err := s.infPools.AddEventHandler(handler); err != nil {
			return fmt.Errorf("pools: kubernetes discovery: %w", err)
		}
		synced = append(synced, s.infPools.HasSynced)
		poolFactory.Start(s.stop)
	}
	timeout := s.SyncTimeout
	if timeout <= 0 {
		timeout = DefaultKubernetesSyncTimeout
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		s.close()
		return fmt.Errorf("pools: kubernetes discovery: %s: pods not listed within %s (is the API server reachable, and may the gateway list and watch pods%s?)",
			s.namespace, timeout, map[bool]string{true: " and inferencepools", false: ""}[s.infPools != nil])
	}
	s.recompute()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run()
	}()
	return nil
}

// poke asks the worker to recompute; a burst of events costs one.
func (s *KubernetesSource) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *KubernetesSource) run() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.recompute()
		}
	}
}

func (s *KubernetesSource) close() { s.once.Do(func() { close(s.stop) }) }

// Close stops the informers and the worker, up to ctx.
func (s *KubernetesSource) Close(ctx context.Context) error {
	s.close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pools: kubernetes discovery: close: %w", ctx.Err())
	}
}

// recompute builds the whole set from the informers' caches and reports
// the difference. Only the worker (and Start, before it runs) calls it.
func (s *KubernetesSource) recompute() {
	sel, ports, err := s.target()
	want := map[string]Target{}
	if err != nil {
		// The InferencePool cannot be read as one: keep the last set.
		s.metrics.errors.WithLabelValues(s.pool).Inc()
		s.log.Warn("InferencePool unusable; keeping the last set", "err", err)
		return
	}
	if sel != nil {
		for _, obj := range s.pods.GetStore().List() {
			pod, ok := obj.(*corev1.Pod)
			if !ok || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			s.addPod(want, pod, ports)
		}
	}
	added, removed := s.rc.apply(want)
	if added > 0 || removed > 0 {
		s.log.Info("pods changed", "endpoints", len(want), "added", added, "removed", removed)
	}
}

// target is the pod selector and ports now: the config's, or the
// InferencePool's. A nil selector selects nothing (no pool).
func (s *KubernetesSource) target() (labels.Selector, []int, error) {
	if s.infPools == nil {
		return s.selector, s.cfg.Ports, nil
	}
	obj, ok, err := s.infPools.GetStore().GetByKey(s.namespace + "/" + s.cfg.InferencePool.Name)
	if err != nil || !ok {
		return nil, nil, err
	}
	u, isU := obj.(*unstructured.Unstructured)
	if !isU {
		return nil, nil, fmt.Errorf("unexpected object %T", obj)
	}
	var ip inferencev1.InferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ip); err != nil {
		return nil, nil, err
	}
	set := labels.Set{}
	for k, v := range ip.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	if len(set) == 0 {
		return nil, nil, errors.New("spec.selector.matchLabels is empty")
	}
	var ports []int
	for _, p := range ip.Spec.TargetPorts {
		if p.Number > 0 && !slices.Contains(ports, int(p.Number)) {
			ports = append(ports, int(p.Number))
		}
	}
	if len(ports) == 0 {
		return nil, nil, errors.New("spec.targetPorts lists no port")
	}
	return labels.SelectorFromSet(set), ports, nil
}

// addPod adds pod's endpoints to want when it is Ready, has a pod IP and
// is not being deleted.
func (s *KubernetesSource) addPod(want map[string]Target, pod *corev1.Pod, ports []int) {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !podReady(pod) {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	l := Labels{Role: pod.Labels[PodLabelRole], Revision: s.revision(pod), Models: s.models(pod),
		Accelerator: pod.Labels[cmp.Or(s.cfg.AcceleratorLabel, DefaultPodAcceleratorLabel)]}
	switch l.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
		delete(s.badLogged, key)
	default:
		s.bad(key, fmt.Sprintf("label %s=%q is not prefill, decode or both", PodLabelRole, l.Role))
		return
	}
	for _, port := range ports {
		u, err := hostPortURL(s.cfg.scheme(), pod.Status.PodIP, port)
		if err != nil {
			s.bad(key, err.Error())
			return
		}
		want[u.Host] = Target{URL: u, Labels: l}
	}
}

// bad counts and logs a pod that cannot be an endpoint, once per problem.
func (s *KubernetesSource) bad(pod, why string) {
	if s.badLogged[pod] == why {
		return
	}
	s.badLogged[pod] = why
	s.metrics.badEntries.WithLabelValues(s.pool).Inc()
	s.log.Warn("pod skipped", "pod", pod, "err", why)
}

func (s *KubernetesSource) revision(pod *corev1.Pod) string {
	if s.cfg.RevisionLabel != "" {
		return pod.Labels[s.cfg.RevisionLabel]
	}
	if h := pod.Labels[PodLabelTemplateHash]; h != "" {
		return h
	}
	return pod.Labels[PodLabelControllerRevision]
}

// models are the model names the pod says it serves: a label value cannot
// hold a slash or a comma, so the annotation of the same key, which can,
// comes first.
func (s *KubernetesSource) models(pod *corev1.Pod) []string {
	key := cmp.Or(s.cfg.ModelsLabel, DefaultPodModelsLabel)
	if v, ok := pod.Annotations[key]; ok {
		return splitModels(v)
	}
	return splitModels(pod.Labels[key])
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

var _ Source = (*KubernetesSource)(nil)
