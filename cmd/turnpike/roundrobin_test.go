package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

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
	front, err := startRoundRobin([]*url.URL{u})
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+front.Addr+"/v1/responses", pr)
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
