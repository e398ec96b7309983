package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

// codexTools are the tools of a Codex CLI request: a namespace of
// functions first (the simulated engine calls the first tool it is
// offered), a plain function, and a hosted web search.
func codexTools() []responses.ToolUnionParam {
	obj := map[string]any{"type": "object", "properties": map[string]any{"task": map[string]any{"type": "string"}}}
	return []responses.ToolUnionParam{
		{OfNamespace: &responses.NamespaceToolParam{Name: "multi_agent_v1", Description: "Tools in the multi_agent_v1 namespace.",
			Tools: []responses.NamespaceToolToolUnionParam{
				{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "spawn_agent", Description: openai.String("Start a sub-agent"), Parameters: obj}},
				{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "wait_agent", Parameters: obj}},
			}}},
		{OfFunction: &responses.FunctionToolParam{Name: "exec_command", Parameters: obj, Strict: openai.Bool(false)}},
		{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch, ExternalWebAccess: openai.Bool(false)}},
	}
}

// TestSDKAgentRequest: a request shaped as the Codex CLI sends it (and
// with the rest of the fields agents set) is answered, streamed: the
// namespace's functions reach the engine flattened, the hosted tool does
// not, and the engine's call comes back named as OpenAI names it, with
// its namespace; the next stateless turn sends that call back as input.
func TestSDKAgentRequest(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:              testModel,
		Instructions:       openai.String("You are a coding agent."),
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("list the files", responses.EasyInputMessageRoleUser)}},
		Tools:              codexTools(),
		ToolChoice:         responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)},
		ParallelToolCalls:  openai.Bool(false),
		Reasoning:          shared.ReasoningParam{Effort: shared.ReasoningEffortMedium, Summary: shared.ReasoningSummaryAuto},
		Store:              openai.Bool(false),
		Include:            []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		PromptCacheKey:     openai.String("019a-thread"),
		SafetyIdentifier:   openai.String("user-hash"),
		MaxToolCalls:       openai.Int(4),
		ContextManagement:  []responses.ResponseNewParamsContextManagement{{Type: "compaction", CompactThreshold: openai.Int(100000)}},
		PromptCacheOptions: responses.ResponseNewParamsPromptCacheOptions{Ttl: "30m"},
		Text:               responses.ResponseTextConfigParam{Verbosity: responses.ResponseTextConfigVerbosityLow},
	}
	stream := st.Client.Responses.NewStreaming(ctx, params,
		option.WithJSONSet("client_metadata", map[string]string{"x-codex-installation-id": "inst-1"}),
		option.WithHeader("session-id", "codex-session"), option.WithHeader("thread-id", "019a-thread"))
	var final responses.Response
	var added []string
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_item.added":
			added = append(added, ev.Item.Name+"/"+ev.Item.AsFunctionCall().Namespace)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(final.Output) != 1 {
		t.Fatalf("output %+v", final.Output)
	}
	call := final.Output[0].AsFunctionCall()
	if call.Name != "spawn_agent" || call.Namespace != "multi_agent_v1" || call.CallID == "" {
		t.Fatalf("call %+v, want spawn_agent in namespace multi_agent_v1", call)
	}
	if len(added) != 1 || added[0] != "spawn_agent/multi_agent_v1" {
		t.Errorf("output_item.added named the call %v", added)
	}
	if len(final.Tools) != 3 || final.MaxToolCalls != 4 || final.PromptCacheKey != "019a-thread" {
		t.Errorf("echo: %d tools, max_tool_calls %d, prompt_cache_key %q", len(final.Tools), final.MaxToolCalls, final.PromptCacheKey)
	}
	var sent struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	json.Unmarshal([]byte(st.Engine.Last()), &sent)
	var names []string
	for _, tl := range sent.Tools {
		names = append(names, tl.Function.Name)
	}
	if strings.Join(names, ",") != "multi_agent_v1__spawn_agent,multi_agent_v1__wait_agent,exec_command" {
		t.Errorf("engine tools %v", names)
	}

	// The next turn, stateless: the whole input again, the call and its
	// output included, as the SDK encodes the call it was given.
	out := responses.ResponseInputItemParamOfFunctionCallOutput("agent started")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	input := params.Input.OfInputItemList
	input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
		CallID: call.CallID, Name: call.Name, Namespace: openai.String(call.Namespace), Arguments: call.Arguments,
	}}, out)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	r2, err := st.Client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() == "" {
		t.Errorf("second turn: %+v", r2.Output)
	}
	if last := st.Engine.Last(); !strings.Contains(last, `"name":"multi_agent_v1__spawn_agent","arguments"`) {
		t.Errorf("the call was not rendered flat for the engine:\n%s", last)
	}
}

// TestResponsesCodexBody: the body the Codex CLI sent that turnpike used
// to refuse (client_metadata, a namespace tool, web_search with
// external_web_access) is answered; with responses.hostedTools: reject the
// hosted tool is refused by name.
func TestResponsesCodexBody(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	body := `{"model":"` + testModel + `","instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],` +
		`"tools":[{"type":"function","name":"exec_command","description":"run","strict":false,"parameters":{"type":"object","properties":{}}},` +
		`{"type":"namespace","name":"multi_agent_v1","description":"agents","tools":[{"type":"function","name":"spawn_agent","description":"spawn","strict":false,"parameters":{"type":"object","properties":{}}}]},` +
		`{"type":"web_search","external_web_access":false}],"tool_choice":"auto","parallel_tool_calls":false,` +
		`"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":false,"include":["reasoning.encrypted_content"],` +
		`"prompt_cache_key":"t1","client_metadata":{"x-codex-installation-id":"i"}}`
	resp, err := http.Post(st.Front.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Output []struct {
			Type, Name string
		} `json:"output"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Output) != 1 || out.Output[0].Name != "exec_command" {
		t.Errorf("output %s", raw)
	}
}

// TestSDKHostedToolsRejected: with responses.hostedTools: reject, a
// request with a hosted tool is refused with OpenAI's error naming it.
func TestSDKHostedToolsRejected(t *testing.T) {
	st := gatewaytest.NewStackWith(t, 0, tpresponses.Config{HostedTools: tpresponses.HostedToolsReject}, mount)
	_, err := st.Client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("hi"), Tools: codexTools()})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "tools[2].type" || !strings.Contains(apiErr.Message, "web_search") {
		t.Fatalf("got %v, want a 400 naming tools[2]", err)
	}
	if st.Engine.Last() != "" {
		t.Error("the engine was asked")
	}
}
