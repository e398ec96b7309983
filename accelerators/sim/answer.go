package sim

import (
	"context"
	"encoding/json"
	"net/http"
)

// answer turns a sequence's progress into OpenAI response bodies. It
// belongs to one handler goroutine.
type answer struct {
	e       *Engine
	g       *genRequest
	q       *sequence
	id      string
	created int64
	sent    int // completion tokens already streamed
}

// wait blocks until the sequence is done, calling each (if not nil) with
// the tokens produced since the last call. It returns false when the
// client went away.
func (a *answer) wait(ctx context.Context, each func(from, to int)) bool {
	for {
		// done before produced: once done is seen, produced is final.
		done := a.q.done.Load()
		if n := int(a.q.produced.Load()); n > a.sent && each != nil {
			each(a.sent, n)
			a.sent = n
		}
		if done {
			return true
		}
		select {
		case <-a.q.notify:
		case <-ctx.Done():
			return false
		}
	}
}

func (a *answer) usage() *usage {
	q := a.q
	u := &usage{
		PromptTokens:        q.promptTokens,
		CompletionTokens:    q.generated,
		TotalTokens:         q.promptTokens + q.generated,
		PromptTokensDetails: &promptTokensDetails{CachedTokens: q.cachedTokens},
	}
	if q.out.thinks() {
		u.CompletionTokensDetails = &completionTokensDetails{ReasoningTokens: min(q.out.reasoningTokens, q.generated)}
	}
	return u
}

// whole is the non-streamed response; call it after done. params, when
// not nil, answer a prefill for a remote decoder.
func (a *answer) whole(params *KVTransferParams) any {
	out := &a.q.out
	finish := out.finish
	if !a.g.chat {
		return textCompletion{
			ID: a.id, Object: "text_completion", Created: a.created, Model: a.e.cfg.ServedModelName,
			Choices: []textChoice{{Text: out.text, FinishReason: &finish}},
			Usage:   a.usage(),

			KVTransferParams: params,
		}
	}
	msg := &chatMessage{Role: "assistant"}
	if out.thinks() {
		msg.ReasoningContent = &out.reasoning
	}
	switch {
	case out.call != nil:
		msg.ToolCalls = []ToolCall{*out.call}
	case out.contentAt < len(out.text) || !out.thinks():
		content := out.text[out.contentAt:]
		msg.Content = &content
	}
	// else the answer was cut while thinking: content null, as vLLM's.
	return chatCompletion{
		ID: a.id, Object: "chat.completion", Created: a.created, Model: a.e.cfg.ServedModelName,
		Choices: []chatChoice{{Message: msg, FinishReason: &finish}},
		Usage:   a.usage(),

		KVTransferParams: params,
	}
}

// stream writes the answer as server-sent events, one chunk per token as
// the engine produces it, then the finish chunk, the usage chunk when
// asked, and [DONE]. dropAfter >= 0 cuts the connection after that many
// chunks. Once the first byte is out, failures abort the connection
// instead of writing a second status.
func (a *answer) stream(w http.ResponseWriter, ctx context.Context, dropAfter int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	sse := sseWriter{w: w, rc: http.NewResponseController(w), dropAfter: dropAfter}
	if a.g.chat {
		empty := ""
		sse.send(a.chunk(&chatMessage{Role: "assistant", Content: &empty}, nil))
	}
	ok := a.wait(ctx, func(from, to int) {
		for k := from; k < to; k++ {
			if v := a.tokenChunk(k); v != nil {
				sse.send(v)
			}
		}
	})
	if !ok {
		return
	}
	if a.q.err != nil {
		panic(http.ErrAbortHandler)
	}
	finish := a.q.out.finish
	if a.g.chat {
		sse.send(a.chunk(&chatMessage{}, &finish))
	} else {
		sse.send(a.textChunk("", &finish))
	}
	if a.g.includeUsage {
		if a.g.chat {
			sse.send(chatCompletion{ID: a.id, Object: "chat.completion.chunk", Created: a.created,
				Model: a.e.cfg.ServedModelName, Choices: []chatChoice{}, Usage: a.usage()})
		} else {
			sse.send(textCompletion{ID: a.id, Object: "text_completion", Created: a.created,
				Model: a.e.cfg.ServedModelName, Choices: []textChoice{}, Usage: a.usage()})
		}
	}
	sse.done()
}

// tokenChunk is the chunk carrying completion token k, or nil when the
// token adds nothing visible (the thinking's markers, the template text
// before a tool call's arguments).
func (a *answer) tokenChunk(k int) any {
	out := &a.q.out
	if !a.g.chat {
		return a.textChunk(out.piece(k), nil)
	}
	lo, hi := k*TokenBytes, min((k+1)*TokenBytes, len(out.text))
	var delta chatMessage
	if th := out.thoughts(lo, hi); th != "" {
		delta.ReasoningContent = &th
	}
	switch {
	case out.call == nil:
		if hi > out.contentAt {
			p := out.text[max(lo, out.contentAt):hi]
			delta.Content = &p
		}
	case hi > out.argsAt || k == out.contentAt/TokenBytes:
		var frag string
		if hi > out.argsAt {
			frag = out.text[max(lo, out.argsAt):hi]
		}
		idx := 0
		tc := ToolCall{Index: &idx, Function: FunctionCall{Arguments: frag}}
		if k == out.contentAt/TokenBytes {
			// The call's first token opens it, as OpenAI streams it:
			// index, id, type and name, then argument fragments.
			tc.ID, tc.Type, tc.Function.Name = out.call.ID, out.call.Type, out.call.Function.Name
		}
		delta.ToolCalls = []ToolCall{tc}
	}
	if delta.Content == nil && delta.ReasoningContent == nil && delta.ToolCalls == nil {
		return nil
	}
	return a.chunk(&delta, nil)
}

func (a *answer) chunk(delta *chatMessage, finish *string) chatCompletion {
	return chatCompletion{
		ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.e.cfg.ServedModelName,
		Choices: []chatChoice{{Delta: delta, FinishReason: finish}},
	}
}

func (a *answer) textChunk(text string, finish *string) textCompletion {
	return textCompletion{
		ID: a.id, Object: "text_completion", Created: a.created, Model: a.e.cfg.ServedModelName,
		Choices: []textChoice{{Text: text, FinishReason: finish}},
	}
}

// sseWriter writes "data: <json>\n\n" events and flushes each one.
type sseWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	chunks    int
	dropAfter int
	buf       []byte
}

func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	s.write(b)
}

// done ends the stream with [DONE]; a stream set to drop never gets it.
func (s *sseWriter) done() {
	if s.dropAfter >= 0 {
		s.abort()
	}
	s.write([]byte("[DONE]"))
}

func (s *sseWriter) write(data []byte) {
	if s.dropAfter >= 0 && s.chunks >= s.dropAfter {
		s.abort()
	}
	s.buf = append(append(append(s.buf[:0], "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(s.buf); err != nil {
		panic(http.ErrAbortHandler)
	}
	if err := s.rc.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
	s.chunks++
}

// abort cuts the connection: net/http closes it without ending the
// chunked body, so the client sees an unexpected EOF.
func (s *sseWriter) abort() {
	s.rc.Flush()
	panic(http.ErrAbortHandler)
}
