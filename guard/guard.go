package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// Config is the guard section: the content-safety service a turn's text
// is checked by before an engine is asked.
type Config struct {
	// URL is the check's HTTP endpoint; empty turns the guard off.
	URL string `yaml:"url" json:"url"`
	// Name names the check in refusals and metrics. Default "guard".
	Name string `yaml:"name" json:"name"`
	// On lists where turns are checked: "input" (the default, and for now
	// the only place).
	On []string `yaml:"on" json:"on"`
	// FailMode is what a turn gets when the check cannot answer (an
	// error, a timeout, an answer it cannot read): "closed" (the default)
	// refuses it with a 503, "open" lets it through.
	FailMode string `yaml:"failMode" json:"failMode"`
	// Timeout bounds one check. Default 2s.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// Scope is the text sent: "turn" (the default) sends the messages
	// after the prompt's last assistant message, the user's words and
	// tool results the turn adds (a first turn's: every message);
	// "prompt" sends every message, each turn.
	Scope string `yaml:"scope" json:"scope"`
}

// Config values.
const (
	OnInput        = "input"
	FailOpen       = "open"
	FailClosed     = "closed"
	ScopeTurn      = "turn"
	ScopePrompt    = "prompt"
	DefaultName    = "guard"
	DefaultTimeout = 2 * time.Second
)

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if len(c.On) == 0 {
		c.On = []string{OnInput}
	}
	if c.FailMode == "" {
		c.FailMode = FailClosed
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Scope == "" {
		c.Scope = ScopeTurn
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	if c.URL == "" {
		return nil
	}
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("guard.url %q: want an http or https URL", c.URL))
	}
	for _, on := range c.On {
		if on != OnInput {
			errs = append(errs, fmt.Errorf("guard.on %q: turns are checked on input only", on))
		}
	}
	if c.FailMode != FailOpen && c.FailMode != FailClosed {
		errs = append(errs, fmt.Errorf("guard.failMode %q: want open or closed", c.FailMode))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("guard.timeout %v is negative", c.Timeout))
	}
	if c.Scope != ScopeTurn && c.Scope != ScopePrompt {
		errs = append(errs, fmt.Errorf("guard.scope %q: want turn or prompt", c.Scope))
	}
	return errors.Join(errs...)
}

// Refusal is the check's verdict against a turn.
type Refusal struct {
	// Check is the check's name; Reason what it said, if anything.
	Check, Reason string
}

func (r *Refusal) Error() string {
	if r.Reason == "" {
		return fmt.Sprintf("guard: the check %s refused the input", r.Check)
	}
	return fmt.Sprintf("guard: the check %s refused the input: %s", r.Check, r.Reason)
}

// ErrUnavailable: the check could not answer and its fail mode is closed.
var ErrUnavailable = errors.New("guard: the content check is unavailable")

// Request is what the check is sent, as JSON.
type Request struct {
	Check     string `json:"check"`
	Tenant    string `json:"tenant"`
	Direction string `json:"direction"`
	Model     string `json:"model"`
	Text      string `json:"text"`
}

// Verdict is what the check answers, as JSON, with a 200.
type Verdict struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
}

// Guard checks turns with one HTTP service. Safe for concurrent use.
type Guard struct {
	cfg     Config
	client  *http.Client
	checks  *prometheus.CounterVec
	latency prometheus.Observer
}

// Check results, the label of turnpike_guard_checks_total.
const (
	resultAllowed     = "allowed"
	resultRefused     = "refused"
	resultErrorOpen   = "error_open"
	resultErrorClosed = "error_closed"
)

// New builds the guard of cfg (defaults applied), registering its metrics
// with reg when not nil; nil when cfg has no URL.
func New(cfg Config, reg prometheus.Registerer) (*Guard, error) {
	cfg.EnsureDefaults()
	if cfg.URL == "" {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_guard_checks_total",
			Help: "Turns checked by the content guard, by check and result: allowed, refused, error_open (the check failed, the turn went on), error_closed (the check failed, the turn was refused).",
		}, []string{"check", "result"}),
	}
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "turnpike_guard_check_seconds",
		Help:    "How long the content guard took to answer a check, failures included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"check"})
	g.latency = h.WithLabelValues(cfg.Name)
	for _, r := range []string{resultAllowed, resultRefused, resultErrorOpen, resultErrorClosed} {
		g.checks.WithLabelValues(cfg.Name, r)
	}
	if reg != nil {
		if err := reg.Register(g.checks); err != nil {
			return nil, err
		}
		if err := reg.Register(h); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// CheckInput asks the check about p, the prompt of tenant's turn on
// model: nil lets the turn go on, a *Refusal is the check's no, and
// ErrUnavailable a failure under fail mode closed.
func (g *Guard) CheckInput(ctx context.Context, tenant, model string, p *prompt.Prompt) error {
	start := time.Now()
	v, err := g.ask(ctx, Request{Check: g.cfg.Name, Tenant: tenant, Direction: OnInput, Model: model, Text: g.text(p)})
	g.latency.Observe(time.Since(start).Seconds())
	switch {
	case err != nil && g.cfg.FailMode == FailOpen:
		g.checks.WithLabelValues(g.cfg.Name, resultErrorOpen).Inc()
		return nil
	case err != nil:
		g.checks.WithLabelValues(g.cfg.Name, resultErrorClosed).Inc()
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, g.cfg.Name, err)
	case !v.Allowed:
		g.checks.WithLabelValues(g.cfg.Name, resultRefused).Inc()
		return &Refusal{Check: g.cfg.Name, Reason: v.Reason}
	}
	g.checks.WithLabelValues(g.cfg.Name, resultAllowed).Inc()
	return nil
}

// maxVerdict bounds the check's answer.
const maxVerdict = 64 << 10

func (g *Guard) ask(ctx context.Context, r Request) (Verdict, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Verdict{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return Verdict{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxVerdict))
		return Verdict{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	var v Verdict
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxVerdict))
	if err := dec.Decode(&v); err != nil {
		return Verdict{}, fmt.Errorf("reading the verdict: %w", err)
	}
	return v, nil
}

// text is what of p the check reads (Config.Scope): a completion's
// prompt, or chat messages, one a paragraph, as role: content, with an
// assistant's tool calls.
func (g *Guard) text(p *prompt.Prompt) string {
	if p == nil {
		return ""
	}
	if p.Messages == nil {
		return p.Text
	}
	var b strings.Builder
	msgs := turnMessages(p.Messages, g.cfg.Scope)
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		for _, tc := range m.ToolCalls {
			b.WriteString("\n")
			b.WriteString(tc.Name)
			b.WriteString(" ")
			b.WriteString(tc.Arguments)
		}
	}
	return b.String()
}

// turnMessages are the messages of scope: all of them, or for a turn
// those after the last assistant message (a first turn's: all).
func turnMessages(msgs []prompt.Message, scope string) []prompt.Message {
	if scope == ScopePrompt {
		return msgs
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" {
			return msgs[i+1:]
		}
	}
	return msgs
}
