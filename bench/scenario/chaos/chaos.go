package chaos

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Round is one round of a chaos schedule: when it kills which
// replicas, and when it restarts them, from the run's start.
type Round struct {
	Kill     time.Duration `json:"kill"`
	Restart  time.Duration `json:"restart"`
	Replicas []int         `json:"replicas"`
}

// Plan yields c's rounds over a fleet of n replicas. Round k kills
// c.AtOnce replicas from k × c.AtOnce on, modulo n, so every replica
// dies in turn. With horizon > 0 (the run's length) a round is yielded
// only when its replicas are back c.RejoinGoal before the horizon, so
// that each restart has a whole breaker timeout to take traffic;
// c.Rounds > 0 caps the count. With neither, rounds never end.
func Plan(c workload.ChaosConfig, n int, horizon time.Duration) iter.Seq[Round] {
	return func(yield func(Round) bool) {
		if n < 1 || c.AtOnce < 1 {
			return
		}
		for k := 0; c.Rounds == 0 || k < c.Rounds; k++ {
			kill := c.FirstKill.D() + time.Duration(k)*c.KillInterval.D()
			rd := Round{Kill: kill, Restart: kill + c.Downtime.D()}
			if horizon > 0 && rd.Restart+c.RejoinGoal.D() > horizon {
				return
			}
			for j := range min(c.AtOnce, n) {
				rd.Replicas = append(rd.Replicas, (k*c.AtOnce+j)%n)
			}
			if !yield(rd) {
				return
			}
		}
	}
}

// Report is what a chaos run did to clients and what the gateway
// did about it.
type Report struct {
	// Rounds are the rounds that ran, as planned.
	Rounds []Round `json:"rounds"`
	// Restarts are the replicas killed, one entry per kill.
	Restarts []Restart `json:"restarts"`
	// Requests is every turn sent; ByAPI splits them by API.
	Requests int                        `json:"requests"`
	ByAPI    map[string]*driver.Summary `json:"by_api"`
	// FailedBeforeStream counts failures before any stream event arrived,
	// by class and the error body's code ("http_503 no-endpoints",
	// "transport"); FailedMidStream those after, by kind: "error_event"
	// (an error event, response.failed, or a stream that ended without
	// its end), "transport" (the connection broke), or the class.
	FailedBeforeStream map[string]int `json:"failed_before_stream,omitempty"`
	FailedMidStream    map[string]int `json:"failed_mid_stream,omitempty"`
	// StreamsStarted got at least one stream event; StreamsCompleted of
	// them ended complete.
	StreamsStarted   int `json:"streams_started"`
	StreamsCompleted int `json:"streams_completed"`
	// Migrations are the gateway's turnpike_stream_migrations_total over
	// the run by result (resumed, not_resumable, failed); Retries its
	// turnpike_upstream_retries_total. GatewayErrors lists failed scrapes.
	Migrations    map[string]float64 `json:"migrations"`
	Retries       float64            `json:"retries"`
	GatewayErrors []string           `json:"gateway_errors,omitempty"`
	// CutStreams estimates the streams cut mid-answer: the migrations the
	// gateway resumed plus the streams clients saw fail mid-answer (a
	// stream resumed twice counts twice). CutCompleted is the resumed
	// share of them.
	CutStreams   int     `json:"cut_streams"`
	CutCompleted float64 `json:"cut_completed"`
	// Goals are the goals, each against what the run got.
	Goals []Goal `json:"goals"`
}

// Restart is one replica's kill and restart.
type Restart struct {
	Replica int `json:"replica"`
	// KilledAt and RestartedAt are from the run's start, in seconds.
	KilledAt    float64 `json:"killed_at_seconds"`
	RestartedAt float64 `json:"restarted_at_seconds"`
	// Serving is whether the restarted replica took traffic before the
	// workload ended; ServingAfter is restart → first sign of it (a
	// request running or tokens counted in its /metrics), in seconds,
	// or how long it was watched in vain.
	Serving      bool    `json:"serving"`
	ServingAfter float64 `json:"serving_after_seconds"`
	// Error is why the kill or the restart failed; "" when both worked.
	Error string `json:"error,omitempty"`
}

// Goal is one goal: what was wanted, what the run got.
type Goal struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	// Met is false when missed, and when the run could not test it.
	Met bool `json:"met"`
}

// migrationResumed is the result label of a migration that resumed the
// stream on another replica.
const migrationResumed = "resumed"

// pollInterval spaces the scrapes that watch a restarted replica for
// traffic: the resolution of Restart.ServingAfter.
const pollInterval = 100 * time.Millisecond

// Run runs the agentic sessions, alternately on chat completions and
// the Responses API, while a second goroutine kills and restarts replicas
// on c's schedule; the gateway's counters are read around it.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	n := len(target.EngineMetricsURLs)
	if target.Replicas == nil || n == 0 {
		return nil, nil, errors.New("bench: chaos needs Target.Replicas and the replicas' EngineMetricsURLs")
	}
	if cfg.Chaos.AtOnce >= n {
		return nil, nil, fmt.Errorf("bench: chaos.at_once %d: want fewer than the fleet's %d replicas", cfg.Chaos.AtOnce, n)
	}
	gwURL := target.GatewayMetrics()
	var gwErrs []string
	before, err := scrape.ScrapeGateway(ctx, gwURL)
	if err != nil {
		gwErrs = append(gwErrs, err.Error())
	}
	sessions := sessionsOf(cfg)
	var restarts []*Restart
	var rounds []Round
	res, samples := driver.Measure(ctx, cfg, target, label, len(sessions)*cfg.Agentic.TurnsPerSession, func(ctx context.Context, dr *driver.Runner) {
		r := runner{dr}
		cctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			rounds, restarts = r.runSchedule(cctx, target.Replicas, target.EngineMetricsURLs)
		}()
		r.Sessions(ctx, sessions)
		stop()
		<-done
	})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	after, err := scrape.ScrapeGateway(sctx, gwURL)
	cancel()
	if err != nil {
		gwErrs = append(gwErrs, err.Error())
	}
	res.API = workload.APIChat + "+" + workload.APIResponses
	rep := reportOf(cfg.Chaos, samples, before, after, rounds, restarts, time.Duration(res.DurationSeconds*float64(time.Second)))
	rep.GatewayErrors = gwErrs
	return res, rep, nil
}

// sessionsOf plans the agentic sessions, even ones on chat
// completions, odd ones on the Responses API.
func sessionsOf(cfg workload.Config) []workload.Session {
	sessions := workload.PlanAgentic(cfg)
	for i := range sessions {
		sessions[i].API = workload.APIResponses
		if i%2 == 0 {
			sessions[i].API = workload.APIChat
		}
	}
	return sessions
}

// runSchedule runs the schedule until it ends or ctx is done, then returns the
// rounds it ran and every kill. A replica down when ctx ends is restarted
// at once, so the fleet is whole for the closing scrapes. Each restart is
// watched for traffic until ctx is done.
func (r runner) runSchedule(ctx context.Context, reps driver.Replicas, urls []string) ([]Round, []*Restart) {
	var rounds []Round
	var restarts []*Restart
	var watchers sync.WaitGroup
	defer watchers.Wait()
	at := func() float64 { return time.Since(r.Started()).Seconds() }
	for rd := range Plan(r.Config().Chaos, len(urls), r.Config().MaxDuration.D()) {
		if !driver.SleepUntil(ctx, r.Started().Add(rd.Kill)) {
			break
		}
		rounds = append(rounds, rd)
		var down []*Restart
		pre := make(map[int]float64)
		for _, i := range rd.Replicas {
			pre[i] = replicaTraffic(ctx, urls[i])
			rs := &Restart{Replica: i, KilledAt: at()}
			restarts = append(restarts, rs)
			if err := reps.Kill(i); err != nil {
				rs.Error = err.Error()
				continue
			}
			down = append(down, rs)
		}
		driver.SleepUntil(ctx, r.Started().Add(rd.Restart))
		for _, rs := range down {
			rs.RestartedAt = at()
			if err := reps.Restart(rs.Replica); err != nil {
				rs.Error = err.Error()
				continue
			}
			watchers.Go(func() {
				rs.Serving, rs.ServingAfter = watchRejoin(ctx, urls[rs.Replica], pre[rs.Replica], time.Now())
			})
		}
		if ctx.Err() != nil {
			break
		}
	}
	return rounds, restarts
}

// replicaTraffic is what a replica's /metrics have counted: prompt plus
// generation tokens; 0 when the scrape fails.
func replicaTraffic(ctx context.Context, url string) float64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := scrape.One(ctx, http.DefaultClient, url)
	if err != nil {
		return 0
	}
	return m.Tokens()
}

// watchRejoin polls a restarted replica's /metrics until it takes traffic
// or ctx is done, and reports whether it did and how long after since.
func watchRejoin(ctx context.Context, url string, pre float64, since time.Time) (bool, float64) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	cl := &http.Client{Timeout: time.Second}
	for {
		if m, err := scrape.One(ctx, cl, url); err == nil && serving(m, pre) {
			return true, time.Since(since).Seconds()
		}
		select {
		case <-ctx.Done():
			return false, time.Since(since).Seconds()
		case <-t.C:
		}
	}
}

// serving reports whether a restarted replica's scrape shows traffic,
// given its token count pre just before the kill. A restarted process
// counts from zero (any tokens are new); an engine that kept its counters
// shows more than pre. Both are "above zero and not pre".
func serving(m scrape.EngineMetrics, pre float64) bool {
	tokens := m.Tokens()
	running, _ := m.Running()
	return running > 0 || (tokens > 0 && tokens != pre)
}

// failureKind sorts a failed sample: before the stream, by class and code;
// mid-stream, as error_event, transport, or its class.
func failureKind(s *driver.Sample) (mid bool, kind string) {
	if !s.Streamed {
		if s.ErrorCode != "" {
			return false, s.Error + " " + s.ErrorCode
		}
		return false, s.Error
	}
	if s.Error == driver.ErrClassStream {
		return true, "error_event"
	}
	return true, s.Error
}

// reportOf counts a chaos run's samples and the gateway's counter
// deltas, and checks them against the goals.
func reportOf(c workload.ChaosConfig, samples []*driver.Sample, before, after scrape.GatewayCounters, rounds []Round, restarts []*Restart, wall time.Duration) *Report {
	rep := &Report{
		Rounds:             rounds,
		Requests:           len(samples),
		ByAPI:              map[string]*driver.Summary{},
		FailedBeforeStream: map[string]int{},
		FailedMidStream:    map[string]int{},
		Migrations:         map[string]float64{},
		Retries:            max(after.Retries-before.Retries, 0),
	}
	for _, rs := range restarts {
		rep.Restarts = append(rep.Restarts, *rs)
	}
	for k, v := range after.Migrations {
		rep.Migrations[k] = max(v-before.Migrations[k], 0)
	}
	for api, group := range driver.GroupBy(samples, func(s *driver.Sample) string { return s.API }) {
		sum := driver.Aggregate(group, wall)
		rep.ByAPI[api] = &sum
	}
	var beforeStream, midStream int
	for _, s := range samples {
		if s.Streamed {
			rep.StreamsStarted++
			if s.Error == "" {
				rep.StreamsCompleted++
			}
		}
		if s.Error == "" {
			continue
		}
		if mid, kind := failureKind(s); mid {
			rep.FailedMidStream[kind]++
			midStream++
		} else {
			rep.FailedBeforeStream[kind]++
			beforeStream++
		}
	}
	resumed := int(rep.Migrations[migrationResumed])
	rep.CutStreams = resumed + midStream
	if rep.CutStreams > 0 {
		rep.CutCompleted = float64(resumed) / float64(rep.CutStreams)
	}

	rep.Goals = append(rep.Goals, Goal{
		Name: "failures before streaming", Want: "0",
		Got: fmt.Sprint(beforeStream), Met: beforeStream == 0,
	})
	cut := Goal{Name: "cut streams completed by migration", Want: ">= 99%", Got: "no stream was cut"}
	if rep.CutStreams > 0 {
		cut.Got = fmt.Sprintf("%s (%d of %d)", fmt.Sprintf("%.1f%%", rep.CutCompleted*100), resumed, rep.CutStreams)
		cut.Met = rep.CutCompleted >= 0.99
	}
	rep.Goals = append(rep.Goals, cut)
	goal := c.RejoinGoal.D().Seconds()
	rejoined := 0
	for _, rs := range rep.Restarts {
		if rs.Error == "" && rs.Serving && rs.ServingAfter <= goal {
			rejoined++
		}
	}
	rejoin := Goal{Name: "restarted replicas serving again", Want: fmt.Sprintf("all within %gs", goal), Got: "no replica was killed"}
	if n := len(rep.Restarts); n > 0 {
		rejoin.Got = fmt.Sprintf("%d of %d", rejoined, n)
		rejoin.Met = rejoined == n
	}
	rep.Goals = append(rep.Goals, rejoin)
	return rep
}

// runner is the driver's runner with the scenario's own ways of sending.
type runner struct{ *driver.Runner }
