package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/scenario/agents"
	"github.com/turnpike-gateway/turnpike/bench/scenario/isolation"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// smallAgentic is a quick agentic run: a handful of sessions, short gaps.
func smallAgentic(api string) workload.Config {
	return workload.Config{
		API:      api,
		Progress: io.Discard,
		Agentic: workload.AgenticConfig{
			Sessions: 6, TurnsPerSession: 4, Tenants: 2,
			SystemPromptTokens: 200, ToolSchemaTokens: 100, ToolResultTokens: 50, UserTurnTokens: 10,
			OutputTokens: 5, HumanTurnShare: 0.3,
			ThinkTime: workload.Duration(20 * time.Millisecond), LoopGap: workload.Duration(5 * time.Millisecond),
			Waves: 2, WaveInterval: workload.Duration(20 * time.Millisecond),
		},
		KeepSamples: true,
	}
}

func TestRunAgenticResponses(t *testing.T) {
	f := newFakeGateway(t)
	cfg := smallAgentic(workload.APIResponses)
	cfg.TenantKeys = []string{"key-t0"}
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	s := res.Total
	if s.Requests != 24 || s.Succeeded != 24 || s.Errors != 0 {
		t.Fatalf("requests/succeeded/errors = %d/%d/%d, want 24/24/0 (%v)", s.Requests, s.Succeeded, s.Errors, s.ErrorsByClass)
	}
	if s.OutputTokens != 24*5 {
		t.Errorf("output tokens = %d, want %d", s.OutputTokens, 24*5)
	}
	if s.TTFT.Count != 24 || !(s.TTFT.P50Ms > 0) || s.TTFT.P50Ms > s.E2E.P50Ms {
		t.Errorf("TTFT %+v against E2E %+v: want 24 positive TTFTs below E2E", s.TTFT, s.E2E)
	}
	if s.ITL.Count != 24*4 || !(s.ITL.P50Ms > 0) {
		t.Errorf("ITL %+v: want 4 gaps per request", s.ITL)
	}
	if !(s.CachedTokenShare > 0 && s.CachedTokenShare < 1) {
		t.Errorf("cached token share = %v, want in (0,1)", s.CachedTokenShare)
	}
	if res.Engines == nil || res.Engines.Flavor != "vllm" || res.Engines.Engines != 1 {
		t.Fatalf("engines = %+v", res.Engines)
	}
	if got, want := res.Engines.HitRate, s.CachedTokenShare; abs(got-want) > 1e-9 {
		t.Errorf("engine hit rate = %v, want the fake's %v", got, want)
	}
	if len(res.ByTenant) != 2 || res.ByBand[workload.BandUnset] == nil {
		t.Errorf("by tenant %v, by band %v", keys(res.ByTenant), keys(res.ByBand))
	}

	// Every turn chains to the previous turn's response, and sends only its
	// new items.
	bySession := map[string][]driver.Sample{}
	for _, x := range res.Samples {
		bySession[x.Session] = append(bySession[x.Session], x)
	}
	if len(bySession) != 6 {
		t.Fatalf("sessions = %d, want 6", len(bySession))
	}
	for id, ss := range bySession {
		slices.SortFunc(ss, func(a, b driver.Sample) int { return a.Turn - b.Turn })
		for i, x := range ss {
			want := ""
			if i > 0 {
				want = ss[i-1].ResponseID
			}
			if x.PreviousResponseID != want || x.ResponseID == "" {
				t.Errorf("session %s turn %d: previous_response_id %q, response %q; want previous %q", id, i, x.PreviousResponseID, x.ResponseID, want)
			}
		}
	}
	for _, r := range f.requests() {
		if r.PreviousID == "" && r.Items != 2 {
			t.Errorf("opening turn sent %d items, want system + user", r.Items)
		}
		if r.PreviousID != "" && r.Items > 2 {
			t.Errorf("chained turn sent %d items, want only the new ones", r.Items)
		}
		if r.Session != "" {
			t.Errorf("responses turn sent x-session-id %q; the chain names the session", r.Session)
		}
		if r.MaxTokens != 5 {
			t.Errorf("max_output_tokens = %d, want 5", r.MaxTokens)
		}
		if r.Auth != "Bearer key-t0" && r.Auth != "Bearer key-default" {
			t.Errorf("authorization %q", r.Auth)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("result does not marshal: %v", err)
	}
}

func TestRunAgenticChat(t *testing.T) {
	f := newFakeGateway(t)
	cfg := smallAgentic(workload.APIChat)
	cfg.Priority = workload.BandStandard
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Succeeded != 24 || res.Total.OutputTokens != 120 || res.Total.TTFT.Count != 24 {
		t.Fatalf("summary %+v", res.Total)
	}
	if res.ByBand[workload.BandStandard] == nil || res.ByBand[workload.BandStandard].Requests != 24 {
		t.Errorf("by band %v, want all standard", keys(res.ByBand))
	}
	// The history grows every turn of a session, and carries the session id.
	items := map[string][]int{}
	for _, r := range f.requests() {
		if r.Session == "" || r.Priority != workload.BandStandard || !r.IgnoreEOS || r.MaxTokens != 5 {
			t.Fatalf("request %+v: want session id, priority, ignore_eos, max_tokens", r)
		}
		items[r.Session] = append(items[r.Session], r.Items)
	}
	for id, n := range items {
		if len(n) != 4 || !slices.IsSorted(n) || n[0] != 2 || n[3] <= n[0] {
			t.Errorf("session %s message counts %v, want growing from 2", id, n)
		}
	}
}

func TestRunTrace(t *testing.T) {
	f := newFakeGateway(t)
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	lines := `{"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 50, "input_length": 600, "output_length": 4, "hash_ids": [1, 3]}

{"timestamp": 100, "input_length": 100, "output_length": 2, "hash_ids": [9]}
{"timestamp": 9000, "input_length": 100, "output_length": 2, "hash_ids": [9]}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := workload.Config{Workload: workload.WorkloadTrace, Progress: io.Discard, Trace: workload.TraceConfig{Path: path, TimeScale: 0.5, WindowEnd: workload.Duration(time.Second)}}
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Succeeded != 3 || res.Total.OutputTokens != 9 || res.API != workload.APIChat {
		t.Fatalf("summary %+v api %s", res.Total, res.API)
	}
	if res.ByTenant["trace"] == nil {
		t.Errorf("tenants %v", keys(res.ByTenant))
	}
	for _, r := range f.requests() {
		if r.Path != "/v1/chat/completions" || r.Session != "" || r.Items != 1 {
			t.Errorf("trace request %+v: want one chat message without session id", r)
		}
	}
}

func TestRunShedAndErrors(t *testing.T) {
	f := newFakeGateway(t)
	f.shedBand = workload.BandBackground
	cfg := smallAgentic(workload.APIResponses)
	cfg.Priority = workload.BandBackground
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	s := res.Total
	if s.Requests != 24 || s.Shed != 24 || s.ErrorsByClass["http_429"] != 24 {
		t.Fatalf("summary %+v", s)
	}
	if s.Sheds[workload.BandBackground]["saturated"] != 24 {
		t.Errorf("sheds %v, want background/saturated", s.Sheds)
	}
	var b bytes.Buffer
	if err := report.WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "shed[background/saturated]=24") {
		t.Errorf("text report lacks the sheds:\n%s", b.String())
	}
}

func TestRunIsolation(t *testing.T) { testRunIsolation(t, nil) }

// The tenants sent from processes of their own: each spec and each
// request crosses a JSON boundary, as between `turnpike bench` and
// `turnpike bench tenant`.
func TestRunIsolationTenantsApart(t *testing.T) {
	var mu sync.Mutex
	ran := map[string]int{}
	apart := overJSON(t, isolation.RunTenant, func(spec driver.TenantSpec, b []byte) {
		if bytes.Contains(b, []byte("key-a")) != (spec.Tenant == isolation.TenantA) || bytes.Contains(b, []byte("key-b")) != (spec.Tenant == isolation.TenantB) {
			t.Errorf("tenant %s's spec carries another tenant's key: %s", spec.Tenant, b)
		}
	}, func(spec driver.TenantSpec, l driver.TenantLine) {
		mu.Lock()
		ran[spec.Tenant+"/"+l.Request.Tenant]++
		mu.Unlock()
	})
	testRunIsolation(t, apart)
	if ran["A/A"] == 0 || ran["B/B"] == 0 || len(ran) != 2 {
		t.Errorf("requests by process/tenant: %v", ran)
	}
}

// overJSON runs a tenant's spec through run as `turnpike bench tenant`
// would, the spec and each line of its report crossing a JSON boundary:
// sent sees the spec as it arrived and its JSON, got each request's line
// as it came back (one at a time).
func overJSON(t *testing.T, run func(context.Context, driver.TenantSpec, func(driver.TenantLine)) error,
	sent func(driver.TenantSpec, []byte), got func(driver.TenantSpec, driver.TenantLine)) driver.TenantRunner {
	return func(ctx context.Context, spec driver.TenantSpec, record func(driver.TenantLine)) error {
		b, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		var in driver.TenantSpec
		if err := json.Unmarshal(b, &in); err != nil {
			return err
		}
		sent(in, b)
		return run(ctx, in, func(l driver.TenantLine) {
			b, err := json.Marshal(l)
			if err != nil {
				t.Error(err)
				return
			}
			var back driver.TenantLine
			if err := json.Unmarshal(b, &back); err != nil || back.Request == nil {
				t.Errorf("line %s: %v", b, err)
				return
			}
			got(in, back)
			record(back)
		})
	}
}

func testRunIsolation(t *testing.T, tenants driver.TenantRunner) {
	f := newFakeGateway(t)
	f.shedBand = workload.BandBackground
	cfg := workload.Config{
		Workload: workload.WorkloadIsolation, Progress: io.Discard, KeepSamples: true,
		Agentic: workload.AgenticConfig{SystemPromptTokens: 50, ToolSchemaTokens: 10, ToolResultTokens: 20, OutputTokens: 3,
			TurnsPerSession: 3, LoopGap: workload.Duration(5 * time.Millisecond)},
		Isolation: workload.IsolationConfig{KeyA: "key-a", KeyB: "key-b", Duration: workload.Duration(600 * time.Millisecond), Rounds: 2, ARate: 20,
			FleetSlots: 2, BurstMultiple: 2, BPriority: workload.BandBackground,
			// A pause shorter than B's requests: A's next stretch alone must wait for them.
			Settle: 0.001},
	}
	target := f.target()
	target.Tenant = tenants
	res, err := Run(context.Background(), cfg, target)
	if err != nil {
		t.Fatal(err)
	}
	iso := res.Isolation
	if iso == nil || iso.Baseline == nil {
		t.Fatal("no isolation report")
	}
	if iso.BLoops != 4 || iso.BaselineA.Succeeded == 0 || iso.BurstA.Succeeded == 0 || iso.BurstA.Errors != 0 {
		t.Errorf("report %+v", iso)
	}
	// A's stretches alone start only once the burst before has ended, and
	// no turn of B's counts in them.
	if len(iso.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(iso.Rounds))
	}
	for k, rd := range iso.Rounds {
		if !(rd.AloneFromSeconds <= rd.AloneToSeconds && rd.AloneToSeconds <= rd.BurstFromSeconds && rd.BurstFromSeconds < rd.BurstToSeconds) {
			t.Errorf("round %d: stretches out of order: %+v", k, rd)
		}
		if k > 0 && rd.AloneFromSeconds < iso.Rounds[k-1].BurstToSeconds+iso.Rounds[k-1].BDrainSeconds {
			t.Errorf("round %d: A alone from %.3fs, before burst %d ended at %.3fs", k, rd.AloneFromSeconds, k-1, iso.Rounds[k-1].BurstToSeconds+iso.Rounds[k-1].BDrainSeconds)
		}
	}
	alone, under := 0, 0
	for _, rd := range iso.Rounds {
		alone, under = alone+rd.AloneTurns, under+rd.BurstTurns
	}
	if alone != iso.BaselineA.Requests || under != iso.BurstA.Requests || iso.Rounds[0].AloneTurns == 0 {
		t.Errorf("A's turns by round add up to %d alone and %d under the burst, want %d and %d; round 1 alone %d",
			alone, under, iso.BaselineA.Requests, iso.BurstA.Requests, iso.Rounds[0].AloneTurns)
	}
	// No request of B's was in flight during a stretch of A alone.
	for _, smp := range res.Samples {
		if smp.Tenant != isolation.TenantB {
			continue
		}
		start, end := smp.Start.Seconds(), (smp.Start + smp.E2E).Seconds()
		for k, rd := range iso.Rounds {
			if start < rd.AloneToSeconds && end > rd.AloneFromSeconds {
				t.Errorf("B's request of %.3f–%.3fs overlaps A's stretch alone %d [%.3f, %.3f)", start, end, k, rd.AloneFromSeconds, rd.AloneToSeconds)
			}
		}
	}
	if iso.BurstB.Shed == 0 || iso.Sheds[workload.BandBackground]["saturated"] != iso.BurstB.Shed {
		t.Errorf("B shed %d, sheds %v", iso.BurstB.Shed, iso.Sheds)
	}
	if !(iso.BaselineAP99TTFTMs > 0 && iso.BurstAP99TTFTMs > 0 && iso.P99TTFTRatio > 0) {
		t.Errorf("p99 TTFT %v → %v (%v)", iso.BaselineAP99TTFTMs, iso.BurstAP99TTFTMs, iso.P99TTFTRatio)
	}
	for _, r := range f.requests() {
		switch r.Auth {
		case "Bearer key-a":
			if r.Priority != workload.BandInteractive {
				t.Errorf("A sent priority %q", r.Priority)
			}
		case "Bearer key-b":
			if r.Priority != workload.BandBackground {
				t.Errorf("B sent priority %q", r.Priority)
			}
		default:
			t.Errorf("unexpected authorization %q", r.Auth)
		}
	}
	// The verdict is printed by round, alone and in a comparison.
	var text bytes.Buffer
	if err := report.WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	cmp := report.Compared([]*report.Result{res}, nil, 1)
	if err := cmp.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(text.String(), "A's p99 TTFT by round"); got != 2 {
		t.Errorf("the verdict by round printed %d times, want 2 (run, comparison):\n%s", got, text.String())
	}
	var html bytes.Buffer
	if err := report.WriteHTML(&html, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "Isolation") {
		t.Error("HTML report lacks the isolation section")
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatal(err)
	}
}

func TestCompare(t *testing.T) {
	var started, stopped []string
	start := func(ctx context.Context, policy string) (driver.Target, func() error, error) {
		f := newFakeGateway(t)
		if policy == "prefix-aware" {
			f.tokenGap = 0
		}
		started = append(started, policy)
		return f.target(), func() error { stopped = append(stopped, policy); f.srv.Close(); return nil }, nil
	}
	cfg := smallAgentic(workload.APIResponses)
	cfg.KeepSamples = false
	cmp, err := Compare(context.Background(), cfg, []string{"prefix-aware", report.BaselinePolicy}, 1, start)
	if err != nil {
		t.Fatal(err)
	}
	if cmp.Repeat != 0 || cmp.Medians != nil || cmp.Results[0].Run != 0 || cmp.Results[0].Name() != "prefix-aware" {
		t.Errorf("a single run: repeat %d, medians %v, run %d named %q", cmp.Repeat, cmp.Medians, cmp.Results[0].Run, cmp.Results[0].Name())
	}
	if !slices.Equal(started, stopped) || len(started) != 2 {
		t.Errorf("started %v, stopped %v", started, stopped)
	}
	if cmp.Baseline != report.BaselinePolicy || len(cmp.Ratios) != 2 {
		t.Fatalf("baseline %q, ratios %+v", cmp.Baseline, cmp.Ratios)
	}
	for _, q := range cmp.Ratios {
		if q.Policy == report.BaselinePolicy && (q.TTFTP50ReductionPct != 0 || q.ThroughputX != 1 || q.HitRateX != 1) {
			t.Errorf("baseline against itself: %+v", q)
		}
	}
	for name, write := range map[string]func(io.Writer) error{"text": cmp.WriteText, "markdown": cmp.WriteMarkdown, "html": cmp.WriteHTML} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, want := range []string{"prefix-aware", report.BaselinePolicy} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s report lacks %q", name, want)
			}
		}
		if name == "html" && strings.Count(b.String(), "<svg") < 4 {
			t.Errorf("html report has %d plots, want 4", strings.Count(b.String(), "<svg"))
		}
		if name == "markdown" && !strings.Contains(b.String(), "|---|") {
			t.Errorf("markdown report has no table:\n%s", b.String())
		}
	}
	if _, err := json.Marshal(cmp); err != nil {
		t.Fatal(err)
	}

	failing := func(ctx context.Context, policy string) (driver.Target, func() error, error) {
		return driver.Target{}, nil, errors.New("no fleet")
	}
	if _, err := Compare(context.Background(), cfg, []string{report.BaselinePolicy}, 1, failing); err == nil || !strings.Contains(err.Error(), "no fleet") {
		t.Errorf("failing start: err = %v", err)
	}
	if _, err := Compare(context.Background(), cfg, []string{report.BaselinePolicy}, 0, start); err == nil {
		t.Error("repeat 0 accepted")
	}
}

// A repeated comparison runs the policies in turn, the order reversed
// every other time, each run on a fresh stack, and sets every run against
// the baseline's run of the same repetition.
func TestCompareRepeat(t *testing.T) {
	var started []string
	start := func(ctx context.Context, policy string) (driver.Target, func() error, error) {
		f := newFakeGateway(t)
		started = append(started, policy)
		return f.target(), func() error { f.srv.Close(); return nil }, nil
	}
	cfg := smallAgentic(workload.APIResponses)
	cfg.KeepSamples = false
	cmp, err := Compare(context.Background(), cfg, []string{report.BaselinePolicy, "prefix-aware"}, 3, start)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{report.BaselinePolicy, "prefix-aware", "prefix-aware", report.BaselinePolicy, report.BaselinePolicy, "prefix-aware"}
	if !slices.Equal(started, want) {
		t.Errorf("started %v, want %v", started, want)
	}
	if cmp.Repeat != 3 || len(cmp.Results) != 6 || len(cmp.Ratios) != 6 {
		t.Fatalf("repeat %d, %d results, %d ratios", cmp.Repeat, len(cmp.Results), len(cmp.Ratios))
	}
	for i, r := range cmp.Results {
		if wantRun := i/2 + 1; r.Run != wantRun || r.Policy != started[i] {
			t.Errorf("result %d: %s run %d, want %s run %d", i, r.Policy, r.Run, started[i], wantRun)
		}
		if q := cmp.Ratios[i]; q.Policy != r.Name() || r.Policy == report.BaselinePolicy && q.ThroughputX != 1 {
			t.Errorf("ratio %d: %+v for %s", i, q, r.Name())
		}
	}
	if len(cmp.Medians) != 2 || cmp.Medians[0].Policy != report.BaselinePolicy || cmp.Medians[1].Runs != 3 || cmp.Medians[1].Compared["ttft_p50"] != 3 {
		t.Fatalf("medians %+v", cmp.Medians)
	}
	for name, write := range map[string]func(io.Writer) error{"text": cmp.WriteText, "markdown": cmp.WriteMarkdown, "html": cmp.WriteHTML} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wants := []string{"prefix-aware #3", report.BaselinePolicy + " #2"}
		if name != "html" {
			wants = append(wants, "edian of 3 runs")
		}
		for _, want := range wants {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s report lacks %q:\n%s", name, want, b.String())
			}
		}
	}
}

// TestRunCancel: cancelling the run's context stops it, requests in flight
// included, and returns what was measured. Each session's second turn is
// sent only once its opening turn has ended, and the fake holds it
// unanswered: when all six have arrived, the run can go no further by
// itself, and the test cancels it there.
func TestRunCancel(t *testing.T) {
	f := newFakeGateway(t)
	f.holdChained = make(chan fakeRequest, 6)
	cfg := smallAgentic(workload.APIResponses)
	cfg.Agentic.HumanTurnShare = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		res *report.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, cfg, f.target())
		done <- ran{res, err}
	}()
	for range cfg.Agentic.Sessions {
		select {
		case <-f.holdChained:
		case r := <-done:
			t.Fatalf("run ended before it was cancelled: %v", r.err)
		}
	}
	cancel()
	var r ran
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled run did not return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Total.Succeeded != 6 {
		t.Errorf("succeeded %d, want the 6 opening turns", r.res.Total.Succeeded)
	}
	if n := len(f.requests()); n != 12 {
		t.Errorf("the fake saw %d requests, want 12: the opening turns and the held ones, nothing after the cancel", n)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	_, err := Run(context.Background(), workload.Config{API: "grpc", Rate: -1, Progress: io.Discard}, driver.Target{BaseURL: "http://x"})
	if err == nil || !strings.Contains(err.Error(), "api") || !strings.Contains(err.Error(), "rate") {
		t.Errorf("err = %v, want both problems", err)
	}
	if _, err := Run(context.Background(), workload.Config{Progress: io.Discard}, driver.Target{}); err == nil {
		t.Error("empty base URL accepted")
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// TestRunAgenticClosedLoop runs sessions closed loop: never more than
// Concurrency at once, all of them in the end, each turn after the last.
func TestRunAgenticClosedLoop(t *testing.T) {
	f := newFakeGateway(t)
	cfg := smallAgentic(workload.APIResponses)
	cfg.Agentic.Concurrency = 2
	cfg.Agentic.TimeScale = 0.5
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Total; s.Requests != 24 || s.Succeeded != 24 {
		t.Fatalf("requests/succeeded = %d/%d, want 24/24", s.Requests, s.Succeeded)
	}
	type span struct{ from, to time.Duration }
	spans := map[string]*span{}
	for _, s := range res.Samples {
		sp := spans[s.Session]
		if sp == nil {
			sp = &span{from: s.Start, to: s.Start + s.E2E}
			spans[s.Session] = sp
		}
		sp.from, sp.to = min(sp.from, s.Start), max(sp.to, s.Start+s.E2E)
	}
	if len(spans) != 6 {
		t.Fatalf("%d sessions ran, want 6", len(spans))
	}
	for name, a := range spans {
		overlapping := 0
		for _, b := range spans {
			if b.from <= a.from && a.from < b.to {
				overlapping++
			}
		}
		if overlapping > 2 {
			t.Errorf("session %s started with %d sessions running (itself included), want at most 2", name, overlapping)
		}
	}
	if res.Ideal == nil || res.Ideal.Method != driver.IdealWorkload || !(res.Ideal.HitRate > 0) {
		t.Errorf("ideal = %+v, want a workload ideal above 0", res.Ideal)
	}
}

func TestPlanAgenticTimeScale(t *testing.T) {
	cfg := smallAgentic(workload.APIResponses)
	cfg.EnsureDefaults()
	base := workload.PlanAgentic(cfg)
	cfg.Agentic.TimeScale = 0.1
	scaled := workload.PlanAgentic(cfg)
	for i := range base {
		if got, want := scaled[i].Start, time.Duration(float64(base[i].Start)*0.1); absDur(got-want) > time.Microsecond {
			t.Errorf("session %d starts at %v, want %v", i, got, want)
		}
		for j := range base[i].Turns {
			if got, want := scaled[i].Turns[j].Delay, time.Duration(float64(base[i].Turns[j].Delay)*0.1); absDur(got-want) > time.Microsecond {
				t.Errorf("session %d turn %d delay %v, want %v", i, j, got, want)
			}
		}
	}
	cfg.Agentic.Concurrency = 3
	for _, s := range workload.PlanAgentic(cfg) {
		if s.Start != 0 {
			t.Errorf("closed loop: session %s starts at %v, want 0", s.ID, s.Start)
		}
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

// The agents sent from a process of their own: the spec and each turn
// cross a JSON boundary, as between `turnpike bench` and `turnpike bench
// tenant`; the agents' process is told the run's start and when to stop
// sending, and every turn it sends is a turn of the run's phases.
func TestRunAgentsApart(t *testing.T) {
	f := newFakeGateway(t)
	cfg := workload.Config{Workload: workload.WorkloadAgents, Progress: io.Discard, KeepSamples: true}
	cfg.Agents.Phases = []int{1, 2}
	cfg.Agents.PhaseDuration = workload.Duration(20 * time.Second)
	cfg.Agentic.TimeScale = 0.03
	var spec driver.TenantSpec
	lines := 0
	apart := overJSON(t, RunTenant, func(s driver.TenantSpec, _ []byte) { spec = s }, func(driver.TenantSpec, driver.TenantLine) { lines++ })
	target := f.target()
	target.Tenant = apart
	res, err := Run(context.Background(), cfg, target)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Tenant != agents.TenantAgents || spec.Key != "key-default" || spec.Start.IsZero() ||
		spec.Until.Sub(spec.Start) != time.Duration(2*float64(20*time.Second)*0.03) {
		t.Errorf("the agents' spec: tenant %q, key %q, from %v until %v", spec.Tenant, spec.Key, spec.Start, spec.Until)
	}
	rep := res.Agents
	if rep == nil || len(rep.Phases) != 2 {
		t.Fatalf("agents report %+v, want 2 phases", rep)
	}
	turns := 0
	for k, p := range rep.Phases {
		if p.Answered == 0 || p.Errors != 0 {
			t.Errorf("phase %d: %d answered, %d errors", k+1, p.Answered, p.Errors)
		}
		turns += p.Turns + p.Cut
	}
	if turns != lines || len(f.requests()) != lines || res.Total.Requests != lines {
		t.Errorf("%d turns in the phases, %d lines from the agents' process, %d requests at the gateway, %d in the result", turns, lines, len(f.requests()), res.Total.Requests)
	}
	// Continuing turns chain to the responses the gateway answered.
	chained := 0
	for _, r := range f.requests() {
		if r.PreviousID != "" {
			chained++
		}
	}
	if chained == 0 {
		t.Error("no turn continued a conversation")
	}
}

func TestRunTenantAgentsNeedsItsRun(t *testing.T) {
	cfg := workload.Config{Workload: workload.WorkloadAgents}
	now := time.Now()
	for _, spec := range []driver.TenantSpec{
		{Config: cfg, Tenant: agents.TenantAgents},                          // no start
		{Config: cfg, Tenant: agents.TenantAgents, Start: now, Until: now},  // nothing to send
		{Config: cfg, Tenant: "A", Start: now, Until: now.Add(time.Second)}, // not the agents
	} {
		if err := RunTenant(context.Background(), spec, func(driver.TenantLine) { t.Error("a turn sent") }); err == nil {
			t.Errorf("spec %+v ran", spec)
		}
	}
}
