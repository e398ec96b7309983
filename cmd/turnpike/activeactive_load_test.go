package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// TestActiveActiveSharedLoad: two gateways on one Redis with the
// least-loaded policy, two engines. Gateway A holds three streams on the
// first engine; gateway B, which has nothing in flight, counts them
// (routing.shareLoad, on by default with Redis), shows them in its admin
// API, and sends its own two streams to the other engine. Alone, B would
// see two idle engines and put one of its streams on the busy one. When
// A's streams end, B stops counting them.
func TestActiveActiveSharedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	srv, pool := startShared(t, 1)
	leastLoaded := func(c *stack.Config) { c.Routing.Policy = affinity.PolicyLeastLoaded }
	a := startGatewayStack(t, srv.URL(), pool, leastLoaded)
	b := startGatewayStack(t, srv.URL(), pool, leastLoaded)
	// A routes only to the first engine.
	busy := a.Registry().Endpoints()[0]
	a.Registry().Endpoints()[1].SetDraining(true)

	// stream opens a long stream through addr and returns once its first
	// chunk came; the stream runs until ctx ends.
	stream := func(ctx context.Context, addr string) {
		t.Helper()
		client := sdkClient(addr)
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel,
			MaxTokens: openai.Int(4000), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a long story.")}})
		if !s.Next() {
			t.Fatalf("stream through %s: no first chunk: %v", addr, s.Err())
		}
		go func() {
			for s.Next() {
			}
			s.Close()
		}()
	}
	ctxA, stopA := context.WithCancel(t.Context())
	defer stopA()
	for range 3 {
		stream(ctxA, a.Addr())
	}
	var onB *pools.Endpoint // the busy engine in B's registry
	for _, ep := range b.Registry().Endpoints() {
		if ep.ID == busy.ID {
			onB = ep
		}
	}
	// A bound only for a failure: reports go every 100 ms.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("B counts A's three streams", func() bool { return onB.InFlight() == 3 })

	// B's admin API shows them as the other gateways'.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+b.Addr()+"/admin/v1/endpoints", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID           string `json:"id"`
			InFlight     int64  `json:"inFlight"`
			PeerInFlight int64  `json:"peerInFlight"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Data {
		if e.ID == busy.ID && (e.InFlight != 0 || e.PeerInFlight != 3) {
			t.Errorf("B's admin view of %s: inFlight %d, peerInFlight %d; want 0 and A's 3", e.ID, e.InFlight, e.PeerInFlight)
		}
	}

	// B's own streams go to the other engine.
	ctxB, stopB := context.WithCancel(t.Context())
	defer stopB()
	for range 2 {
		stream(ctxB, b.Addr())
	}
	if n := onB.OwnInFlight(); n != 0 {
		t.Errorf("B sent %d of its 2 streams to the engine that has A's 3", n)
	}

	stopA()
	waitFor("B stops counting A's streams once they end", func() bool { return onB.Peers().InFlight == 0 })
}
