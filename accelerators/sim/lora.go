package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// LoRA defaults.
const (
	// DefaultLoRASizeBytes is an adapter's size when its config gives
	// none: rank 64 on every projection of a 70B model in 16 bits.
	DefaultLoRASizeBytes = 512 << 20
	// DefaultLoRALoadBandwidth is the bytes per second an adapter loads
	// at, read from local disk and copied into HBM: 1 GB/s.
	DefaultLoRALoadBandwidth = 1e9
)

// LoRAAdapter is an adapter of the served model that the engine can load.
type LoRAAdapter struct {
	// Name is the model id clients send for it. Required.
	Name string
	// Path is where it loads from, vLLM's lora_path; /v1/models lists it
	// as the adapter's root. Default "/adapters/" + Name.
	Path string
	// SizeBytes sets its load time (Config.LoRALoadBandwidth). Default
	// DefaultLoRASizeBytes.
	SizeBytes int64
	// Preload loads it at start, as vLLM's --lora-modules does. Default
	// false.
	Preload bool
}

// LoRA load paths, vLLM's (with VLLM_ALLOW_RUNTIME_LORA_UPDATING).
const (
	LoadLoRAPath   = "/v1/load_lora_adapter"
	UnloadLoRAPath = "/v1/unload_lora_adapter"
)

// LoRARequest is the body of LoadLoRAPath and UnloadLoRAPath.
type LoRARequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path,omitempty"`
}

var (
	errLoRANotFound = errors.New("sim: lora adapter not found")
	errLoRALoaded   = errors.New("sim: lora adapter already loaded")
)

// loras is an engine's adapter slots: which adapters are loaded, the
// least recently used first to go when a load needs a slot, and the
// load in flight. Loads run one at a time; requests for an adapter
// being loaded wait on that load. An adapter some request still uses is
// never unloaded: a load that finds every slot in use waits for one.
type loras struct {
	slots     int
	bandwidth float64
	scale     float64
	metrics   *loraMetrics
	// load serialises loads: one at a time per engine.
	load sync.Mutex

	mu struct {
		sync.Mutex
		// protects the fields below
		known   map[string]LoRAAdapter
		loaded  map[string]*slot
		loading map[string]chan struct{} // closed when the load ends
		waiting map[string]int           // requests waiting on a load, by adapter
		// freed is closed (and replaced) when a slot may have become
		// free: an adapter's last request ended or it was unloaded.
		freed  chan struct{}
		tick   uint64
		nextID int64
	}
}

// slot is a loaded adapter.
type slot struct {
	id       int64 // vLLM's lora_int_id, from 1
	refs     int   // requests using it
	lastUsed uint64
}

type loraMetrics struct {
	loads, waits prometheus.Counter
}

func newLoRAs(cfg *Config, reg *prometheus.Registry, model string) *loras {
	l := &loras{slots: cfg.MaxLoRAs, bandwidth: cfg.LoRALoadBandwidth, scale: cfg.TimeScale}
	l.mu.known = map[string]LoRAAdapter{}
	l.mu.loaded = map[string]*slot{}
	l.mu.loading = map[string]chan struct{}{}
	l.mu.waiting = map[string]int{}
	l.mu.freed = make(chan struct{})
	labels := prometheus.Labels{enginemetrics.LabelModelName: model}
	l.metrics = &loraMetrics{
		loads: prometheus.NewCounter(prometheus.CounterOpts{Name: enginemetrics.SimLoRALoads, Help: "Adapters loaded into a slot.", ConstLabels: labels}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{Name: enginemetrics.SimLoRALoadWaits, Help: "Requests that waited on an adapter's load.", ConstLabels: labels}),
	}
	reg.MustRegister(l.metrics.loads, l.metrics.waits)
	for _, a := range cfg.LoRAAdapters {
		l.mu.known[a.Name] = a
	}
	for _, a := range cfg.LoRAAdapters {
		if a.Preload && len(l.mu.loaded) < l.slots {
			l.mu.nextID++
			l.mu.loaded[a.Name] = &slot{id: l.mu.nextID}
		}
	}
	return l
}

// loraSeed is the parent of an adapter's first KV block: its blocks are
// not the base model's, nor another adapter's.
func loraSeed(name string) uint64 {
	if name == "" {
		return 0
	}
	return xxhash.Sum64String(name)
}

// isAdapter reports whether name is an adapter the engine knows.
func (l *loras) isAdapter(name string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.mu.known[name]
	if !ok {
		_, ok = l.mu.loaded[name]
	}
	return ok
}

// acquire takes a reference on adapter name for one request, loading it
// first when runtime loading is on (load) and it is not loaded. It
// returns the adapter's id and whether the request waited on a load;
// errLoRANotFound when it is not loaded and may not be.
func (l *loras) acquire(ctx context.Context, name string, load bool) (id int64, waited bool, err error) {
	for {
		l.mu.Lock()
		if s, ok := l.mu.loaded[name]; ok {
			s.refs++
			l.mu.tick++
			s.lastUsed = l.mu.tick
			l.mu.Unlock()
			if waited {
				l.metrics.waits.Inc()
			}
			return s.id, waited, nil
		}
		a, known := l.mu.known[name]
		if !load || !known {
			l.mu.Unlock()
			return 0, false, errLoRANotFound
		}
		done, inFlight := l.mu.loading[name]
		l.mu.waiting[name]++
		l.mu.Unlock()
		waited = true
		if inFlight {
			select {
			case <-done:
			case <-ctx.Done():
				l.unwait(name)
				return 0, true, ctx.Err()
			}
		} else if err := l.loadAdapter(ctx, a); err != nil && !errors.Is(err, errLoRALoaded) {
			l.unwait(name)
			return 0, true, err
		}
		l.unwait(name)
	}
}

func (l *loras) unwait(name string) {
	l.mu.Lock()
	if l.mu.waiting[name]--; l.mu.waiting[name] <= 0 {
		delete(l.mu.waiting, name)
	}
	l.mu.Unlock()
}

// release drops a request's reference on adapter name.
func (l *loras) release(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.mu.loaded[name]
	if !ok {
		panic("sim: release of an adapter not loaded: " + name)
	}
	if s.refs--; s.refs == 0 {
		l.freedLocked()
	}
}

func (l *loras) freedLocked() {
	close(l.mu.freed)
	l.mu.freed = make(chan struct{})
}

// loadAdapter loads a into a slot, one load at a time, unloading the
// least recently used adapter no request uses when the slots are full
// and waiting for one when every adapter is in use. The load takes
// a.SizeBytes at the load bandwidth, on the engine's time scale.
func (l *loras) loadAdapter(ctx context.Context, a LoRAAdapter) error {
	l.mu.Lock()
	if _, ok := l.mu.loaded[a.Name]; ok {
		l.mu.Unlock()
		return errLoRALoaded
	}
	if done, ok := l.mu.loading[a.Name]; ok {
		l.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	l.mu.loading[a.Name] = done
	l.mu.known[a.Name] = a
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.mu.loading, a.Name)
		l.mu.Unlock()
		close(done)
	}()

	l.load.Lock()
	defer l.load.Unlock()
	for {
		l.mu.Lock()
		if len(l.mu.loaded) < l.slots || l.evictLocked() {
			break
		}
		freed := l.mu.freed
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A slot is free; it is this load's once the weights are in.
	l.mu.nextID++
	id := l.mu.nextID
	l.mu.Unlock()
	if d := l.loadTime(a); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	l.mu.Lock()
	l.mu.tick++
	l.mu.loaded[a.Name] = &slot{id: id, lastUsed: l.mu.tick}
	l.mu.Unlock()
	l.metrics.loads.Inc()
	return nil
}

// loadTime is the wall time a's load takes.
func (l *loras) loadTime(a LoRAAdapter) time.Duration {
	if l.scale <= 0 {
		return 0
	}
	sim := float64(a.SizeBytes) / l.bandwidth
	return time.Duration(sim * l.scale * float64(time.Second))
}

// evictLocked unloads the least recently used adapter that no request
// uses; false when every one is in use.
func (l *loras) evictLocked() bool {
	victim, oldest := "", uint64(0)
	for name, s := range l.mu.loaded {
		if s.refs == 0 && (victim == "" || s.lastUsed < oldest) {
			victim, oldest = name, s.lastUsed
		}
	}
	if victim == "" {
		return false
	}
	delete(l.mu.loaded, victim)
	return true
}

// unload removes adapter name from its slot; errLoRANotFound when it is
// not loaded. A request still using it keeps it until it ends, as the
// engine keeps a running request's weights.
func (l *loras) unload(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.mu.loaded[name]
	if !ok {
		return errLoRANotFound
	}
	if s.refs > 0 {
		return fmt.Errorf("sim: lora adapter %q is in use by %d requests", name, s.refs)
	}
	delete(l.mu.loaded, name)
	l.freedLocked()
	return nil
}

// Loaded lists the loaded adapters, sorted.
func (l *loras) loadedNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.mu.loaded))
	for name := range l.mu.loaded {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// LoadedAdapters lists the adapters the engine has loaded, sorted; nil
// without LoRA.
func (e *Engine) LoadedAdapters() []string {
	if e.lora == nil {
		return nil
	}
	return e.lora.loadedNames()
}

// requestsInfo is the label values of VLLMLoRARequestsInfo: the adapters
// of running and of waiting requests, sorted and comma-separated. Those
// waiting on a load count as waiting.
func (l *loras) requestsInfo(running, waiting []*sequence) (run, wait string) {
	var r, w []string
	add := func(set []string, name string) []string {
		if name != "" && !slices.Contains(set, name) {
			set = append(set, name)
		}
		return set
	}
	for _, q := range running {
		r = add(r, q.adapter)
	}
	for _, q := range waiting {
		w = add(w, q.adapter)
	}
	l.mu.Lock()
	for name := range l.mu.waiting {
		w = add(w, name)
	}
	l.mu.Unlock()
	slices.Sort(r)
	slices.Sort(w)
	return strings.Join(r, ","), strings.Join(w, ",")
}

// loraInfo exports VLLMLoRARequestsInfo as vLLM does: the series of the
// current label set is set to the time; earlier label sets stay.
type loraInfo struct {
	vec        *prometheus.GaugeVec
	maxLoRA    string
	run, wait  string
	everSet    bool
	lastUpdate time.Time
}

func newLoRAInfo(reg *prometheus.Registry, slots int) *loraInfo {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: enginemetrics.VLLMLoRARequestsInfo, Help: "Running stats on lora requests.",
	}, []string{enginemetrics.LabelMaxLoRA, enginemetrics.LabelWaitingLoRAAdapters, enginemetrics.LabelRunningLoRAAdapters})
	reg.MustRegister(vec)
	return &loraInfo{vec: vec, maxLoRA: strconv.Itoa(slots)}
}

// set publishes the adapters of running and waiting requests when they
// changed, or a second after the last update (vLLM sets it every
// logging interval).
func (li *loraInfo) set(run, wait string) {
	now := time.Now()
	if li.everSet && run == li.run && wait == li.wait && now.Sub(li.lastUpdate) < time.Second {
		return
	}
	li.everSet, li.run, li.wait, li.lastUpdate = true, run, wait, now
	li.vec.WithLabelValues(li.maxLoRA, wait, run).Set(float64(now.UnixNano()) / 1e9)
}

// handleLoadLoRA is vLLM's POST /v1/load_lora_adapter.
func (e *Engine) handleLoadLoRA(w http.ResponseWriter, r *http.Request) {
	req, ok := e.loraRequest(w, r)
	if !ok {
		return
	}
	if req.LoRAPath == "" {
		writeError(w, http.StatusBadRequest, "Both 'lora_name' and 'lora_path' must be provided.", "lora_path")
		return
	}
	a := LoRAAdapter{Name: req.LoRAName, Path: req.LoRAPath, SizeBytes: DefaultLoRASizeBytes}
	e.lora.mu.Lock()
	if k, ok := e.lora.mu.known[req.LoRAName]; ok {
		a.SizeBytes = k.SizeBytes
	}
	e.lora.mu.Unlock()
	err := e.lora.loadAdapter(r.Context(), a)
	switch {
	case errors.Is(err, errLoRALoaded):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.LoRAName), "lora_name")
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error(), "")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoRAName)
	}
}

// handleUnloadLoRA is vLLM's POST /v1/unload_lora_adapter.
func (e *Engine) handleUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	req, ok := e.loraRequest(w, r)
	if !ok {
		return
	}
	switch err := e.lora.unload(req.LoRAName); {
	case errors.Is(err, errLoRANotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoRAName), "lora_name")
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error(), "lora_name")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoRAName)
	}
}

func (e *Engine) loraRequest(w http.ResponseWriter, r *http.Request) (LoRARequest, bool) {
	var req LoRARequest
	if e.lora == nil {
		writeError(w, http.StatusBadRequest, "LoRA is not enabled.", "")
		return req, false
	}
	body, ok := readBody(w, r)
	if !ok {
		return req, false
	}
	if err := json.Unmarshal(body, &req); err != nil || req.LoRAName == "" {
		writeError(w, http.StatusBadRequest, "'lora_name' must be provided.", "lora_name")
		return req, false
	}
	return req, true
}

// adapterCards are the /v1/models entries of the loaded adapters, as
// vLLM lists them: root the adapter's path, parent the base model.
func (e *Engine) adapterCards() []modelCard {
	if e.lora == nil {
		return nil
	}
	l := e.lora
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.mu.loaded))
	for name := range l.mu.loaded {
		names = append(names, name)
	}
	slices.Sort(names)
	parent := e.cfg.ServedModelName
	out := make([]modelCard, 0, len(names))
	for _, name := range names {
		out = append(out, modelCard{
			ID: name, Object: "model", Created: e.created, OwnedBy: e.cfg.Flavor,
			Root: l.mu.known[name].Path, Parent: &parent, MaxModelLen: e.maxModelLen,
		})
	}
	return out
}
