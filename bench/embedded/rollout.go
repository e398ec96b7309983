package embedded

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/scenario/rollout"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// WorkloadRollout is --workload rollout: agentic sessions on the embedded
// fleet while each replica is replaced by one of a new revision
// (bench/scenario/rollout).
const WorkloadRollout = "rollout"

// The rollout's --compare entries: the gateway warms the endpoints its
// sessions are handed to, or does not.
const (
	RolloutWarmUp   = "warm-up"
	RolloutNoWarmUp = "no-warm-up"
)

// Rollout runs the rollout workload repeat times for each of modes
// (warm-up, no-warm-up), their order reversed every other time, each on a
// fresh embedded fleet, and prints them side by side, each mode's runs
// pooled (rollout.Pool).
func (f *Fleet) Rollout(ctx context.Context, cfg bench.Config, modes []string, repeat int, stdout io.Writer, out string, log *slog.Logger) error {
	for _, m := range modes {
		if m != RolloutWarmUp && m != RolloutNoWarmUp {
			return fmt.Errorf("bench: --workload rollout --compare %q: want %s and/or %s", m, RolloutWarmUp, RolloutNoWarmUp)
		}
	}
	runs := make([][]*rollout.Report, len(modes))
	for run := range max(repeat, 1) {
		order := slices.Clone(modes)
		if run%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			res, rep, err := f.runRollout(ctx, cfg, mode, log)
			if err != nil {
				return fmt.Errorf("bench: rollout %s: %w", mode, err)
			}
			r := report.ResultOf(res)
			r.Workload, r.Policy, r.Run = WorkloadRollout, mode, run
			b, err := json.MarshalIndent(struct {
				Result  any             `json:"result"`
				Rollout *rollout.Report `json:"rollout"`
			}{r, rep}, "", "  ")
			if err != nil {
				return err
			}
			name := "rollout-" + mode + ".json"
			if repeat > 1 {
				name = fmt.Sprintf("rollout-%s-%d.json", mode, run+1)
			}
			if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
				return err
			}
			i := slices.Index(modes, mode)
			runs[i] = append(runs[i], rep)
		}
	}
	reps := make([]*rollout.Report, len(modes))
	for i := range modes {
		reps[i] = rollout.Pool(runs[i])
	}
	writeRollout(stdout, f.Topology, modes, reps, runs)
	fmt.Fprintf(stdout, "\nresults: %s/rollout-*.json\n", out)
	return nil
}

// runRollout runs the sessions on a fresh embedded gateway and fleet while
// each replica is replaced.
func (f *Fleet) runRollout(ctx context.Context, cfg bench.Config, mode string, log *slog.Logger) (*driver.Result, *rollout.Report, error) {
	dataDir, err := os.MkdirTemp("", "turnpike-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dataDir)
	gcfg := &stack.Config{Addr: "127.0.0.1:0", DataDir: dataDir}
	gcfg.Routing.Policy = f.Policy
	gcfg.Routing.HandOff.DisableWarmUp = mode == RolloutNoWarmUp
	gcfg.EnsureDefaults()
	tenants(gcfg, cfg)
	fl, err := f.New("")
	if err != nil {
		return nil, nil, err
	}
	ttftTargets(gcfg, f.TimeScale, f.TTFTTarget)
	scrapes(gcfg, f.TimeScale)
	flushes(gcfg, f.TimeScale, f.FlushInterval)
	st, err := stack.New(gcfg, stack.Options{Logger: log, Fleet: fl})
	if err == nil {
		err = st.Start(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	fleet := newRolloutFleet(st)
	defer func() {
		st.Close(context.Background())
		fleet.Close()
	}()
	t := f.target(st, fl)
	fleet.metrics = t.GatewayMetrics()
	// The replicas come and go: their /metrics are not the run's.
	t.Replicas, t.EngineMetricsURLs, t.EngineURLs, t.Cost = nil, nil, nil, nil
	return rollout.Run(ctx, cfg, t, fleet, rollout.Options{}, mode)
}

// rolloutFleet replaces the embedded fleet's replicas: new engines of the
// pools' configs join their pools' lists, and once they take traffic the
// old ones leave the lists, drain, and are stopped once the gateway sends
// them nothing more: no turn in flight, no hand-off pending (a session's
// turns go to its old replica until its new one is warmed), as a pod
// serves through its termination grace period.
type rolloutFleet struct {
	st *stack.Stack
	// metrics is the gateway's /metrics, where it counts the hand-offs
	// pending.
	metrics string
	// lists are the pools' endpoint lists as set; replicas name each
	// replica's pool and URL, across the pools in order; steps the
	// replicas replaced together, in order.
	lists    map[string][]pools.EndpointConfig
	replicas []rolloutReplica
	steps    [][]int
	started  []*sim.Fleet
}

type rolloutReplica struct {
	pool int
	url  string
	// index is the replica's in the embedded fleet (sim.Fleets).
	index int
}

// newRolloutFleet lists the stack's replicas in the pools' order and the
// steps they are replaced in: one replica a step, or, in a P/D fleet, a
// prefiller and a decoder together, so that while two revisions serve
// each has prefill and decode capacity in proportion, and a decoder
// always finds a prefiller of its revision.
func newRolloutFleet(st *stack.Stack) *rolloutFleet {
	f := &rolloutFleet{st: st, lists: map[string][]pools.EndpointConfig{}}
	var prefill, other []int
	for i, pc := range st.Pools() {
		f.lists[pc.Name] = slices.Clone(pc.Endpoints)
		role := st.Fleet().Pools[i].Role
		for _, ep := range pc.Endpoints {
			if role == sim.RolePrefill {
				prefill = append(prefill, len(f.replicas))
			} else {
				other = append(other, len(f.replicas))
			}
			f.replicas = append(f.replicas, rolloutReplica{pool: i, url: ep.URL, index: len(f.replicas)})
		}
	}
	if len(prefill) == 0 {
		for _, i := range other {
			f.steps = append(f.steps, []int{i})
		}
		return f
	}
	for k := range max(len(prefill), len(other)) {
		var step []int
		if k < len(prefill) {
			step = append(step, prefill[k])
		}
		if k < len(other) {
			step = append(step, other[k])
		}
		f.steps = append(f.steps, step)
	}
	return f
}

// Steps implements rollout.Fleet.
func (f *rolloutFleet) Steps() int { return len(f.steps) }

// Replicas implements rollout.Fleet.
func (f *rolloutFleet) Replicas() int { return len(f.replicas) }

// rolloutWait bounds each step of a replacement.
const rolloutWait = time.Minute

// Replace implements rollout.Fleet: the step's new replicas join and
// take traffic, then its old ones leave together.
func (f *rolloutFleet) Replace(ctx context.Context, step int, rev string) error {
	reg := f.st.Registry()
	var joined []string
	for _, i := range f.steps[step] {
		url, err := f.join(i, rev)
		if err != nil {
			return err
		}
		joined = append(joined, url)
	}
	for _, url := range joined {
		if err := waitRollout(ctx, func() bool {
			ep, ok := reg.Endpoint(hostPort(url))
			return ok && ep.Available()
		}); err != nil {
			return fmt.Errorf("the new replica %s did not take traffic: %w", url, err)
		}
	}
	var old []*pools.Endpoint
	for _, i := range f.steps[step] {
		r := f.replicas[i]
		ep, ok := reg.Endpoint(hostPort(r.url))
		if !ok {
			return fmt.Errorf("replica %d (%s) is not in the fleet", i, r.url)
		}
		old = append(old, ep)
		pc := f.st.Pools()[r.pool]
		f.lists[pc.Name] = slices.DeleteFunc(slices.Clone(f.lists[pc.Name]), func(e pools.EndpointConfig) bool { return e.URL == r.url })
		if err := reg.SetEndpoints(pc.Name, f.lists[pc.Name]); err != nil {
			return err
		}
	}
	for k, i := range f.steps[step] {
		select {
		case <-old[k].Drained():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rolloutWait):
			return fmt.Errorf("replica %d did not drain", i)
		}
		if err := waitRollout(ctx, func() bool { return f.handOffsPending(ctx) == 0 && old[k].OwnInFlight() == 0 }); err != nil {
			return fmt.Errorf("replica %d: hand-offs still pending: %w", i, err)
		}
		if err := f.st.Fleet().Kill(f.replicas[i].index); err != nil {
			return err
		}
		f.replicas[i].url = joined[k]
	}
	return nil
}

// handOffsPending is the gateway's count of sessions whose turns still go
// to a draining replica (turnpike_session_handoffs_pending), or -1 when
// its /metrics cannot be read.
func (f *rolloutFleet) handOffsPending(ctx context.Context) int {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fams, err := scrape.Families(sctx, http.DefaultClient, f.metrics)
	if err != nil {
		return -1
	}
	fam := fams["turnpike_session_handoffs_pending"]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return 0 // a gateway without sessions hands nothing over
	}
	return int(fam.GetMetric()[0].GetGauge().GetValue())
}

// join starts a replica of revision rev beside replica i, in its pool's
// list, and returns its URL.
func (f *rolloutFleet) join(i int, rev string) (string, error) {
	r := f.replicas[i]
	sp := f.st.Fleet().Pools[r.pool]
	pc := f.st.Pools()[r.pool]
	c := sp.Config
	c.Name = fmt.Sprintf("%s-%s-%d", sp.Name, rev, i)
	c.Seed += uint64(1000 + i)
	eng, err := sim.StartFleet(context.Background(), 1, c, "127.0.0.1", 0)
	if err != nil {
		return "", err
	}
	f.started = append(f.started, eng)
	rep := eng.Replicas()[0]
	next := pools.EndpointConfig{URL: rep.URL, KVEvents: rep.KVEvents, Revision: rev}
	if c.Flavor == sim.FlavorSGLang && sp.Role == sim.RolePrefill {
		// Its bootstrap endpoint is on its own port (stack.SimPools).
		_, port, _ := strings.Cut(hostPort(rep.URL), ":")
		next.BootstrapPort, _ = strconv.Atoi(port)
	}
	f.lists[pc.Name] = append(f.lists[pc.Name], next)
	return rep.URL, f.st.Registry().SetEndpoints(pc.Name, f.lists[pc.Name])
}

// Close stops the replicas the rollout started.
func (f *rolloutFleet) Close() {
	for _, e := range f.started {
		e.Close()
	}
}

// waitRollout polls cond until it holds, for at most rolloutWait.
func waitRollout(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(rolloutWait)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// hostPort is a URL's host:port, an endpoint's ID.
func hostPort(u string) string {
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	h, _, _ := strings.Cut(u, "/")
	return h
}

// writeRollout prints the runs side by side, with the rollout's goals: no
// failed turn, no P/D leg across revisions, and the next turn after a
// hand-off no slower than 1.5× the steady state.
func writeRollout(w io.Writer, topology string, modes []string, reps []*rollout.Report, runs [][]*rollout.Report) {
	fmt.Fprintf(w, "rollout: %d replicas (%s topology) replaced by revision %s in %d steps (a P/D fleet's: a prefiller and a decoder at once)", reps[0].Replicas, cmp.Or(topology, sim.TopologyAggregated), reps[0].Options.Revision, len(runs[0][0].Replacements))
	if n := len(runs[0]); n > 1 {
		fmt.Fprintf(w, "; %d runs of each, pooled: counts added up, phase percentiles the runs' medians, the gateway's medians over every run's turns", n)
	}
	fmt.Fprint(w, "\n\n")
	row := func(name string, f func(*rollout.Report) string) {
		fmt.Fprintf(w, "%-36s", name)
		for _, r := range reps {
			fmt.Fprintf(w, " %18s", f(r))
		}
		fmt.Fprintln(w)
	}
	row("", func(r *rollout.Report) string { return modes[slices.Index(reps, r)] })
	for k, name := range []string{"before", "during", "after"} {
		row("turns "+name+" (failed)", func(r *rollout.Report) string {
			p := r.Phases[k]
			return fmt.Sprintf("%d (%d)", p.Turns, p.Failed)
		})
		row("  TTFT p50 / p95 ms", func(r *rollout.Report) string {
			p := r.Phases[k]
			return fmt.Sprintf("%.0f / %.0f", p.TTFTP50, p.TTFTP95)
		})
		row("  cached share", func(r *rollout.Report) string { return fmt.Sprintf("%.1f%%", 100*r.Phases[k].CachedShare) })
	}
	row("hand-offs", func(r *rollout.Report) string { return fmt.Sprintf("%.0f", r.HandOffs) })
	row("warm-ups sent (skipped)", func(r *rollout.Report) string {
		return fmt.Sprintf("%.0f (%.0f)", r.WarmUps["sent"], r.WarmUps["busy"]+r.WarmUps["budget"]+r.WarmUps["failed"])
	})
	row("P/D legs across revisions", func(r *rollout.Report) string { return fmt.Sprintf("%.0f", r.CrossRevisionLegs) })
	row("gateway TTFT p50 before, ms", func(r *rollout.Report) string { return fmt.Sprintf("%.0f", r.SteadyTTFTP50) })
	row("next turn after hand-off p50, ms", func(r *rollout.Report) string {
		return fmt.Sprintf("%.0f (%d)", r.HandOffTTFTP50, r.HandOffTurns)
	})
	row("  over steady state", func(r *rollout.Report) string { return fmt.Sprintf("%.2fx", r.Ratio) })
	if len(runs[0]) > 1 {
		row("  each run's", func(r *rollout.Report) string {
			var each []string
			for _, run := range runs[slices.Index(reps, r)] {
				each = append(each, fmt.Sprintf("%.2f", run.Ratio))
			}
			return strings.Join(each, " ")
		})
	}
	row("other turns during, TTFT p50 ms", func(r *rollout.Report) string { return fmt.Sprintf("%.0f", r.DuringTTFTP50) })
	row("  next turn over those", func(r *rollout.Report) string { return fmt.Sprintf("%.2fx", r.DuringRatio) })
	fmt.Fprintln(w)
	for i, r := range reps {
		for _, rp := range r.Replacements {
			if rp.Error != "" {
				fmt.Fprintf(w, "%s: step %d: %s\n", modes[i], rp.Step, rp.Error)
			}
		}
		met := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		fmt.Fprintf(w, "%s goals: failed turns 0 (%s), P/D legs across revisions 0 (%s)", modes[i], met(r.Failed == 0), met(r.CrossRevisionLegs == 0))
		if modes[i] == RolloutWarmUp {
			fmt.Fprintf(w, ", next turn after hand-off p50 <= 1.5x steady (%s)", met(r.Ratio > 0 && r.Ratio <= 1.5))
		}
		fmt.Fprintln(w)
	}
}

var _ rollout.Fleet = (*rolloutFleet)(nil)
