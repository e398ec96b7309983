package pools

import (
	"fmt"
	"strings"
	"time"
)

// LendSchedule lends a lendable pool in windows that recur every week, as
// an RL trainer's idle hours do (nights, weekends, the evaluation hour):
// at each window's start the gateway lends the pool until the window's
// end, as POST /admin/v1/pools/{name}/lend would. The admin API still
// reclaims a window early or lends outside the schedule.
type LendSchedule struct {
	// Timezone is the IANA zone the windows' clock times are in (for
	// instance "Europe/Paris"). Default UTC.
	Timezone string `yaml:"timezone,omitempty" json:"timezone,omitempty"`
	// ReclaimDeadline is how long work in flight may run on once a window
	// ends, a Go duration. Default DefaultReclaimGrace (30s).
	ReclaimDeadline string `yaml:"reclaimDeadline,omitempty" json:"reclaimDeadline,omitempty"`
	// Windows are the lending windows. At least one.
	Windows []LendWindow `yaml:"windows" json:"windows"`

	// Parsed by Validate.
	loc   *time.Location
	grace time.Duration
}

// LendWindow is a window of every day named in Days, from From to To on
// the schedule's clock. A window whose To is not after its From ends the
// next day ("22:00" to "06:00").
type LendWindow struct {
	// Days are the days the window starts on: "mon" … "sun". Empty means
	// every day.
	Days []string `yaml:"days,omitempty" json:"days,omitempty"`
	// From and To are clock times, "HH:MM".
	From string `yaml:"from" json:"from"`
	To   string `yaml:"to" json:"to"`

	// Parsed by Validate: minutes since midnight, and the days as a set
	// by time.Weekday.
	from, to int
	days     [7]bool
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// maxReclaimGrace bounds a schedule's ReclaimDeadline, as the admin API
// bounds a lend's.
const maxReclaimGrace = time.Hour

// Validate parses s and reports what is wrong with it through bad, each
// problem with the field's path under where.
func (s *LendSchedule) Validate(where string, bad func(field, format string, args ...any)) {
	s.loc = time.UTC
	if s.Timezone != "" {
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			bad(where+".timezone", "unknown time zone %q", s.Timezone)
		} else {
			s.loc = loc
		}
	}
	s.grace = DefaultReclaimGrace
	if s.ReclaimDeadline != "" {
		d, err := time.ParseDuration(s.ReclaimDeadline)
		switch {
		case err != nil:
			bad(where+".reclaimDeadline", "%q is not a duration such as \"30s\"", s.ReclaimDeadline)
		case d < 0 || d > maxReclaimGrace:
			bad(where+".reclaimDeadline", "%v is not between 0s and %v", d, maxReclaimGrace)
		default:
			s.grace = d
		}
	}
	if len(s.Windows) == 0 {
		bad(where+".windows", "at least one window is required")
	}
	for i := range s.Windows {
		w := &s.Windows[i]
		at := fmt.Sprintf("%s.windows[%d]", where, i)
		var ok bool
		if w.from, ok = clockMinutes(w.From); !ok {
			bad(at+".from", "%q is not a clock time such as \"22:00\"", w.From)
		}
		if w.to, ok = clockMinutes(w.To); !ok {
			bad(at+".to", "%q is not a clock time such as \"06:00\"", w.To)
		}
		if w.From == w.To {
			bad(at+".to", "the window from %s to %s is empty", w.From, w.To)
		}
		w.days = [7]bool{}
		for _, d := range w.Days {
			wd, ok := weekdays[strings.ToLower(d)]
			if !ok {
				bad(at+".days", "%q is not a day (mon, tue, wed, thu, fri, sat, sun)", d)
				continue
			}
			w.days[wd] = true
		}
		if len(w.Days) == 0 {
			w.days = [7]bool{true, true, true, true, true, true, true}
		}
	}
}

// clockMinutes reads "HH:MM" as minutes since midnight.
func clockMinutes(v string) (int, bool) {
	t, err := time.Parse("15:04", v)
	if err != nil || len(v) != len("15:04") {
		return 0, false
	}
	return t.Hour()*60 + t.Minute(), true
}

// Grace is how long work in flight may run on once a window ends.
func (s *LendSchedule) Grace() time.Duration { return s.grace }

// maxJoined bounds how far WindowAt joins windows that follow each other
// without a gap (a schedule may cover every hour of the week).
const maxJoined = 7 * 24 * time.Hour

// WindowAt returns the window that contains now, as its start and end;
// ok is false when now is in none. Windows that overlap or follow each
// other without a gap are one window, ending where the last of them ends
// (at most a week on), so that lending never stops between them. The
// schedule must have been validated.
func (s *LendSchedule) WindowAt(now time.Time) (start, end time.Time, ok bool) {
	start, end, ok = s.containing(now)
	for ok && end.Sub(now) < maxJoined {
		_, next, more := s.containing(end)
		if !more {
			break
		}
		end = next
	}
	if limit := now.Add(maxJoined); end.After(limit) {
		end = limit
	}
	return start, end, ok
}

// containing is the window that contains now, the one that ends last of
// those that do.
func (s *LendSchedule) containing(now time.Time) (start, end time.Time, ok bool) {
	local := now.In(s.loc)
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, s.loc)
	// A window that contains now started today or, crossing midnight,
	// yesterday.
	for back := 0; back <= 1; back++ {
		day := midnight.AddDate(0, 0, -back)
		for i := range s.Windows {
			w := &s.Windows[i]
			if !w.days[day.Weekday()] {
				continue
			}
			from := clockOn(day, w.from)
			to := clockOn(day, w.to)
			if w.to <= w.from {
				to = clockOn(day.AddDate(0, 0, 1), w.to)
			}
			if !now.Before(from) && now.Before(to) && (!ok || to.After(end)) {
				start, end, ok = from, to, true
			}
		}
	}
	return start, end, ok
}

// clockOn is minutes past midnight on day, in day's zone: on the day a
// clock skips an hour, a time within the skipped hour is the hour after.
func clockOn(day time.Time, minutes int) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day(), minutes/60, minutes%60, 0, 0, day.Location())
}
