package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// Sink receives a response's stream events, each as its type and its JSON
// data, in sequence order. An error stops delivery to that sink (the
// client went away); the response itself runs on.
type Sink interface {
	Event(eventType string, data []byte) error
}

// SinkFunc is a Sink that is a function.
type SinkFunc func(eventType string, data []byte) error

// Event implements Sink.
func (f SinkFunc) Event(eventType string, data []byte) error { return f(eventType, data) }

// A Holder is a Sink that can hold events back to send several at once.
// While a turn's engine stream has more lines ready to read, the run
// holds its sink: the events of those lines are sent together when it
// releases it, as soon as the stream has nothing more ready, so that a
// gateway that falls behind its engines writes (and wakes its clients)
// once for a burst of tokens instead of once for each. Events come
// unheld otherwise, and each is sent at once.
type Holder interface {
	Sink
	// Hold holds the events that follow (true), or sends those held and
	// stops holding (false).
	Hold(hold bool)
}

// Event is one Responses streaming event. Fields a type does not use are
// left zero and omitted.
type Event struct {
	Type           string            `json:"type"`
	SequenceNumber int               `json:"sequence_number"`
	Response       *wire.Response    `json:"response,omitempty"`
	OutputIndex    *int              `json:"output_index,omitempty"`
	ItemID         string            `json:"item_id,omitempty"`
	ContentIndex   *int              `json:"content_index,omitempty"`
	SummaryIndex   *int              `json:"summary_index,omitempty"`
	Item           *wire.Item        `json:"item,omitempty"`
	Part           *wire.ContentPart `json:"part,omitempty"`
	Delta          *string           `json:"delta,omitempty"`
	Text           *string           `json:"text,omitempty"`
	Arguments      *string           `json:"arguments,omitempty"`
	Input          *string           `json:"input,omitempty"`
	Name           string            `json:"name,omitempty"`
	Logprobs       *[]string         `json:"logprobs,omitempty"`
	// Status is set on a reasoning summary part cut short: "incomplete".
	Status string `json:"status,omitempty"`
}

var zero = 0

// chatChunk is the part of an engine's chat.completion.chunk turnpike reads.
type chatChunk struct {
	Choices []chunkChoice `json:"choices"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type chunkChoice struct {
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Content *string `json:"content"`
	// ReasoningContent is a reasoning model's thinking, as vLLM streams
	// it; newer vLLM names it reasoning.
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
	ToolCalls        []struct {
		Index    int    `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// run translates one engine stream into a response and its events. It is
// owned by one goroutine.
type run struct {
	resp *wire.Response
	sink Sink
	seq  int
	// open is the output index of the item being streamed, -1 if none;
	// openCall the engine's tool call index when it is a function call.
	open     int
	openCall int
	// chunkBuf is chunk's decoded chunk, reused.
	chunkBuf chatChunk
	// text is the open item's text: a message's or reasoning's, or a
	// call's arguments.
	text   strings.Builder
	finish string
	// names maps the engine's names of namespaced functions back to
	// them; nil when the request has none.
	names map[string]*wire.Tool
	// summarize makes reasoning a summary (reasoning.summary is set),
	// else reasoning text, as OpenAI serves open models; seal, when not
	// nil, seals a reasoning item's text into its encrypted_content
	// (include: reasoning.encrypted_content).
	summarize bool
	seal      func(text string) string
	// pendingMCP are the output indexes of mcp_call items the engine
	// made whose call the gateway is yet to make.
	pendingMCP []int
	// flushEvery spaces the writes of a held sink (Config.FlushInterval).
	flushEvery time.Duration
	// holding says consume holds the sink; pending is the delta joined
	// meanwhile, sent before any other event and when the hold ends.
	holding bool
	pending pendingDelta
}

// newRun starts the translation of the answer to a request offering
// tools.
func newRun(resp *wire.Response, tools []wire.Tool, sink Sink, seq int) *run {
	return &run{resp: resp, sink: sink, seq: seq, open: -1, openCall: -1, names: wire.ToolNames(tools)}
}

// newRun starts the translation of t's answer, its reasoning shown and
// sealed as the request asks.
func (s *Service) newRun(t *turn, sink Sink, seq int) *run {
	r := newRun(t.rec.Response, t.req.Tools, sink, seq)
	r.summarize = t.req.Reasoning != nil && t.req.Reasoning.Summary != nil
	r.flushEvery = s.cfg.FlushInterval
	if slices.Contains(t.req.Include, wire.IncludeReasoning) {
		tenant := t.rec.Tenant
		r.seal = func(text string) string { return s.sealer.seal(sealReasoning, tenant, []byte(text)) }
	}
	return r
}

// prelude puts items the gateway made before the engine's answer (a
// compaction item, MCP tool lists, approved MCP calls) at the head of
// the output, each added, its progress told, and done.
func (r *run) prelude(items []wire.Item) {
	for i := range items {
		idx := len(r.resp.Output)
		r.resp.Output = append(r.resp.Output, items[i])
		added := items[i]
		switch added.Type {
		case wire.ItemMCPListTools:
			added.Output = "[]"
		case wire.ItemMCPCall:
			added.Output, added.Error, added.Status = "", "", wire.StatusInProgress
		}
		r.emit(&Event{Type: "response.output_item.added", OutputIndex: &idx, Item: &added})
		switch added.Type {
		case wire.ItemMCPListTools:
			r.mcpProgress("response.mcp_list_tools.", idx, &r.resp.Output[idx])
		case wire.ItemMCPCall:
			r.mcpProgress("response.mcp_call.", idx, &r.resp.Output[idx])
		}
		done := items[i]
		r.emit(&Event{Type: "response.output_item.done", OutputIndex: &idx, Item: &done})
	}
}

// mcpProgress tells an MCP item's progress, its request made: events
// prefix+in_progress, then prefix+completed or prefix+failed.
func (r *run) mcpProgress(prefix string, idx int, it *wire.Item) {
	r.emit(&Event{Type: prefix + "in_progress", OutputIndex: &idx, ItemID: it.ID})
	end := "completed"
	if it.Error != "" {
		end = "failed"
	}
	r.emit(&Event{Type: prefix + end, OutputIndex: &idx, ItemID: it.ID})
}

// openType is the type of the item being streamed, "" if none.
func (r *run) openType() string {
	if r.open < 0 {
		return ""
	}
	return r.resp.Output[r.open].Type
}

// number gives the next event its sequence number, and reports whether
// anything listens for it.
func (r *run) number() (seq int, listened bool) {
	seq = r.seq
	r.seq++
	return seq, r.sink != nil
}

// held runs fn with the sink held, if it can be: the events fn emits go
// out in one write.
func (r *run) held(fn func()) {
	holder, _ := r.sink.(Holder)
	if holder != nil {
		holder.Hold(true)
		defer holder.Hold(false)
	}
	fn()
}

// send hands an encoded event to the sink, which is dropped once it
// fails.
func (r *run) send(typ string, data []byte) {
	if r.sink.Event(typ, data) != nil {
		r.sink = nil
	}
}

// event numbers ev and encodes it; nil data when nothing listens.
func (r *run) event(ev *Event) []byte {
	r.flushDelta()
	seq, listened := r.number()
	ev.SequenceNumber = seq
	if !listened {
		return nil
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(fmt.Sprintf("responses: encoding event %s: %v", ev.Type, err))
	}
	return b
}

func (r *run) emit(ev *Event) {
	if b := r.event(ev); r.sink != nil {
		r.send(ev.Type, b)
	}
}

func (r *run) emitResponse(typ string) {
	r.emit(&Event{Type: typ, Response: r.resp})
}

// consume reads the turn's engine stream to its end, through the turn's
// one stream reader, and takes the usage block the reader noted. It
// returns the engine's failure, if any; the caller decides the response's
// end and ends the turn.
func (r *run) consume(t *dispatch.Turn) error {
	defer r.takeUsage(t)
	holder, _ := r.sink.(Holder)
	if holder != nil {
		defer r.release(holder)
	}
	for {
		if holder != nil {
			if !t.Pending() {
				// The engine has sent nothing more: what the lines read
				// so far made goes out, then, with a flush interval,
				// what it sends meanwhile in one write.
				r.release(holder)
				t.Linger(r.flushEvery)
			}
			// A line's events (an item opened and its first delta)
			// go out together, and so do those of the lines already
			// read.
			holder.Hold(true)
			r.holding = true
		}
		l, err := t.Next()
		if errors.Is(err, io.EOF) {
			return r.ended()
		}
		if errors.Is(err, dispatch.ErrStreamCut) {
			return fmt.Errorf("the model server stopped in the middle of the stream: %w", err)
		}
		if err != nil {
			return err
		}
		switch {
		case l.Done:
			return r.ended()
		case l.Data != nil:
			if err := r.chunk(l.Data); err != nil {
				return err
			}
		}
	}
}

// takeUsage copies the engine's usage block into the response.
func (r *run) takeUsage(t *dispatch.Turn) {
	u, ok := t.Usage()
	if !ok {
		return
	}
	usage := &wire.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if usage.TotalTokens == 0 {
		usage.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	usage.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	usage.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	if prev := r.resp.Usage; prev != nil {
		// Another engine turn of the same response (the MCP tool loop).
		usage.InputTokens += prev.InputTokens
		usage.OutputTokens += prev.OutputTokens
		usage.TotalTokens += prev.TotalTokens
		usage.InputTokensDetails.CachedTokens += prev.InputTokensDetails.CachedTokens
		usage.OutputTokensDetails.ReasoningTokens += prev.OutputTokensDetails.ReasoningTokens
	}
	r.resp.Usage = usage
}

// release sends what consume held: the pending delta, then the events
// holder held.
func (r *run) release(holder Holder) {
	r.flushDelta()
	r.holding = false
	holder.Hold(false)
}

func (r *run) ended() error {
	if r.finish == "" {
		return errors.New("the model server ended the stream without finishing the response")
	}
	return nil
}

func (r *run) chunk(data []byte) error {
	c := &r.chunkBuf
	if err := readChunk(data, c); err != nil {
		return fmt.Errorf("the model server sent an unreadable chunk: %w", err)
	}
	if c.Error != nil {
		return fmt.Errorf("the model server failed: %s", c.Error.Message)
	}
	for _, ch := range c.Choices {
		if d := ch.Delta.ReasoningContent; d != nil && *d != "" {
			r.reasoningDelta(*d)
		} else if d := ch.Delta.Reasoning; d != nil && *d != "" {
			r.reasoningDelta(*d)
		}
		if d := ch.Delta.Content; d != nil && *d != "" {
			r.textDelta(*d)
		}
		for _, tc := range ch.Delta.ToolCalls {
			r.callDelta(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			r.finish = *ch.FinishReason
		}
	}
	return nil
}

func (r *run) textDelta(d string) {
	if r.openType() != wire.ItemMessage {
		r.closeOpen(wire.StatusCompleted)
		r.open = len(r.resp.Output)
		r.resp.Output = append(r.resp.Output, wire.Item{Type: wire.ItemMessage, ID: newID("msg_"), Status: wire.StatusInProgress, Role: "assistant"})
		it := r.resp.Output[r.open]
		r.emit(&Event{Type: "response.output_item.added", OutputIndex: &r.open, Item: &it})
		r.emit(&Event{Type: "response.content_part.added", OutputIndex: &r.open, ItemID: it.ID, ContentIndex: &zero,
			Part: &wire.ContentPart{Type: "output_text"}})
	}
	r.text.WriteString(d)
	r.emitDelta("response.output_text.delta", delta{outputIndex: r.open, itemID: r.resp.Output[r.open].ID,
		inContent: true, text: d, logprobs: true})
}

// reasoningDelta streams the model's thinking into a reasoning item: as
// its summary's one part, or as its one reasoning_text content part.
func (r *run) reasoningDelta(d string) {
	if r.openType() != wire.ItemReasoning {
		r.closeOpen(wire.StatusCompleted)
		r.open = len(r.resp.Output)
		r.resp.Output = append(r.resp.Output, wire.Item{Type: wire.ItemReasoning, ID: newID("rs_"), Status: wire.StatusInProgress})
		it := r.resp.Output[r.open]
		r.emit(&Event{Type: "response.output_item.added", OutputIndex: &r.open, Item: &it})
		if r.summarize {
			r.emit(&Event{Type: "response.reasoning_summary_part.added", OutputIndex: &r.open, ItemID: it.ID, SummaryIndex: &zero,
				Part: &wire.ContentPart{Type: wire.PartSummary}})
		} else {
			r.emit(&Event{Type: "response.content_part.added", OutputIndex: &r.open, ItemID: it.ID, ContentIndex: &zero,
				Part: &wire.ContentPart{Type: wire.PartReasoning}})
		}
	}
	r.text.WriteString(d)
	id := r.resp.Output[r.open].ID
	if r.summarize {
		r.emitDelta("response.reasoning_summary_text.delta", delta{outputIndex: r.open, itemID: id, inSummary: true, text: d})
	} else {
		r.emitDelta("response.reasoning_text.delta", delta{outputIndex: r.open, itemID: id, inContent: true, text: d})
	}
}

// closeReasoning ends the reasoning item it: its text becomes its summary
// or content, sealed when the request asks.
func (r *run) closeReasoning(idx int, it *wire.Item) {
	text := r.text.String()
	r.text.Reset()
	if r.seal != nil {
		it.EncryptedContent = r.seal(text)
	}
	if r.summarize {
		it.Summary = []wire.ContentPart{{Type: wire.PartSummary, Text: text}}
		r.emit(&Event{Type: "response.reasoning_summary_text.done", OutputIndex: &idx, ItemID: it.ID, SummaryIndex: &zero, Text: &text})
		ev := &Event{Type: "response.reasoning_summary_part.done", OutputIndex: &idx, ItemID: it.ID, SummaryIndex: &zero, Part: &it.Summary[0]}
		if it.Status == wire.StatusIncomplete {
			ev.Status = wire.StatusIncomplete
		}
		r.emit(ev)
		return
	}
	it.Content = []wire.ContentPart{{Type: wire.PartReasoning, Text: text}}
	r.emit(&Event{Type: "response.reasoning_text.done", OutputIndex: &idx, ItemID: it.ID, ContentIndex: &zero, Text: &text})
	r.emit(&Event{Type: "response.content_part.done", OutputIndex: &idx, ItemID: it.ID, ContentIndex: &zero, Part: &it.Content[0]})
}

func (r *run) callDelta(index int, callID, name, args string) {
	// A call's index is never negative, so that it cannot be taken for
	// an open message's or reasoning's (openCall -1).
	index = max(index, 0)
	if r.open < 0 || r.openCall != index {
		r.closeOpen(wire.StatusCompleted)
		if callID == "" {
			callID = newID("call_")
		}
		r.open, r.openCall = len(r.resp.Output), index
		it := wire.Item{Type: wire.ItemFunctionCall, ID: newID("fc_"), Status: wire.StatusInProgress, CallID: callID}
		if t := r.names[name]; t != nil && t.Custom {
			it.Type, it.ID = wire.ItemCustomToolCall, newID("ctc_")
		} else if t != nil && t.MCP != nil {
			it = wire.Item{Type: wire.ItemMCPCall, ID: newID("mcp_"), Status: wire.StatusInProgress}
			if t.MCP.NeedsApproval(t.Name) {
				it = wire.Item{Type: wire.ItemMCPApprovalRequest, ID: newID("mcpr_")}
			}
		}
		r.resp.Output = append(r.resp.Output, it)
		r.name(&r.resp.Output[r.open], name)
		added := r.resp.Output[r.open]
		r.emit(&Event{Type: "response.output_item.added", OutputIndex: &r.open, Item: &added})
	}
	it := &r.resp.Output[r.open]
	if it.Name == "" {
		r.name(it, name)
	}
	if args != "" {
		// The arguments so far are the builder's: appending to a string
		// would copy them all at every delta.
		r.text.WriteString(args)
		it.Arguments = r.text.String()
		switch it.Type {
		case wire.ItemFunctionCall:
			r.emitDelta("response.function_call_arguments.delta", delta{outputIndex: r.open, itemID: it.ID, text: args})
		case wire.ItemMCPCall:
			r.emitDelta("response.mcp_call_arguments.delta", delta{outputIndex: r.open, itemID: it.ID, text: args})
		}
	}
}

// name names a call to the function the engine knows as engineName:
// a namespaced function is called by its own name in its namespace, as
// OpenAI returns it.
func (r *run) name(it *wire.Item, engineName string) {
	if t := r.names[engineName]; t != nil {
		if t.MCP != nil {
			it.ServerLabel, it.Name = t.MCP.Label, t.Name
			return
		}
		it.Namespace, it.Name = t.Namespace, t.Name
		return
	}
	it.Name = engineName
}

// closeOpen ends the item being streamed with status.
func (r *run) closeOpen(status string) {
	if r.open < 0 {
		return
	}
	idx := r.open
	it := &r.resp.Output[idx]
	it.Status = status
	if it.Type != wire.ItemReasoning && it.Type != wire.ItemMessage {
		// A call's arguments, built in r.text, are its own now.
		r.text.Reset()
	}
	switch it.Type {
	case wire.ItemReasoning:
		r.closeReasoning(idx, it)
	case wire.ItemMessage:
		text := r.text.String()
		r.text.Reset()
		it.Content = []wire.ContentPart{{Type: "output_text", Text: text}}
		var noLogprobs []string
		r.emit(&Event{Type: "response.output_text.done", OutputIndex: &idx, ItemID: it.ID, ContentIndex: &zero, Text: &text, Logprobs: &noLogprobs})
		r.emit(&Event{Type: "response.content_part.done", OutputIndex: &idx, ItemID: it.ID, ContentIndex: &zero, Part: &it.Content[0]})
	case wire.ItemMCPCall:
		args := it.Arguments
		r.emit(&Event{Type: "response.mcp_call_arguments.done", OutputIndex: &idx, ItemID: it.ID, Arguments: &args})
		if status == wire.StatusCompleted {
			// Done once the gateway has made the call (mcp.go).
			it.Status = wire.StatusInProgress
			r.pendingMCP = append(r.pendingMCP, idx)
			r.open, r.openCall = -1, -1
			return
		}
	case wire.ItemMCPApprovalRequest:
		it.Status = ""
	case wire.ItemCustomToolCall:
		// The engine wrote the function's arguments, {"input": "…"}: the
		// call's input is that string, streamed whole.
		var args map[string]json.RawMessage
		var input string
		if json.Unmarshal([]byte(it.Arguments), &args) == nil && json.Unmarshal(args[wire.CustomInputParam], &input) == nil {
			it.Arguments = input
		}
		in := it.Arguments
		r.emitDelta("response.custom_tool_call_input.delta", delta{outputIndex: idx, itemID: it.ID, text: in})
		r.emit(&Event{Type: "response.custom_tool_call_input.done", OutputIndex: &idx, ItemID: it.ID, Input: &in})
	default:
		args := it.Arguments
		r.emit(&Event{Type: "response.function_call_arguments.done", OutputIndex: &idx, ItemID: it.ID, Arguments: &args, Name: it.Name})
	}
	done := *it
	r.emit(&Event{Type: "response.output_item.done", OutputIndex: &idx, Item: &done})
	r.open, r.openCall = -1, -1
}

// end settles the response's status from how the stream ended: engErr is
// the engine's failure, cancelled says the response was cancelled. The
// events closing the open item go out in one write.
func (r *run) end(engErr error, cancelled bool, now int64) {
	r.held(func() { r.settle(engErr, cancelled, now) })
}

func (r *run) settle(engErr error, cancelled bool, now int64) {
	switch {
	case cancelled:
		r.closeOpen(wire.StatusIncomplete)
		r.resp.Status = wire.StatusCancelled
	case engErr != nil:
		r.closeOpen(wire.StatusIncomplete)
		r.resp.Status = wire.StatusFailed
		r.resp.Error = &wire.ResponseError{Code: "server_error", Message: engErr.Error()}
	case r.finish == "length":
		r.closeOpen(wire.StatusIncomplete)
		r.resp.Status = wire.StatusIncomplete
		r.resp.IncompleteDetails = &wire.IncompleteDetails{Reason: "max_output_tokens"}
	case r.finish == "content_filter":
		r.closeOpen(wire.StatusIncomplete)
		r.resp.Status = wire.StatusIncomplete
		r.resp.IncompleteDetails = &wire.IncompleteDetails{Reason: "content_filter"}
	default:
		r.closeOpen(wire.StatusCompleted)
		r.resp.Status = wire.StatusCompleted
		r.resp.CompletedAt = &now
	}
}

// errorEvent is the event that ends a stream whose response could not
// end as it is told (it could not be stored): the error's code, message
// and param at the top, as OpenAI's reference has them, and again under
// error, as its servers send them and as the SDKs raise them.
type errorEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Code           string          `json:"code"`
	Message        string          `json:"message"`
	Param          *string         `json:"param"`
	Error          *apierror.Error `json:"error"`
}

// errorEvent numbers and encodes the error event of ae; nil data when
// nothing listens.
func (r *run) errorEvent(ae *apierror.Error) []byte {
	seq, listened := r.number()
	if !listened {
		return nil
	}
	ev := errorEvent{Type: "error", SequenceNumber: seq, Code: ae.Code, Message: ae.Message, Error: ae}
	if ae.Param != "" {
		ev.Param = &ae.Param
	}
	b, err := json.Marshal(&ev)
	if err != nil {
		panic(fmt.Sprintf("responses: encoding an error event: %v", err))
	}
	return b
}

// terminalEvent is the event that announces the response's end, "" for a
// cancelled response (whose stream just ends).
func terminalEvent(status string) string {
	switch status {
	case wire.StatusCompleted:
		return "response.completed"
	case wire.StatusIncomplete:
		return "response.incomplete"
	case wire.StatusFailed:
		return "response.failed"
	}
	return ""
}
