package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// testAdminToken guards the pair's admin API.
const testAdminToken = "admin-secret"

// startPair starts two gateways wired as `turnpike serve` wires them, on
// one Redis and one simulated fleet, and returns an SDK client of each
// and their addresses.
func startPair(t *testing.T) ([2]openai.Client, [2]string) {
	t.Helper()
	return startPairWith(t, 0.02, nil)
}

// startPairWith is startPair on a fleet at timeScale, each gateway's
// config changed by tune when it is not nil.
func startPairWith(t *testing.T, timeScale float64, tune func(*stack.Config)) ([2]openai.Client, [2]string) {
	t.Helper()
	srv, pool := startShared(t, timeScale)
	var clients [2]openai.Client
	var addrs [2]string
	for i := range clients {
		clients[i], addrs[i] = startGateway(t, srv.URL(), pool, tune)
	}
	return clients, addrs
}

// startShared starts what gateways share: a Redis and a simulated fleet,
// returned as the pool a gateway's config lists.
func startShared(t *testing.T, timeScale float64) (*redistest.Server, pools.PoolConfig) {
	t.Helper()
	srv := redistest.Start(t)
	sf := simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, timeScale: timeScale}
	simCfg := sf.config()
	fleet := sim.NewFleets([]sim.Pool{{Name: "sim", Config: simCfg, Size: sf.replicas}})
	if err := fleet.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close(context.Background()) })
	return srv, stack.SimPools(fleet, "")[0]
}

// gatewayConfig is the config of one gateway of a pair.
func gatewayConfig(t testing.TB, redisURL string, pool pools.PoolConfig, tune func(*stack.Config)) *stack.Config {
	cfg := &stack.Config{}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	cfg.State = state.Config{Backend: state.BackendRedis, URL: redisURL}
	cfg.Pools = append(cfg.Pools, pool)
	cfg.Admin.AdminToken = testAdminToken
	if tune != nil {
		tune(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startGateway starts one gateway in this process until t ends.
func startGateway(t *testing.T, redisURL string, pool pools.PoolConfig, tune func(*stack.Config)) (openai.Client, string) {
	t.Helper()
	st, err := startStack(t.Context(), gatewayConfig(t, redisURL, pool, tune), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return sdkClient(st.Addr()), st.Addr()
}

func sdkClient(addr string) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("any"), option.WithMaxRetries(0))
}

func input(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// TestActiveActiveChain: on two gateways sharing one Redis, a chain of 50
// Responses turns alternates gateways, each naming the response the other
// one created; each turn's context holds every turn before it (the engine
// counted the previous turn's input and output again), and either gateway
// reads and deletes what the other wrote.
func TestActiveActiveChain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw, _ := startPair(t)
	ctx := t.Context()
	const turns = 50
	var prev *responses.Response
	for i := range turns {
		p := responses.ResponseNewParams{Model: defaultSimServedModel, Input: input("turn " + string(rune('A'+i%26))), MaxOutputTokens: openai.Int(4)}
		if prev != nil {
			p.PreviousResponseID = openai.String(prev.ID)
		}
		r, err := gw[i%2].Responses.New(ctx, p)
		if err != nil {
			t.Fatalf("turn %d on gateway %d: %v", i, i%2, err)
		}
		// The simulated engine answers at length: a short answer ends at
		// the token budget.
		if r.Status != responses.ResponseStatusCompleted && r.IncompleteDetails.Reason != "max_output_tokens" {
			t.Fatalf("turn %d: status %s %+v", i, r.Status, r.IncompleteDetails)
		}
		if prev != nil {
			if r.PreviousResponseID != prev.ID {
				t.Errorf("turn %d: previous_response_id %q, want %q", i, r.PreviousResponseID, prev.ID)
			}
			if r.Usage.InputTokens < prev.Usage.InputTokens+prev.Usage.OutputTokens {
				t.Fatalf("turn %d on gateway %d: %d input tokens, fewer than the previous turn's %d in and %d out: the context lost turns",
					i, i%2, r.Usage.InputTokens, prev.Usage.InputTokens, prev.Usage.OutputTokens)
			}
		}
		prev = r
	}
	for g := range gw {
		got, err := gw[g].Responses.Get(ctx, prev.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != prev.OutputText() {
			t.Errorf("gateway %d reads the last turn: %v, %q want %q", g, err, got.OutputText(), prev.OutputText())
		}
	}
	// Written by gateway 1 (turn 49), deleted through gateway 0, gone on both.
	if err := gw[0].Responses.Delete(ctx, prev.ID); err != nil {
		t.Fatal(err)
	}
	for g := range gw {
		var apiErr *openai.Error
		if _, err := gw[g].Responses.Get(ctx, prev.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("gateway %d after delete: %v, want 404", g, err)
		}
	}
}

// TestActiveActiveConversation: a conversation created on one gateway
// takes turns on both, and either lists the same items in order.
func TestActiveActiveConversation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw, _ := startPair(t)
	ctx := t.Context()
	conv, err := gw[0].Conversations.New(ctx, conversations.ConversationNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("You are terse.", responses.EasyInputMessageRoleSystem)},
	})
	if err != nil {
		t.Fatal(err)
	}
	const turns = 10
	var want []string
	for i := range turns {
		text := "question " + string(rune('a'+i))
		r, err := gw[(i+1)%2].Responses.New(ctx, responses.ResponseNewParams{
			Model: defaultSimServedModel, Input: input(text), MaxOutputTokens: openai.Int(4),
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
		})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		want = append(want, text, r.OutputText())
	}
	added, err := gw[1].Conversations.Items.New(ctx, conv.ID, conversations.ItemNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("a note", responses.EasyInputMessageRoleUser)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "a note")
	for g := range gw {
		items, err := gw[g].Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc, Limit: openai.Int(100)})
		if err != nil {
			t.Fatal(err)
		}
		if len(items.Data) != 1+len(want) {
			t.Fatalf("gateway %d lists %d items, want %d", g, len(items.Data), 1+len(want))
		}
		for i, w := range want {
			if got := items.Data[i+1].AsMessage().Content[0].Text; got != w {
				t.Errorf("gateway %d item %d: %q, want %q", g, i+1, got, w)
			}
		}
		one, err := gw[g].Conversations.Items.Get(ctx, conv.ID, added.Data[0].ID, conversations.ItemGetParams{})
		if err != nil || one.ID != added.Data[0].ID {
			t.Errorf("gateway %d gets the item added on 1: %v", g, err)
		}
	}
}

// TestActiveActiveAdmin: a tenant and key created through one gateway's
// admin API authenticate on the other once it has looked for changes
// (every admin.DefaultRefreshInterval), and a key revoked on the other
// stops working on the first.
func TestActiveActiveAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	_, addrs := startPair(t)
	ctx := t.Context()
	adminCall := func(gw int, method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addrs[gw]+"/admin/v1"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s on gateway %d: %d %v", method, path, gw, resp.StatusCode, out)
		}
		return out
	}
	adminCall(0, "POST", "/tenants", `{"name":"acme"}`)
	key := adminCall(0, "POST", "/tenants/acme/keys", `{"name":"ci"}`)
	secret, _ := key["secret"].(string)
	id, _ := key["id"].(string)
	if secret == "" || id == "" {
		t.Fatalf("key answer %v", key)
	}
	client := openai.NewClient(option.WithBaseURL("http://"+addrs[1]+"/v1"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	status := func() int {
		_, err := client.Models.List(ctx)
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.StatusCode
		}
		if err != nil {
			t.Fatal(err)
		}
		return http.StatusOK
	}
	// The gateways were open (no tenants); once gateway 1 has the new
	// tenancy a wrong key is refused and acme's accepted.
	wrong := openai.NewClient(option.WithBaseURL("http://"+addrs[1]+"/v1"), option.WithAPIKey("tp-wrong"), option.WithMaxRetries(0))
	waitFor(t, "gateway 1 to refuse an unknown key", func() bool {
		_, err := wrong.Models.List(ctx)
		var apiErr *openai.Error
		return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized
	})
	if got := status(); got != http.StatusOK {
		t.Fatalf("acme's key on gateway 1: %d", got)
	}
	adminCall(1, "DELETE", "/tenants/acme/keys/"+id, "")
	client0 := openai.NewClient(option.WithBaseURL("http://"+addrs[0]+"/v1"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	waitFor(t, "gateway 0 to refuse the key revoked on gateway 1", func() bool {
		_, err := client0.Models.List(ctx)
		var apiErr *openai.Error
		return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized
	})
}

// waitFor polls cond until it holds, failing after a generous bound (a
// minute) that only a broken propagation, or a gateway that never
// starts, reaches.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(admin.DefaultRefreshInterval / 10)
	}
}
