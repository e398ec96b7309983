package dispatch

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestBudgetChargedOnce (issue 37): a turn retried on another endpoint
// before its first byte, or migrated mid-stream, is one turn to its
// tenant's budgets: one request, and the tokens the engines counted over
// all its legs, once.
func TestBudgetChargedOnce(t *testing.T) {
	const tpm = 1_000_000
	budgeted := func(f *fixture) {
		t.Helper()
		if err := f.flow.SetTenants([]turns.Tenant{{Name: "acme", MaxBand: turns.Standard, Quota: turns.Quota{RequestsPerMinute: 10, TokensPerMinute: tpm}}}); err != nil {
			t.Fatal(err)
		}
	}
	// next begins and ends a plain turn, and returns what its
	// reservation left of the budgets.
	next := func(f *fixture) (requests, tokens int64, cost int) {
		t.Helper()
		s := chatSpec(false)
		tr, err := f.d.Begin(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		l := tr.RateLimits()
		tr.ReadAll()
		tr.End(nil)
		return l.Requests.Remaining, l.Tokens.Remaining, tr.PromptTokens()
	}

	t.Run("retried", func(t *testing.T) {
		bad := newEngine(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		good := newEngine(t, streamOK)
		f := newFixture(t, bad, good)
		budgeted(f)
		// Round-robin sends one of two turns to the failing endpoint first.
		for range 2 {
			tr, err := f.d.Begin(t.Context(), chatSpec(false))
			if err != nil {
				t.Fatal(err)
			}
			tr.ReadAll()
			tr.End(nil)
		}
		if bad.hits.Load() == 0 {
			t.Fatal("the failing endpoint was never tried")
		}
		if requests, _, _ := next(f); requests != 7 {
			t.Errorf("the third turn left %d requests of 10, want 7", requests)
		}
	})

	t.Run("migrated", func(t *testing.T) {
		const maxTokens = 40
		a, b := simPair(t, 3)
		f := newFixture(t, a, b)
		budgeted(f)
		body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"ignore_eos":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"tell me about caches"}]}`, maxTokens)
		tr, err := f.d.Begin(t.Context(), &Spec{Tenant: "acme", Model: testModel, Path: chatPath, Body: []byte(body), MaxOutputTokens: maxTokens,
			Prompt: &prompt.Prompt{Model: testModel, Messages: []prompt.Message{{Role: "user", Content: "tell me about caches"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := streamText(t, tr); err != nil {
			t.Fatal(err)
		}
		u, _ := tr.Usage()
		tr.End(nil)
		if a.hits.Load()+b.hits.Load() != 2 {
			t.Fatalf("engine requests %d, want 2 (a migration)", a.hits.Load()+b.hits.Load())
		}
		requests, tokens, cost := next(f)
		if requests != 8 {
			t.Errorf("the next turn left %d requests of 10, want 8", requests)
		}
		// The next turn's reservation (its prompt, no output budget) after
		// the migrated turn's tokens over both legs.
		if want := int64(tpm - u.TotalTokens - cost); tokens != want {
			t.Errorf("tokens left %d, want %d: the migrated turn's %d tokens charged once", tokens, want, u.TotalTokens)
		}
	})
}
