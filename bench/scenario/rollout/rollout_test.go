package rollout

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMedianFromHistograms: the median of what a histogram observed
// between two reads, interpolated in its bucket.
func TestMedianFromHistograms(t *testing.T) {
	read := func(text string) []bucket {
		t.Helper()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return histogram(fams, "h_seconds")
	}
	before := read(`# TYPE h_seconds histogram
h_seconds_bucket{r="a",le="0.1"} 10
h_seconds_bucket{r="a",le="0.2"} 10
h_seconds_bucket{r="a",le="+Inf"} 10
h_seconds_sum{r="a"} 0.5
h_seconds_count{r="a"} 10
`)
	after := read(`# TYPE h_seconds histogram
h_seconds_bucket{r="a",le="0.1"} 10
h_seconds_bucket{r="a",le="0.2"} 20
h_seconds_bucket{r="a",le="+Inf"} 20
h_seconds_sum{r="a"} 2
h_seconds_count{r="a"} 20
h_seconds_bucket{r="b",le="0.1"} 0
h_seconds_bucket{r="b",le="0.2"} 10
h_seconds_bucket{r="b",le="+Inf"} 10
h_seconds_sum{r="b"} 1.5
h_seconds_count{r="b"} 10
`)
	// Between the reads: 20 observations in (0.1, 0.2]; the median is
	// half-way through that bucket.
	got, n := median(delta(after, before))
	if n != 20 || math.Abs(got-150) > 1e-9 {
		t.Errorf("median %v ms of %d, want 150 ms of 20", got, n)
	}
	if got, n := median(delta(before, before)); got != 0 || n != 0 {
		t.Errorf("nothing observed: median %v of %d", got, n)
	}
}

// TestPhases: turns sort into before, during and after the replacements
// by when they were sent, with their failures and cached share.
func TestPhases(t *testing.T) {
	rep := &Report{Replacements: []Replacement{{StartedAt: 1, DoneAt: 2}, {StartedAt: 2, DoneAt: 3}}}
	rep.phases(samplesAt(t, 0.5, 1.5, 2.5, 3.5))
	got := ""
	for _, p := range rep.Phases {
		got += p.Name + ":" + string(rune('0'+p.Turns)) + " "
	}
	if got != "before:1 during:2 after:1 " {
		t.Errorf("phases %q", got)
	}
}

func samplesAt(t *testing.T, seconds ...float64) []*driver.Sample {
	t.Helper()
	var out []*driver.Sample
	for _, s := range seconds {
		out = append(out, &driver.Sample{Start: time.Duration(s * float64(time.Second)), TTFT: time.Millisecond, InputTokens: 10, CachedTokens: 5})
	}
	return out
}

// TestDelta: one histogram less another of the same buckets leaves the
// observations of the first that the second did not make: the turns
// during the rollout less the hand-offs' next turns.
func TestDelta(t *testing.T) {
	all := []bucket{{0.1, 10}, {0.2, 20}, {math.Inf(1), 20}}
	next := []bucket{{0.1, 10}, {0.2, 10}, {math.Inf(1), 10}}
	got, n := median(delta(all, next))
	if n != 10 || math.Abs(got-150) > 1e-9 {
		t.Errorf("median %v ms of %d, want 150 ms of the 10 in (0.1, 0.2]", got, n)
	}
}

// TestPool: runs pooled add up their counts and read the hand-offs'
// median from every run's next turns: two runs of 3 and 1 turns give the
// median of the 4, not a median of medians.
func TestPool(t *testing.T) {
	inf := math.Inf(1)
	run := func(next []bucket, handOffs float64) *Report {
		r := &Report{Runs: 1, HandOffs: handOffs, WarmUps: map[string]float64{"sent": 2},
			steady: []bucket{{0.1, 10}, {0.2, 10}, {inf, 10}}, next: next,
			Phases: []Phase{{Name: "before", Turns: 5, TTFTP50: 10}}}
		r.medians()
		return r
	}
	a := run([]bucket{{0.1, 3}, {0.2, 3}, {inf, 3}}, 3)
	b := run([]bucket{{0.1, 0}, {0.2, 1}, {inf, 1}}, 1)
	if math.Abs(b.HandOffTTFTP50-150) > 1e-9 {
		t.Fatalf("one run's median %v ms, want 150", b.HandOffTTFTP50)
	}
	p := Pool([]*Report{a, b})
	if p.Runs != 2 || p.HandOffs != 4 || p.WarmUps["sent"] != 4 || p.Phases[0].Turns != 10 {
		t.Errorf("pooled runs %d, hand-offs %v, warm-ups %v, turns before %d; want 2, 4, 4, 10", p.Runs, p.HandOffs, p.WarmUps, p.Phases[0].Turns)
	}
	// Of 4 turns, 3 in (0, 0.1]: the median is two thirds of the way
	// through the first bucket.
	if p.HandOffTurns != 4 || math.Abs(p.HandOffTTFTP50-100*2/3.0) > 1e-9 {
		t.Errorf("pooled median %v ms of %d, want 66.7 ms of 4", p.HandOffTTFTP50, p.HandOffTurns)
	}
	if math.Abs(p.Ratio-p.HandOffTTFTP50/p.SteadyTTFTP50) > 1e-9 || p.SteadyTTFTP50 != 50 {
		t.Errorf("pooled steady %v ms, ratio %v", p.SteadyTTFTP50, p.Ratio)
	}
}
