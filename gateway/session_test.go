package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// statelessTurns runs turns as a stateless agent does (Codex with
// store:false): the whole conversation as input every turn, no
// previous_response_id.
func statelessTurns(t *testing.T, client openai.Client, turns int, params responses.ResponseNewParams, opts ...option.RequestOption) {
	t.Helper()
	var input responses.ResponseInputParam
	for i := range turns {
		input = append(input, responses.ResponseInputItemParamOfMessage(fmt.Sprintf("step %d: run the tests", i), responses.EasyInputMessageRoleUser))
		p := params
		p.Model, p.Store, p.MaxOutputTokens = testModel, openai.Bool(false), openai.Int(8)
		p.Instructions = openai.String("You are a coding agent.")
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
		r, err := client.Responses.New(context.Background(), p, opts...)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		input = append(input, responses.ResponseInputItemParamOfMessage(r.OutputText(), responses.EasyInputMessageRoleAssistant))
	}
}

// TestStatelessTurnsShareASession: store:false turns that name their
// thread (prompt_cache_key, as Codex does; a session header; or a
// safety_identifier with the same opening) are one session, not one
// session per response.
func TestStatelessTurnsShareASession(t *testing.T) {
	const turns = 4
	for _, tc := range []struct {
		name    string
		params  responses.ResponseNewParams
		opts    []option.RequestOption
		wantKey string
	}{
		{name: "prompt_cache_key", params: responses.ResponseNewParams{PromptCacheKey: openai.String("thread-1")}, wantKey: "thread-1"},
		{
			name:    "Codex headers",
			params:  responses.ResponseNewParams{PromptCacheKey: openai.String("thread-2")},
			opts:    []option.RequestOption{option.WithHeader("session-id", "codex-session"), option.WithHeader("thread-id", "codex-thread")},
			wantKey: "codex-session",
		},
		{name: "safety_identifier", params: responses.ResponseNewParams{SafetyIdentifier: openai.String("user-1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t, stackOptions{engines: 2})
			client := openai.NewClient(option.WithBaseURL(st.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
			statelessTurns(t, client, turns, tc.params, tc.opts...)
			if n := st.sess.Len(); n != 1 {
				t.Fatalf("%d turns made %d sessions, want 1", turns, n)
			}
			if tc.wantKey == "" {
				return
			}
			s, ok := st.sess.Get(DefaultTenant, tc.wantKey, time.Now())
			if !ok || s.Turns != turns || s.Endpoint == "" {
				t.Errorf("session %q: %+v, %v; want %d turns and a pin", tc.wantKey, s, ok, turns)
			}
		})
	}
}

// TestStoredChainKeepsItsSession: a chain whose first response was named
// by its prompt_cache_key stays in that session when it continues with
// previous_response_id alone.
func TestStoredChainKeepsItsSession(t *testing.T) {
	st := newStack(t, stackOptions{engines: 2})
	client := openai.NewClient(option.WithBaseURL(st.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := context.Background()
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hello"), PromptCacheKey: openai.String("thread-9"), MaxOutputTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("more"), PreviousResponseID: openai.String(r.ID), MaxOutputTokens: openai.Int(8)}); err != nil {
			t.Fatal(err)
		}
	}
	if s, ok := st.sess.Get(DefaultTenant, "thread-9", time.Now()); !ok || s.Turns != 3 || st.sess.Len() != 1 {
		t.Errorf("session %+v, %v, %d sessions; want one of 3 turns", s, ok, st.sess.Len())
	}
}

// TestChatSafetyIdentifierIsASession: chat completions of one
// safety_identifier whose conversations open alike are one session, as on
// the Responses API.
func TestChatSafetyIdentifierIsASession(t *testing.T) {
	st := newStack(t, stackOptions{engines: 2})
	history := `{"role":"system","content":"You are a coding agent."},{"role":"user","content":"step 0: run the tests"}`
	for i := range 3 {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":8,"safety_identifier":"user-9","messages":[%s]}`, testModel, history)
		r := post(t, st.front.URL, body)
		if r.StatusCode != 200 {
			t.Fatalf("turn %d: %d", i, r.StatusCode)
		}
		history += fmt.Sprintf(`,{"role":"assistant","content":"ok"},{"role":"user","content":"step %d"}`, i+1)
	}
	if n := st.sess.Len(); n != 1 {
		t.Fatalf("3 turns made %d sessions, want 1", n)
	}
}
