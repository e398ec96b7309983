package stack

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// TestNewGroup: a group needs a gateway or more, on a state store they
// all reach.
func TestNewGroup(t *testing.T) {
	cfg := &Config{}
	cfg.EnsureDefaults()
	if _, err := NewGroup(2, cfg, Options{}); err == nil || !strings.Contains(err.Error(), "Redis") {
		t.Errorf("a group on pebble: %v", err)
	}
	cfg.State = state.Config{Backend: state.BackendRedis, URL: "redis://127.0.0.1:1"}
	if _, err := NewGroup(0, cfg, Options{}); err == nil {
		t.Error("a group of no gateways")
	}
	if _, err := NewGroup(2, cfg, Options{}); err != nil {
		t.Error(err)
	}
}

// TestRoundRobinForwardsBodyAfterAnswerStarts holds the front to full
// duplex: a gateway that starts its answer before it has read the whole
// request still gets the rest of the request. A front that let its
// server discard the request body once the answer's headers were flushed
// cut the proxy's copy of that body short, and on a loaded machine it
// lost requests whose answer began as soon as their last byte landed.
func TestRoundRobinForwardsBodyAfterAnswerStarts(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, head); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.Write(head)
		w.(http.Flusher).Flush()
		rest, _ := io.ReadAll(r.Body)
		w.Write(rest)
	}))
	defer gw.Close()
	u, _ := url.Parse(gw.URL)
	front := httptest.NewServer(RoundRobin([]*url.URL{u}))
	defer front.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/responses", pr)
	go pw.Write([]byte("hello"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	head := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, head); err != nil || string(head) != "hello" {
		t.Fatalf("answer began %q, %v", head, err)
	}
	pw.Write([]byte(" world"))
	pw.Close()
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != " world" {
		t.Fatalf("rest of the answer %q, %v: want the rest of the request", rest, err)
	}
}
