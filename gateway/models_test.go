package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/turns"
)

// newModelsStack is a responses stack whose fleet serves testModel alone,
// with the model rewrites of cfg.
func newModelsStack(t *testing.T, cfg models.Config) *responsesStack {
	t.Helper()
	table, err := models.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newSimStackWith(t, dispatch.Options{Models: table})
}

// TestSDKAlias: a chat completion and a Responses chain sent to an alias
// are served by its target and answer with the served model's name; the
// header names the rule; /v1/models lists the alias with its target.
func TestSDKAlias(t *testing.T) {
	st := newModelsStack(t, models.Config{Aliases: map[string]string{"gpt-4.1": testModel}})
	ctx := context.Background()

	var raw *http.Response
	chat, err := st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "gpt-4.1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if chat.Model != testModel {
		t.Errorf("chat completion's model %q, want the served %q", chat.Model, testModel)
	}
	if got := raw.Header.Get(dispatch.ModelRuleHeader); got != "alias:gpt-4.1" {
		t.Errorf("%s: %q", dispatch.ModelRuleHeader, got)
	}
	if body := st.engine.Sent()[0]; !strings.Contains(body, `"model":"`+testModel+`"`) || strings.Contains(body, "gpt-4.1") {
		t.Errorf("the engine was sent %s", body)
	}

	r1, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", Input: text("The secret word is pelican."), MaxOutputTokens: openai.Int(16),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Model != testModel || r1.Status != responses.ResponseStatusCompleted {
		t.Errorf("response: model %q, status %s", r1.Model, r1.Status)
	}
	if got := raw.Header.Get(dispatch.ModelRuleHeader); got != "alias:gpt-4.1" {
		t.Errorf("Responses %s: %q", dispatch.ModelRuleHeader, got)
	}
	// The chain goes on under the alias.
	r2, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", Input: text("What was the secret word?"), PreviousResponseID: openai.String(r1.ID), MaxOutputTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Model != testModel {
		t.Errorf("the chain's second response: model %q", r2.Model)
	}
	stored, err := st.client.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Model != testModel {
		t.Errorf("stored response: model %q", stored.Model)
	}
	for _, b := range st.engine.Sent()[1:] {
		if !strings.Contains(b, `"model":"`+testModel+`"`) {
			t.Errorf("the engine was sent %s", b)
		}
	}

	list, err := st.client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{}
	for _, m := range list.Data {
		var extra struct {
			Root string `json:"root"`
		}
		if err := json.Unmarshal([]byte(m.RawJSON()), &extra); err != nil {
			t.Fatal(err)
		}
		roots[m.ID] = extra.Root
	}
	if root, ok := roots["gpt-4.1"]; !ok || root != testModel {
		t.Errorf("/v1/models: %v, want gpt-4.1 with root %s", roots, testModel)
	}
	if root, ok := roots[testModel]; !ok || root != "" {
		t.Errorf("/v1/models: %v, want the served %s", roots, testModel)
	}
}

// TestSDKFallback: a target no pool serves gives way to its fallbacks in
// their order; when none serves, the client is told the model it named
// is not found (404), never forbidden.
func TestSDKFallback(t *testing.T) {
	st := newModelsStack(t, models.Config{Rules: []models.RuleConfig{
		{
			Name: "with-fallbacks", Match: models.Match{Model: "gpt-4o"},
			Targets: []models.Target{{Model: "retired-model", Fallbacks: []string{"also-retired", testModel}}},
		},
		{
			Name: "dead-end", Match: models.Match{Model: "o3"},
			Targets: []models.Target{{Model: "retired-model", Fallbacks: []string{"also-retired"}}},
		},
	}})
	ctx := context.Background()
	chat, err := st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "gpt-4o",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxTokens: openai.Int(8),
	})
	if err != nil {
		t.Fatal(err)
	}
	if chat.Model != testModel {
		t.Errorf("chat completion's model %q, want the fallback %q", chat.Model, testModel)
	}
	r, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o", Input: text("Say hello."), MaxOutputTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != testModel {
		t.Errorf("response's model %q, want the fallback %q", r.Model, testModel)
	}

	_, err = st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "o3",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("no target served: %v", err)
	}
	if n := st.engine.Count(); n != 2 {
		t.Errorf("the engine answered %d requests, want 2", n)
	}
}

// TestSDKTenantModels: a tenant that lists the models it may use is told
// any other is not found (404 model_not_found, never forbidden) on chat
// and on the Responses API, reaches the served model only through the
// alias it may use, and sees only that alias in /v1/models.
func TestSDKTenantModels(t *testing.T) {
	fc := turns.FlowControl{}
	fc.EnsureDefaults()
	flow, err := turns.New(turns.Config{FlowControl: fc, Tenants: []turns.Tenant{
		{Name: DefaultTenant, Weight: 1, Models: []string{"gpt-4.1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := flow.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flow.Close(context.Background()) })
	table, err := models.New(models.Config{Aliases: map[string]string{"gpt-4.1": testModel}})
	if err != nil {
		t.Fatal(err)
	}
	st := newSimStackWith(t, dispatch.Options{Models: table, Flow: flow})
	for _, ep := range st.server.reg.Endpoints() {
		// No scraper runs: the engine's load is fresh for the test's span.
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)})
	}
	ctx := context.Background()

	notFound := func(what string, err error) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
			t.Errorf("%s: %v, want 404 model_not_found", what, err)
		}
	}
	_, err = st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	notFound("chat naming the served model", err)
	_, err = st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("Say hello.")})
	notFound("a response naming the served model", err)
	if n := st.engine.Count(); n != 0 {
		t.Fatalf("the engine answered %d requests of a model the tenant may not use", n)
	}

	r, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", Input: text("Say hello."), MaxOutputTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != testModel || r.Status != responses.ResponseStatusCompleted {
		t.Errorf("through the alias: model %q, status %s", r.Model, r.Status)
	}

	list, err := st.client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if len(ids) != 1 || ids[0] != "gpt-4.1" {
		t.Errorf("/v1/models lists %v, want only gpt-4.1", ids)
	}
}
