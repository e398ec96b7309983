package scrape

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// Engine metric names the benchmark reads, as EngineMetrics keys them.
var (
	vllmQueries      = Key(enginemetrics.VLLMPrefixCacheQueries)
	vllmHits         = Key(enginemetrics.VLLMPrefixCacheHits)
	vllmGPUQueries   = Key(enginemetrics.VLLMGPUPrefixCacheQueries) // vLLM before v0.10
	vllmGPUHits      = Key(enginemetrics.VLLMGPUPrefixCacheHits)
	vllmPrompt       = Key(enginemetrics.VLLMPromptTokens)
	vllmGeneration   = Key(enginemetrics.VLLMGenerationTokens)
	sglangPrompt     = Key(enginemetrics.SGLangPromptTokens)
	sglangGeneration = Key(enginemetrics.SGLangGenerationTokens)
	sglangCached     = Key(enginemetrics.SGLangCachedTokens)
	sglangHitRate    = Key(enginemetrics.SGLangCacheHitRate)
)

// Key is the EngineMetrics key of a family: its name without a
// _total suffix, so that a counter exposed with or without one is read
// the same.
func Key(name string) string { return strings.TrimSuffix(name, "_total") }

// EngineMetrics holds the values of one scrape of one engine's /metrics,
// summed over label sets, keyed by family name without a _total suffix.
type EngineMetrics map[string]float64

// Has reports whether the scrape carried name.
func (m EngineMetrics) Has(name string) bool { _, ok := m[name]; return ok }

// Engine gauges, vLLM's and SGLang's names.
var (
	gaugesRunning = []string{enginemetrics.VLLMNumRequestsRunning, enginemetrics.SGLangNumRunningReqs}
	gaugesWaiting = []string{enginemetrics.VLLMNumRequestsWaiting, enginemetrics.SGLangNumQueueReqs}
	gaugesKV      = []string{enginemetrics.VLLMKVCacheUsagePerc, enginemetrics.VLLMGPUCacheUsagePerc, enginemetrics.SGLangTokenUsage}
)

// firstOf is the value of the first of names that m carries, 0 when none.
func firstOf(m EngineMetrics, names []string) float64 {
	v, _ := lookup(m, names)
	return v
}

func lookup(m EngineMetrics, names []string) (float64, bool) {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v, true
		}
	}
	return 0, false
}

// Running is the sequences the engine runs in its batch; Waiting those in
// its own queue; KVUsage the share of its KV cache in use. Each reads
// vLLM's gauge or SGLang's, and is 0 with ok false when the scrape
// carries neither.
func (m EngineMetrics) Running() (n float64, ok bool) { return lookup(m, gaugesRunning) }

// Waiting: see Running.
func (m EngineMetrics) Waiting() (n float64, ok bool) { return lookup(m, gaugesWaiting) }

// KVUsage: see Running.
func (m EngineMetrics) KVUsage() (share float64, ok bool) { return lookup(m, gaugesKV) }

// Tokens is the prompt and generation tokens the engine has counted, vLLM's
// counters and SGLang's summed.
func (m EngineMetrics) Tokens() float64 {
	return m[vllmPrompt] + m[vllmGeneration] + m[sglangPrompt] + m[sglangGeneration]
}

// maxMetricsBody bounds one /metrics read.
const maxMetricsBody = 32 << 20

// ParseEngineMetrics parses the Prometheus text exposition format and sums
// every counter, gauge and untyped sample by family name (a trailing _total
// dropped). Histograms and summaries are skipped. The numeric labels of a
// config info family (a name ending in _config_info, e.g.
// vllm:cache_config_info{max_num_seqs="256"}) are kept as name.label.
func ParseEngineMetrics(r io.Reader) (EngineMetrics, error) {
	fams, err := parseFamilies(r)
	if err != nil {
		return nil, err
	}
	return sumFamilies(fams), nil
}

// sumFamilies is ParseEngineMetrics on families already parsed.
func sumFamilies(fams map[string]*dto.MetricFamily) EngineMetrics {
	out := EngineMetrics{}
	for name, f := range fams {
		key := Key(name)
		if f.GetType() == dto.MetricType_HISTOGRAM && latencyHistograms[name] {
			for _, m := range f.GetMetric() {
				addBuckets(out, name, m)
			}
			continue
		}
		if strings.HasSuffix(name, "_config_info") && len(f.GetMetric()) > 0 {
			for _, lp := range f.GetMetric()[0].GetLabel() {
				if v, err := strconv.ParseFloat(lp.GetValue(), 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
					out[name+"."+lp.GetName()] = v
				}
			}
		}
		for _, m := range f.GetMetric() {
			v, ok := sampleValue(f.GetType(), m)
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			out[key] += v
		}
		// A sum can overflow even when every sample is finite.
		if v := out[key]; math.IsInf(v, 0) {
			delete(out, key)
		}
	}
	return out
}

// byLabel sums family name's samples by the value of label, adding them
// to into.
func byLabel(fams map[string]*dto.MetricFamily, name, label string, into map[string]float64) {
	f := fams[name]
	if f == nil {
		return
	}
	for _, m := range f.GetMetric() {
		v, ok := sampleValue(f.GetType(), m)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				into[lp.GetValue()] += v
			}
		}
	}
}

// parseFamilies parses the Prometheus text exposition format into its
// families, keyed by name.
func parseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, maxMetricsBody))
	if err != nil {
		return nil, fmt.Errorf("bench: parsing metrics: %w", err)
	}
	return fams, nil
}

func sampleValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), m.Counter != nil
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), m.Gauge != nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), m.Untyped != nil
	}
	return 0, false
}

// EngineCache is the engines' own account of the run: deltas of their
// counters between a scrape before and a scrape after, summed over engines.
type EngineCache struct {
	// Flavor is "vllm", "sglang", or "" when no engine exported a known
	// prefix-cache metric.
	Flavor string `json:"flavor,omitempty"`
	// Engines is how many engines were scraped both times.
	Engines int `json:"engines"`
	// QueriedTokens and HitTokens are prompt tokens looked up in and served
	// from the engines' prefix caches during the run.
	QueriedTokens float64 `json:"queried_tokens"`
	HitTokens     float64 `json:"hit_tokens"`
	// HitRate is HitTokens/QueriedTokens; for SGLang without token counters,
	// the mean of sglang:cache_hit_rate after the run.
	HitRate float64 `json:"hit_rate"`
	// PromptTokens and GenerationTokens are the engines' token counters.
	PromptTokens     float64 `json:"prompt_tokens"`
	GenerationTokens float64 `json:"generation_tokens"`
	// PerEngine splits the figures by engine, in the order of
	// Target.EngineMetricsURLs (engines scraped only once are left out).
	PerEngine []EngineFigures `json:"per_engine,omitempty"`
	// LoadSpread is the busiest engine's prompt plus generation tokens over
	// the mean of all engines': 1 is perfectly even, the engine count is
	// everything on one engine. 0 when nothing was counted.
	LoadSpread float64 `json:"load_spread,omitempty"`
	// ITLP50Ms and ITLP99Ms are the engines' own inter-token latency over
	// the run, from their histograms (in the engines' clock: simulated
	// time for the simulator); 0 when none exported one.
	ITLP50Ms float64 `json:"itl_p50_ms,omitempty"`
	ITLP99Ms float64 `json:"itl_p99_ms,omitempty"`
	// TTFTP50Ms and TTFTP99Ms are the engines' own time to first token,
	// from arrival at the engine, likewise.
	TTFTP50Ms float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP99Ms float64 `json:"ttft_p99_ms,omitempty"`
	// Errors lists scrapes that failed; the figures cover the rest.
	Errors []string `json:"errors,omitempty"`
}

// EngineFigures are one engine's counter deltas over the run.
type EngineFigures struct {
	QueriedTokens    float64 `json:"queried_tokens"`
	HitTokens        float64 `json:"hit_tokens"`
	PromptTokens     float64 `json:"prompt_tokens"`
	GenerationTokens float64 `json:"generation_tokens"`
}

// All reads every engine's /metrics at urls; a failed scrape leaves nil in
// its slot and its error in the list.
func All(ctx context.Context, urls []string) ([]EngineMetrics, []string) {
	out := make([]EngineMetrics, len(urls))
	var errs []string
	cl := &http.Client{Timeout: 10 * time.Second}
	for i, u := range urls {
		m, err := One(ctx, cl, u)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out[i] = m
	}
	return out, errs
}

// One reads one engine's /metrics at url.
func One(ctx context.Context, cl *http.Client, url string) (EngineMetrics, error) {
	fams, err := Families(ctx, cl, url)
	if err != nil {
		return nil, err
	}
	return sumFamilies(fams), nil
}

// Families reads the Prometheus text at url into its families, keyed by
// name.
func Families(ctx context.Context, cl *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	// Uncompressed: compressing the page would cost the gateway under
	// test, scraped all through a run, more of its CPU than sending it.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: scrape %s: status %d", url, resp.StatusCode)
	}
	fams, err := parseFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", url, err)
	}
	return fams, nil
}

// Delta computes the run's engine figures from before and after
// scrapes, engine by engine. A counter that went down (an engine restarted)
// counts from zero.
func Delta(before, after []EngineMetrics, errs []string) *EngineCache {
	ec := &EngineCache{Errors: errs}
	var rateSum float64
	var rateN int
	for i := range before {
		b, a := before[i], after[i]
		if b == nil || a == nil {
			continue
		}
		ec.Engines++
		d := func(name string) float64 {
			av, bv := a[name], b[name]
			if av < bv {
				return av
			}
			return av - bv
		}
		var f EngineFigures
		switch {
		case a.Has(vllmQueries):
			ec.Flavor = "vllm"
			f.QueriedTokens, f.HitTokens = d(vllmQueries), d(vllmHits)
		case a.Has(vllmGPUQueries):
			ec.Flavor = "vllm"
			f.QueriedTokens, f.HitTokens = d(vllmGPUQueries), d(vllmGPUHits)
		case a.Has(sglangCached) && a.Has(sglangPrompt):
			ec.Flavor = "sglang"
			f.QueriedTokens, f.HitTokens = d(sglangPrompt), d(sglangCached)
		case a.Has(sglangHitRate):
			ec.Flavor = "sglang"
			rateSum += a[sglangHitRate]
			rateN++
		}
		f.PromptTokens = d(vllmPrompt) + d(sglangPrompt)
		f.GenerationTokens = d(vllmGeneration) + d(sglangGeneration)
		ec.QueriedTokens += f.QueriedTokens
		ec.HitTokens += f.HitTokens
		ec.PromptTokens += f.PromptTokens
		ec.GenerationTokens += f.GenerationTokens
		ec.PerEngine = append(ec.PerEngine, f)
	}
	if total := ec.PromptTokens + ec.GenerationTokens; total > 0 && len(ec.PerEngine) > 0 {
		var most float64
		for _, f := range ec.PerEngine {
			most = max(most, f.PromptTokens+f.GenerationTokens)
		}
		ec.LoadSpread = most / (total / float64(len(ec.PerEngine)))
	}
	switch {
	case ec.QueriedTokens > 0:
		ec.HitRate = ec.HitTokens / ec.QueriedTokens
	case rateN > 0:
		ec.HitRate = rateSum / float64(rateN)
	}
	engineITL(ec, before, after)
	// Engines can export anything; keep the result marshalable.
	for _, p := range []*float64{&ec.ITLP50Ms, &ec.ITLP99Ms, &ec.TTFTP50Ms, &ec.TTFTP99Ms, &ec.HitRate, &ec.QueriedTokens, &ec.HitTokens, &ec.PromptTokens, &ec.GenerationTokens, &ec.LoadSpread} {
		if math.IsNaN(*p) || math.IsInf(*p, 0) {
			*p = 0
		}
	}
	return ec
}

// FiguresBetween are one engine's counter deltas between two scrapes (a
// counter that went down, an engine restarted, counts from zero).
func FiguresBetween(b, a EngineMetrics) EngineFigures {
	d := func(names ...string) float64 {
		var s float64
		for _, n := range names {
			av, bv := a[n], b[n]
			if av < bv {
				s += av
			} else {
				s += av - bv
			}
		}
		return s
	}
	f := EngineFigures{
		PromptTokens:     d(vllmPrompt, sglangPrompt),
		GenerationTokens: d(vllmGeneration, sglangGeneration),
	}
	switch {
	case a.Has(vllmHits):
		f.HitTokens = d(vllmHits)
	case a.Has(vllmGPUHits):
		f.HitTokens = d(vllmGPUHits)
	case a.Has(sglangCached):
		f.HitTokens = d(sglangCached)
	}
	return f
}
