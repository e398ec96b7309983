package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
