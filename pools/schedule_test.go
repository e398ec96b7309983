package pools

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func validSchedule(t *testing.T, s LendSchedule) *LendSchedule {
	t.Helper()
	var errs []string
	s.Validate("s", func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	})
	if len(errs) > 0 {
		t.Fatalf("schedule refused: %v", errs)
	}
	return &s
}

func TestLendScheduleWindowAt(t *testing.T) {
	nights := validSchedule(t, LendSchedule{Windows: []LendWindow{
		{Days: []string{"mon", "tue", "wed", "thu", "fri"}, From: "22:00", To: "06:00"},
	}})
	// 2026-11-30 is a Monday.
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tests := []struct {
		s          *LendSchedule
		now        string
		start, end string // "" when in no window
	}{
		{nights, "2026-11-30T21:59:59Z", "", ""},
		{nights, "2026-11-30T22:00:00Z", "2026-11-30T22:00:00Z", "2026-12-01T06:00:00Z"},
		// After midnight, the window that started the day before.
		{nights, "2026-12-01T05:59:00Z", "2026-11-30T22:00:00Z", "2026-12-01T06:00:00Z"},
		{nights, "2026-12-01T06:00:00Z", "", ""},
		// Friday night runs into Saturday; no window starts on Saturday.
		{nights, "2026-12-05T03:00:00Z", "2026-12-04T22:00:00Z", "2026-12-05T06:00:00Z"},
		{nights, "2026-12-05T22:30:00Z", "", ""},
		// Sunday night has no window; Monday morning's 05:00 is in none.
		{nights, "2026-12-07T05:00:00Z", "", ""},
	}
	// Every day, in Paris (UTC+1 in winter): 12:00–13:00 there is
	// 11:00–12:00 UTC; two windows that overlap join, the later end
	// counting.
	paris := validSchedule(t, LendSchedule{Timezone: "Europe/Paris", Windows: []LendWindow{
		{From: "12:00", To: "13:00"},
		{From: "12:30", To: "14:00"},
	}})
	tests = append(tests, []struct {
		s          *LendSchedule
		now        string
		start, end string
	}{
		{paris, "2026-12-01T10:59:00Z", "", ""},
		// The two overlap: one window to the later end.
		{paris, "2026-12-01T11:10:00Z", "2026-12-01T11:00:00Z", "2026-12-01T13:00:00Z"},
		{paris, "2026-12-01T11:40:00Z", "2026-12-01T11:30:00Z", "2026-12-01T13:00:00Z"},
		{paris, "2026-12-01T12:59:00Z", "2026-12-01T11:30:00Z", "2026-12-01T13:00:00Z"},
		{paris, "2026-12-01T13:00:00Z", "", ""},
	}...)
	for _, tt := range tests {
		start, end, ok := tt.s.WindowAt(at(tt.now))
		if tt.start == "" {
			if ok {
				t.Errorf("%s: in window %v–%v; want none", tt.now, start, end)
			}
			continue
		}
		if !ok || !start.Equal(at(tt.start)) || !end.Equal(at(tt.end)) {
			t.Errorf("%s: window %v–%v (%v); want %s–%s", tt.now, start.UTC(), end.UTC(), ok, tt.start, tt.end)
		}
	}
}

func TestLendScheduleValidate(t *testing.T) {
	tests := []struct {
		s    LendSchedule
		want string // a field that must be named, "" for valid
	}{
		{LendSchedule{Windows: []LendWindow{{From: "22:00", To: "06:00"}}}, ""},
		{LendSchedule{}, "s.windows"},
		{LendSchedule{Timezone: "Mars/Olympus", Windows: []LendWindow{{From: "01:00", To: "02:00"}}}, "s.timezone"},
		{LendSchedule{ReclaimDeadline: "2h", Windows: []LendWindow{{From: "01:00", To: "02:00"}}}, "s.reclaimDeadline"},
		{LendSchedule{ReclaimDeadline: "soon", Windows: []LendWindow{{From: "01:00", To: "02:00"}}}, "s.reclaimDeadline"},
		{LendSchedule{Windows: []LendWindow{{From: "1:00", To: "02:00"}}}, "s.windows[0].from"},
		{LendSchedule{Windows: []LendWindow{{From: "01:00", To: "24:00"}}}, "s.windows[0].to"},
		{LendSchedule{Windows: []LendWindow{{From: "01:00", To: "01:00"}}}, "s.windows[0].to"},
		{LendSchedule{Windows: []LendWindow{{Days: []string{"monday"}, From: "01:00", To: "02:00"}}}, "s.windows[0].days"},
	}
	for _, tt := range tests {
		var fields []string
		tt.s.Validate("s", func(field, format string, args ...any) { fields = append(fields, field) })
		got := strings.Join(fields, ",")
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%+v: fields %q; want %q", tt.s, got, tt.want)
		}
	}
}

func TestLendScheduleNeedsLendablePool(t *testing.T) {
	pc := PoolConfig{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://127.0.0.1:1"}},
		LendSchedule: &LendSchedule{Windows: []LendWindow{{From: "01:00", To: "02:00"}}}}
	err := ValidatePools([]PoolConfig{pc})
	if err == nil || !strings.Contains(err.Error(), "pools[0].lendSchedule") {
		t.Fatalf("a schedule on a pool not lendable: %v; want refused naming pools[0].lendSchedule", err)
	}
	pc.Lendable = true
	if err := ValidatePools([]PoolConfig{pc}); err != nil {
		t.Fatalf("lendable pool with a schedule refused: %v", err)
	}
}

// FuzzLendSchedule: whatever a config holds, Validate does not panic, and
// a schedule it accepts puts any instant in a window that contains it or
// in none.
func FuzzLendSchedule(f *testing.F) {
	f.Add("22:00", "06:00", "mon", "UTC", int64(1796155248))
	f.Add("00:00", "23:59", "", "Europe/Paris", int64(0))
	f.Add("02:30", "03:00", "sun", "America/New_York", int64(1793511000)) // a DST night
	f.Fuzz(func(t *testing.T, from, to, day, tz string, unix int64) {
		s := LendSchedule{Timezone: tz, Windows: []LendWindow{{From: from, To: to}}}
		if day != "" {
			s.Windows[0].Days = []string{day}
		}
		ok := true
		s.Validate("s", func(string, string, ...any) { ok = false })
		if !ok {
			return
		}
		now := time.Unix(unix%(1<<40), 0)
		start, end, in := s.WindowAt(now)
		if in && (now.Before(start) || !now.Before(end)) {
			t.Fatalf("%v not in its window %v–%v", now, start, end)
		}
	})
}
