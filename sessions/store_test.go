package sessions

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fmtState(st State) string {
	pin := "-"
	if st.Endpoint != "" {
		pin = fmt.Sprintf("%s blocks=%d", st.Endpoint, st.PrefixBlocks)
	}
	return fmt.Sprintf("%s/%s: turns=%d first=%v last=%v gap=%v pin=%s",
		st.Tenant, st.Key, st.Turns, st.FirstSeen.Sub(t0), st.LastSeen.Sub(t0), st.MeanGap, pin)
}

func parseReason(t testing.TB, s string) PinReason {
	for i, n := range pinReasonNames {
		if n == s {
			return PinReason(i)
		}
	}
	t.Fatalf("unknown pin reason %q", s)
	return 0
}

// TestStore runs the datadriven session state machine in testdata/store.
//
//	new [max=N] [ttl=D]          a store over a fresh pin store
//	restart at=D                 a new store over the same pin store, pins loaded
//	touch tenant=T key=K at=D    a turn starts
//	finish tenant=T key=K at=D   a turn ends
//	get tenant=T key=K at=D
//	pin tenant=T key=K endpoint=E [blocks=N] [reason=R] at=D
//	unpin tenant=T key=K [reason=R]
//	left endpoint=E at=D         the endpoint left the fleet
//	sweep at=D
//	pins                         the pin store's contents
//	pin-changes                  the pin change counter, by reason
func TestStore(t *testing.T) {
	datadriven.Walk(t, "testdata/store", func(t *testing.T, path string) {
		var (
			s     *Store
			opts  Options
			ps    *MemPinStore
			reg   *prometheus.Registry
			ctx   = context.Background()
			build = func(t *testing.T) {
				reg = prometheus.NewRegistry()
				o := opts
				o.Pins, o.Metrics = ps, reg
				var err error
				if s, err = NewStore(o); err != nil {
					t.Fatal(err)
				}
			}
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var tenant, key, endpoint, reason string
			var at time.Duration
			d.MaybeScanArgs(t, "tenant", &tenant)
			d.MaybeScanArgs(t, "key", &key)
			d.MaybeScanArgs(t, "endpoint", &endpoint)
			d.MaybeScanArgs(t, "reason", &reason)
			if d.HasArg("at") {
				var v string
				d.ScanArgs(t, "at", &v)
				var err error
				if at, err = time.ParseDuration(v); err != nil {
					t.Fatal(err)
				}
			}
			now := t0.Add(at)
			switch d.Cmd {
			case "new":
				opts = Options{}
				d.MaybeScanArgs(t, "max", &opts.MaxSessions)
				if d.HasArg("ttl") {
					var v string
					d.ScanArgs(t, "ttl", &v)
					opts.TTL, _ = time.ParseDuration(v)
				}
				ps = &MemPinStore{}
				build(t)
				return s.String()
			case "restart":
				build(t)
				n, err := s.LoadPins(ctx, now)
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("loaded %d pins", n)
			case "touch":
				return fmtState(s.Touch(tenant, key, now))
			case "finish":
				s.Finish(tenant, key, now)
				return ""
			case "get":
				st, ok := s.Get(tenant, key, now)
				if !ok {
					return "not found"
				}
				return fmtState(st)
			case "pin":
				var blocks int
				d.MaybeScanArgs(t, "blocks", &blocks)
				if reason == "" {
					reason = "new"
				}
				if err := s.Pin(ctx, tenant, key, endpoint, blocks, parseReason(t, reason), now); err != nil {
					return err.Error()
				}
				ep, b := s.Pinned(tenant, key, now)
				return fmt.Sprintf("pinned to %s blocks=%d", ep, b)
			case "unpin":
				if reason == "" {
					reason = "removed"
				}
				had, err := s.Unpin(ctx, tenant, key, parseReason(t, reason), now)
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("had pin: %t", had)
			case "left":
				s.EndpointLeft(endpoint, now)
				return ""
			case "sweep":
				return fmt.Sprintf("swept %d, %d left", s.Sweep(now), s.Len())
			case "pins":
				pins, _ := ps.LoadPins(ctx)
				var b strings.Builder
				for _, p := range pins {
					ep := cmp.Or(p.Endpoint, "unpinned")
					fmt.Fprintf(&b, "%s/%s → %s\n", p.Tenant, p.Key, ep)
				}
				return b.String()
			case "pin-changes":
				var b strings.Builder
				for i := range s.metrics.pinChanges {
					if v := counterValue(s.metrics.pinChanges[i]); v > 0 {
						fmt.Fprintf(&b, "%s: %v\n", PinReason(i), v)
					}
				}
				fmt.Fprintf(&b, "evicted: ttl=%v capacity=%v\n",
					counterValue(s.metrics.evictedTTL), counterValue(s.metrics.evictedCapacity))
				return b.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func TestOptionsValidate(t *testing.T) {
	o := Options{MaxSessions: -1, TTL: -time.Second, GapSmoothing: 2}
	err := o.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"maxSessions", "ttl", "gapSmoothing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := NewStore(o); err == nil {
		t.Error("NewStore accepted invalid options")
	}
}

func TestPinnedDoesNotAllocate(t *testing.T) {
	s, err := NewStore(Options{MaxSessions: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 1000 {
		s.Touch("t", fmt.Sprint("s", i), t0)
		if err := s.Pin(ctx, "t", fmt.Sprint("s", i), "e1", 3, PinNew, t0); err != nil {
			t.Fatal(err)
		}
	}
	// The departures of other endpoints are looked up on every read.
	s.EndpointLeft("e2", t0)
	key := "s500"
	allocs := testing.AllocsPerRun(100, func() {
		if ep, _ := s.Pinned("t", key, t0); ep != "e1" {
			t.Fatal("lost the pin")
		}
		s.Touch("t", key, t0)
		_ = s.Pin(ctx, "t", key, "e1", 4, PinNew, t0)
	})
	if allocs != 0 {
		t.Errorf("Pinned+Touch+Pin of a known session: %v allocs, want 0", allocs)
	}
}

func TestStoreConcurrent(t *testing.T) {
	s, err := NewStore(Options{MaxSessions: 5000, Pins: &MemPinStore{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 2000 {
				key := fmt.Sprint("s", (i*7+g)%3000)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				s.Touch("t", key, now)
				s.Pin(ctx, "t", key, fmt.Sprint("e", g%3), i, PinRescored, now)
				s.Pinned("t", key, now)
				if i%500 == 0 {
					s.Sweep(now)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	if n := s.Len(); n > 5000 {
		t.Errorf("Len %d beyond MaxSessions", n)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
