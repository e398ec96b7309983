package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestSDKCachePredictionHeader (issue 37): a chat request that sends
// x-turnpike-cache-prediction gets the prompt tokens routing predicted
// cached in that header, within a block of what the engine then reports
// cached on a conversation's second turn; a request that does not send it gets none.
func TestSDKCachePredictionHeader(t *testing.T) {
	st := newStack(t, stackOptions{engines: 2})
	client := openai.NewClient(option.WithBaseURL(st.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := context.Background()
	history := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(strings.Repeat("You are a careful build engineer. ", 30)),
		openai.UserMessage("The linker fails."),
	}
	turn := func(ask bool) (http.Header, int64) {
		t.Helper()
		var raw *http.Response
		opts := []option.RequestOption{option.WithResponseInto(&raw), option.WithHeader("x-session-id", "s1")}
		if ask {
			opts = append(opts, option.WithHeader("x-turnpike-cache-prediction", "1"))
		}
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: testModel, Messages: history, MaxTokens: openai.Int(8),
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		history = append(history, openai.AssistantMessage(c.Choices[0].Message.Content), openai.UserMessage("And now?"))
		return raw.Header, c.Usage.PromptTokensDetails.CachedTokens
	}

	if h, _ := turn(false); h.Get("x-turnpike-cache-prediction") != "" {
		t.Errorf("unasked, the answer carries %q", h.Get("x-turnpike-cache-prediction"))
	}
	h, cached := turn(true)
	fields := map[string]string{}
	for _, f := range strings.Split(h.Get("x-turnpike-cache-prediction"), "; ") {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	predicted, err := strconv.Atoi(fields["predicted"])
	if err != nil || fields["endpoint"] == "" || fields["best_other"] == "" {
		t.Fatalf("header %q", h.Get("x-turnpike-cache-prediction"))
	}
	// Within one block: the index knows the prompt it routed, not the
	// answer the engine cached behind it.
	if predicted == 0 || cached == 0 || max(int64(predicted)-cached, cached-int64(predicted)) > 16 {
		t.Errorf("predicted %d, the engine reported %d cached: want them within a block, above 0", predicted, cached)
	}
}
