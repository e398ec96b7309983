package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
)

// TestSDKInputTokens: POST /v1/responses/input_tokens (the SDK's
// InputTokens.Count) answers the count of the prompt a create request with
// the same fields sends the engine, which is the engine's own count of it
// (usage.input_tokens), for a plain input, tools and a chain.
func TestSDKInputTokens(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	tool := responses.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
	}, false)

	count := func(p responses.InputTokenCountParams) int64 {
		t.Helper()
		c, err := st.Client.Responses.InputTokens.Count(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Object != "response.input_tokens" || c.InputTokens <= 0 {
			t.Fatalf("answer %s", c.RawJSON())
		}
		return c.InputTokens
	}
	n1 := count(responses.InputTokenCountParams{Model: openai.String(testModel), Instructions: openai.String("Be brief."),
		Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("Tell me about Lisbon.")}})
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Instructions: openai.String("Be brief."), Input: gatewaytest.Text("Tell me about Lisbon.")})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Usage.InputTokens != n1 {
		t.Errorf("input_tokens %d, but the engine counted %d", n1, r1.Usage.InputTokens)
	}

	n2 := count(responses.InputTokenCountParams{Model: openai.String(testModel), PreviousResponseID: openai.String(r1.ID),
		Tools: []responses.ToolUnionParam{tool}, Instructions: openai.String("Be brief."),
		Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("And the weather in Porto?")}})
	if n2 <= n1 {
		t.Errorf("a chained turn with tools counts %d, not more than its first turn's %d", n2, n1)
	}
	r2, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, PreviousResponseID: openai.String(r1.ID),
		Tools: []responses.ToolUnionParam{tool}, Instructions: openai.String("Be brief."), Input: gatewaytest.Text("And the weather in Porto?")})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Usage.InputTokens != n2 {
		t.Errorf("chained input_tokens %d, but the engine counted %d", n2, r2.Usage.InputTokens)
	}
	// A chain alone, with no input, counts the context it names.
	if n := count(responses.InputTokenCountParams{Model: openai.String(testModel), PreviousResponseID: openai.String(r1.ID)}); n <= n1 {
		t.Errorf("previous_response_id alone counts %d, not more than its first prompt's %d", n, n1)
	}

	for _, tc := range []struct {
		name            string
		params          responses.InputTokenCountParams
		opts            []option.RequestOption
		status          int
		code, wantParam string
	}{
		{"unknown model", responses.InputTokenCountParams{Model: openai.String("nope"), Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("hi")}}, nil, http.StatusNotFound, "model_not_found", "model"},
		{"unknown previous response", responses.InputTokenCountParams{Model: openai.String(testModel), PreviousResponseID: openai.String("resp_nope")}, nil, http.StatusNotFound, "previous_response_not_found", "previous_response_id"},
		{"a field that does not shape the prompt", responses.InputTokenCountParams{Model: openai.String(testModel), Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("hi")}}, []option.RequestOption{option.WithJSONSet("stream", true)}, http.StatusBadRequest, "unknown_parameter", "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.Client.Responses.InputTokens.Count(ctx, tc.params, tc.opts...)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Param != tc.wantParam {
				t.Fatalf("err %v, want %d %s on %s", err, tc.status, tc.code, tc.wantParam)
			}
		})
	}
}
