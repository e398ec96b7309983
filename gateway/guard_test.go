package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/guard"
)

// guardedStack is a responses stack whose turns a content check (a test
// server refusing any text with "forbidden", or hanging when hang) reads
// first, in fail mode mode.
func guardedStack(t *testing.T, mode string, hang bool) *responsesStack {
	t.Helper()
	release := make(chan struct{})
	checker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req guard.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.Copy(io.Discard, r.Body)
		if hang {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		json.NewEncoder(w).Encode(guard.Verdict{Allowed: !strings.Contains(req.Text, "forbidden"), Reason: "not here"})
	}))
	t.Cleanup(checker.Close)
	t.Cleanup(func() { close(release) })
	g, err := guard.New(guard.Config{URL: checker.URL, Name: "policy", FailMode: mode, Timeout: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newSimStackWith(t, dispatch.Options{Guard: g})
}

// TestSDKGuard (issue 37): a content check refuses a turn before any
// engine sees it, on chat and on the Responses API, with a 400
// content_policy_violation naming the check; a check that cannot answer
// lets turns through in fail mode open and refuses them (503) in closed.
func TestSDKGuard(t *testing.T) {
	ctx := t.Context()
	chat := func(st *responsesStack, text string) error {
		_, err := st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}, MaxTokens: openai.Int(4)})
		return err
	}
	respond := func(st *responsesStack, text string) error {
		_, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}, MaxOutputTokens: openai.Int(16)})
		return err
	}
	status := func(err error) (int, string, string) {
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			return 0, "", ""
		}
		return apiErr.StatusCode, apiErr.Code, apiErr.Message
	}

	t.Run("refused", func(t *testing.T) {
		st := guardedStack(t, guard.FailClosed, false)
		for name, send := range map[string]func(*responsesStack, string) error{"chat": chat, "responses": respond} {
			if err := send(st, "hello"); err != nil {
				t.Fatalf("%s: an allowed turn: %v", name, err)
			}
			before := st.engine.Count()
			err := send(st, "something forbidden")
			if code, c, msg := status(err); code != http.StatusBadRequest || c != "content_policy_violation" || !strings.Contains(msg, "'policy': not here") {
				t.Errorf("%s: a refused turn: %v", name, err)
			}
			if st.engine.Count() != before {
				t.Errorf("%s: the engine saw a refused turn", name)
			}
		}
	})
	t.Run("check down, open", func(t *testing.T) {
		st := guardedStack(t, guard.FailOpen, true)
		if err := chat(st, "hello"); err != nil {
			t.Errorf("fail open: %v", err)
		}
	})
	t.Run("check down, closed", func(t *testing.T) {
		st := guardedStack(t, guard.FailClosed, true)
		err := chat(st, "hello")
		if code, c, _ := status(err); code != http.StatusServiceUnavailable || c != "content_check_unavailable" {
			t.Errorf("fail closed: %v", err)
		}
		if st.engine.Count() != 0 {
			t.Error("the engine saw a turn the check could not read")
		}
	})
}
