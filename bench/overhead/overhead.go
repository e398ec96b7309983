package overhead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Defaults of Config.
const (
	// DefaultBodyBytes is 168 KiB: about 40k tokens of agent
	// history, short of the long sessions agents run today but long enough
	// that a proxy's per-byte costs dominate its per-request ones.
	DefaultBodyBytes   = 168 << 10
	DefaultConcurrency = 16
	DefaultDuration    = 5 * time.Second
	DefaultWarmup      = time.Second
	DefaultRounds      = 3
	DefaultTimeout     = 30 * time.Second
	DefaultWait        = 30 * time.Second
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go runs on.
const clockTicks = 100

// Config describes a proxy-overhead run: closed-loop clients
// posting one large chat body each, to every target in turn. Zero fields
// take the defaults.
type Config struct {
	// BodyBytes is the size of each chat body, in bytes (AgentChatBody).
	// Default 168 KiB.
	BodyBytes int `json:"body_bytes"`
	// Concurrency is the number of clients, each with one request in
	// flight. Default 16.
	Concurrency int `json:"concurrency"`
	// Duration is the measured length of one target's run in one round.
	// Default 5s.
	Duration workload.Duration `json:"duration"`
	// Warmup runs before each measured run and is not counted, so that
	// connections are open and the target's buffers grown. Default 1s.
	Warmup workload.Duration `json:"warmup"`
	// Rounds is how often every target runs; the order of the targets
	// rotates every round, so that drift of the machine falls on all of
	// them alike. Default 3.
	Rounds int `json:"rounds"`
	// Stream asks for streamed answers. Default false.
	Stream bool `json:"stream"`
	// Model is the model requested. Default "bench-model".
	Model string `json:"model"`
	// Seed fixes the bodies' text. Default 1.
	Seed int64 `json:"seed"`
	// Sessions sends an x-session-id header, one session per client, as
	// an agent on chat completions does. Default false.
	Sessions bool `json:"sessions"`
	// Turns is what each client's successive requests are: "next" (the
	// default), each the next turn of the client's session, its history
	// and one new message, as an agent sends them; "repeat", the same
	// body every time; "cold", every request a session of its own, whose
	// opening no earlier request had.
	Turns string `json:"turns"`
	// Timeout bounds one request. Default 30s.
	Timeout workload.Duration `json:"timeout"`
	// Wait bounds how long each target may take, before the first round,
	// to answer a request with 200 (a gateway marks its endpoints healthy
	// after its first probe). Default 30s.
	Wait workload.Duration `json:"wait"`
	// BackendPID is the engine's process, whose CPU time per request is
	// reported beside each target's; 0: not reported.
	BackendPID int `json:"backend_pid,omitempty"`
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	setDefault(&c.BodyBytes, DefaultBodyBytes)
	setDefault(&c.Turns, TurnsNext)
	setDefault(&c.Concurrency, DefaultConcurrency)
	setDefault(&c.Duration, workload.Duration(DefaultDuration))
	setDefault(&c.Warmup, workload.Duration(DefaultWarmup))
	setDefault(&c.Rounds, DefaultRounds)
	setDefault(&c.Model, DefaultInstantModel)
	setDefault(&c.Seed, workload.DefaultSeed)
	setDefault(&c.Timeout, workload.Duration(DefaultTimeout))
	setDefault(&c.Wait, workload.Duration(DefaultWait))
}

// Target is one thing to measure: a base URL, and the process
// whose CPU time is charged to it.
type Target struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// PID is the process serving URL; 0: its CPU is not reported.
	PID int `json:"pid,omitempty"`
}

// ParseTarget reads "name=url[,pid=N]".
func ParseTarget(s string) (Target, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return Target{}, fmt.Errorf("bench: target %q is not name=url[,pid=N]", s)
	}
	t := Target{Name: name}
	url, opts, _ := strings.Cut(rest, ",")
	t.URL = strings.TrimSuffix(url, "/")
	for opt := range strings.SplitSeq(opts, ",") {
		if opt == "" {
			continue
		}
		v, ok := strings.CutPrefix(opt, "pid=")
		pid, err := strconv.Atoi(v)
		if !ok || err != nil || pid <= 0 {
			return Target{}, fmt.Errorf("bench: target %q: option %q is not pid=N", s, opt)
		}
		t.PID = pid
	}
	if !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
		return Target{}, fmt.Errorf("bench: target %q: url must start with http:// or https://", s)
	}
	return t, nil
}

// Run is one target's figures over one measured run, or over all
// of them (TargetResult.Total). CPU figures are seconds per
// successful request; -1 when the process was not given.
type Run struct {
	Round    int     `json:"round"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	driver.Latency
	CPUSecondsPerRequest        float64 `json:"cpu_seconds_per_request"`
	BackendCPUSecondsPerRequest float64 `json:"backend_cpu_seconds_per_request"`
	ClientCPUSecondsPerRequest  float64 `json:"client_cpu_seconds_per_request"`
	FirstError                  string  `json:"first_error,omitempty"`

	// Raw sums behind the ratios, kept to total the rounds.
	cpu, backendCPU, clientCPU float64
	ms                         []float64
}

// TargetResult is one target's runs and their total.
type TargetResult struct {
	Target
	Runs  []Run `json:"runs"`
	Total Run   `json:"total"`
	// RPSMin and RPSMax are the slowest and fastest round.
	RPSMin float64 `json:"rps_min"`
	RPSMax float64 `json:"rps_max"`
}

// Result is a whole run.
type Result struct {
	Config Config `json:"config"`
	// BodyBytes is the mean size of the bodies sent, in bytes; BodyTokens
	// the same over BytesPerToken.
	BodyBytes  int            `json:"body_bytes"`
	BodyTokens int            `json:"body_tokens"`
	Targets    []TargetResult `json:"targets"`
	Started    time.Time      `json:"started"`
}

// Measure measures every target, Rounds times, one at a time. A
// target that never answers 200 within Wait fails the run: figures with
// a broken target in them would read as the proxy's cost.
func Measure(ctx context.Context, cfg Config, targets []Target, progress io.Writer) (*Result, error) {
	cfg.EnsureDefaults()
	if len(targets) == 0 {
		return nil, errors.New("bench: no targets")
	}
	if cfg.Concurrency < 1 || cfg.Rounds < 1 || cfg.Duration <= 0 || cfg.BodyBytes < 1 {
		return nil, errors.New("bench: concurrency, rounds, duration and body size must be positive")
	}
	switch cfg.Turns {
	case TurnsNext, TurnsRepeat, TurnsCold:
	default:
		return nil, fmt.Errorf("bench: turns %q: want %s, %s or %s", cfg.Turns, TurnsNext, TurnsRepeat, TurnsCold)
	}
	bodies := make([][]byte, cfg.Concurrency)
	total := 0
	for i := range bodies {
		bodies[i] = workload.AgentChatBody(cfg.Model, cfg.Stream, cfg.BodyBytes, cfg.Seed, i)
		total += len(bodies[i])
	}
	res := &Result{Config: cfg, BodyBytes: total / len(bodies), Started: time.Now()}
	res.BodyTokens = res.BodyBytes / workload.BytesPerToken
	clients := make([]*http.Client, len(targets))
	for i := range targets {
		clients[i] = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: cfg.Concurrency,
			DisableCompression:  true,
		}}
		defer clients[i].CloseIdleConnections()
		if err := waitReady(ctx, clients[i], targets[i], bodies[0], cfg); err != nil {
			return nil, err
		}
		res.Targets = append(res.Targets, TargetResult{Target: targets[i]})
	}
	for round := range cfg.Rounds {
		for k := range targets {
			i := (k + round) % len(targets)
			run := runTarget(ctx, clients[i], targets[i], bodies, cfg)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			run.Round = round + 1
			if progress != nil {
				fmt.Fprintf(progress, "round %d/%d  %-20s %8.1f req/s  p50 %s ms  errors %d\n",
					round+1, cfg.Rounds, targets[i].Name, run.RPS, report.Millis(run.P50Ms), run.Errors)
			}
			res.Targets[i].Runs = append(res.Targets[i].Runs, run)
		}
	}
	for i := range res.Targets {
		res.Targets[i].total()
	}
	return res, nil
}

func waitReady(ctx context.Context, cl *http.Client, t Target, body []byte, cfg Config) error {
	deadline := time.Now().Add(cfg.Wait.D())
	var last error
	for time.Now().Before(deadline) {
		status, err := post(ctx, cl, t.URL, body, "", cfg, nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %d", status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: target %s (%s) did not answer 200 within %s: %v", t.Name, t.URL, cfg.Wait, last)
}

// runTarget runs the warmup, then the measured run, of one target.
func runTarget(ctx context.Context, cl *http.Client, t Target, bodies [][]byte, cfg Config) Run {
	load(ctx, cl, t, bodies, cfg, cfg.Warmup.D())
	cpu0, backend0, self0 := cpuSeconds(t.PID), cpuSeconds(cfg.BackendPID), cpuSeconds(os.Getpid())
	start := time.Now()
	run := load(ctx, cl, t, bodies, cfg, cfg.Duration.D())
	run.Seconds = time.Since(start).Seconds()
	cpu1, backend1, self1 := cpuSeconds(t.PID), cpuSeconds(cfg.BackendPID), cpuSeconds(os.Getpid())
	run.cpu, run.backendCPU, run.clientCPU = cpu1-cpu0, backend1-backend0, self1-self0
	if t.PID == 0 || cpu0 < 0 || cpu1 < 0 {
		run.cpu = -1
	}
	if cfg.BackendPID == 0 || backend0 < 0 || backend1 < 0 {
		run.backendCPU = -1
	}
	run.finish()
	return run
}

// load keeps cfg.Concurrency requests in flight for d and collects their
// latencies. Each client sends its own body, as each agent session has
// its own history.
func load(ctx context.Context, cl *http.Client, t Target, bodies [][]byte, cfg Config, d time.Duration) Run {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var run Run
	var wg sync.WaitGroup
	for c := range cfg.Concurrency {
		wg.Go(func() {
			session := ""
			if cfg.Sessions {
				session = "overhead-" + strconv.Itoa(c)
			}
			buf := make([]byte, 32<<10)
			lat := make([]float64, 0, 4096)
			var errs int
			var first error
			var body []byte
			for n := 0; ctx.Err() == nil; n++ {
				body = turnBody(body[:0], bodies[c], cfg.Turns, c, n)
				start := time.Now()
				status, err := post(ctx, cl, t.URL, body, session, cfg, buf)
				if ctx.Err() != nil {
					// Cut off by the end of the run: neither a figure nor an error.
					break
				}
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d", status)
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					// A target that fails at once must not spin the
					// client, which shares the machine with it.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat = append(lat, float64(time.Since(start))/float64(time.Millisecond))
			}
			mu.Lock()
			run.ms = append(run.ms, lat...)
			run.Errors += errs
			if first != nil && run.FirstError == "" {
				run.FirstError = first.Error()
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	run.Requests = len(run.ms)
	return run
}

var doneEvent = []byte("data: [DONE]")

// post sends one chat completion and reads the whole answer; a streamed
// answer must end with the [DONE] event. buf is the copy buffer (nil: one
// is allocated).
func post(ctx context.Context, cl *http.Client, url string, body []byte, session string, cfg Config, buf []byte) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if buf == nil {
		buf = make([]byte, 32<<10)
	}
	tail := tailWriter{}
	if _, err := io.CopyBuffer(&tail, resp.Body, buf); err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusOK && cfg.Stream && !bytes.Contains(tail.last(), doneEvent) {
		return resp.StatusCode, errors.New("stream ended without [DONE]")
	}
	return resp.StatusCode, nil
}

// tailWriter discards what it is written but its last bytes.
type tailWriter struct {
	b [32]byte
	n int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return len(p), nil
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
	return len(p), nil
}

func (t *tailWriter) last() []byte { return t.b[:t.n] }

// cpuSeconds is a process's user and system CPU time so far, from
// /proc/<pid>/stat; -1 when pid is 0 or unreadable.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a stat line.
// The command name (field 2) is in parentheses and may hold spaces, so
// fields are counted from the last ')'.
func parseStatCPU(b []byte) float64 {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so utime is f[11] and stime f[12].
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return float64(u+s) / clockTicks
}

// finish computes a run's ratios and latency summary from its raw sums.
func (r *Run) finish() {
	r.Requests = len(r.ms)
	if r.Seconds > 0 {
		r.RPS = float64(r.Requests) / r.Seconds
	}
	r.Latency = driver.Summarize(r.ms)
	per := func(v float64) float64 {
		if v < 0 {
			return -1
		}
		if r.Requests == 0 {
			return 0
		}
		return v / float64(r.Requests)
	}
	r.CPUSecondsPerRequest = per(r.cpu)
	r.BackendCPUSecondsPerRequest = per(r.backendCPU)
	r.ClientCPUSecondsPerRequest = per(r.clientCPU)
}

// total sums the runs: requests over seconds, latencies of all requests,
// CPU over requests.
func (t *TargetResult) total() {
	tot := Run{}
	for i, r := range t.Runs {
		tot.ms = append(tot.ms, r.ms...)
		tot.Errors += r.Errors
		tot.Seconds += r.Seconds
		tot.cpu = sumKnown(tot.cpu, r.cpu, i)
		tot.backendCPU = sumKnown(tot.backendCPU, r.backendCPU, i)
		tot.clientCPU = sumKnown(tot.clientCPU, r.clientCPU, i)
		if tot.FirstError == "" {
			tot.FirstError = r.FirstError
		}
		if i == 0 || r.RPS < t.RPSMin {
			t.RPSMin = r.RPS
		}
		if r.RPS > t.RPSMax {
			t.RPSMax = r.RPS
		}
	}
	tot.finish()
	t.Total = tot
}

// sumKnown adds v to sum, where -1 (not measured) in any run makes the
// total -1.
func sumKnown(sum, v float64, i int) float64 {
	if (i > 0 && sum < 0) || v < 0 {
		return -1
	}
	return sum + v
}

// overheadTable is the summary: one row per target, over all rounds.
func overheadTable(r *Result) *report.Table {
	t := &report.Table{Header: []string{"target", "req/s", "req/s per round", "p50 ms", "p90 ms", "p99 ms", "requests", "errors", "CPU ms/req", "engine CPU ms/req", "client CPU ms/req"}}
	cpu := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", v*1000)
	}
	for _, tr := range r.Targets {
		s := tr.Total
		t.Add(tr.Name, fmt.Sprintf("%.1f", s.RPS), fmt.Sprintf("%.0f–%.0f", tr.RPSMin, tr.RPSMax),
			report.Millis(s.P50Ms), report.Millis(s.P90Ms), report.Millis(s.P99Ms), strconv.Itoa(s.Requests), strconv.Itoa(s.Errors),
			cpu(s.CPUSecondsPerRequest), cpu(s.BackendCPUSecondsPerRequest), cpu(s.ClientCPUSecondsPerRequest))
	}
	return t
}

func (r *Result) heading() string {
	mode := "non-stream"
	if r.Config.Stream {
		mode = "stream"
	}
	return fmt.Sprintf("proxy overhead: %s chat, %d-byte bodies (~%d tokens), %d clients, %d rounds × %s per target (+%s warmup), on %d CPUs\n",
		mode, r.BodyBytes, r.BodyTokens, r.Config.Concurrency, r.Config.Rounds, r.Config.Duration, r.Config.Warmup, runtime.NumCPU())
}

// WriteText prints the summary table for a terminal.
func (r *Result) WriteText(w io.Writer) error {
	if _, err := io.WriteString(w, r.heading()); err != nil {
		return err
	}
	return overheadTable(r).WriteText(w)
}

// WriteMarkdown prints the summary table as markdown.
func (r *Result) WriteMarkdown(w io.Writer) error {
	if _, err := io.WriteString(w, r.heading()+"\n"); err != nil {
		return err
	}
	return overheadTable(r).WriteMarkdown(w)
}

// The kinds of Config.Turns.
const (
	TurnsNext   = "next"
	TurnsRepeat = "repeat"
	TurnsCold   = "cold"
)

// turnCounter makes every cold session's opening one of its own, across
// targets and rounds.
var turnCounter atomic.Int64

// turnBody appends to dst the n-th request of client's session, made from
// its AgentChatBody as turns says.
func turnBody(dst, body []byte, turns string, client, n int) []byte {
	switch turns {
	case TurnsRepeat:
		return append(dst, body...)
	case TurnsCold:
		// The session's name opens its first user message.
		at := bytes.Index(body, []byte(`"content":"Session `))
		if at < 0 {
			return append(dst, body...)
		}
		at += len(`"content":"`)
		dst = append(dst, body[:at]...)
		dst = fmt.Appendf(dst, "Cold %d. ", turnCounter.Add(1))
		return append(dst, body[at:]...)
	}
	end := bytes.LastIndex(body, []byte(`],"tools":`))
	if end < 0 {
		return append(dst, body...)
	}
	dst = append(dst, body[:end]...)
	dst = fmt.Appendf(dst, `,{"role":"user","content":"Turn %d of client %d: go on."}`, n, client)
	return append(dst, body[end:]...)
}

// setDefault sets *p to v when it is zero.
func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
