package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBenchProxyForwards runs `turnpike bench proxy` in front of an
// upstream: a request's method, path and body reach it unchanged and its
// answer comes back; an upstream that is not a URL is refused.
func TestBenchProxyForwards(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body))
	}))
	defer up.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"bench", "proxy", "--addr", addr, "--upstream", up.URL}, io.Discard, io.Discard)
	}()

	var res *http.Response
	for range 200 {
		res, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := `POST /v1/chat/completions {"model":"m"}`; res.StatusCode != http.StatusOK || string(got) != want {
		t.Fatalf("status %d, answer %q; want 200 and %q", res.StatusCode, got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy stopped with %v", err)
	}

	var stderr strings.Builder
	if err := run(context.Background(), []string{"bench", "proxy", "--upstream", "not a url"}, io.Discard, &stderr); err == nil || !strings.Contains(stderr.String(), "--upstream") {
		t.Fatalf("a bad upstream: %v, %q; want a usage error naming --upstream", err, stderr.String())
	}
}
