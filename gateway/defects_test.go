package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// wantAPIError fails t unless err is the OpenAI error with status, code
// and param, its message holding each of words.
func wantAPIError(t *testing.T, err error, status int, code, param string, words ...string) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err %v, want a %d %s", err, status, code)
	}
	if apiErr.StatusCode != status || apiErr.Code != code || apiErr.Param != param {
		t.Fatalf("got %d code %q param %q (%s), want %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Message, status, code, param)
	}
	for _, w := range words {
		if !strings.Contains(apiErr.Message, w) {
			t.Errorf("message %q lacks %q", apiErr.Message, w)
		}
	}
}

// TestSDKBudgetsNeverNegative: a model the fleet does not serve is a 404
// model_not_found on compact as on create, and an output budget past the
// model's window is a 400 on max_output_tokens naming the window and what
// was asked, never "and -N fit" (issue 32, item 1).
func TestSDKBudgetsNeverNegative(t *testing.T) {
	st := newResponsesStack(t, 0)
	ctx := t.Context()
	in := responses.ResponseCompactParamsInputUnion{OfResponseInputItemArray: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Remember pelican.", responses.EasyInputMessageRoleUser),
	}}

	_, err := st.client.Responses.Compact(ctx, responses.ResponseCompactParams{Model: "no-such-model", Input: in})
	wantAPIError(t, err, http.StatusNotFound, "model_not_found", "model", "no-such-model")

	_, err = st.client.Responses.New(ctx, responses.ResponseNewParams{Model: "no-such-model", Input: text("hi"), Truncation: responses.ResponseNewParamsTruncationAuto})
	wantAPIError(t, err, http.StatusNotFound, "model_not_found", "model", "no-such-model")

	_, err = st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi"), MaxOutputTokens: openai.Int(1_000_000_000_000)})
	wantAPIError(t, err, http.StatusBadRequest, "context_length_exceeded", "max_output_tokens", "1000000000000", "maximum context length")
	if st.engine.Count() != 0 {
		t.Errorf("%d engine requests, want none", st.engine.Count())
	}

	// A budget that fits still runs.
	if _, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi"), MaxOutputTokens: openai.Int(8)}); err != nil {
		t.Fatal(err)
	}
}

// TestSDKEmptyInput: input [] with nothing before it is a 400 on input
// before any engine (issue 32, item 9: it reached the engine and the 400
// named messages); with a previous response it continues that response.
func TestSDKEmptyInput(t *testing.T) {
	st := newResponsesStack(t, 0)
	ctx := t.Context()
	empty := responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{}}
	_, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: empty})
	wantAPIError(t, err, http.StatusBadRequest, "empty_array", "input")
	if st.engine.Count() != 0 {
		t.Fatalf("%d engine requests, want none", st.engine.Count())
	}
	first, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi"), MaxOutputTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: empty, PreviousResponseID: openai.String(first.ID), MaxOutputTokens: openai.Int(8)}); err != nil {
		t.Errorf("empty input after a previous response: %v", err)
	}
}

// TestChatIntegerWording: chat's max_tokens 1.5 says an integer was
// expected (issue 32, item 9: "expected a number, but got number").
func TestChatIntegerWording(t *testing.T) {
	st := newResponsesStack(t, 0)
	_, err := st.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}},
		// The SDK's field is an integer: send the fraction as a raw field.
		option.WithJSONSet("max_tokens", 1.5))
	wantAPIError(t, err, http.StatusBadRequest, "invalid_type", "max_tokens", "expected an integer", "decimal number")
}
