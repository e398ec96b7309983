package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/turnpike-gateway/turnpike/bench/scenario/chaos"
)

// titledTable is a table under its heading.
type titledTable struct {
	title string
	*Table
}

// chaosTables are the report's tables: the run's failures and counters,
// the restarts, the goals.
func chaosTables(rep *chaos.Report) []titledTable {
	counts := &Table{Header: []string{"figure", "value"}}
	counts.Add("turns sent", fmt.Sprint(rep.Requests))
	for _, api := range slices.Sorted(maps.Keys(rep.ByAPI)) {
		s := rep.ByAPI[api]
		counts.Add("turns on "+api+" (failed)", fmt.Sprintf("%d (%d)", s.Requests, s.Errors))
	}
	counts.Add("failed before streaming", countsText(rep.FailedBeforeStream))
	counts.Add("failed mid-stream", countsText(rep.FailedMidStream))
	counts.Add("streams started / completed", fmt.Sprintf("%d / %d", rep.StreamsStarted, rep.StreamsCompleted))
	var mig []string
	for _, k := range slices.Sorted(maps.Keys(rep.Migrations)) {
		mig = append(mig, fmt.Sprintf("%s=%g", k, rep.Migrations[k]))
	}
	counts.Add("gateway migrations", strings.Join(mig, " "))
	counts.Add("gateway retries", fmt.Sprintf("%g", rep.Retries))

	restarts := &Table{Header: []string{"replica", "killed at (s)", "restarted at (s)", "serving after (s)"}}
	for _, rs := range rep.Restarts {
		after := fmt.Sprintf("%.2f", rs.ServingAfter)
		switch {
		case rs.Error != "":
			after = "error: " + rs.Error
		case !rs.Serving:
			after = fmt.Sprintf("not within %.2f", rs.ServingAfter)
		}
		restarts.Add(fmt.Sprint(rs.Replica), fmt.Sprintf("%.1f", rs.KilledAt), fmt.Sprintf("%.1f", rs.RestartedAt), after)
	}

	goals := &Table{Header: []string{"goal", "want", "got", "met"}}
	for _, g := range rep.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		goals.Add(g.Name, g.Want, g.Got, met)
	}
	return []titledTable{
		{fmt.Sprintf("chaos: %d rounds; failures and the gateway's counters", len(rep.Rounds)), counts},
		{"chaos: restarts (serving: the replica's /metrics show traffic)", restarts},
		{"chaos: goals", goals},
	}
}

// countsText prints counts by key, "0" when there are none.
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
