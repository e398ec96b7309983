package responses

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// Compaction: the model is asked to summarise the conversation, and the
// summary, sealed, becomes a compaction item (seal.go) that stands for
// everything before it but the user, system and developer messages
// (compacted, chat.go). POST /v1/responses/compact answers with those
// messages and the item; context_management compacts a response's
// context before its turn once the prompt passes compact_threshold.

// compactMaxTokens bounds the summary's length.
const compactMaxTokens = 2048

// compactPrompt is the request the model answers with the summary.
const compactPrompt = "Compact the conversation above so that it can continue in a fresh context. " +
	"Write a summary with everything needed to carry on the work: the user's goals and requests, " +
	"decisions taken, important facts, names, files and commands, the tool results that still matter, " +
	"and what remains to be done. Reply with the summary only."

// Compaction triggers, the label of turnpike_responses_compactions_total.
const (
	compactRequested = "request"
	compactThreshold = "threshold"
)

// later request's input can carry. Nothing is stored.
func (s *Service) Compact(ctx context.Context, tenant string, req *wire.CreateRequest, hdr http.Header) (*wire.Compacted, error) {
	if s.engine == nil || s.sealer == nil {
		return nil, errors.New("responses: service not started")
	}
	t, items, err := s.load(ctx, tenant, req, hdr, newID("resp_"), s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, wire.Invalidf("input", "empty_array", "There is nothing to compact: the input and the previous response hold no items.")
	}
	it, usage, err := s.summarise(ctx, t, items, hdr, compactRequested)
	if err != nil {
		return nil, err
	}
	c := &wire.Compacted{ID: t.rec.Response.ID, Object: "response.compaction", CreatedAt: t.rec.Response.CreatedAt}
	for _, m := range compacted(append(items, it)) {
		if m.Type == wire.ItemMessage && m.Role == "user" || m.Type == wire.ItemCompaction {
			c.Output = append(c.Output, m)
		}
	}
	if usage != nil {
		c.Usage = *usage
	}
	return c, nil
}

// summarise asks the model for a summary of items, the context of t, and
// returns it as a compaction item (its id new, its summary sealed for
// t's tenant) with the usage of the turn that wrote it.
func (s *Service) summarise(ctx context.Context, t *turn, items []wire.Item, hdr http.Header, trigger string) (wire.Item, *wire.Usage, error) {
	sreq := *t.req
	sreq.Tools, sreq.ToolsRaw, sreq.EngineChoice = nil, nil, wire.EngineChoice{}
	sreq.Text = wire.TextConfig{}
	sreq.Truncation = "auto"
	limit := compactMaxTokens
	sreq.MaxOutputTokens = &limit
	st := &turn{req: &sreq, rec: t.rec, base: t.base, conversation: t.conversation, chainRoot: t.chainRoot, newChain: t.newChain, aside: true}
	ask := wire.Item{Type: wire.ItemMessage, Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: compactPrompt}}}
	if err := s.fit(st, append(compacted(items), ask)); err != nil {
		return wire.Item{}, nil, err
	}
	dt, err := s.begin(ctx, st, hdr)
	if err != nil {
		return wire.Item{}, nil, err
	}
	r := newRun(&wire.Response{Output: []wire.Item{}}, nil, nil, 0)
	engErr := r.consume(dt)
	dt.End(engErr)
	if engErr == nil {
		engErr = ctx.Err()
	}
	if engErr != nil {
		return wire.Item{}, nil, apierror.New(http.StatusBadGateway, "compaction_failed", "The model did not finish the summary of the conversation: %v", engErr).WithClass(ErrEngine)
	}
	r.end(nil, false, 0)
	var summary strings.Builder
	for i := range r.resp.Output {
		if o := &r.resp.Output[i]; o.Type == wire.ItemMessage {
			summary.WriteString(o.Text())
		}
	}
	if strings.TrimSpace(summary.String()) == "" {
		return wire.Item{}, nil, apierror.New(http.StatusBadGateway, "compaction_failed", "The model answered the request for a summary of the conversation with no text.").WithClass(ErrEngine)
	}
	text := summary.String()
	s.compactions.WithLabelValues(trigger).Inc()
	return wire.Item{
		Type: wire.ItemCompaction, ID: newID("cmp_"), Status: wire.StatusCompleted,
		Content:          []wire.ContentPart{{Type: wire.PartSummary, Text: text}},
		EncryptedContent: s.sealer.seal(sealCompaction, t.rec.Tenant, []byte(text)),
	}, r.resp.Usage, nil
}

// autoCompact compacts t's context before its turn when the request's
// compact_threshold asks for it and the prompt passes it: the context
// becomes its user messages and the compaction item, which is the first
// item of the response's output.
func (s *Service) autoCompact(ctx context.Context, t *turn, hdr http.Header) error {
	if t.req.CompactThreshold <= 0 {
		return nil
	}
	n := t.promptTokens
	if n == 0 {
		n = prompt.Count(s.engine.Tokenizer(t.req.Model), t.prompt)
	}
	if n <= t.req.CompactThreshold {
		return nil
	}
	it, _, err := s.summarise(ctx, t, t.items, hdr, compactThreshold)
	if err != nil {
		return err
	}
	t.pre = append(t.pre, it)
	return s.fit(t, compacted(append(t.items, it)))
}
