package pools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// maxMetricsBytes bounds one scrape's body; an engine's exposition is a few
// tens of KiB.
const maxMetricsBytes = 4 << 20

// metricNames maps an engine flavour's metric names onto Load's fields.
type metricNames struct {
	running, waiting, kvUsage, cacheConfig string
	// loraInfo is the LoRA adapters series; "" when the flavour has none.
	loraInfo                       string
	prefixQueries, prefixHits      string
	promptTokens, generationTokens string
	// legacy are older spellings of kvUsage, prefixQueries and
	// prefixHits, read when the family above is missing; "" for none.
	legacyKVUsage, legacyPrefixQueries, legacyPrefixHits string
}

// vllmNames are vLLM's.
var vllmNames = metricNames{
	running:          enginemetrics.VLLMNumRequestsRunning,
	waiting:          enginemetrics.VLLMNumRequestsWaiting,
	kvUsage:          enginemetrics.VLLMKVCacheUsagePerc,
	cacheConfig:      enginemetrics.VLLMCacheConfigInfo,
	prefixQueries:    enginemetrics.VLLMPrefixCacheQueries,
	prefixHits:       enginemetrics.VLLMPrefixCacheHits,
	promptTokens:     enginemetrics.VLLMPromptTokens,
	generationTokens: enginemetrics.VLLMGenerationTokens,
	loraInfo:         enginemetrics.VLLMLoRARequestsInfo,
}

var flavours = map[string]metricNames{
	EngineVLLM: vllmNames,
	// vLLM on TPU runs vLLM's engine core and metric loggers (the TPU
	// backend replaces the platform, worker and model runner), so it
	// exports vLLM's names; images built on releases before the rename
	// of the KV cache series export the gpu_ spellings instead.
	EngineVLLMTPU: vllmNames.withLegacy(enginemetrics.VLLMGPUCacheUsagePerc,
		enginemetrics.VLLMGPUPrefixCacheQueries, enginemetrics.VLLMGPUPrefixCacheHits),
	EngineSGLang: {
		running:          enginemetrics.SGLangNumRunningReqs,
		waiting:          enginemetrics.SGLangNumQueueReqs,
		kvUsage:          enginemetrics.SGLangTokenUsage,
		cacheConfig:      enginemetrics.SGLangCacheConfigInfo,
		promptTokens:     enginemetrics.SGLangPromptTokens,
		generationTokens: enginemetrics.SGLangGenerationTokens,
	},
}

// withLegacy is names reading the older spellings given when its own
// are missing.
func (names metricNames) withLegacy(kvUsage, prefixQueries, prefixHits string) metricNames {
	names.legacyKVUsage, names.legacyPrefixQueries, names.legacyPrefixHits = kvUsage, prefixQueries, prefixHits
	return names
}

// keep returns the lines of an exposition that belong to the families
// ParseLoad reads: their samples, and their TYPE and HELP comments (also
// those that name a counter without its _total suffix). An engine's page
// is mostly latency histograms, whose thousands of buckets would
// otherwise be parsed every scrape; the text parser sees the lines kept
// in their order, so it reads those families as it would the whole page.
func (names *metricNames) keep(page []byte) []byte {
	all := [...]string{names.running, names.waiting, names.kvUsage, names.cacheConfig,
		names.prefixQueries, names.prefixHits, names.promptTokens, names.generationTokens,
		names.legacyKVUsage, names.legacyPrefixQueries, names.legacyPrefixHits, names.loraInfo}
	wanted := func(name []byte, comment bool) bool {
		for _, w := range all {
			if w == "" {
				continue
			}
			if string(name) == w {
				return true
			}
			if base, ok := strings.CutSuffix(w, "_total"); ok && comment && string(name) == base {
				return true
			}
		}
		return false
	}
	var out []byte
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i+1], page[i+1:]
		} else {
			page = nil
		}
		t := bytes.TrimLeft(line, " \t")
		if rest, ok := bytes.CutPrefix(t, []byte("#")); ok {
			// "# TYPE name ..." or "# HELP name ..."; other comments go.
			f := bytes.Fields(rest)
			if len(f) >= 2 && (string(f[0]) == "TYPE" || string(f[0]) == "HELP") && wanted(f[1], true) {
				out = append(out, line...)
			}
			continue
		}
		end := bytes.IndexAny(t, "{ \t\r\n")
		if end < 0 {
			end = len(t)
		}
		if wanted(t[:end], false) {
			out = append(out, line...)
		}
	}
	return out
}

// pages are ParseLoad's read buffers: an engine's page is read into
// one grown to its size by the scrapes before, not into a new slice
// doubled as it fills, scrape after scrape.
var pages = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledPage bounds the buffers kept in pages: one that took in a
// larger page goes to the collector.
const maxPooledPage = 1 << 20

// ParseLoad reads a Prometheus text exposition from an engine of the given
// flavour into a Load. The cache config info's labels give the KV cache's
// shape (block_size or page_size, num_gpu_blocks or max_total_num_tokens)
// and, when the engine adds them, the scheduler's limits (max_num_seqs or
// max_running_requests, max_num_batched_tokens or chunked_prefill_size),
// which flow control calibrates an endpoint's capacity by. Metrics it does not know are ignored; a family that
// is missing leaves its field zero. Counters and gauges with several series
// (one per model_name) are summed.
func ParseLoad(flavour string, r io.Reader) (Load, error) {
	names, ok := flavours[flavour]
	if !ok {
		return Load{}, fmt.Errorf("pools: unknown engine flavour %q", flavour)
	}
	buf := pages.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledPage {
			buf.Reset()
			pages.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(r); err != nil {
		return Load{}, fmt.Errorf("pools: read metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(names.keep(buf.Bytes())))
	if err != nil {
		return Load{}, fmt.Errorf("pools: parse metrics: %w", err)
	}
	return names.load(fams), nil
}

// load reads the flavour's families into a Load.
func (names *metricNames) load(fams map[string]*dto.MetricFamily) Load {
	var l Load
	l.Running = int(sum(fams[names.running]))
	l.Waiting = int(sum(fams[names.waiting]))
	l.KVUsage = sum(family(fams, names.kvUsage, names.legacyKVUsage))
	l.PrefixQueries = sum(family(fams, names.prefixQueries, names.legacyPrefixQueries))
	l.PrefixHits = sum(family(fams, names.prefixHits, names.legacyPrefixHits))
	l.PromptTokens = sum(fams[names.promptTokens])
	l.GenerationTokens = sum(fams[names.generationTokens])
	if names.loraInfo != "" {
		l.LoRA = parseLoRAInfo(fams[names.loraInfo])
	}
	if f := fams[names.cacheConfig]; f != nil && len(f.Metric) > 0 {
		for _, lp := range f.Metric[0].Label {
			switch lp.GetName() {
			case enginemetrics.LabelBlockSize, enginemetrics.LabelPageSize:
				l.BlockSize, _ = strconv.Atoi(lp.GetValue())
			case enginemetrics.LabelNumGPUBlocks, enginemetrics.LabelMaxTotalNumTokens:
				l.NumGPUBlocks, _ = strconv.Atoi(lp.GetValue())
			case enginemetrics.LabelMaxNumSeqs, enginemetrics.LabelMaxRunningRequests:
				l.MaxNumSeqs = positive(lp.GetValue())
			case enginemetrics.LabelMaxNumBatchedTokens, enginemetrics.LabelChunkedPrefillSize:
				l.MaxBatchedTokens = positive(lp.GetValue())
			}
		}
	}
	return l
}

// family is fams[name], or fams[legacy] when name is missing.
func family(fams map[string]*dto.MetricFamily, name, legacy string) *dto.MetricFamily {
	if f := fams[name]; f != nil || legacy == "" {
		return f
	}
	return fams[legacy]
}

// positive parses a label's integer, zero when it is not a positive one
// (SGLang writes -1 for "no chunked prefill").
func positive(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func sum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var s float64
	for _, m := range f.Metric {
		switch {
		case m.Gauge != nil:
			s += m.Gauge.GetValue()
		case m.Counter != nil:
			s += m.Counter.GetValue()
		case m.Untyped != nil:
			s += m.Untyped.GetValue()
		}
	}
	return s
}

func (r *Registry) scrapeLoop(ctx context.Context, ep *Endpoint) {
	r.every(ep, r.opts.ScrapeInterval, func() {
		if err := r.scrape(ctx, ep); err != nil && ctx.Err() == nil {
			r.log.Debug("scrape failed", "endpoint", ep.ID, "err", err)
		}
	})
}

// scrape fetches one endpoint's /metrics and publishes the new Load. A
// failed scrape publishes nothing: the old snapshot ages into staleness.
func (r *Registry) scrape(ctx context.Context, ep *Endpoint) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ScrapeInterval+r.opts.ConnectTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL.JoinPath("/metrics").String(), nil)
	if err != nil {
		return err
	}
	resp, err := r.client.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pools: %s/metrics: status %d", ep.ID, resp.StatusCode)
	}
	l, err := ParseLoad(ep.Pool.Config.Engine, io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return err
	}
	l.ScrapedAt = time.Now()
	ep.SetLoad(l)
	if ep.joining.CompareAndSwap(true, false) {
		r.log.Info("endpoint takes traffic after its first good scrape", "pool", ep.Pool.Config.Name, "endpoint", ep.ID)
	}
	if r.onLoad != nil {
		r.onLoad(ep, l)
	}
	if ep.wantsAdapters(&l) {
		return r.discoverAdapters(ctx, ep)
	}
	return nil
}

func (r *Registry) healthLoop(ctx context.Context, ep *Endpoint) {
	h := healthCheck{threshold: r.opts.HealthFailures}
	r.every(ep, r.opts.HealthInterval, func() {
		err := r.probe(ctx, ep)
		if ctx.Err() != nil {
			return // the registry is closing: the probe says nothing
		}
		was := ep.Healthy()
		ok := h.observe(was, err)
		if ok == was {
			return
		}
		ep.SetHealthy(ok)
		if ok {
			r.log.Info("endpoint health changed", "endpoint", ep.ID, "healthy", true)
		} else {
			r.log.Warn("endpoint health changed", "endpoint", ep.ID, "healthy", false, "failed_probes", h.failures, "err", err)
		}
	})
}

// healthCheck turns probe results into a health verdict: unhealthy after
// threshold consecutive failures, or at once when the connection was
// refused; healthy after one success. Only the endpoint's health loop uses
// it.
type healthCheck struct {
	threshold int
	failures  int
}

// observe records one probe's result (err nil: passed) and returns the
// verdict; healthy is the verdict before it.
func (h *healthCheck) observe(healthy bool, err error) bool {
	switch {
	case err == nil:
		h.failures = 0
		return true
	case errors.Is(err, syscall.ECONNREFUSED):
		// Nothing listens: the engine is down, not slow. Waiting for more
		// probes would only send it turns that fail.
		h.failures = max(h.failures+1, h.threshold)
	default:
		h.failures++
	}
	return healthy && h.failures < h.threshold
}

// probe is one active health check: GET /health answering 200 in time. It
// returns why the probe failed, nil when it passed.
func (r *Registry) probe(ctx context.Context, ep *Endpoint) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ConnectTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL.JoinPath("/health").String(), nil)
	if err != nil {
		return err
	}
	resp, err := r.client.http.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pools: %s/health: status %d", ep.ID, resp.StatusCode)
	}
	return nil
}

// Waiting estimates the requests waiting in the endpoint's engine queue
// now, of those it reported: the waiting it last reported less the
// engine's progress on this gateway's requests since (Endpoint.answered:
// a request that began to answer, one that ended). An engine starts the
// next request it queued when a prefill it runs finishes or a sequence
// ends, so each is taken as one fewer waiting; progress on requests that
// were not ahead of the queue counts too, and then the estimate errs low
// until the next scrape. Zero with a stale or missing report.
func (e *Endpoint) Waiting(now time.Time) int64 {
	if e.Stale(now) {
		return 0
	}
	return e.waitingOf(e.load.Load())
}

// waitingOf is Waiting against the fresh snapshot l.
func (e *Endpoint) waitingOf(l *Load) int64 {
	return max(int64(l.Waiting)-(e.answered.Load()-l.answeredAt), 0)
}

// EngineQueue estimates the requests waiting in the endpoint's engine now:
// Waiting, plus this gateway's requests in flight beyond the running and
// waiting the engine last counted (sent since the scrape) that did not fit
// in the room it then had. An engine that queued nothing when scraped,
// ran fewer than its max_num_seqs and had KV cache to spare starts the
// requests sent since at once, up to that room; one that queued, or
// reports no limit, queues them all. With a stale or missing load report
// it is the gateway's requests in flight. Scrapes come every 200 ms or
// so; routing and admission decide many times in between, and must see
// their own decisions and the engine's progress.
func (e *Endpoint) EngineQueue(now time.Time) int64 {
	inFlight := e.InFlight()
	if e.Stale(now) {
		return inFlight
	}
	l := e.load.Load()
	sent := max(inFlight-int64(l.Running+l.Waiting), 0)
	return e.waitingOf(l) + max(sent-l.seqRoom(), 0)
}

// kvRoomBelow is the KV cache use under which an engine that queues
// nothing is taken to admit a new sequence: above it a new prompt may not
// find its blocks.
const kvRoomBelow = 0.9

// seqRoom is how many more sequences the engine could have started when
// scraped: 0 while it queued, its KV cache was nearly full or it reported
// no limit.
func (l *Load) seqRoom() int64 {
	if l.Waiting > 0 || l.MaxNumSeqs == 0 || l.KVUsage >= kvRoomBelow {
		return 0
	}
	return int64(max(l.MaxNumSeqs-l.Running, 0))
}
