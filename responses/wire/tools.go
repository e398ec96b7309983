package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/turnpike-gateway/turnpike/apierror"
)

// Tool is a function the model may call: a top-level function tool, or
// one of a namespace tool's functions, flattened for the engine (which
// knows only a flat list of functions) and mapped back to its namespace
// in the output.
type Tool struct {
	// Namespace is the namespace tool the function was declared in; ""
	// for a top-level function.
	Namespace string
	// Name is the function's name within its namespace.
	Name        string
	Description *string
	Parameters  json.RawMessage
	Strict      *bool
	// MCP is the server of a tool an MCP server listed (Namespace is its
	// label); the gateway makes its calls. nil for a function.
	MCP *MCPServer
	// Custom marks a custom tool: freeform text input, offered to the
	// engine as a function of one string parameter, customInputParam.
	Custom bool
}

// customInputParam is the one parameter of a custom tool's function.
const CustomInputParam = "input"

// customParameters are a custom tool's function's parameters.
var customParameters = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"The tool's input, as free text."}},"required":["input"]}`)

// decodeCustom reads a custom tool; namespace is the namespace tool it
// is in, "" for none. A grammar format is checked and described to the
// model; engines are not asked to constrain the input to it.
func decodeCustom(f map[string]json.RawMessage, p, namespace string) (Tool, error) {
	t := Tool{Namespace: namespace, Custom: true, Parameters: customParameters}
	if err := allowKeys(f, p, "type", "name", "description", "format", "defer_loading", "async", "allowed_callers"); err != nil {
		return t, err
	}
	var err error
	if t.Name, err = decodeString(f["name"], p+".name"); err != nil {
		return t, err
	}
	if t.Name == "" {
		return t, Invalidf(p+".name", "empty_string", "Invalid '%s.name': empty string.", p)
	}
	desc := ""
	if d, ok := f["description"]; ok && !isNull(d) {
		if desc, err = decodeString(d, p+".description"); err != nil {
			return t, err
		}
	}
	if err := checkToolExtras(f, p); err != nil {
		return t, err
	}
	if v, ok := f["format"]; ok && !isNull(v) {
		ff, err := decodeObject(v, p+".format")
		if err != nil {
			return t, err
		}
		typ, err := decodeEnum(ff["type"], p+".format.type", "text", "grammar")
		if err != nil {
			return t, err
		}
		if typ == "grammar" {
			if err := checkObject(v, p+".format", fields{
				"type": {nil, true}, "syntax": {enum("lark", "regex"), true}, "definition": {str, true},
			}); err != nil {
				return t, err
			}
			syntax, _ := decodeString(ff["syntax"], "")
			def, _ := decodeString(ff["definition"], "")
			desc += fmt.Sprintf("\n\nThe input must match this %s grammar:\n%s", syntax, def)
		} else if err := allowKeys(ff, p+".format", "type"); err != nil {
			return t, err
		}
	}
	if desc != "" {
		t.Description = &desc
	}
	return t, nil
}

// EngineName is the name the engine knows the tool by.
func (t *Tool) EngineName() string { return EngineName(t.Namespace, t.Name) }

// engineName flattens a namespaced function's name for the engine:
// the namespace, trailing underscores trimmed, "__", the name
// (multi_agent_v1 and spawn_agent make multi_agent_v1__spawn_agent;
// mcp__fs__ and read make mcp__fs__read). It is a pure function of the
// two, so history items render the same whatever tools a later turn has.
func EngineName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return strings.TrimRight(namespace, "_") + "__" + name
}

// HostedTool is a tool of a type OpenAI runs on its side (web search,
// file search, code interpreter, …), which turnpike cannot run. It never
// reaches the engine; Config.HostedTools says whether a request carrying
// one is answered without it or refused.
type HostedTool struct {
	// Index is the tool's place in the request's tools.
	Index int
	// Type is its type as the client sent it.
	Type string
}

// hostedToolTypes are the tool types OpenAI runs (or that make the model
// emit items only OpenAI's own models produce); turnpike can run none.
var hostedToolTypes = []string{
	"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
	"file_search", "code_interpreter", "image_generation",
	"computer", "computer_use", "computer_use_preview",
	"local_shell", "shell", "apply_patch", "tool_search", "programmatic_tool_calling",
}

// functionKeys are the fields of a function tool, top-level or in a
// namespace.
var functionKeys = []string{"type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers", "output_schema", "async"}

// decodeTools reads the tools array into the functions the engine is
// offered (namespaces flattened) and the hosted tools, in order.
func (r *CreateRequest) decodeTools(raw json.RawMessage) error {
	elems, err := decodeList(raw, "tools", "an array", func(e json.RawMessage, _ string) (json.RawMessage, error) { return e, nil })
	if err != nil {
		return err
	}
	r.Tools, r.HostedTools, r.ToolsRaw = nil, nil, elems
	for i, e := range elems {
		p := fmt.Sprintf("tools[%d]", i)
		f, err := decodeObject(e, p)
		if err != nil {
			return err
		}
		typ, err := decodeString(f["type"], p+".type")
		if err != nil {
			return err
		}
		switch {
		case typ == "function":
			t, err := decodeFunction(f, p, "")
			if err != nil {
				return err
			}
			r.Tools = append(r.Tools, t)
		case typ == "namespace":
			if err := r.decodeNamespace(f, p); err != nil {
				return err
			}
		case slices.Contains(hostedToolTypes, typ):
			r.HostedTools = append(r.HostedTools, HostedTool{Index: i, Type: typ})
		case typ == "mcp":
			m, err := decodeMCPTool(f, p)
			if err != nil {
				return err
			}
			if slices.ContainsFunc(r.MCP, func(o MCPServer) bool { return o.Label == m.Label }) {
				return Invalidf(p+".server_label", "duplicate_server_label", "Invalid '%s.server_label': another mcp tool is labelled '%s'.", p, m.Label)
			}
			r.MCP = append(r.MCP, m)
			r.ToolsRaw[i] = redactMCP(f)
		case typ == "custom":
			t, err := decodeCustom(f, p, "")
			if err != nil {
				return err
			}
			r.Tools = append(r.Tools, t)
		default:
			return Invalidf(p+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'function', 'namespace', %s.", typ, quoteList(hostedToolTypes))
		}
	}
	// The engine sees one flat list: a namespaced function's name in it
	// must name that function alone, or its calls could not be mapped back.
	seen := make(map[string]*Tool, len(r.Tools))
	for i := range r.Tools {
		t := &r.Tools[i]
		n := t.EngineName()
		if other := seen[n]; other != nil && (other.Namespace != "" || t.Namespace != "") {
			return Invalidf("tools", "duplicate_tool_name", "Invalid 'tools': the engine would know two tools as '%s' (a namespace's functions are named <namespace>__<name>); rename one.", n)
		}
		seen[n] = t
	}
	return nil
}

// decodeNamespace reads a namespace tool: a named group of function tools.
func (r *CreateRequest) decodeNamespace(f map[string]json.RawMessage, p string) error {
	if err := allowKeys(f, p, "type", "name", "description", "tools"); err != nil {
		return err
	}
	ns, err := decodeString(f["name"], p+".name")
	if err != nil {
		return err
	}
	if ns == "" {
		return Invalidf(p+".name", "empty_string", "Invalid '%s.name': empty string.", p)
	}
	if d, ok := f["description"]; ok && !isNull(d) {
		if _, err := decodeString(d, p+".description"); err != nil {
			return err
		}
	}
	members, err := decodeList(f["tools"], p+".tools", "an array", decodeObject)
	if err != nil {
		if isNull(f["tools"]) {
			return Invalidf(p+".tools", "missing_required_parameter", "Missing required parameter: '%s.tools'.", p)
		}
		return err
	}
	for j, m := range members {
		mp := fmt.Sprintf("%s.tools[%d]", p, j)
		typ, err := decodeString(m["type"], mp+".type")
		if err != nil {
			return err
		}
		var t Tool
		switch typ {
		case "function":
			t, err = decodeFunction(m, mp, ns)
		case "custom":
			t, err = decodeCustom(m, mp, ns)
		default:
			return Invalidf(mp+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'function' and 'custom'.", typ)
		}
		if err != nil {
			return err
		}
		r.Tools = append(r.Tools, t)
	}
	return nil
}

// decodeFunction reads a function tool's fields; namespace is the
// namespace tool it is in, "" for none.
func decodeFunction(f map[string]json.RawMessage, p, namespace string) (Tool, error) {
	t := Tool{Namespace: namespace}
	if err := allowKeys(f, p, functionKeys...); err != nil {
		return t, err
	}
	var err error
	if t.Name, err = decodeString(f["name"], p+".name"); err != nil {
		return t, err
	}
	if t.Name == "" {
		return t, Invalidf(p+".name", "empty_string", "Invalid '%s.name': empty string.", p)
	}
	if d, ok := f["description"]; ok && !isNull(d) {
		if t.Description, err = ptr(decodeString(d, p+".description")); err != nil {
			return t, err
		}
	}
	if ps, ok := f["parameters"]; ok && !isNull(ps) {
		if kindOf(ps) != "an object" {
			return t, typeError(p+".parameters", "an object", ps)
		}
		t.Parameters = ps
	}
	if s, ok := f["strict"]; ok && !isNull(s) {
		if t.Strict, err = ptr(decodeBool(s, p+".strict")); err != nil {
			return t, err
		}
	}
	if err := checkToolExtras(f, p); err != nil {
		return t, err
	}
	if v, ok := f["output_schema"]; ok && !isNull(v) && kindOf(v) != "an object" {
		return t, typeError(p+".output_schema", "an object", v)
	}
	return t, nil
}

// checkToolExtras checks a tool's defer_loading, async and
// allowed_callers: accepted and not acted on, as turnpike defers no tool
// loading and lets no program call tools.
func checkToolExtras(f map[string]json.RawMessage, p string) error {
	for _, k := range []string{"defer_loading", "async"} {
		if v, ok := f[k]; ok && !isNull(v) {
			if _, err := decodeBool(v, p+"."+k); err != nil {
				return err
			}
		}
	}
	if v, ok := f["allowed_callers"]; ok && !isNull(v) {
		if _, err := decodeList(v, p+".allowed_callers", "an array of strings", func(e json.RawMessage, ep string) (string, error) {
			return decodeEnum(e, ep, "direct", "programmatic")
		}); err != nil {
			return err
		}
	}
	return nil
}

// toolChoice is a request's tool_choice as the engine is to be told it.
type EngineChoice struct {
	// mode is "none", "auto" or "required"; "function" forces name;
	// "" leaves the choice to the engine (a forced hosted tool, dropped).
	Mode, Name string
	// allowed, when not nil, limits the tools the engine is offered to
	// these engine names (an allowed_tools choice).
	Allowed []string
}

// decodeToolChoice reads tool_choice: a mode, a function, an allowed_tools
// list, or a hosted tool type. Names are resolved against the tools in
// resolveToolChoice, once both are read.
func decodeToolChoice(raw json.RawMessage) (EngineChoice, error) {
	if raw[0] == '"' {
		mode, err := decodeEnum(raw, "tool_choice", "none", "auto", "required")
		return EngineChoice{Mode: mode}, err
	}
	f, err := decodeObject(raw, "tool_choice")
	if err != nil {
		return EngineChoice{}, typeError("tool_choice", "a string or an object", raw)
	}
	typ, err := decodeString(f["type"], "tool_choice.type")
	if err != nil {
		return EngineChoice{}, err
	}
	switch {
	case typ == "function":
		if err := allowKeys(f, "tool_choice", "type", "name"); err != nil {
			return EngineChoice{}, err
		}
		name, err := decodeString(f["name"], "tool_choice.name")
		return EngineChoice{Mode: "function", Name: name}, err
	case typ == "allowed_tools":
		if err := allowKeys(f, "tool_choice", "type", "mode", "tools"); err != nil {
			return EngineChoice{}, err
		}
		mode, err := decodeEnum(f["mode"], "tool_choice.mode", "auto", "required")
		if err != nil {
			return EngineChoice{}, err
		}
		tools, err := decodeList(f["tools"], "tool_choice.tools", "an array", decodeObject)
		if err != nil {
			return EngineChoice{}, err
		}
		c := EngineChoice{Mode: mode, Allowed: []string{}}
		for i, t := range tools {
			p := fmt.Sprintf("tool_choice.tools[%d]", i)
			typ, err := decodeString(t["type"], p+".type")
			if err != nil {
				return EngineChoice{}, err
			}
			if typ != "function" && typ != "custom" {
				continue // a hosted tool: never offered to the engine anyway
			}
			name, err := decodeString(t["name"], p+".name")
			if err != nil {
				return EngineChoice{}, err
			}
			c.Allowed = append(c.Allowed, name)
		}
		return c, nil
	case typ == "mcp":
		if err := allowKeys(f, "tool_choice", "type", "server_label", "name"); err != nil {
			return EngineChoice{}, err
		}
		label, err := decodeString(f["server_label"], "tool_choice.server_label")
		if err != nil {
			return EngineChoice{}, err
		}
		if n, ok := f["name"]; ok && !isNull(n) {
			name, err := decodeString(n, "tool_choice.name")
			return EngineChoice{Mode: "function", Name: EngineName(label, name)}, err
		}
		return EngineChoice{Mode: "required"}, nil
	case typ == "custom":
		if err := allowKeys(f, "tool_choice", "type", "name"); err != nil {
			return EngineChoice{}, err
		}
		name, err := decodeString(f["name"], "tool_choice.name")
		return EngineChoice{Mode: "function", Name: name}, err
	case slices.Contains(hostedToolTypes, typ):
		// The hosted tool is never offered to the engine: the engine
		// chooses among the rest.
		return EngineChoice{}, nil
	}
	return EngineChoice{}, Invalidf("tool_choice.type", "invalid_value", "Invalid value: '%s'. Supported values are: 'function', 'allowed_tools', %s.", typ, quoteList(hostedToolTypes))
}

// resolveToolChoice maps the names in the request's tool_choice to engine
// names: a function named as declared at the top level, or by its name
// within its namespace when that name is unique.
func (r *CreateRequest) resolveToolChoice() {
	c := &r.EngineChoice
	if c.Mode == "function" {
		c.Name = r.engineToolName(c.Name)
	}
	for i, n := range c.Allowed {
		c.Allowed[i] = r.engineToolName(n)
	}
}

func (r *CreateRequest) engineToolName(name string) string {
	var found *Tool
	for i := range r.Tools {
		t := &r.Tools[i]
		switch {
		case t.Namespace == "" && t.Name == name, t.EngineName() == name:
			return t.EngineName()
		case t.Name == name:
			if found != nil {
				return name // ambiguous: left as given
			}
			found = t
		}
	}
	if found != nil {
		return found.EngineName()
	}
	return name
}

// toolNames maps engine names back to the namespaced, MCP and custom
// tools they name; nil when there are none (a function's engine name is
// its name).
func ToolNames(tools []Tool) map[string]*Tool {
	var m map[string]*Tool
	for i := range tools {
		if tools[i].Namespace == "" && !tools[i].Custom {
			continue
		}
		if m == nil {
			m = make(map[string]*Tool)
		}
		m[tools[i].EngineName()] = &tools[i]
	}
	return m
}

// hostedToolError refuses a request for its first hosted tool.
func HostedToolError(h HostedTool) *apierror.Error {
	return Invalidf(fmt.Sprintf("tools[%d].type", h.Index), "unsupported_value",
		"Tools of type '%s' are not supported by this gateway: it runs no hosted tools (responses.hostedTools is 'reject').", h.Type)
}

// quoteList writes values as OpenAI's errors list them.
func quoteList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	return strings.Join(quoted, ", ")
}
