package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/responses/mcpclient/mcptest"
)

// newMCPStack is a responses stack allowed to call MCP servers on
// loopback, and one such server.
func newMCPStack(t *testing.T) (*gatewaytest.Stack, *mcpServer) {
	t.Helper()
	return gatewaytest.NewStackWith(t, 0, tpresponses.Config{MCPAllowedURLs: []string{"http://127.0.0.1:"}}, mount), newMCPServer(t)
}

// mcpServer is the calculator MCP server, with the mcp tools that name it.
type mcpServer struct{ *mcptest.Calc }

func newMCPServer(t *testing.T) *mcpServer { return &mcpServer{mcptest.NewCalc(t)} }

// mcpTool is an mcp tool on m offering only tool, approved as approval
// says.
func (m *mcpServer) tool(tool, approval string) responses.ToolUnionParam {
	return responses.ToolUnionParam{OfMcp: &responses.ToolMcpParam{
		ServerLabel: "calc", ServerURL: openai.String(m.URL), Headers: map[string]string{"X-Key": "k-1"},
		AllowedTools:    responses.ToolMcpAllowedToolsUnionParam{OfMcpAllowedTools: []string{tool}},
		RequireApproval: responses.ToolMcpRequireApprovalUnionParam{OfMcpToolApprovalSetting: openai.String(approval)},
	}}
}

func outputTypes(r responses.Response) []string {
	types := make([]string, len(r.Output))
	for i, o := range r.Output {
		types[i] = o.Type
	}
	return types
}

// addResult is what add answers for a call's arguments.
func addResult(t *testing.T, arguments string) string {
	t.Helper()
	var a struct{ A, B int }
	if err := json.Unmarshal([]byte(arguments), &a); err != nil {
		t.Fatalf("arguments %q: %v", arguments, err)
	}
	return strconv.Itoa(a.A + a.B)
}

// TestSDKMCPCall: an mcp tool is run by the gateway: its tools are
// listed (mcp_list_tools), the engine's call is made inside the response
// (mcp_call with the server's output), streamed with OpenAI's MCP events,
// and the engine answers from the result; the tool's headers reach the
// server and are not echoed.
func TestSDKMCPCall(t *testing.T) {
	st, m := newMCPStack(t)
	before := len(st.Engine.Bodies)
	evs, r := streamed(t, st, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("add 2 and 3"),
		Tools: []responses.ToolUnionParam{m.tool("add", "never")}})
	if got := outputTypes(r); !slices.Equal(got, []string{"mcp_list_tools", "mcp_call", "message"}) {
		t.Fatalf("output %v: %s", got, r.RawJSON())
	}
	list := r.Output[0].AsMcpListTools()
	if list.ServerLabel != "calc" || len(list.Tools) != 2 || list.Tools[0].Name != "add" || list.Tools[0].InputSchema == nil {
		t.Fatalf("list %s", r.Output[0].RawJSON())
	}
	call := r.Output[1].AsMcpCall()
	if call.ServerLabel != "calc" || call.Name != "add" || call.Output != addResult(t, call.Arguments) || call.Error.Type != "" || call.Status != "completed" {
		t.Fatalf("call %s", r.Output[1].RawJSON())
	}
	types := eventTypes(evs)
	for _, typ := range []string{"response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
		"response.mcp_call_arguments.delta", "response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.completed"} {
		if !slices.Contains(types, typ) {
			t.Errorf("no %s in %v", typ, types)
		}
	}
	if slices.Index(types, "response.mcp_call.completed") > slices.Index(types, "response.output_text.delta") {
		t.Errorf("the answer streamed before the call was made: %v", types)
	}
	st.Engine.Mu.Lock()
	asked := len(st.Engine.Bodies) - before
	st.Engine.Mu.Unlock()
	msgs := engineMessages(t, st)
	if asked != 2 || len(msgs) != 3 || msgs[2]["role"] != "tool" || msgs[2]["content"] != call.Output {
		t.Fatalf("engine asked %d times, last with %v", asked, msgs)
	}
	if !strings.Contains(st.Engine.Last(), `"calc__add"`) {
		t.Errorf("the engine was not offered calc__add: %s", st.Engine.Last())
	}
	keys := slices.Compact(m.Keys())
	if !slices.Equal(keys, []string{"k-1"}) {
		t.Errorf("X-Key headers the server saw: %v", keys)
	}
	if strings.Contains(r.RawJSON(), "k-1") {
		t.Errorf("the tool's headers are echoed: %s", r.RawJSON())
	}
	if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
		t.Errorf("usage %+v", r.Usage)
	}
}

// TestSDKMCPApproval: a tool that requires approval ends the response
// with an mcp_approval_request; the client's mcp_approval_response in the
// next turn makes the call (or refuses it, which the model hears), with
// no second listing of the tools.
func TestSDKMCPApproval(t *testing.T) {
	st, m := newMCPStack(t)
	ctx := context.Background()
	tools := []responses.ToolUnionParam{m.tool("add", "always")}
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("add 4 and 5"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputTypes(*r1); !slices.Equal(got, []string{"mcp_list_tools", "mcp_approval_request"}) || r1.Status != responses.ResponseStatusCompleted {
		t.Fatalf("output %v, status %s", got, r1.Status)
	}
	req := r1.Output[1].AsMcpApprovalRequest()
	if req.Name != "add" || req.ServerLabel != "calc" || !strings.HasPrefix(req.ID, "mcpr_") {
		t.Fatalf("approval request %s", r1.Output[1].RawJSON())
	}

	approve := func(ok bool) *responses.Response {
		r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, PreviousResponseID: openai.String(r1.ID), Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMcpApprovalResponse(req.ID, ok)}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r2 := approve(true)
	if got := outputTypes(*r2); !slices.Equal(got, []string{"mcp_call", "message"}) {
		t.Fatalf("approved: output %v", got)
	}
	call := r2.Output[0].AsMcpCall()
	if call.ApprovalRequestID != req.ID || call.Arguments != req.Arguments || call.Output != addResult(t, req.Arguments) {
		t.Fatalf("approved call %s", r2.Output[0].RawJSON())
	}

	r3 := approve(false)
	if got := outputTypes(*r3); !slices.Equal(got, []string{"message"}) {
		t.Fatalf("refused: output %v", got)
	}
	msgs := engineMessages(t, st)
	if last := msgs[len(msgs)-1]; last["role"] != "tool" || !strings.Contains(last["content"].(string), "not approve") {
		t.Fatalf("refused: engine messages %v", msgs)
	}

	t.Run("unknown request", func(t *testing.T) {
		_, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMcpApprovalResponse("mcpr_nope", true)}}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "input[0].approval_request_id" {
			t.Fatalf("err %v", err)
		}
	})
}

// TestSDKMCPFailures: a tool that fails, a server that cannot be reached
// and max_tool_calls are items' errors, and the response completes with
// the model's answer.
func TestSDKMCPFailures(t *testing.T) {
	st, m := newMCPStack(t)
	ctx := context.Background()

	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("try it"), Tools: []responses.ToolUnionParam{m.tool("fail", "never")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputTypes(*r); !slices.Equal(got, []string{"mcp_list_tools", "mcp_call", "message"}) || r.Status != responses.ResponseStatusCompleted {
		t.Fatalf("failing tool: output %v, status %s", got, r.Status)
	}
	if call := r.Output[1].AsMcpCall(); call.Error.Type != "mcp_tool_execution_error" || !strings.Contains(call.Error.JSON.Content.Raw(), "disk on fire") || call.Output != "" || call.Status != "failed" {
		t.Fatalf("failing tool: call %s", r.Output[1].RawJSON())
	}

	limited, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("add 1 and 1"),
		Tools: []responses.ToolUnionParam{m.tool("add", "never")}, MaxToolCalls: openai.Int(0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputTypes(*limited); !slices.Equal(got, []string{"mcp_list_tools", "mcp_call", "message"}) ||
		!strings.Contains(limited.Output[1].AsMcpCall().Error.Message, "max_tool_calls") {
		t.Fatalf("max_tool_calls 0: %s", limited.RawJSON())
	}
	if !strings.Contains(st.Engine.Last(), `"tool_choice":"none"`) {
		t.Errorf("past max_tool_calls the engine was still offered tools: %s", st.Engine.Last())
	}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	tool := m.tool("add", "never")
	tool.OfMcp.ServerURL = openai.String(gone.URL)
	r, err = st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("add 1 and 2"), Tools: []responses.ToolUnionParam{tool}})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputTypes(*r); !slices.Equal(got, []string{"mcp_list_tools", "message"}) || r.Output[0].AsMcpListTools().Error == "" {
		t.Fatalf("unreachable server: %s", r.RawJSON())
	}
}
