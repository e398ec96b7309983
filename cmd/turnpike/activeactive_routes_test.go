package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// startGatewayStack is startGateway returning the stack, for tests that
// look into its KV index.
func startGatewayStack(t *testing.T, redisURL string, pool pools.PoolConfig, tune func(*stack.Config)) *stack.Stack {
	t.Helper()
	st, err := startStack(t.Context(), gatewayConfig(t, redisURL, pool, tune), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

// TestActiveActiveSharedRoutingRecords: two gateways on one Redis whose
// engines publish no KV events, so that what one gateway routed reaches
// the other only as a shared routing record. Each prompt routed through
// A is then in B's index on the endpoint A chose, and the next turn of
// each conversation, sent through B, lands where its prefix is cached.
func TestActiveActiveSharedRoutingRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	srv, pool := startShared(t, 0.02)
	for i := range pool.Endpoints {
		pool.Endpoints[i].KVEvents = ""
	}
	a := startGatewayStack(t, srv.URL(), pool, nil)
	b := startGatewayStack(t, srv.URL(), pool, nil)
	ca, cb := sdkClient(a.Addr()), sdkClient(b.Addr())
	ctx := t.Context()

	// endpointBlocks is what an index holds per endpoint.
	endpointBlocks := func(ix *kv.Index) []int {
		var n []int
		for i := range pool.Endpoints {
			n = append(n, ix.EndpointStats(i).Blocks[kv.HBM])
		}
		return n
	}
	const conversations = 6
	type turn struct {
		system, user, answer string
		prompt               int64
	}
	var first []turn
	for i := range conversations {
		system := fmt.Sprintf("You are agent %d. ", i) + strings.Repeat(fmt.Sprintf("Rule %d: keep answers short and exact. ", i), 40)
		user := "List the files."
		c, err := ca.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(8),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)}})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, turn{system, user, c.Choices[0].Message.Content, c.Usage.PromptTokens})
	}
	want := endpointBlocks(a.Index())
	if want[0]+want[1] == 0 {
		t.Fatal("gateway A recorded no routed blocks")
	}
	// A bound only for a failure: the records arrive in milliseconds.
	deadline := time.Now().Add(30 * time.Second)
	for got := endpointBlocks(b.Index()); fmt.Sprint(got) != fmt.Sprint(want); got = endpointBlocks(b.Index()) {
		if time.Now().After(deadline) {
			t.Fatalf("gateway B's index holds %v blocks per endpoint, A's %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The next turns through B: their prefix is cached where A sent it.
	for i, f := range first {
		c, err := cb.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(8),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(f.system), openai.UserMessage(f.user),
				openai.AssistantMessage(f.answer), openai.UserMessage("Now the tests.")}})
		if err != nil {
			t.Fatal(err)
		}
		if cached := c.Usage.PromptTokensDetails.CachedTokens; cached < f.prompt/2 {
			t.Errorf("conversation %d: its turn through B found %d of its %d prompt tokens cached, want at least the first turn's %d (half)",
				i, cached, c.Usage.PromptTokens, f.prompt)
		}
	}
}

// TestActiveActiveRoutingRecordsOff: with routing.shareRecords false, a
// gateway on Redis neither publishes nor applies routing records; the
// other, with the default, does.
func TestActiveActiveRoutingRecordsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	srv, pool := startShared(t, 0.02)
	off := func(c *stack.Config) { c.Routing.ShareRecords = new(bool) }
	a := startGatewayStack(t, srv.URL(), pool, off)
	b := startGatewayStack(t, srv.URL(), pool, nil)
	const metric = "turnpike_kv_peer_records_published_total"
	for _, g := range []struct {
		st   *stack.Stack
		want bool
	}{{a, false}, {b, true}} {
		resp, err := http.Get("http://" + g.st.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(body), metric); got != g.want {
			t.Errorf("gateway %s exports %s: %v, want %v", g.st.Addr(), metric, got, g.want)
		}
	}
}
