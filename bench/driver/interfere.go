package driver

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// InterferenceReport is what the interfering client sent and the engines
// answered, apart from the run's own figures.
type InterferenceReport struct {
	// Engines are the URLs it sent to.
	Engines []string `json:"engines"`
	// Requests were sent; Errors of them failed; Skipped were due while
	// MaxInFlight requests were in flight, and not sent.
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	Skipped  int `json:"skipped"`
	// PromptTokens and CachedTokens are the engines' usage of the answered
	// requests: what they looked up in, and found in, their prefix caches.
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// FirstError is the first failure's message, "" when none failed.
	FirstError string `json:"first_error,omitempty"`
}

// interferer is the interfering client of one run.
type interferer struct {
	cfg     workload.InterferenceConfig
	model   string
	seed    uint64
	timeout time.Duration
	clients []openai.Client

	mu struct {
		sync.Mutex
		rep InterferenceReport
	}
}

// startInterference starts the interfering client of cfg against target's
// engines; the function it returns stops sending, waits for the requests
// in flight and reports. Without interference (Rate 0) or engine URLs it
// starts nothing and reports nil.
func startInterference(ctx context.Context, cfg workload.Config, target Target) func() *InterferenceReport {
	ic := cfg.Interference
	if ic.Rate <= 0 || len(target.EngineURLs) == 0 {
		return func() *InterferenceReport { return nil }
	}
	in := &interferer{cfg: ic, model: cfg.Model, seed: uint64(cfg.Seed), timeout: cfg.RequestTimeout.D()}
	urls := target.EngineURLs[:min(ic.Engines, len(target.EngineURLs))]
	in.mu.rep.Engines = urls
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: ic.MaxInFlight,
	}
	for _, u := range urls {
		in.clients = append(in.clients, openai.NewClient(
			option.WithBaseURL(apiBase(u)+"/"),
			option.WithHTTPClient(&http.Client{Transport: transport}),
			option.WithAPIKey("interference"),
			option.WithMaxRetries(0),
		))
	}
	ctx, cancel := context.WithCancel(ctx)
	// stop ends the schedule; requests in flight run on until they end
	// (or the run's own context does), so their usage is counted before
	// the engines are scraped again.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.schedule(ctx, stop, &wg)
	}()
	return func() *InterferenceReport {
		close(stop)
		<-done
		wg.Wait()
		cancel()
		transport.CloseIdleConnections()
		in.mu.Lock()
		defer in.mu.Unlock()
		rep := in.mu.rep
		return &rep
	}
}

// schedule sends request i at i intervals from the start until stop.
func (in *interferer) schedule(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) {
	interval := time.Duration(in.cfg.TimeScale / in.cfg.Rate * float64(time.Second))
	slots := make(chan struct{}, in.cfg.MaxInFlight)
	start := time.Now()
	for i := 0; ; i++ {
		t := time.NewTimer(time.Until(start.Add(time.Duration(i) * interval)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			in.mu.Lock()
			in.mu.rep.Skipped++
			in.mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			in.send(ctx, i)
		})
	}
}

// send sends request i to its engine and counts it.
func (in *interferer) send(ctx context.Context, i int) {
	if in.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.timeout)
		defer cancel()
	}
	cl := in.clients[i%len(in.clients)]
	params := openai.ChatCompletionNewParams{
		Model:     in.model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(workload.InterferencePrompt(in.seed, i, in.cfg.PromptTokens))},
		MaxTokens: openai.Int(int64(in.cfg.OutputTokens)),
	}
	c, err := cl.Chat.Completions.New(ctx, params)
	in.mu.Lock()
	defer in.mu.Unlock()
	rep := &in.mu.rep
	rep.Requests++
	if err != nil {
		rep.Errors++
		if rep.FirstError == "" {
			rep.FirstError = err.Error()
		}
		return
	}
	rep.PromptTokens += int(c.Usage.PromptTokens)
	rep.CachedTokens += int(c.Usage.PromptTokensDetails.CachedTokens)
}

// excludeInterference takes the interfering client's requests out of the engines'
// prefix-cache figures, so that the hit rate (and the captured share of
// the ideal) is the run's own. The engines' token counters, load spread
// and latency histograms still include them.
func excludeInterference(ec *scrape.EngineCache, rep *InterferenceReport) {
	if ec == nil || rep == nil || ec.Flavor == "" || ec.QueriedTokens == 0 {
		return
	}
	ec.QueriedTokens = max(ec.QueriedTokens-float64(rep.PromptTokens), 0)
	ec.HitTokens = max(ec.HitTokens-float64(rep.CachedTokens), 0)
	ec.HitRate = 0
	if ec.QueriedTokens > 0 {
		ec.HitRate = ec.HitTokens / ec.QueriedTokens
	}
}
