package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// MCP tools are run by the gateway, as OpenAI runs them: the tools of a
// remote MCP server (streamable HTTP) are listed on first use (an
// mcp_list_tools item; a later turn whose context holds one lists no
// more), offered to the engine as functions named <server_label>__<tool>,
// and the engine's calls to them are made by the gateway inside the same
// response (mcp_call items with their output or error), the engine asked
// again with the results, until it answers without calling one. A tool
// that needs approval ends the response with an mcp_approval_request
// item; the client's mcp_approval_response in the next request's input
// makes (or refuses) the call. Calls are bounded by max_tool_calls and
// Config.MCPTimeout; a server's failure is an mcp_call's error, not the
// response's.

// Defaults for the MCP tool loop.
const (
	// DefaultMCPTimeout bounds one MCP request (connect, list, call).
	DefaultMCPTimeout = 60 * time.Second
	// maxMCPLegs bounds the engine turns of one response.
	maxMCPLegs = 16
)

// mcpSessions holds a response's connections to its MCP servers, opened
// on first use and closed when the response ends. It is owned by the
// response's goroutine.
type mcpSessions struct {
	s     *Service
	conns map[string]*mcp.ClientSession
	// calls counts the calls made, for max_tool_calls.
	calls int
}

func (ms *mcpSessions) close() {
	for _, c := range ms.conns {
		c.Close()
	}
}

// headerTransport adds a server's headers to each request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// session connects to srv, once per response.
func (ms *mcpSessions) session(ctx context.Context, srv *wire.MCPServer) (*mcp.ClientSession, error) {
	if c := ms.conns[srv.Label]; c != nil {
		return c, nil
	}
	if err := ms.s.mcpAllowed(srv.URL); err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "turnpike", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerTransport{srv.Headers, http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(ctx, ms.s.cfg.MCPTimeout)
	defer cancel()
	c, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to MCP server %q: %w", srv.Label, err)
	}
	if ms.conns == nil {
		ms.conns = make(map[string]*mcp.ClientSession)
	}
	ms.conns[srv.Label] = c
	return c, nil
}

// mcpAllowed checks a server URL against Config.MCPAllowedURLs: none is
// allowed unless a prefix names it. A prefix matches at a boundary only
// (its own end in '/' or ':', or the URL's next character one of "/?#"),
// so that "https://tools.internal" does not admit
// "https://tools.internal.example.com".
func (s *Service) mcpAllowed(url string) error {
	for _, p := range s.cfg.MCPAllowedURLs {
		if p != "" && strings.HasPrefix(url, p) && (len(url) == len(p) || strings.ContainsRune("/:", rune(p[len(p)-1])) || strings.ContainsRune("/?#", rune(url[len(p)]))) {
			return nil
		}
	}
	if len(s.cfg.MCPAllowedURLs) == 0 {
		return fmt.Errorf("the gateway calls no MCP server until its operator allows some by URL prefix (responses.mcpAllowedURLs); %s is not allowed", url)
	}
	return fmt.Errorf("the MCP server %s is not among the servers this gateway may call (responses.mcpAllowedURLs)", url)
}

// list lists srv's tools as an mcp_list_tools item; a failure is the
// item's error.
func (ms *mcpSessions) list(ctx context.Context, srv *wire.MCPServer) wire.Item {
	it := wire.Item{Type: wire.ItemMCPListTools, ID: newID("mcpl_"), Status: wire.StatusCompleted, ServerLabel: srv.Label, Output: "[]"}
	c, err := ms.session(ctx, srv)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, ms.s.cfg.MCPTimeout)
		defer cancel()
		var res *mcp.ListToolsResult
		if res, err = c.ListTools(ctx, nil); err == nil {
			tools := make([]wire.MCPListedTool, 0, len(res.Tools))
			for _, t := range res.Tools {
				schema, _ := json.Marshal(t.InputSchema)
				ann, _ := json.Marshal(t.Annotations)
				tools = append(tools, wire.MCPListedTool{Name: t.Name, Description: t.Description, InputSchema: schema, Annotations: ann})
			}
			b, _ := json.Marshal(tools)
			it.Output = string(b)
		}
	}
	if err != nil {
		it.Error, it.Status = err.Error(), wire.StatusFailed
	}
	ms.s.mcpRequests.WithLabelValues("list", resultOf(err)).Inc()
	return it
}

// call makes an mcp_call item's call and fills its output or error.
func (ms *mcpSessions) call(ctx context.Context, srv *wire.MCPServer, it *wire.Item) {
	ms.calls++
	it.Status = wire.StatusCompleted
	err := func() error {
		var args map[string]any
		if strings.TrimSpace(it.Arguments) != "" {
			if err := json.Unmarshal([]byte(it.Arguments), &args); err != nil {
				return fmt.Errorf("the arguments are not a JSON object: %v", err)
			}
		}
		c, err := ms.session(ctx, srv)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, ms.s.cfg.MCPTimeout)
		defer cancel()
		res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: it.Name, Arguments: args})
		if err != nil {
			return err
		}
		var out strings.Builder
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.TextContent:
				out.WriteString(c.Text)
			default:
				b, _ := json.Marshal(c)
				out.Write(b)
			}
		}
		if res.IsError {
			b, _ := json.Marshal(res.Content)
			return toolError{content: b}
		}
		it.Output = out.String()
		return nil
	}()
	if err != nil {
		it.Error, it.Status = callError(err), wire.StatusFailed
	}
	ms.s.mcpRequests.WithLabelValues("call", resultOf(err)).Inc()
}

// toolError is a tool's own failure (a result with isError), its content
// as the server sent it.
type toolError struct{ content json.RawMessage }

func (e toolError) Error() string { return string(e.content) }

// callError is an mcp_call's error as OpenAI writes it, in JSON: the
// tool's failure (mcp_tool_execution_error with its content), or a
// failure to reach or speak with the server (mcp_protocol_error).
func callError(err error) string {
	var te toolError
	if !errors.As(err, &te) {
		return wire.MCPProtocolError(err.Error())
	}
	b, _ := json.Marshal(struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}{"mcp_tool_execution_error", te.content})
	return string(b)
}

// errorText is an mcp_call's error as the model reads it.
func errorText(errJSON string) string {
	var e struct {
		Message string `json:"message"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal([]byte(errJSON), &e) != nil {
		return errJSON
	}
	text := e.Message
	for _, c := range e.Content {
		text += c.Text
	}
	return text
}

func resultOf(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// mcpSetup readies t's mcp tools before its first engine turn: each
// server's tools are listed unless the context holds a list of them
// already (a new list is an item at the head of the output), offered to
// the engine, and the calls the input approves are made. It returns the
// response's MCP sessions, nil when the request has no mcp tools; the
// caller closes them.
func (s *Service) mcpSetup(ctx context.Context, t *turn) (*mcpSessions, error) {
	if len(t.req.MCP) == 0 {
		return nil, nil
	}
	ms := &mcpSessions{s: s}
	req := *t.req
	req.Tools = slices.Clone(t.req.Tools)
	for i := range req.MCP {
		srv := &req.MCP[i]
		listed := lastList(t.items, srv.Label)
		if listed == nil {
			it := ms.list(ctx, srv)
			t.pre = append(t.pre, it)
			listed = &it
		}
		var tools []wire.MCPListedTool
		json.Unmarshal([]byte(listed.Output), &tools)
		for _, lt := range tools {
			if srv.Allowed != nil && !slices.Contains(srv.Allowed, lt.Name) {
				continue
			}
			tool := wire.Tool{Namespace: srv.Label, Name: lt.Name, Parameters: lt.InputSchema, MCP: srv}
			if lt.Description != "" {
				tool.Description = &lt.Description
			}
			if len(tool.Parameters) == 0 || string(tool.Parameters) == "null" {
				tool.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			req.Tools = append(req.Tools, tool)
		}
	}
	t.req = &req
	for i := range t.input {
		in := &t.input[i]
		if in.Type != wire.ItemMCPApprovalResponse {
			continue
		}
		ar := approvalRequest(t.items, in.ApprovalRequestID)
		if ar == nil {
			ms.close()
			return nil, wire.Invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"No mcp_approval_request with id '%s' comes before this approval.", in.ApprovalRequestID)
		}
		if !*in.Approve || answered(t.items, ar.ID) {
			continue
		}
		srv := req.Server(ar.ServerLabel)
		if srv == nil {
			ms.close()
			return nil, wire.Invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"The approved call is to MCP server '%s', which is not among the request's tools.", ar.ServerLabel)
		}
		call := wire.Item{Type: wire.ItemMCPCall, ID: newID("mcp_"), ServerLabel: ar.ServerLabel, Name: ar.Name, Arguments: ar.Arguments, ApprovalRequestID: ar.ID}
		ms.callBounded(ctx, t.req, srv, &call)
		t.pre = append(t.pre, call)
	}
	if err := s.fit(t, compacted(slices.Concat(t.items, t.pre))); err != nil {
		ms.close()
		return nil, err
	}
	return ms, nil
}

// lastList is the last tool list of the server labelled label in items
// that listed its tools, or nil.
func lastList(items []wire.Item, label string) *wire.Item {
	for i := len(items) - 1; i >= 0; i-- {
		if it := &items[i]; it.Type == wire.ItemMCPListTools && it.ServerLabel == label && it.Error == "" {
			return it
		}
	}
	return nil
}

// answered reports whether items hold the mcp_call made for approval
// request id (an approval sent twice makes the call once).
func answered(items []wire.Item, id string) bool {
	return slices.ContainsFunc(items, func(it wire.Item) bool { return it.Type == wire.ItemMCPCall && it.ApprovalRequestID == id })
}

// callBounded makes the call unless max_tool_calls has been reached, in
// which case the call fails saying so.
func (ms *mcpSessions) callBounded(ctx context.Context, req *wire.CreateRequest, srv *wire.MCPServer, it *wire.Item) {
	if req.MaxToolCalls != nil && ms.calls >= *req.MaxToolCalls {
		it.Status, it.Error = wire.StatusFailed, callError(fmt.Errorf("not called: this response has made max_tool_calls (%d) tool calls", *req.MaxToolCalls))
		return
	}
	ms.call(ctx, srv, it)
}

// mcpStep makes the MCP calls the engine's last turn asked for, each
// told as it is made, and says whether the engine is to be asked again
// with their results: not when the turn also called a function the
// client runs or a tool that waits for approval, nor when no MCP call
// was made. Once max_tool_calls is reached the next turn offers no
// tools, so the model answers.
func (s *Service) mcpStep(ctx context.Context, t *turn, r *run, ms *mcpSessions, legStart int) bool {
	r.closeOpen(wire.StatusCompleted)
	pending := r.pendingMCP
	r.pendingMCP = nil
	for _, idx := range pending {
		it := &r.resp.Output[idx]
		srv := t.req.Server(it.ServerLabel)
		r.emit(&Event{Type: "response.mcp_call.in_progress", OutputIndex: &idx, ItemID: it.ID})
		if srv == nil {
			it.Status, it.Error = wire.StatusFailed, callError(fmt.Errorf("no MCP server labelled %q among the request's tools", it.ServerLabel))
		} else {
			ms.callBounded(ctx, t.req, srv, it)
		}
		end := "response.mcp_call.completed"
		if it.Error != "" {
			end = "response.mcp_call.failed"
		}
		r.emit(&Event{Type: end, OutputIndex: &idx, ItemID: it.ID})
		done := *it
		r.emit(&Event{Type: "response.output_item.done", OutputIndex: &idx, Item: &done})
	}
	if len(pending) == 0 || ctx.Err() != nil {
		return false
	}
	for _, it := range r.resp.Output[legStart:] {
		if it.Type == wire.ItemFunctionCall || it.Type == wire.ItemMCPApprovalRequest {
			return false
		}
	}
	if t.req.MaxToolCalls != nil && ms.calls >= *t.req.MaxToolCalls {
		req := *t.req
		req.EngineChoice = wire.EngineChoice{Mode: "none"}
		t.req = &req
	}
	return true
}

// mcpLoop asks the engine again while its answer calls MCP tools, each
// time with the calls' results; engErr is the first turn's failure and
// the loop's result is the last one's. The caller owns r and ends it.
func (s *Service) mcpLoop(ctx context.Context, t *turn, r *run, ms *mcpSessions, hdr http.Header, engErr error) error {
	if ms == nil || engErr != nil {
		return engErr
	}
	legStart := len(t.pre)
	for leg := 1; ; leg++ {
		if !s.mcpStep(ctx, t, r, ms, legStart) || leg >= maxMCPLegs {
			return engErr
		}
		legStart = len(r.resp.Output)
		if err := s.fit(t, compacted(slices.Concat(t.items, r.resp.Output))); err != nil {
			return err
		}
		dt, err := s.begin(ctx, t, hdr)
		if err != nil {
			return err
		}
		r.finish = ""
		engErr = r.consume(dt)
		dt.End(engErr)
		if engErr != nil {
			return engErr
		}
	}
}
