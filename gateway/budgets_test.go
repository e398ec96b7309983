package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/turns"
)

// TestSDKRateLimitHeaders (issue 37): a tenant with budgets a minute gets
// OpenAI's x-ratelimit-* headers on every answer, chat and Responses,
// streamed or not, and once its requests are spent a 429
// rate_limit_exceeded with Retry-After and the same headers, read by the
// OpenAI Go SDK.
func TestSDKRateLimitHeaders(t *testing.T) {
	st := newStack(t, stackOptions{engines: 1, tenants: []turns.Tenant{
		{Name: DefaultTenant, Weight: 1, Quota: turns.Quota{RequestsPerMinute: 4, TokensPerMinute: 1_000_000}},
	}})
	client := openai.NewClient(option.WithBaseURL(st.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := context.Background()
	remaining := func(what string, h http.Header, want int) {
		t.Helper()
		if h.Get("x-ratelimit-limit-requests") != "4" || h.Get("x-ratelimit-remaining-requests") != strconv.Itoa(want) ||
			h.Get("x-ratelimit-reset-requests") == "" || h.Get("x-ratelimit-limit-tokens") != "1000000" || h.Get("x-ratelimit-remaining-tokens") == "" {
			t.Errorf("%s: rate-limit headers %v", what, h)
		}
	}

	var raw *http.Response
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}, MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	remaining("chat", raw.Header, 3)

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}, MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&raw))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	remaining("streamed chat", raw.Header, 2)

	if _, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")}, MaxOutputTokens: openai.Int(16),
	}, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	remaining("a response", raw.Header, 1)

	rs := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")}, MaxOutputTokens: openai.Int(16),
	}, option.WithResponseInto(&raw))
	for rs.Next() {
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	remaining("a streamed response", raw.Header, 0)

	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("the fifth request in a minute of four: %v", err)
	}
	h := apiErr.Response.Header
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 120 {
		t.Errorf("Retry-After %q", h.Get("Retry-After"))
	}
	if h.Get("X-Turnpike-Dropped-Reason") != turns.ReasonQuotaRPM {
		t.Errorf("reason %q", h.Get("X-Turnpike-Dropped-Reason"))
	}
	remaining("the refusal", h, 0)
}
