package pools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// LoRA loading modes (PoolConfig.LoRALoading).
const (
	// LoRALoadingOff: the gateway loads no adapter; a replica without the
	// adapter a request names loads it itself (a runtime LoRA resolver)
	// or refuses it. The default.
	LoRALoadingOff = "off"
	// LoRALoadingOnDemand: the gateway loads the adapter a request names
	// on the replica routing chose, POST /v1/load_lora_adapter, before
	// sending the request; one load at a time per replica, and requests
	// for an adapter being loaded there wait on that load.
	LoRALoadingOnDemand = "on-demand"
)

// adapterPendingFor is how long an adapter routed to a replica counts as
// there before the engine reports it: a load takes seconds, and scrapes
// come every few hundred milliseconds.
const adapterPendingFor = 30 * time.Second

// maxModelsBytes bounds one /v1/models body.
const maxModelsBytes = 1 << 20

// AdapterConfig is a LoRA adapter of a pool's served model.
type AdapterConfig struct {
	// Name is the model id clients send for it. Required, unique in the
	// pool and not one of its served models.
	Name string `yaml:"name" json:"name"`
	// Path is where an engine loads it from (vLLM's lora_path). Required
	// with loraLoading on-demand.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
}

// validateLoRA reports the problems of a pool's adapters.
func (pc *PoolConfig) validateLoRA(where string, bad func(field, format string, args ...any)) {
	switch pc.LoRALoading {
	case "", LoRALoadingOff, LoRALoadingOnDemand:
	default:
		bad(where+".loraLoading", "%q is not off or on-demand", pc.LoRALoading)
	}
	if pc.MaxLoRA < 0 {
		bad(where+".maxLoRA", "%d < 0", pc.MaxLoRA)
	}
	seen := map[string]bool{}
	for i, a := range pc.Adapters {
		aw := fmt.Sprintf("%s.adapters[%d]", where, i)
		switch {
		case a.Name == "":
			bad(aw+".name", "required")
		case seen[a.Name]:
			bad(aw+".name", "adapter %q listed twice", a.Name)
		case slices.Contains(pc.ServedModels, a.Name):
			bad(aw+".name", "%q is a served model of the pool", a.Name)
		}
		seen[a.Name] = true
		if a.Path == "" && pc.LoRALoading == LoRALoadingOnDemand {
			bad(aw+".path", "required with loraLoading on-demand")
		}
	}
}

// LoRALoad is what an engine's vllm:lora_requests_info last said.
type LoRALoad struct {
	// Reported: the engine exports the series (it serves adapters).
	Reported bool
	// MaxLoRA is its adapter slots; 0 when unknown.
	MaxLoRA int
	// Running and Waiting are the adapters of its running and waiting
	// requests, comma-separated as the engine reports them.
	Running, Waiting string
}

// listHas reports whether the comma-separated list names adapter.
func listHas(list, adapter string) bool {
	for list != "" {
		var a string
		a, list, _ = strings.Cut(list, ",")
		if strings.TrimSpace(a) == adapter {
			return true
		}
	}
	return false
}

// parseLoRAInfo reads the current series of VLLMLoRARequestsInfo: of the
// label sets the engine ever set, the one whose value (the time it was
// set) is latest.
func parseLoRAInfo(f *dto.MetricFamily) LoRALoad {
	if f == nil || len(f.Metric) == 0 {
		return LoRALoad{}
	}
	var cur *dto.Metric
	for _, m := range f.Metric {
		if cur == nil || value(m) > value(cur) {
			cur = m
		}
	}
	l := LoRALoad{Reported: true}
	for _, lp := range cur.Label {
		switch lp.GetName() {
		case enginemetrics.LabelMaxLoRA:
			l.MaxLoRA = positive(lp.GetValue())
		case enginemetrics.LabelRunningLoRAAdapters:
			l.Running = lp.GetValue()
		case enginemetrics.LabelWaitingLoRAAdapters:
			l.Waiting = lp.GetValue()
		}
	}
	return l
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

func splitAdapters(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// adapterState is what the gateway knows of an endpoint's adapters:
// those its engine lists (/v1/models entries with a parent), those
// routed there and not yet listed, and the gateway's loads in flight.
type adapterState struct {
	// load serialises the gateway's loads: one at a time per replica.
	load sync.Mutex
	mu   struct {
		sync.Mutex
		// protects the fields below
		listed  []string             // /v1/models entries with a parent
		paths   map[string]string    // their roots: where each loads from
		pending map[string]time.Time // routed here, until listed or expired
		loading map[string]chan struct{}
	}
}

// IsAdapter reports whether model is a LoRA adapter the endpoint can
// serve: one of its pool's (PoolConfig.Adapters) or one its engine
// lists.
func (e *Endpoint) IsAdapter(model string) bool {
	if slices.Contains(e.models(), model) {
		return false
	}
	if e.Pool != nil && e.Pool.adapter(model) {
		return true
	}
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.mu.listed, model)
}

// HasAdapter reports whether adapter is loaded on the endpoint, as far
// as the gateway knows: listed by its engine, named by its running or
// waiting requests, being loaded by the gateway, or routed there lately
// (noteAdapter).
func (e *Endpoint) HasAdapter(adapter string, now time.Time) bool {
	if l := e.load.Load(); l != nil && (listHas(l.LoRA.Running, adapter) || listHas(l.LoRA.Waiting, adapter)) {
		return true
	}
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.mu.listed, adapter) {
		return true
	}
	if _, ok := s.mu.loading[adapter]; ok {
		return true
	}
	t, ok := s.mu.pending[adapter]
	return ok && now.Sub(t) < adapterPendingFor
}

// adapterLoading reports whether the gateway is loading adapter on the
// endpoint now.
func (e *Endpoint) adapterLoading(adapter string) bool {
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.mu.loading[adapter]
	return ok
}

// AdapterSlots is how many adapters the endpoint holds, as far as the
// gateway knows (listed, in its requests, loading, routed lately), and
// its slots: the engine's max_lora, else the pool's maxLoRA; 0 when
// neither says.
func (e *Endpoint) AdapterSlots(now time.Time) (used, slots int) {
	var l LoRALoad
	if p := e.load.Load(); p != nil {
		l = p.LoRA
	}
	slots = l.MaxLoRA
	if slots == 0 && e.Pool != nil {
		slots = e.Pool.Config.MaxLoRA
	}
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	// The union of what the engine listed, its requests' adapters, the
	// loads in flight and the adapters routed here lately.
	seen := make(map[string]bool, len(s.mu.listed)+len(s.mu.pending)+len(s.mu.loading))
	for _, a := range s.mu.listed {
		seen[a] = true
	}
	for _, a := range splitAdapters(l.Running + "," + l.Waiting) {
		seen[a] = true
	}
	for a := range s.mu.loading {
		seen[a] = true
	}
	for a, t := range s.mu.pending {
		if now.Sub(t) < adapterPendingFor {
			seen[a] = true
		}
	}
	return len(seen), slots
}

// noteAdapter records that a request for adapter was routed to the
// endpoint, whose engine will load it: until the engine lists it (or
// adapterPendingFor passes) routing counts it as there, as the kv index
// records a routed prompt ahead of the engine.
func (e *Endpoint) noteAdapter(adapter string, now time.Time) {
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.mu.listed, adapter) {
		return
	}
	if s.mu.pending == nil {
		s.mu.pending = map[string]time.Time{}
	}
	s.mu.pending[adapter] = now
}

// setListed records the adapters the engine lists, and reports whether
// they changed.
func (e *Endpoint) setListed(listed []string, paths map[string]string, now time.Time) bool {
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !slices.Equal(s.mu.listed, listed)
	s.mu.listed, s.mu.paths = listed, paths
	for a, t := range s.mu.pending {
		if slices.Contains(listed, a) || now.Sub(t) >= adapterPendingFor {
			delete(s.mu.pending, a)
		}
	}
	return changed
}

// listedAdapters are the adapters the engine listed last.
func (e *Endpoint) listedAdapters() []string {
	s := &e.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.listed
}

// adapter reports whether the pool's config names adapter.
func (p *Pool) adapter(name string) bool {
	for _, a := range p.Config.Adapters {
		if a.Name == name {
			return true
		}
	}
	return false
}

// adapterPath is where adapter loads from: the pool's config, else the
// root an engine of the pool listed it with.
func (p *Pool) adapterPath(name string) string {
	for _, a := range p.Config.Adapters {
		if a.Name == name {
			return a.Path
		}
	}
	for _, ep := range p.Endpoints() {
		s := &ep.lora
		s.mu.Lock()
		path := s.mu.paths[name]
		s.mu.Unlock()
		if path != "" {
			return path
		}
	}
	return ""
}

// adapterNames are the adapters the endpoint serves: its pool's and
// those its engine lists.
func (e *Endpoint) adapterNames() []string {
	var out []string
	if e.Pool != nil {
		for _, a := range e.Pool.Config.Adapters {
			out = append(out, a.Name)
		}
	}
	for _, a := range e.listedAdapters() {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// modelList is the part of an engine's /v1/models the gateway reads.
type modelList struct {
	Data []struct {
		ID     string  `json:"id"`
		Root   string  `json:"root"`
		Parent *string `json:"parent"`
	} `json:"data"`
}

// ParseAdapters reads an engine's /v1/models body: the entries with a
// parent are its loaded LoRA adapters, each with the path it loaded from
// (its root). The list is sorted.
func ParseAdapters(r io.Reader) ([]string, map[string]string, error) {
	var list modelList
	if err := json.NewDecoder(io.LimitReader(r, maxModelsBytes)).Decode(&list); err != nil {
		return nil, nil, fmt.Errorf("pools: parse models: %w", err)
	}
	var names []string
	paths := map[string]string{}
	for _, m := range list.Data {
		if m.Parent == nil || *m.Parent == "" || m.ID == "" || slices.Contains(names, m.ID) {
			continue
		}
		names = append(names, m.ID)
		paths[m.ID] = m.Root
	}
	slices.Sort(names)
	return names, paths, nil
}

// wantsAdapters reports whether the endpoint's adapters are worth
// listing: its pool names some or its engine reports LoRA requests.
func (e *Endpoint) wantsAdapters(l *Load) bool {
	return l.LoRA.Reported || (e.Pool != nil && (len(e.Pool.Config.Adapters) > 0 || e.Pool.Config.LoRALoading == LoRALoadingOnDemand))
}

// discoverAdapters reads the engine's /v1/models for its loaded adapters
// and, when they changed, republishes the fleet so that requests for them
// find the endpoint.
func (r *Registry) discoverAdapters(ctx context.Context, ep *Endpoint) error {
	resp, err := r.client.Get(ctx, ep, "/v1/models")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pools: %s/v1/models: status %d", ep.ID, resp.StatusCode)
	}
	names, paths, err := ParseAdapters(resp.Body)
	if err != nil {
		return err
	}
	if ep.setListed(names, paths, time.Now()) {
		r.mu.Lock()
		if !r.mu.closed {
			r.publishLocked()
		}
		r.mu.Unlock()
	}
	return nil
}

// ErrAdapterLoad classes a failed load of an adapter on an endpoint.
var ErrAdapterLoad = errors.New("pools: lora adapter load failed")

// EnsureAdapter readies ep for a request for model. When model is not an
// adapter of ep's, or ep already has it, it does nothing. Otherwise, in a
// pool with loraLoading on-demand it loads the adapter (POST
// /v1/load_lora_adapter with vLLM's {"lora_name","lora_path"}): one load
// at a time per replica, and a request for an adapter being loaded there
// waits on that load. In other pools it notes the adapter as routed there
// at now (noteAdapter): the engine loads it itself. A failed load wraps
// ErrUpstream and ErrAdapterLoad.
func (r *Registry) EnsureAdapter(ctx context.Context, ep *Endpoint, model string, now time.Time) error {
	if ep.Pool == nil || !ep.IsAdapter(model) {
		return nil
	}
	if ep.HasAdapter(model, now) && !ep.adapterLoading(model) {
		return nil
	}
	if ep.Pool.Config.LoRALoading != LoRALoadingOnDemand {
		ep.noteAdapter(model, now)
		return nil
	}
	return r.loadAdapter(ctx, ep, model)
}

// loadAdapter loads adapter on ep, or waits on the load in flight there.
func (r *Registry) loadAdapter(ctx context.Context, ep *Endpoint, adapter string) error {
	s := &ep.lora
	s.mu.Lock()
	if done, ok := s.mu.loading[adapter]; ok {
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if ep.HasAdapter(adapter, time.Now()) {
			return nil
		}
		return fmt.Errorf("%w: %w: %s on %s", ErrUpstream, ErrAdapterLoad, adapter, ep.ID)
	}
	if s.mu.loading == nil {
		s.mu.loading = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	s.mu.loading[adapter] = done
	s.mu.Unlock()

	err := r.postLoad(ctx, ep, adapter)
	s.mu.Lock()
	delete(s.mu.loading, adapter)
	if err == nil {
		if s.mu.pending == nil {
			s.mu.pending = map[string]time.Time{}
		}
		s.mu.pending[adapter] = time.Now()
	}
	s.mu.Unlock()
	close(done)
	r.metrics.adapterLoads.WithLabelValues(ep.Pool.Config.Name, loadResult(err)).Inc()
	return err
}

func loadResult(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// postLoad sends the load, one at a time per replica. An engine that
// answers the adapter is loaded already has it.
func (r *Registry) postLoad(ctx context.Context, ep *Endpoint, adapter string) error {
	s := &ep.lora
	s.load.Lock()
	defer s.load.Unlock()
	body, _ := json.Marshal(map[string]string{"lora_name": adapter, "lora_path": ep.Pool.adapterPath(adapter)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL.JoinPath("/v1/load_lora_adapter").String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w: %s on %s: %w", ErrUpstream, ErrAdapterLoad, adapter, ep.ID, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadRequest && bytes.Contains(msg, []byte("already been loaded")):
		return nil
	}
	return fmt.Errorf("%w: %w: %s on %s: status %d: %s", ErrUpstream, ErrAdapterLoad, adapter, ep.ID, resp.StatusCode, bytes.TrimSpace(msg))
}

// AdapterBase is the served model adapter is a LoRA adapter of: the
// first model of the first pool whose config names it or one of whose
// engines lists it; "" when it is no adapter of the fleet's.
func (r *Registry) AdapterBase(adapter string) string {
	for _, p := range r.Pools {
		if len(p.Config.ServedModels) == 0 || slices.Contains(p.Config.ServedModels, adapter) {
			continue
		}
		if p.adapter(adapter) {
			return p.Config.ServedModels[0]
		}
		for _, ep := range p.Endpoints() {
			if slices.Contains(ep.listedAdapters(), adapter) {
				return p.Config.ServedModels[0]
			}
		}
	}
	return ""
}
