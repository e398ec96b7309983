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

// MCPServer is a request's mcp tool: a remote MCP server and what of it
// the model may use.
type MCPServer struct {
	// Label names the server in items and in the engine's function names.
	Label string
	URL   string
	// Headers are sent with every request to the server (authorization
	// as a bearer token among them).
	Headers map[string]string
	// Allowed, when not nil, limits the tools offered to these names.
	Allowed []string
	// Approval is "always" (the default) or "never"; Always and Never
	// name the tools that take the other answer.
	Approval      string
	Always, Never []string
}

// needsApproval reports whether a call to tool waits for the client.
func (m *MCPServer) needsApproval(tool string) bool {
	switch {
	case slices.Contains(m.Never, tool):
		return false
	case slices.Contains(m.Always, tool):
		return true
	}
	return m.Approval != "never"
}

// decodeMCPTool reads a tool of type mcp.
func decodeMCPTool(f map[string]json.RawMessage, p string) (MCPServer, error) {
	m := MCPServer{Approval: "always"}
	if err := allowKeys(f, p, "type", "server_label", "server_url", "connector_id", "authorization", "headers",
		"allowed_tools", "require_approval", "server_description", "defer_loading", "allowed_callers", "tunnel_id"); err != nil {
		return m, err
	}
	if v, ok := f["tunnel_id"]; ok && !isNull(v) {
		return m, invalidf(p+".tunnel_id", "unsupported_value", "MCP tunnels are OpenAI's; this gateway runs remote MCP servers given by server_url.")
	}
	if err := checkToolExtras(f, p); err != nil {
		return m, err
	}
	var err error
	if m.Label, err = decodeString(f["server_label"], p+".server_label"); err != nil {
		return m, err
	}
	if m.Label == "" || strings.ContainsAny(m.Label, " \t\n") {
		return m, invalidf(p+".server_label", "invalid_value", "Invalid '%s.server_label': a non-empty name without spaces.", p)
	}
	if v, ok := f["connector_id"]; ok && !isNull(v) {
		return m, invalidf(p+".connector_id", "unsupported_value", "MCP connectors are OpenAI's; this gateway runs remote MCP servers given by server_url.")
	}
	if m.URL, err = decodeString(f["server_url"], p+".server_url"); err != nil {
		return m, err
	}
	if !strings.HasPrefix(m.URL, "http://") && !strings.HasPrefix(m.URL, "https://") {
		return m, invalidf(p+".server_url", "invalid_value", "Invalid '%s.server_url': an http or https URL.", p)
	}
	for _, k := range []string{"server_description"} {
		if v, ok := f[k]; ok && !isNull(v) {
			if _, err := decodeString(v, p+"."+k); err != nil {
				return m, err
			}
		}
	}
	if v, ok := f["headers"]; ok && !isNull(v) {
		hf, err := decodeObject(v, p+".headers")
		if err != nil {
			return m, err
		}
		m.Headers = make(map[string]string, len(hf))
		for _, k := range sortedKeys(hf) {
			if m.Headers[k], err = decodeString(hf[k], p+".headers."+k); err != nil {
				return m, err
			}
		}
	}
	if v, ok := f["authorization"]; ok && !isNull(v) {
		a, err := decodeString(v, p+".authorization")
		if err != nil {
			return m, err
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers["Authorization"] = "Bearer " + a
	}
	if v, ok := f["allowed_tools"]; ok && !isNull(v) {
		if m.Allowed, err = decodeToolFilter(v, p+".allowed_tools"); err != nil {
			return m, err
		}
	}
	if v, ok := f["require_approval"]; ok && !isNull(v) {
		if v[0] == '"' {
			m.Approval, err = decodeEnum(v, p+".require_approval", "always", "never")
			return m, err
		}
		af, err := decodeObject(v, p+".require_approval")
		if err != nil {
			return m, typeError(p+".require_approval", "a string or an object", v)
		}
		if err := allowKeys(af, p+".require_approval", "always", "never"); err != nil {
			return m, err
		}
		if a, ok := af["always"]; ok && !isNull(a) {
			if m.Always, err = decodeToolFilter(a, p+".require_approval.always"); err != nil {
				return m, err
			}
		}
		if n, ok := af["never"]; ok && !isNull(n) {
			if m.Never, err = decodeToolFilter(n, p+".require_approval.never"); err != nil {
				return m, err
			}
		}
		// With a filter, the tools it does not name need approval, as
		// OpenAI asks for it by default.
	}
	return m, nil
}

// decodeToolFilter reads a list of tool names or a filter object
// ({tool_names, read_only}); the names, never nil.
func decodeToolFilter(raw json.RawMessage, p string) ([]string, error) {
	names := func(raw json.RawMessage, p string) ([]string, error) {
		return decodeList(raw, p, "an array of strings", decodeString)
	}
	if kindOf(raw) == "an array" {
		return names(raw, p)
	}
	f, err := decodeObject(raw, p)
	if err != nil {
		return nil, typeError(p, "an array of strings or an object", raw)
	}
	if err := allowKeys(f, p, "tool_names", "read_only"); err != nil {
		return nil, err
	}
	if v, ok := f["read_only"]; ok && !isNull(v) {
		if _, err := decodeBool(v, p+".read_only"); err != nil {
			return nil, err
		}
	}
	out := []string{}
	if v, ok := f["tool_names"]; ok && !isNull(v) {
		return names(v, p+".tool_names")
	}
	return out, nil
}

// mcpListedTool is one tool in an mcp_list_tools item.
type mcpListedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	Annotations json.RawMessage `json:"annotations"`
}

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
func (ms *mcpSessions) session(ctx context.Context, srv *MCPServer) (*mcp.ClientSession, error) {
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
func (ms *mcpSessions) list(ctx context.Context, srv *MCPServer) Item {
	it := Item{Type: ItemMCPListTools, ID: newID("mcpl_"), Status: StatusCompleted, ServerLabel: srv.Label, Output: "[]"}
	c, err := ms.session(ctx, srv)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, ms.s.cfg.MCPTimeout)
		defer cancel()
		var res *mcp.ListToolsResult
		if res, err = c.ListTools(ctx, nil); err == nil {
			tools := make([]mcpListedTool, 0, len(res.Tools))
			for _, t := range res.Tools {
				schema, _ := json.Marshal(t.InputSchema)
				ann, _ := json.Marshal(t.Annotations)
				tools = append(tools, mcpListedTool{Name: t.Name, Description: t.Description, InputSchema: schema, Annotations: ann})
			}
			b, _ := json.Marshal(tools)
			it.Output = string(b)
		}
	}
	if err != nil {
		it.Error, it.Status = err.Error(), StatusFailed
	}
	ms.s.mcpRequests.WithLabelValues("list", resultOf(err)).Inc()
	return it
}

// call makes an mcp_call item's call and fills its output or error.
func (ms *mcpSessions) call(ctx context.Context, srv *MCPServer, it *Item) {
	ms.calls++
	it.Status = StatusCompleted
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
		it.Error, it.Status = callError(err), StatusFailed
	}
	ms.s.mcpRequests.WithLabelValues("call", resultOf(err)).Inc()
}

// toolError is a tool's own failure (a result with isError), its content
// as the server sent it.
type toolError struct{ content json.RawMessage }

func (e toolError) Error() string { return string(e.content) }

// JSON-RPC's internal error code, for a call that failed on the way.
const mcpInternalError = -32603

// callError is an mcp_call's error as OpenAI writes it, in JSON: the
// tool's failure (mcp_tool_execution_error with its content), or a
// failure to reach or speak with the server (mcp_protocol_error).
func callError(err error) string {
	var te toolError
	var b []byte
	if errors.As(err, &te) {
		b, _ = json.Marshal(struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}{"mcp_tool_execution_error", te.content})
	} else {
		b, _ = json.Marshal(struct {
			Type    string `json:"type"`
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{"mcp_protocol_error", mcpInternalError, err.Error()})
	}
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

// decodeMCPItem reads an MCP item sent back as input (a stateless
// client's history) or an approval response into it, whose type, id and
// status are read.
func decodeMCPItem(f map[string]json.RawMessage, p string, it *Item) error {
	str := func(k string, required bool) (string, error) {
		v, ok := f[k]
		if !ok || isNull(v) {
			if required {
				return "", invalidf(p+"."+k, "missing_required_parameter", "Missing required parameter: '%s.%s'.", p, k)
			}
			return "", nil
		}
		return decodeString(v, p+"."+k)
	}
	var err error
	switch it.Type {
	case ItemMCPApprovalResponse:
		if err := allowKeys(f, p, "type", "id", "approval_request_id", "approve", "reason"); err != nil {
			return err
		}
		if it.ApprovalRequestID, err = str("approval_request_id", true); err != nil {
			return err
		}
		if _, err := str("reason", false); err != nil {
			return err
		}
		v, ok := f["approve"]
		if !ok || isNull(v) {
			return invalidf(p+".approve", "missing_required_parameter", "Missing required parameter: '%s.approve'.", p)
		}
		a, err := decodeBool(v, p+".approve")
		it.Approve = &a
		return err
	case ItemMCPListTools:
		if err := allowKeys(f, p, "type", "id", "server_label", "tools", "error"); err != nil {
			return err
		}
		tools, err := decodeList(f["tools"], p+".tools", "an array", func(e json.RawMessage, ep string) (mcpListedTool, error) {
			var t mcpListedTool
			tf, err := decodeObject(e, ep)
			if err != nil {
				return t, err
			}
			if err := allowKeys(tf, ep, "name", "description", "input_schema", "annotations"); err != nil {
				return t, err
			}
			if t.Name, err = decodeString(tf["name"], ep+".name"); err != nil {
				return t, err
			}
			if d, ok := tf["description"]; ok && !isNull(d) {
				if t.Description, err = decodeString(d, ep+".description"); err != nil {
					return t, err
				}
			}
			if sc, ok := tf["input_schema"]; ok && !isNull(sc) {
				if kindOf(sc) != "an object" {
					return t, typeError(ep+".input_schema", "an object", sc)
				}
				t.InputSchema = sc
			}
			if an, ok := tf["annotations"]; ok && !isNull(an) {
				if kindOf(an) != "an object" {
					return t, typeError(ep+".annotations", "an object", an)
				}
				t.Annotations = an
			}
			return t, nil
		})
		if err != nil {
			return err
		}
		b, _ := json.Marshal(tools)
		it.Output = string(b)
		if it.Error, err = str("error", false); err != nil {
			return err
		}
	case ItemMCPCall:
		if err := allowKeys(f, p, "type", "id", "status", "server_label", "name", "arguments", "output", "error", "approval_request_id"); err != nil {
			return err
		}
		if e, ok := f["error"]; ok && !isNull(e) {
			switch kindOf(e) {
			case "a string":
				msg, _ := decodeString(e, p+".error")
				it.Error = callError(errors.New(msg))
			case "an object":
				ef, _ := decodeObject(e, p+".error")
				if _, err := decodeEnum(ef["type"], p+".error.type", "mcp_protocol_error", "mcp_tool_execution_error", "http_error"); err != nil {
					return err
				}
				b, _ := json.Marshal(ef)
				it.Error = string(b)
			default:
				return typeError(p+".error", "a string or an object", e)
			}
		}
		for _, fd := range []struct {
			k   string
			dst *string
		}{{"approval_request_id", &it.ApprovalRequestID}, {"output", &it.Output}} {
			if *fd.dst, err = str(fd.k, false); err != nil {
				return err
			}
		}
		if it.Status != "" {
			if _, err := decodeEnum(f["status"], p+".status", "in_progress", "completed", "incomplete", "calling", "failed"); err != nil {
				return err
			}
		}
	case ItemMCPApprovalRequest:
		if err := allowKeys(f, p, "type", "id", "server_label", "name", "arguments"); err != nil {
			return err
		}
	}
	if it.ServerLabel, err = str("server_label", true); err != nil {
		return err
	}
	if it.Type == ItemMCPCall || it.Type == ItemMCPApprovalRequest {
		if it.Name, err = str("name", true); err != nil {
			return err
		}
		if it.Arguments, err = str("arguments", true); err != nil {
			return err
		}
	}
	return nil
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
		var tools []mcpListedTool
		json.Unmarshal([]byte(listed.Output), &tools)
		for _, lt := range tools {
			if srv.Allowed != nil && !slices.Contains(srv.Allowed, lt.Name) {
				continue
			}
			tool := Tool{Namespace: srv.Label, Name: lt.Name, Parameters: lt.InputSchema, MCP: srv}
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
		if in.Type != ItemMCPApprovalResponse {
			continue
		}
		ar := approvalRequest(t.items, in.ApprovalRequestID)
		if ar == nil {
			ms.close()
			return nil, invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"No mcp_approval_request with id '%s' comes before this approval.", in.ApprovalRequestID)
		}
		if !*in.Approve || answered(t.items, ar.ID) {
			continue
		}
		srv := req.server(ar.ServerLabel)
		if srv == nil {
			ms.close()
			return nil, invalidf(fmt.Sprintf("input[%d].approval_request_id", i), "invalid_value",
				"The approved call is to MCP server '%s', which is not among the request's tools.", ar.ServerLabel)
		}
		call := Item{Type: ItemMCPCall, ID: newID("mcp_"), ServerLabel: ar.ServerLabel, Name: ar.Name, Arguments: ar.Arguments, ApprovalRequestID: ar.ID}
		ms.callBounded(ctx, t.req, srv, &call)
		t.pre = append(t.pre, call)
	}
	if err := s.fit(t, compacted(slices.Concat(t.items, t.pre))); err != nil {
		ms.close()
		return nil, err
	}
	return ms, nil
}

// server is the request's mcp tool labelled label, or nil.
func (r *CreateRequest) server(label string) *MCPServer {
	for i := range r.MCP {
		if r.MCP[i].Label == label {
			return &r.MCP[i]
		}
	}
	return nil
}

// lastList is the last tool list of the server labelled label in items
// that listed its tools, or nil.
func lastList(items []Item, label string) *Item {
	for i := len(items) - 1; i >= 0; i-- {
		if it := &items[i]; it.Type == ItemMCPListTools && it.ServerLabel == label && it.Error == "" {
			return it
		}
	}
	return nil
}

// answered reports whether items hold the mcp_call made for approval
// request id (an approval sent twice makes the call once).
func answered(items []Item, id string) bool {
	return slices.ContainsFunc(items, func(it Item) bool { return it.Type == ItemMCPCall && it.ApprovalRequestID == id })
}

// callBounded makes the call unless max_tool_calls has been reached, in
// which case the call fails saying so.
func (ms *mcpSessions) callBounded(ctx context.Context, req *CreateRequest, srv *MCPServer, it *Item) {
	if req.MaxToolCalls != nil && ms.calls >= *req.MaxToolCalls {
		it.Status, it.Error = StatusFailed, callError(fmt.Errorf("not called: this response has made max_tool_calls (%d) tool calls", *req.MaxToolCalls))
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
	r.closeOpen(StatusCompleted)
	pending := r.pendingMCP
	r.pendingMCP = nil
	for _, idx := range pending {
		it := &r.resp.Output[idx]
		srv := t.req.server(it.ServerLabel)
		r.emit(&Event{Type: "response.mcp_call.in_progress", OutputIndex: &idx, ItemID: it.ID})
		if srv == nil {
			it.Status, it.Error = StatusFailed, callError(fmt.Errorf("no MCP server labelled %q among the request's tools", it.ServerLabel))
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
		if it.Type == ItemFunctionCall || it.Type == ItemMCPApprovalRequest {
			return false
		}
	}
	if t.req.MaxToolCalls != nil && ms.calls >= *t.req.MaxToolCalls {
		req := *t.req
		req.toolChoice = toolChoice{mode: "none"}
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

// redactMCP is an mcp tool as echoed on the response and stored: without
// its headers and authorization, which are the client's secrets.
func redactMCP(f map[string]json.RawMessage) json.RawMessage {
	out := make(map[string]json.RawMessage, len(f))
	for k, v := range f {
		if k != "headers" && k != "authorization" {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	return b
}
