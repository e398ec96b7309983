package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/responses/mcpclient"
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

// mcpList lists srv's tools as an mcp_list_tools item; a failure is the
// item's error.
func (s *Service) mcpList(ctx context.Context, ms *mcpclient.Sessions, srv *wire.MCPServer) wire.Item {
	it := wire.Item{Type: wire.ItemMCPListTools, ID: newID("mcpl_"), Status: wire.StatusCompleted, ServerLabel: srv.Label, Output: "[]"}
	tools, err := ms.List(ctx, srv)
	if err == nil {
		b, _ := json.Marshal(tools)
		it.Output = string(b)
	} else {
		it.Error, it.Status = err.Error(), wire.StatusFailed
	}
	s.mcpRequests.WithLabelValues("list", resultOf(err)).Inc()
	return it
}

// mcpCall makes an mcp_call item's call and fills its output or error.
func (s *Service) mcpCall(ctx context.Context, ms *mcpclient.Sessions, srv *wire.MCPServer, it *wire.Item) {
	it.Status = wire.StatusCompleted
	out, err := ms.Call(ctx, srv, it.Name, it.Arguments)
	if err != nil {
		it.Error, it.Status = mcpclient.CallError(err), wire.StatusFailed
	} else {
		it.Output = out
	}
	s.mcpRequests.WithLabelValues("call", resultOf(err)).Inc()
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
func (s *Service) mcpSetup(ctx context.Context, t *turn) (*mcpclient.Sessions, error) {
	if len(t.req.MCP) == 0 {
		return nil, nil
	}
	ms := s.mcp.Open()
	req := *t.req
	req.Tools = slices.Clone(t.req.Tools)
	for i := range req.MCP {
		srv := &req.MCP[i]
		listed := lastList(t.items, srv.Label)
		if listed == nil {
			it := s.mcpList(ctx, ms, srv)
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
			ms.Close()
			return nil, wire.Invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"No mcp_approval_request with id '%s' comes before this approval.", in.ApprovalRequestID)
		}
		if !*in.Approve || answered(t.items, ar.ID) {
			continue
		}
		srv := req.Server(ar.ServerLabel)
		if srv == nil {
			ms.Close()
			return nil, wire.Invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"The approved call is to MCP server '%s', which is not among the request's tools.", ar.ServerLabel)
		}
		call := wire.Item{Type: wire.ItemMCPCall, ID: newID("mcp_"), ServerLabel: ar.ServerLabel, Name: ar.Name, Arguments: ar.Arguments, ApprovalRequestID: ar.ID}
		s.callBounded(ctx, ms, t.req, srv, &call)
		t.pre = append(t.pre, call)
	}
	if err := s.fit(t, compacted(slices.Concat(t.items, t.pre))); err != nil {
		ms.Close()
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
func (s *Service) callBounded(ctx context.Context, ms *mcpclient.Sessions, req *wire.CreateRequest, srv *wire.MCPServer, it *wire.Item) {
	if req.MaxToolCalls != nil && ms.Calls() >= *req.MaxToolCalls {
		it.Status, it.Error = wire.StatusFailed, mcpclient.CallError(fmt.Errorf("not called: this response has made max_tool_calls (%d) tool calls", *req.MaxToolCalls))
		return
	}
	s.mcpCall(ctx, ms, srv, it)
}

// mcpStep makes the MCP calls the engine's last turn asked for, each
// told as it is made, and says whether the engine is to be asked again
// with their results: not when the turn also called a function the
// client runs or a tool that waits for approval, nor when no MCP call
// was made. Once max_tool_calls is reached the next turn offers no
// tools, so the model answers.
func (s *Service) mcpStep(ctx context.Context, t *turn, r *run, ms *mcpclient.Sessions, legStart int) bool {
	r.closeOpen(wire.StatusCompleted)
	pending := r.pendingMCP
	r.pendingMCP = nil
	for _, idx := range pending {
		it := &r.resp.Output[idx]
		srv := t.req.Server(it.ServerLabel)
		r.emit(&Event{Type: "response.mcp_call.in_progress", OutputIndex: &idx, ItemID: it.ID})
		if srv == nil {
			it.Status, it.Error = wire.StatusFailed, mcpclient.CallError(fmt.Errorf("no MCP server labelled %q among the request's tools", it.ServerLabel))
		} else {
			s.callBounded(ctx, ms, t.req, srv, it)
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
	if t.req.MaxToolCalls != nil && ms.Calls() >= *t.req.MaxToolCalls {
		req := *t.req
		req.EngineChoice = wire.EngineChoice{Mode: "none"}
		t.req = &req
	}
	return true
}

// mcpLoop asks the engine again while its answer calls MCP tools, each
// time with the calls' results; engErr is the first turn's failure and
// the loop's result is the last one's. The caller owns r and ends it.
func (s *Service) mcpLoop(ctx context.Context, t *turn, r *run, ms *mcpclient.Sessions, hdr http.Header, engErr error) error {
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
