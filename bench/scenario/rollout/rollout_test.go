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
