package guard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// checker is a content check that refuses any text holding "forbidden",
// keeping what it was asked.
func checker(t *testing.T) (*httptest.Server, *[]Request) {
	var asked []Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked = append(asked, req)
		json.NewEncoder(w).Encode(Verdict{Allowed: !strings.Contains(req.Text, "forbidden"), Reason: "it says forbidden"})
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

func chat(msgs ...string) *prompt.Prompt {
	p := &prompt.Prompt{}
	for i := 0; i+1 < len(msgs); i += 2 {
		p.Messages = append(p.Messages, prompt.Message{Role: msgs[i], Content: msgs[i+1]})
	}
	return p
}

func TestCheckInput(t *testing.T) {
	srv, asked := checker(t)
	reg := prometheus.NewRegistry()
	g, err := New(Config{URL: srv.URL, Name: "armor"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := g.CheckInput(ctx, "acme", "m", chat("system", "be kind", "user", "hello")); err != nil {
		t.Fatalf("an allowed text: %v", err)
	}
	err = g.CheckInput(ctx, "acme", "m", chat("user", "something forbidden"))
	var r *Refusal
	if !errors.As(err, &r) || r.Check != "armor" || r.Reason != "it says forbidden" {
		t.Fatalf("a refused text: %v", err)
	}
	// A turn's check reads what the turn adds: the messages after the
	// last assistant message, not the history the check has seen.
	if err := g.CheckInput(ctx, "acme", "m", chat("user", "forbidden once", "assistant", "no", "user", "fine now")); err != nil {
		t.Fatalf("a turn after a refused one: %v", err)
	}
	last := (*asked)[len(*asked)-1]
	if last.Text != "user: fine now" || last.Tenant != "acme" || last.Model != "m" || last.Direction != OnInput || last.Check != "armor" {
		t.Errorf("asked %+v", last)
	}
	if got := testutil.ToFloat64(g.checks.WithLabelValues("armor", resultRefused)); got != 1 {
		t.Errorf("%v refusals counted", got)
	}
	if got := testutil.ToFloat64(g.checks.WithLabelValues("armor", resultAllowed)); got != 2 {
		t.Errorf("%v allowed counted", got)
	}

	// Scope prompt: the whole history, each turn.
	whole, err := New(Config{URL: srv.URL, Scope: ScopePrompt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := whole.CheckInput(ctx, "acme", "m", chat("user", "forbidden once", "assistant", "no", "user", "fine now")); !errors.As(err, &r) {
		t.Errorf("the whole prompt's check let a refused text through: %v", err)
	}
}

// A check that cannot answer: the turn goes on under fail mode open and
// is refused as unavailable under closed.
func TestCheckFailMode(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusInternalServerError) }))
	defer broken.Close()
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{allowed")) }))
	defer garbled.Close()
	for _, srv := range []*httptest.Server{hang, broken, garbled} {
		for _, mode := range []string{FailOpen, FailClosed} {
			g, err := New(Config{URL: srv.URL, FailMode: mode, Timeout: 20 * time.Millisecond}, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = g.CheckInput(context.Background(), "t", "m", chat("user", "hi"))
			if mode == FailOpen && err != nil {
				t.Errorf("fail open: %v", err)
			}
			if mode == FailClosed && !errors.Is(err, ErrUnavailable) {
				t.Errorf("fail closed: %v, want ErrUnavailable", err)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if g, err := New(Config{}, nil); g != nil || err != nil {
		t.Errorf("no URL: %v, %v; want no guard", g, err)
	}
	c := Config{URL: "ftp://x", On: []string{"output"}, FailMode: "maybe", Timeout: -1, Scope: "all"}
	c.EnsureDefaults()
	err := c.Validate()
	for _, want := range []string{"guard.url", "guard.on", "guard.failMode", "guard.timeout", "guard.scope"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
}

// FuzzVerdict: whatever the check answers, a turn is let through, refused
// with a *Refusal, or refused as unavailable; nothing else.
func FuzzVerdict(f *testing.F) {
	f.Add([]byte(`{"allowed":true}`), 200)
	f.Add([]byte(`{"allowed":false,"reason":"x"}`), 200)
	f.Add([]byte(`{"allowed":"yes"}`), 200)
	f.Add([]byte(`<html>`), 502)
	f.Fuzz(func(t *testing.T, answer []byte, status int) {
		if status < 200 || status > 599 {
			return
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write(answer)
		}))
		defer srv.Close()
		g, err := New(Config{URL: srv.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = g.CheckInput(context.Background(), "t", "m", chat("user", "hi"))
		var r *Refusal
		if err != nil && !errors.As(err, &r) && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("answer %q (%d): %v", answer, status, err)
		}
	})
}
