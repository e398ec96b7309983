package responses

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/prompt"
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

// Compacted is the answer to POST /v1/responses/compact.
type Compacted struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	// Output is the context's user messages, then the compaction item.
	Output []Item `json:"output"`
	Usage  Usage  `json:"usage"`
}

// compactKeys are the fields of a compact request.
var compactKeys = []string{
	"model", "input", "instructions", "previous_response_id", "prompt_cache_key",
	"prompt_cache_options", "prompt_cache_retention", "service_tier", "image",
}

// DecodeCompactRequest decodes a POST /v1/responses/compact body as
// strictly as a create request: its fields are those of a create request
// that compaction takes; input or previous_response_id names what to
// compact.
func DecodeCompactRequest(body []byte) (*CreateRequest, error) {
	return decodeStateless(body, compactKeys, func(f map[string]json.RawMessage) error {
		if in, ok := f["input"]; (!ok || isNull(in)) && isNull(f["previous_response_id"]) {
			return invalidf("input", "missing_required_parameter", "Missing required parameter: 'input' (or 'previous_response_id').")
		}
		return nil
	})
}

// decodeStateless decodes body as a create request that takes only the
// fields keys names, checked by check (nil checks nothing), that stores
// nothing and whose input, when absent or null, is empty.
func decodeStateless(body []byte, keys []string, check func(map[string]json.RawMessage) error) (*CreateRequest, error) {
	f, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	if err := allowKeys(f, "", keys...); err != nil {
		e := err.(*apierror.Error)
		return nil, unknownParam(strings.TrimPrefix(e.Param, "."))
	}
	if check != nil {
		if err := check(f); err != nil {
			return nil, err
		}
	}
	if in, ok := f["input"]; !ok || isNull(in) {
		f["input"] = json.RawMessage(`[]`)
	}
	f["store"] = json.RawMessage(`false`)
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return DecodeCreateRequest(b)
}

// Compact summarises the context req names (its previous response's and
// its input) and answers with the user messages and a compaction item a
// later request's input can carry. Nothing is stored.
func (s *Service) Compact(ctx context.Context, tenant string, req *CreateRequest, hdr http.Header) (*Compacted, error) {
	if s.engine == nil || s.sealer == nil {
		return nil, errors.New("responses: service not started")
	}
	t, items, err := s.load(ctx, tenant, req, hdr, newID("resp_"), s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, invalidf("input", "empty_array", "There is nothing to compact: the input and the previous response hold no items.")
	}
	it, usage, err := s.summarise(ctx, t, items, hdr, compactRequested)
	if err != nil {
		return nil, err
	}
	c := &Compacted{ID: t.rec.Response.ID, Object: "response.compaction", CreatedAt: t.rec.Response.CreatedAt}
	for _, m := range compacted(append(items, it)) {
		if m.Type == ItemMessage && m.Role == "user" || m.Type == ItemCompaction {
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
func (s *Service) summarise(ctx context.Context, t *turn, items []Item, hdr http.Header, trigger string) (Item, *Usage, error) {
	sreq := *t.req
	sreq.Tools, sreq.ToolsRaw, sreq.toolChoice = nil, nil, toolChoice{}
	sreq.Text = TextConfig{}
	sreq.Truncation = "auto"
	limit := compactMaxTokens
	sreq.MaxOutputTokens = &limit
	st := &turn{req: &sreq, rec: t.rec, base: t.base, conversation: t.conversation, chainRoot: t.chainRoot, newChain: t.newChain, aside: true}
	ask := Item{Type: ItemMessage, Role: "user", Content: []ContentPart{{Type: "input_text", Text: compactPrompt}}}
	if err := s.fit(st, append(compacted(items), ask)); err != nil {
		return Item{}, nil, err
	}
	dt, err := s.begin(ctx, st, hdr)
	if err != nil {
		return Item{}, nil, err
	}
	r := newRun(&Response{Output: []Item{}}, nil, nil, 0)
	engErr := r.consume(dt)
	dt.End(engErr)
	if engErr == nil {
		engErr = ctx.Err()
	}
	if engErr != nil {
		return Item{}, nil, apierror.New(http.StatusBadGateway, "compaction_failed", "The model did not finish the summary of the conversation: %v", engErr).WithClass(ErrEngine)
	}
	r.end(nil, false, 0)
	var summary strings.Builder
	for i := range r.resp.Output {
		if o := &r.resp.Output[i]; o.Type == ItemMessage {
			summary.WriteString(o.Text())
		}
	}
	if strings.TrimSpace(summary.String()) == "" {
		return Item{}, nil, apierror.New(http.StatusBadGateway, "compaction_failed", "The model answered the request for a summary of the conversation with no text.").WithClass(ErrEngine)
	}
	text := summary.String()
	s.compactions.WithLabelValues(trigger).Inc()
	return Item{
		Type: ItemCompaction, ID: newID("cmp_"), Status: StatusCompleted,
		Content:          []ContentPart{{Type: partSummary, Text: text}},
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
