package workload

import (
	"encoding/json"
	"fmt"
	"strings"
)

// agentTools are the functions of AgentChatBody's tool schema, with the
// arguments each call passes.
var agentTools = []struct{ name, param, desc string }{
	{"read_file", "path", "Read a file of the repository and return its contents with line numbers."},
	{"grep", "pattern", "Search the repository for a regular expression and return the matching lines."},
	{"edit_file", "path", "Replace an exact span of a file with new text; fails when the span is not unique."},
	{"run_tests", "package", "Run the test suite of one package and return its output."},
	{"list_dir", "path", "List a directory of the repository, one entry a line."},
	{"shell", "command", "Run a shell command in the repository root and return stdout and stderr."},
	{"web_fetch", "url", "Fetch a web page and return it as text."},
	{"todo_write", "items", "Replace the task list shown to the user."},
}

type agentMessage struct {
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolCalls  []agentToolCall `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type agentToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type agentTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type agentRequest struct {
	Model     string         `json:"model"`
	Stream    bool           `json:"stream"`
	MaxTokens int            `json:"max_tokens"`
	Messages  []agentMessage `json:"messages"`
	Tools     []agentTool    `json:"tools"`
}

// AgentChatBody returns a chat completion request as a coding agent sends
// it deep into a session: a system prompt, a tool schema, a user task,
// then tool-call turns (an assistant message calling a tool, the tool's
// output) until the body is at least size bytes. Tool outputs read like
// source code and command output, with the newlines, tabs and quotes
// that JSON escapes, because a decoder's cost depends on them. The body
// is a pure function of its arguments; session varies the history, not
// the system prompt and tools, which every session of an agent shares.
func AgentChatBody(model string, stream bool, size int, seed int64, session int) []byte {
	req := agentRequest{Model: model, Stream: stream, MaxTokens: DefaultOutputTokens}
	for _, t := range agentTools {
		var at agentTool
		at.Type = "function"
		at.Function.Name = t.name
		at.Function.Description = t.desc + " " + words(Mix(domainSchema, uint64(seed), uint64(len(t.name))), 60)
		at.Function.Parameters = fmt.Appendf(nil,
			`{"type":"object","properties":{%q:{"type":"string","description":%q},"limit":{"type":"integer","description":"at most this many lines"}},"required":[%q],"additionalProperties":false}`,
			t.param, words(Mix(domainArgs, uint64(seed), uint64(len(t.param))), 12), t.param)
		req.Tools = append(req.Tools, at)
	}
	req.Messages = append(req.Messages,
		agentMessage{Role: "system", Content: agentSystemPrompt(seed)},
		agentMessage{Role: "user", Content: fmt.Sprintf("Session %d. ", session) + words(Mix(domainUser, uint64(seed), uint64(session)), 120)})
	base, _ := json.Marshal(req)
	n := len(base)
	g := Rand(Mix(domainTool, uint64(seed), uint64(session)))
	for turn := 0; n < size; turn++ {
		t := agentTools[g.Next()%uint64(len(agentTools))]
		call := agentToolCall{ID: fmt.Sprintf("call_%d_%d", session, turn), Type: "function"}
		call.Function.Name = t.name
		call.Function.Arguments = fmt.Sprintf(`{%q:"src/%s/%s.go"}`, t.param, words(g.Next(), 1), words(g.Next(), 1))
		asst := agentMessage{Role: "assistant", Content: words(g.Next(), 24), ToolCalls: []agentToolCall{call}}
		out := agentMessage{Role: "tool", ToolCallID: call.ID, Content: codeText(g.Next(), 40+int(g.Next()%60))}
		for _, m := range []agentMessage{asst, out} {
			b, _ := json.Marshal(m)
			n += len(b) + 1
			req.Messages = append(req.Messages, m)
		}
	}
	body, _ := json.Marshal(req)
	return body
}

// agentSystemPrompt is about 24 KB of instructions in markdown.
func agentSystemPrompt(seed int64) string {
	var b strings.Builder
	b.WriteString("You are a coding agent working in the user's repository.\n\n")
	for i := range 24 {
		fmt.Fprintf(&b, "## %s\n\n", words(Mix(domainSystem, uint64(seed), uint64(i)), 3))
		for j := range 4 {
			fmt.Fprintf(&b, "- %s.\n", words(Mix(domainSystem, uint64(seed), uint64(i), uint64(j)), 60))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// codeText returns lines lines of Go-like source, as read_file shows it.
func codeText(seed uint64, lines int) string {
	g := Rand(seed)
	w := func() string { return vocab[g.Next()%uint64(len(vocab))] }
	var b strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&b, "%5d\t", i)
		switch g.Next() % 6 {
		case 0:
			fmt.Fprintf(&b, "func (%s *%s) %s(ctx context.Context, %s string) error {", w(), strings.ToUpper(w()[:1])+w(), strings.ToUpper(w()[:1])+w(), w())
		case 1:
			fmt.Fprintf(&b, "\tif err := %s.%s(%q); err != nil {", w(), w(), w()+" "+w())
		case 2:
			fmt.Fprintf(&b, "\t\treturn fmt.Errorf(\"%s %s: %%w\", err)", w(), w())
		case 3:
			fmt.Fprintf(&b, "\t// %s %s %s %s %s.", w(), w(), w(), w(), w())
		case 4:
			fmt.Fprintf(&b, "\t%s := map[string]int{%q: %d, %q: %d}", w(), w(), g.Next()%100, w(), g.Next()%100)
		default:
			b.WriteString("\t}")
		}
		b.WriteByte('\n')
	}
	return b.String()
}
