package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// workloadRollout is --workload rollout: agentic sessions on the embedded
// fleet while each replica is replaced by one of a new revision
// (bench/scenario/rollout).
const workloadRollout = "rollout"

// The rollout's --compare entries: the gateway warms the endpoints its
// sessions are handed to, or does not.
const (
	rolloutWarmUp   = "warm-up"
	rolloutNoWarmUp = "no-warm-up"
)

// benchRollout runs the rollout workload once for each of modes (warm-up,
// no-warm-up), each on a fresh embedded fleet, and prints them side by
// side.
func benchRollout(ctx context.Context, cfg bench.Config, sf *simFlags, modes []string, stdout io.Writer, out string, log *slog.Logger) error {
	for _, m := range modes {
		if m != rolloutWarmUp && m != rolloutNoWarmUp {
			return fmt.Errorf("bench: --workload rollout --compare %q: want %s and/or %s", m, rolloutWarmUp, rolloutNoWarmUp)
		}
	}
	var reps []*rollout.Report
	for _, mode := range modes {
		res, rep, err := runRollout(ctx, cfg, sf, mode, log)
		if err != nil {
			return fmt.Errorf("bench: rollout %s: %w", mode, err)
		}
		r := report.ResultOf(res)
		r.Workload, r.Policy = workloadRollout, mode
		b, err := json.MarshalIndent(struct {
			Result  any             `json:"result"`
			Rollout *rollout.Report `json:"rollout"`
		}{r, rep}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "rollout-"+mode+".json"), b, 0o644); err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	writeRollout(stdout, sf, modes, reps)
	fmt.Fprintf(stdout, "\nresults: %s/rollout-*.json\n", out)
	return nil
}

// runRollout runs the sessions on a fresh embedded gateway and fleet while
// each replica is replaced.
func runRollout(ctx context.Context, cfg bench.Config, sf *simFlags, mode string, log *slog.Logger) (*driver.Result, *rollout.Report, error) {
	dataDir, err := os.MkdirTemp("", "turnpike-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dataDir)
	gcfg := &stack.Config{Addr: "127.0.0.1:0", DataDir: dataDir}
	gcfg.Routing.Policy = sf.policy
	gcfg.Routing.HandOff.DisableWarmUp = mode == rolloutNoWarmUp
	gcfg.EnsureDefaults()
	benchTenants(gcfg, cfg)
	fl, err := sf.fleet()
	if err != nil {
		return nil, nil, err
	}
	benchTTFTTargets(gcfg, sf.timeScale, sf.ttftTarget)
	benchScrapes(gcfg, sf.timeScale)
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
	t := benchTarget(st, sf, fl)
	// The replicas come and go: their /metrics are not the run's.
	t.Replicas, t.EngineMetricsURLs, t.EngineURLs, t.Cost = nil, nil, nil, nil
	return rollout.Run(ctx, cfg, t, fleet, rollout.Options{}, mode)
}

// rolloutFleet replaces the embedded fleet's replicas: a new engine of the
// pool's config joins its pool's list, and once it takes traffic the old
// one leaves the list, drains, and is stopped.
type rolloutFleet struct {
	st *stack.Stack
	// lists are the pools' endpoint lists as set; replicas name each
	// replica's pool and URL, across the pools in order.
	lists    map[string][]pools.EndpointConfig
	replicas []rolloutReplica
	started  []*sim.Fleet
}

type rolloutReplica struct {
	pool int
	url  string
	// index is the replica's in the embedded fleet (sim.Fleets).
	index int
}

// newRolloutFleet lists the stack's replicas in the pools' order, the order
// they are replaced in: a P/D fleet's prefillers first.
func newRolloutFleet(st *stack.Stack) *rolloutFleet {
	f := &rolloutFleet{st: st, lists: map[string][]pools.EndpointConfig{}}
	for i, pc := range st.Pools() {
		f.lists[pc.Name] = slices.Clone(pc.Endpoints)
		for _, ep := range pc.Endpoints {
			f.replicas = append(f.replicas, rolloutReplica{pool: i, url: ep.URL, index: len(f.replicas)})
		}
	}
	return f
}

// Replicas implements rollout.Fleet.
func (f *rolloutFleet) Replicas() int { return len(f.replicas) }

// rolloutWait bounds each step of a replacement.
const rolloutWait = time.Minute

// Replace implements rollout.Fleet.
func (f *rolloutFleet) Replace(ctx context.Context, i int, rev string) error {
	r := f.replicas[i]
	sp := f.st.Fleet().Pools[r.pool]
	pc := f.st.Pools()[r.pool]
	c := sp.Config
	c.Name = fmt.Sprintf("%s-%s-%d", sp.Name, rev, i)
	c.Seed += uint64(1000 + i)
	eng, err := sim.StartFleet(context.Background(), 1, c, "127.0.0.1", 0)
	if err != nil {
		return err
	}
	f.started = append(f.started, eng)
	rep := eng.Replicas()[0]
	next := pools.EndpointConfig{URL: rep.URL, KVEvents: rep.KVEvents, Revision: rev}
	if c.Flavor == sim.FlavorSGLang && sp.Role == sim.RolePrefill {
		// Its bootstrap endpoint is on its own port (stack.SimPools).
		_, port, _ := strings.Cut(hostPort(rep.URL), ":")
		next.BootstrapPort, _ = strconv.Atoi(port)
	}
	reg := f.st.Registry()
	list := append(f.lists[pc.Name], next)
	if err := reg.SetEndpoints(pc.Name, list); err != nil {
		return err
	}
	if err := waitRollout(ctx, func() bool {
		ep, ok := reg.Endpoint(hostPort(rep.URL))
		return ok && ep.Available()
	}); err != nil {
		return fmt.Errorf("the new replica did not take traffic: %w", err)
	}
	old, ok := reg.Endpoint(hostPort(r.url))
	if !ok {
		return fmt.Errorf("replica %d (%s) is not in the fleet", i, r.url)
	}
	list = slices.DeleteFunc(slices.Clone(list), func(e pools.EndpointConfig) bool { return e.URL == r.url })
	f.lists[pc.Name] = list
	if err := reg.SetEndpoints(pc.Name, list); err != nil {
		return err
	}
	select {
	case <-old.Drained():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rolloutWait):
		return errors.New("the old replica did not drain")
	}
	f.replicas[i].url = rep.URL
	return f.st.Fleet().Kill(r.index)
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
func writeRollout(w io.Writer, sf *simFlags, modes []string, reps []*rollout.Report) {
	fmt.Fprintf(w, "rollout: %d replicas (%s topology) replaced one at a time by revision %s\n\n", len(reps[0].Replacements), cmp.Or(sf.topology, sim.TopologyAggregated), reps[0].Options.Revision)
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
	fmt.Fprintln(w)
	for i, r := range reps {
		for _, rp := range r.Replacements {
			if rp.Error != "" {
				fmt.Fprintf(w, "%s: replica %d: %s\n", modes[i], rp.Replica, rp.Error)
			}
		}
		met := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		fmt.Fprintf(w, "%s goals: failed turns 0 (%s), P/D legs across revisions 0 (%s)", modes[i], met(r.Failed == 0), met(r.CrossRevisionLegs == 0))
		if modes[i] == rolloutWarmUp {
			fmt.Fprintf(w, ", next turn after hand-off p50 <= 1.5x steady (%s)", met(r.Ratio > 0 && r.Ratio <= 1.5))
		}
		fmt.Fprintln(w)
	}
}

var _ rollout.Fleet = (*rolloutFleet)(nil)
