package stack

import (
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestGatewaysShareBudgets: two gateways on one Redis draw a
// tenant's requests a minute from one budget: three requests through
// either are all it gets, the fourth is refused on whichever gateway.
func TestGatewaysShareBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine and two gateways")
	}
	const model, key = "m", "tp-budgets-test-key"
	srv := redistest.Start(t)
	pool := startRealTimeEngine(t, model)
	tenant := admin.TenantConfig{Tenant: turns.Tenant{Name: "acme", Quota: turns.Quota{RequestsPerMinute: 3}}, Keys: []string{auth.HashKey(key).String()}}
	tenant.EnsureDefaults()
	var clients []openai.Client
	for range 2 {
		st, _ := startPoolGateway(t, pool, func(cfg *Config) {
			cfg.State = state.Config{Backend: state.BackendRedis, URL: srv.URL()}
			cfg.Server.ShutdownDelay = -1
			cfg.Admin.Tenants = []admin.TenantConfig{tenant}
		}, Options{})
		clients = append(clients, openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0)))
	}
	chat := func(c openai.Client) error {
		_, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}, MaxTokens: openai.Int(4),
		})
		return err
	}
	for i, c := range []openai.Client{clients[0], clients[1], clients[0]} {
		if err := chat(c); err != nil {
			t.Fatalf("request %d of a budget of 3: %v", i+1, err)
		}
	}
	var apiErr *openai.Error
	if err := chat(clients[1]); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the fourth request in the minute, on the other gateway: %v, want 429", err)
	}
}
