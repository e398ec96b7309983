package driver

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name   string
		values []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"single", []float64{7}, 99, 7},
		{"min", v, 0, 1},
		{"max", v, 100, 10},
		{"median of even count", v, 50, 5.5},
		{"p90", v, 90, 9.1},
		{"p99", v, 99, 9.91},
		{"below 0", v, -5, 1},
		{"above 100", v, 500, 10},
		{"two values", []float64{10, 20}, 25, 12.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.values, tc.p); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.values, tc.p, got, tc.want)
			}
		})
	}
	s := Summarize([]float64{3, 1, 2})
	if s != (Latency{Count: 3, MeanMs: 2, P50Ms: 2, P90Ms: 2.8, P99Ms: 2.98, MaxMs: 3}) {
		if math.Abs(s.P90Ms-2.8) > 1e-9 || math.Abs(s.P99Ms-2.98) > 1e-9 || s.Count != 3 || s.MeanMs != 2 || s.MaxMs != 3 {
			t.Errorf("summarize = %+v", s)
		}
	}
}

func TestAggregate(t *testing.T) {
	samples := []*Sample{
		{Band: "unset", TTFT: 10 * time.Millisecond, E2E: 50 * time.Millisecond, InputTokens: 100, CachedTokens: 40, OutputTokens: 10,
			itl: []time.Duration{time.Millisecond, 3 * time.Millisecond}},
		{Band: "unset", TTFT: 30 * time.Millisecond, E2E: 70 * time.Millisecond, InputTokens: 100, CachedTokens: 60, OutputTokens: 10},
		{Band: "background", Error: "http_429", Status: 429, Shed: true, DroppedReason: "saturated"},
		{Band: "background", Error: "http_503", Status: 503, Shed: true},
		{Band: "unset", Error: ErrClassTimeout},
		// Cut by the bench at the run's end: sent, but no error.
		{Band: "unset", Error: ErrClassCanceled},
	}
	s := Aggregate(samples, 2*time.Second)
	if s.Requests != 6 || s.Succeeded != 2 || s.Errors != 3 || s.Shed != 2 || s.Cut != 1 || s.ErrorsByClass[ErrClassCanceled] != 0 {
		t.Errorf("counts %+v", s)
	}
	if s.Sheds["background"]["saturated"] != 1 || s.Sheds["background"]["unspecified"] != 1 || s.ErrorsByClass[ErrClassTimeout] != 1 {
		t.Errorf("sheds %v errors %v", s.Sheds, s.ErrorsByClass)
	}
	if s.TTFT.P50Ms != 20 || s.ITL.Count != 2 || s.E2E.MaxMs != 70 {
		t.Errorf("latencies %+v %+v %+v", s.TTFT, s.ITL, s.E2E)
	}
	if s.CachedTokenShare != 0.5 || s.OutputTokensPerSec != 10 || s.RequestsPerSec != 1 {
		t.Errorf("share %v tok/s %v req/s %v", s.CachedTokenShare, s.OutputTokensPerSec, s.RequestsPerSec)
	}
	tl := buildTimeline(samples, 30*time.Second)
	if tl.BucketSeconds != 1 || len(tl.Completed) != 31 || tl.Completed[0] != 2 || tl.Errors[0] != 3 || tl.OutputTokensPerSec[0] != 20 {
		t.Errorf("timeline %+v", tl)
	}
	cdf := buildCDF(samples)
	if len(cdf.TTFTMs) != len(CDFGrid) || cdf.TTFTMs[0] != 10 || cdf.TTFTMs[len(CDFGrid)-1] != 30 {
		t.Errorf("cdf %v", cdf.TTFTMs)
	}
	if _, err := json.Marshal(Result{Total: Aggregate(nil, 0), CDF: buildCDF(nil), Timeline: buildTimeline(nil, 0)}); err != nil {
		t.Errorf("empty result does not marshal: %v", err)
	}
}

func TestTimelineBuckets(t *testing.T) {
	for _, tc := range []struct {
		wall   time.Duration
		bucket float64
	}{
		{200 * time.Millisecond, 0.0078125},
		{30 * time.Second, 1},
		{time.Hour, 16},
	} {
		tl := buildTimeline(nil, tc.wall)
		if tl.BucketSeconds != tc.bucket {
			t.Errorf("wall %v: bucket %vs, want %vs", tc.wall, tl.BucketSeconds, tc.bucket)
		}
	}
}
