package driver

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Percentile returns the p-th percentile (p in [0,100]) of sorted values,
// interpolating linearly between the closest ranks (numpy's default). It
// returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	rank := p / 100 * float64(n-1)
	lo := int(rank)
	frac := rank - float64(lo)
	if lo+1 >= n {
		return sorted[n-1]
	}
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Latency summarises one latency distribution, in milliseconds.
type Latency struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summarize sorts ms in place and summarises it.
func Summarize(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	sort.Float64s(ms)
	var sum float64
	for _, v := range ms {
		sum += v
	}
	return Latency{
		Count:  len(ms),
		MeanMs: sum / float64(len(ms)),
		P50Ms:  Percentile(ms, 50),
		P90Ms:  Percentile(ms, 90),
		P99Ms:  Percentile(ms, 99),
		MaxMs:  ms[len(ms)-1],
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summary is the figures of a set of requests: a whole run, one tenant, or
// one band.
type Summary struct {
	// Requests were sent; Succeeded ended with a complete stream; Errors
	// did not (sheds included); Cut were cancelled by the bench itself
	// (the run's end, or the bench stopped) before they ended, neither.
	Requests  int `json:"requests"`
	Succeeded int `json:"succeeded"`
	Errors    int `json:"errors"`
	Cut       int `json:"cut,omitempty"`
	// Shed counts requests the gateway refused with 429/503 and a reason.
	Shed int `json:"shed"`
	// ErrorsByClass counts failures by class: "http_<status>", "timeout",
	// "transport", "stream".
	ErrorsByClass map[string]int `json:"errors_by_class,omitempty"`
	// Sheds counts shed requests by band, then by the gateway's
	// x-turnpike-dropped-reason ("unspecified" when absent).
	Sheds map[string]map[string]int `json:"sheds,omitempty"`
	// TTFT is request sent → first content delta; ITL the gaps between
	// content deltas; E2E request sent → stream end. Successful requests only.
	TTFT Latency `json:"ttft"`
	ITL  Latency `json:"itl"`
	E2E  Latency `json:"e2e"`
	// Token counts from the responses' usage, successful requests only.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// CachedTokenShare is CachedTokens/InputTokens as the gateway reported
	// them in usage.
	CachedTokenShare float64 `json:"cached_token_share"`
	// OutputTokensPerSec and RequestsPerSec are successful output tokens
	// and requests over the run's wall time.
	OutputTokensPerSec float64 `json:"output_tokens_per_sec"`
	RequestsPerSec     float64 `json:"requests_per_sec"`
}

// Aggregate computes the summary of samples over wall time.
func Aggregate(samples []*Sample, wall time.Duration) Summary {
	var s Summary
	var ttft, itl, e2e []float64
	for _, x := range samples {
		s.Requests++
		if x.Cut() {
			s.Cut++
			continue
		}
		if x.Error != "" {
			s.Errors++
			if s.ErrorsByClass == nil {
				s.ErrorsByClass = map[string]int{}
			}
			s.ErrorsByClass[x.Error]++
			if x.Shed {
				s.Shed++
				if s.Sheds == nil {
					s.Sheds = map[string]map[string]int{}
				}
				if s.Sheds[x.Band] == nil {
					s.Sheds[x.Band] = map[string]int{}
				}
				reason := x.DroppedReason
				if reason == "" {
					reason = "unspecified"
				}
				s.Sheds[x.Band][reason]++
			}
			continue
		}
		s.Succeeded++
		if x.TTFT > 0 {
			ttft = append(ttft, millis(x.TTFT))
		}
		for _, d := range x.itl {
			itl = append(itl, millis(d))
		}
		e2e = append(e2e, millis(x.E2E))
		s.InputTokens += int64(x.InputTokens)
		s.OutputTokens += int64(x.OutputTokens)
		s.CachedTokens += int64(x.CachedTokens)
	}
	s.TTFT = Summarize(ttft)
	s.ITL = Summarize(itl)
	s.E2E = Summarize(e2e)
	if s.InputTokens > 0 {
		s.CachedTokenShare = float64(s.CachedTokens) / float64(s.InputTokens)
	}
	if secs := wall.Seconds(); secs > 0 {
		s.OutputTokensPerSec = float64(s.OutputTokens) / secs
		s.RequestsPerSec = float64(s.Succeeded) / secs
	}
	return s
}

// CDFGrid is the percentiles at which CDF keeps latencies: every percent,
// then finer in the tail.
var CDFGrid = func() []float64 {
	g := make([]float64, 0, 110)
	for p := 0; p <= 99; p++ {
		g = append(g, float64(p))
	}
	return append(g, 99.5, 99.9, 100)
}()

// CDF keeps latency distributions at the percentiles of CDFGrid, in
// milliseconds, so reports can plot them without the samples.
type CDF struct {
	Percentiles []float64 `json:"percentiles"`
	TTFTMs      []float64 `json:"ttft_ms,omitempty"`
	ITLMs       []float64 `json:"itl_ms,omitempty"`
	E2EMs       []float64 `json:"e2e_ms,omitempty"`
}

func buildCDF(samples []*Sample) CDF {
	var ttft, itl, e2e []float64
	for _, x := range samples {
		if x.Error != "" {
			continue
		}
		if x.TTFT > 0 {
			ttft = append(ttft, millis(x.TTFT))
		}
		for _, d := range x.itl {
			itl = append(itl, millis(d))
		}
		e2e = append(e2e, millis(x.E2E))
	}
	at := func(v []float64) []float64 {
		if len(v) == 0 {
			return nil
		}
		slices.Sort(v)
		out := make([]float64, len(CDFGrid))
		for i, p := range CDFGrid {
			out[i] = Percentile(v, p)
		}
		return out
	}
	return CDF{Percentiles: CDFGrid, TTFTMs: at(ttft), ITLMs: at(itl), E2EMs: at(e2e)}
}

// Timeline is the run bucketed by completion time.
type Timeline struct {
	// BucketSeconds is the width of each bucket.
	BucketSeconds float64 `json:"bucket_seconds"`
	// Per bucket: requests completed, errors, and output tokens per second.
	Completed          []int     `json:"completed"`
	Errors             []int     `json:"errors"`
	OutputTokensPerSec []float64 `json:"output_tokens_per_sec"`
}

// maxTimelineBuckets keeps plots and JSON small on long runs.
const (
	minTimelineBuckets = 20
	maxTimelineBuckets = 300
)

func buildTimeline(samples []*Sample, wall time.Duration) Timeline {
	// One-second buckets, wider on long runs and narrower on short ones, so
	// a plot has between minTimelineBuckets and maxTimelineBuckets points.
	bucket := time.Second
	for wall/bucket > maxTimelineBuckets {
		bucket *= 2
	}
	for wall/bucket < minTimelineBuckets && bucket > 10*time.Millisecond {
		bucket /= 2
	}
	n := int(wall/bucket) + 1
	t := Timeline{
		BucketSeconds:      bucket.Seconds(),
		Completed:          make([]int, n),
		Errors:             make([]int, n),
		OutputTokensPerSec: make([]float64, n),
	}
	for _, x := range samples {
		i := int((x.Start + x.E2E) / bucket)
		if i < 0 {
			i = 0
		}
		if i >= n {
			i = n - 1
		}
		if x.Cut() {
			continue
		}
		if x.Error != "" {
			t.Errors[i]++
			continue
		}
		t.Completed[i]++
		t.OutputTokensPerSec[i] += float64(x.OutputTokens) / bucket.Seconds()
	}
	return t
}
