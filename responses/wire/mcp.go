package wire

import (
	"encoding/json"
	"slices"
	"strings"
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
func (m *MCPServer) NeedsApproval(tool string) bool {
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
		return m, Invalidf(p+".tunnel_id", "unsupported_value", "MCP tunnels are OpenAI's; this gateway runs remote MCP servers given by server_url.")
	}
	if err := checkToolExtras(f, p); err != nil {
		return m, err
	}
	var err error
	if m.Label, err = decodeString(f["server_label"], p+".server_label"); err != nil {
		return m, err
	}
	if m.Label == "" || strings.ContainsAny(m.Label, " \t\n") {
		return m, Invalidf(p+".server_label", "invalid_value", "Invalid '%s.server_label': a non-empty name without spaces.", p)
	}
	if v, ok := f["connector_id"]; ok && !isNull(v) {
		return m, Invalidf(p+".connector_id", "unsupported_value", "MCP connectors are OpenAI's; this gateway runs remote MCP servers given by server_url.")
	}
	if m.URL, err = decodeString(f["server_url"], p+".server_url"); err != nil {
		return m, err
	}
	if !strings.HasPrefix(m.URL, "http://") && !strings.HasPrefix(m.URL, "https://") {
		return m, Invalidf(p+".server_url", "invalid_value", "Invalid '%s.server_url': an http or https URL.", p)
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

// decodeMCPItem reads an MCP item sent back as input (a stateless
// client's history) or an approval response into it, whose type, id and
// status are read.
func decodeMCPItem(f map[string]json.RawMessage, p string, it *Item) error {
	str := func(k string, required bool) (string, error) {
		v, ok := f[k]
		if !ok || isNull(v) {
			if required {
				return "", Invalidf(p+"."+k, "missing_required_parameter", "Missing required parameter: '%s.%s'.", p, k)
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
			return Invalidf(p+".approve", "missing_required_parameter", "Missing required parameter: '%s.approve'.", p)
		}
		a, err := decodeBool(v, p+".approve")
		it.Approve = &a
		return err
	case ItemMCPListTools:
		if err := allowKeys(f, p, "type", "id", "server_label", "tools", "error"); err != nil {
			return err
		}
		tools, err := decodeList(f["tools"], p+".tools", "an array", func(e json.RawMessage, ep string) (MCPListedTool, error) {
			var t MCPListedTool
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
				it.Error = MCPProtocolError(msg)
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

// server is the request's mcp tool labelled label, or nil.
func (r *CreateRequest) Server(label string) *MCPServer {
	for i := range r.MCP {
		if r.MCP[i].Label == label {
			return &r.MCP[i]
		}
	}
	return nil
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

// mcpListedTool is one tool in an mcp_list_tools item.
type MCPListedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	Annotations json.RawMessage `json:"annotations"`
}

// JSON-RPC's internal error code, for a call that failed on the way.
const mcpInternalError = -32603

// protocolError is an mcp_call's error that is not the tool's own, as
// OpenAI writes it, in JSON.
func MCPProtocolError(msg string) string {
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{"mcp_protocol_error", mcpInternalError, msg})
	return string(b)
}
