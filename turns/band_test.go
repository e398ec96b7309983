package turns

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

func TestClassifyDataDriven(t *testing.T) {
	datadriven.RunTest(t, "testdata/classify", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "classify" {
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		var tenant Tenant
		var h Hints
		var def, maxBand string
		d.MaybeScanArgs(t, "default", &def)
		d.MaybeScanArgs(t, "max", &maxBand)
		d.MaybeScanArgs(t, "priority", &h.Priority)
		d.MaybeScanArgs(t, "tier", &h.ServiceTier)
		h.Background = d.HasArg("background")
		for s, b := range map[string]*Band{def: &tenant.DefaultBand, maxBand: &tenant.MaxBand} {
			if s != "" {
				if err := b.UnmarshalText([]byte(s)); err != nil {
					d.Fatalf(t, "%v", err)
				}
			}
		}
		return Classify(tenant, h).String()
	})
}

func TestScoreDataDriven(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	datadriven.RunTest(t, "testdata/score", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "score" {
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		var turn Turn
		var gap, wait string
		d.MaybeScanArgs(t, "turns", &turn.SessionTurns)
		d.MaybeScanArgs(t, "tokens", &turn.InputTokens)
		d.MaybeScanArgs(t, "cached", &turn.CachedTokens)
		d.MaybeScanArgs(t, "gap", &gap)
		d.MaybeScanArgs(t, "wait", &wait)
		turn.Warm = d.HasArg("warm")
		parse := func(s string) time.Duration {
			if s == "" {
				return 0
			}
			v, err := time.ParseDuration(s)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return v
		}
		turn.MeanGap = parse(gap)
		turn.Enqueued = now.Add(-parse(wait))
		return fmt.Sprintf("%.3f (loop %.2f, short %.2f)", Score(&turn, now), loopiness(turn.SessionTurns, turn.MeanGap), shortness(turn.InputTokens-turn.CachedTokens))
	})
}

func TestParseBand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Band
		err  bool
	}{
		{"interactive", Interactive, false},
		{" Standard ", Standard, false},
		{"BACKGROUND", Background, false},
		{"", 0, true},
		{"high", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBand(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseBand(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzParseBand(f *testing.F) {
	for _, s := range append(bandNames[:], "", " x ", "INTERACTIVE\n") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBand(s)
		if err != nil {
			return
		}
		if !b.Valid() || !strings.EqualFold(strings.TrimSpace(s), b.String()) {
			t.Fatalf("ParseBand(%q) = %v", s, b)
		}
		var rt Band
		text, _ := b.MarshalText()
		if err := rt.UnmarshalText(text); err != nil || rt != b {
			t.Fatalf("round trip of %v: %v, %v", b, rt, err)
		}
	})
}
