package hf

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// Prompts is a model's prompt.PromptTokenizer: prompts rendered by its
// chat template (Model.Render) and encoded by its tokenizer, through
// Incremental when one is set, so that an agent's next turn encodes only
// its new suffix. A prompt the template refuses (Render's error, which the
// engine would give too) is encoded in prompt.AppendRender's canonical
// form instead, an estimate, and counted in RenderFailures.
//
// Prompts is safe for concurrent use once its fields are set.
type Prompts struct {
	// Model is the tokenizer and chat template. Required.
	Model *Model
	// Incremental, when not nil, remembers each key's last prompt; nil
	// encodes every prompt whole.
	Incremental *Incremental

	failures atomic.Uint64
}

// Encode implements prompt.Tokenizer.
func (p *Prompts) Encode(dst []uint32, text string) []uint32 {
	return p.Model.Tokenizer.Encode(dst, text)
}

// Count implements prompt.Tokenizer.
func (p *Prompts) Count(text string) int { return p.Model.Tokenizer.Count(text) }

// EncodePrompt implements prompt.PromptTokenizer.
func (p *Prompts) EncodePrompt(dst []uint32, pr *prompt.Prompt, key string) []uint32 {
	out, err := p.Model.EncodePrompt(dst, pr, p.Incremental, key)
	if err == nil {
		return out
	}
	p.failures.Add(1)
	buf := renderBuffers.Get().(*[]byte)
	*buf = prompt.AppendRender((*buf)[:0], pr)
	dst = p.Model.Tokenizer.Encode(dst, unsafeString(*buf))
	putRender(buf)
	return dst
}

// CountPrompt implements prompt.PromptTokenizer.
func (p *Prompts) CountPrompt(pr *prompt.Prompt) int {
	text, err := p.Model.Render(pr)
	if err != nil {
		p.failures.Add(1)
		return p.Model.Tokenizer.Count(string(prompt.AppendRender(nil, pr)))
	}
	return p.Model.Tokenizer.Count(text)
}

// RenderFailures counts the prompts the chat template refused.
func (p *Prompts) RenderFailures() uint64 { return p.failures.Load() }

// Collector reports RenderFailures, and Incremental's series when it is
// set, with labels on every series:
//
//	turnpike_chat_template_failures_total    prompts the template refused,
//	                                         encoded in the canonical form
func (p *Prompts) Collector(labels prometheus.Labels) prometheus.Collector {
	c := &promptsCollector{p: p, failures: prometheus.NewDesc("turnpike_chat_template_failures_total",
		"Prompts the model's chat template refused to render; they were tokenized in the canonical form, an estimate.", nil, labels)}
	if p.Incremental != nil {
		c.inc = p.Incremental.Collector(labels)
	}
	return c
}

type promptsCollector struct {
	p        *Prompts
	failures *prometheus.Desc
	inc      prometheus.Collector
}

func (c *promptsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.failures
	if c.inc != nil {
		c.inc.Describe(ch)
	}
}

func (c *promptsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(c.p.RenderFailures()))
	if c.inc != nil {
		c.inc.Collect(ch)
	}
}

// Interface guards.
var _ prompt.PromptTokenizer = (*Prompts)(nil)
