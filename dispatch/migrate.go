package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// Outcomes of a stream migration, for turnpike_stream_migrations_total.
const (
	migrationResumed      = "resumed"
	migrationNotResumable = "not_resumable"
	migrationFailed       = "failed"
)

// errNotResumable says why a cut stream cannot continue elsewhere.
var errNotResumable = errors.New("dispatch: the answer cannot be resumed")

// keep remembers a streamed data line, so that a migration can tell what
// the engine had generated, and a hand-off's catch-up what a turn on the
// draining endpoint answered. Only data is kept, not the lines around it.
func (t *Turn) keep(l *Line) {
	if l.Data == nil || l.Done || l.Usage || t.d.maxMigrations == 0 && !t.stayed {
		return
	}
	t.sent.add(l.Data)
}

// migrate moves a stream cut by cause to another endpoint: it asks the
// next engine to continue the answer generated so far, with what is left
// of the output budget, and reads on from its stream. It reports whether
// the turn continues.
func (t *Turn) migrate(cause error) bool {
	d := t.d
	if t.legs >= d.maxMigrations || t.ctx.Err() != nil {
		return false
	}
	text, err := generatedText(&t.sent, t.spec.Path)
	var body []byte
	generated := 0
	if err == nil {
		generated = d.tok.Count(text)
		body, err = continuation(t.spec, text, generated)
	}
	if err != nil {
		d.migrations.WithLabelValues(migrationNotResumable).Inc()
		d.log.Warn("engine stream broke; not resumable", "endpoint", t.ep.ID, "err", err, "cause", cause)
		return false
	}
	failed := t.ep
	if !t.sendAgain(body, cause) {
		d.migrations.WithLabelValues(migrationFailed).Inc()
		return false
	}
	t.priorCompletion = generated
	t.br.Reset(t.resp.Body)
	d.migrations.WithLabelValues(migrationResumed).Inc()
	d.log.Info("engine stream broke; moved to another endpoint", "from", failed.ID, "to", t.ep.ID,
		"generated_tokens", t.priorCompletion, "cause", cause)
	return true
}

// generatedText is the answer text of the data lines in sent: chat
// deltas' content, or completions' text. An answer that was calling tools,
// reasoning, or generating several choices cannot be handed on as text.
func generatedText(sent *sentLog, path string) (string, error) {
	var b strings.Builder
	for line := range sent.lines() {
		var c struct {
			Choices []struct {
				Index int     `json:"index"`
				Text  *string `json:"text"`
				Delta struct {
					Content          *string         `json:"content"`
					ReasoningContent *string         `json:"reasoning_content"`
					ToolCalls        json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			return "", fmt.Errorf("%w: an unreadable chunk: %w", errNotResumable, err)
		}
		for _, ch := range c.Choices {
			switch {
			case ch.Index != 0:
				return "", fmt.Errorf("%w: several choices", errNotResumable)
			case len(ch.Delta.ToolCalls) > 0 && !bytes.Equal(ch.Delta.ToolCalls, []byte("null")):
				return "", fmt.Errorf("%w: a tool call was streaming", errNotResumable)
			case ch.Delta.ReasoningContent != nil && *ch.Delta.ReasoningContent != "":
				return "", fmt.Errorf("%w: reasoning was streaming", errNotResumable)
			}
			if path == chatPath && ch.Delta.Content != nil {
				b.WriteString(*ch.Delta.Content)
			} else if path != chatPath && ch.Text != nil {
				b.WriteString(*ch.Text)
			}
		}
	}
	return b.String(), nil
}

const chatPath = "/v1/chat/completions"

// continuation is the request that continues the answer to spec.Body
// after text (generated tokens, by every leg so far), given as the start
// of the assistant's answer (withAnswer). The output budget shrinks by
// what was generated. With nothing generated it is body itself: a plain
// retry.
func continuation(spec *Spec, text string, generated int) ([]byte, error) {
	if text == "" {
		return spec.Body, nil
	}
	var set []jsonscan.Member
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok, err := jsonscan.Lookup(spec.Body, k)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotResumable, err)
		}
		if !ok || bytes.Equal(raw, []byte("null")) {
			continue
		}
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errNotResumable, k, err)
		}
		if n-generated < 1 {
			return nil, fmt.Errorf("%w: the output budget is spent", errNotResumable)
		}
		set = append(set, jsonscan.Member{Key: k, Value: strconv.AppendInt(nil, int64(n-generated), 10)})
	}
	answer, err := withAnswer(spec, text)
	if err != nil {
		return nil, err
	}
	return jsonscan.Edit(spec.Body, append(set, answer...))
}

// withAnswer is the members that make spec.Body the request whose prompt
// ends with text, the start of the assistant's answer: for a chat, the
// messages with text as a final assistant message continued in place
// (vLLM's continue_final_message, with no generation prompt); for a
// completion, the prompt followed by text.
func withAnswer(spec *Spec, text string) ([]jsonscan.Member, error) {
	var set []jsonscan.Member
	textJSON, _ := json.Marshal(text)
	if spec.Path == chatPath {
		msgs, _, err := jsonscan.Lookup(spec.Body, "messages")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotResumable, err)
		}
		answer := append(append([]byte(`{"role":"assistant","content":`), textJSON...), '}')
		if msgs, err = appendElement(msgs, answer); err != nil {
			return nil, fmt.Errorf("%w: messages: %w", errNotResumable, err)
		}
		set = append(set, jsonscan.Member{Key: "messages", Value: msgs},
			jsonscan.Member{Key: "continue_final_message", Value: []byte("true")},
			jsonscan.Member{Key: "add_generation_prompt", Value: []byte("false")})
	} else {
		raw, _, err := jsonscan.Lookup(spec.Body, "prompt")
		var p string
		if err != nil || json.Unmarshal(raw, &p) != nil {
			return nil, fmt.Errorf("%w: a prompt that is not one string", errNotResumable)
		}
		raw, _ = json.Marshal(p + text)
		set = append(set, jsonscan.Member{Key: "prompt", Value: raw})
	}
	return set, nil
}

// appendElement is the JSON array arr with elem added at its end; the
// elements it had come as they came.
func appendElement(arr, elem []byte) ([]byte, error) {
	var d jsonscan.Decoder
	d.Data = arr
	d.SkipSpace()
	if d.Peek() != '[' {
		return nil, errors.New("not an array")
	}
	if err := d.Skip(); err != nil {
		return nil, err
	}
	if err := d.End(); err != nil {
		return nil, err
	}
	head := bytes.TrimRight(arr, " \t\r\n")
	head = bytes.TrimRight(head[:len(head)-1], " \t\r\n")
	out := make([]byte, 0, len(head)+len(elem)+2)
	out = append(out, head...)
	if head[len(head)-1] != '[' {
		out = append(out, ',')
	}
	out = append(out, elem...)
	return append(out, ']'), nil
}

// combinedUsage is the usage of a migrated answer: the prompt as the
// turn counted it, and every leg's completion tokens.
func (t *Turn) combinedUsage(last Usage) Usage {
	u := last
	u.PromptTokens = t.route.PromptTokens
	u.CompletionTokens = t.priorCompletion + last.CompletionTokens
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = min(last.PromptTokensDetails.CachedTokens, u.PromptTokens)
	return u
}

// rewriteUsage puts the combined usage in a migrated stream's usage line,
// so the client is told what both legs did.
func (t *Turn) rewriteUsage(l *Line) {
	var m map[string]json.RawMessage
	if json.Unmarshal(l.Data, &m) != nil {
		return
	}
	u, _ := json.Marshal(t.usage)
	m["usage"] = u
	data, err := json.Marshal(m)
	if err != nil {
		return
	}
	raw := make([]byte, 0, len(data)+8)
	raw = append(raw, "data: "...)
	raw = append(raw, data...)
	raw = append(raw, '\n')
	l.Raw, l.Data = raw, data
}
