package restart

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a gateway stand-in: /readyz answers 200 while ready, and
// every other request is counted and answered with its Idempotency-Key.
type backend struct {
	*httptest.Server
	ready  atomic.Bool
	served atomic.Int64
}

func newBackend(t *testing.T, ready bool) *backend {
	b := &backend{}
	b.ready.Store(ready)
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if !b.ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		b.served.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Header.Get("Idempotency-Key"))
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// TestFront: the front sends nothing to a gateway that is not ready,
// sends a request that meets a refused connection to the next gateway,
// and gives a non-streamed request an Idempotency-Key.
func TestFront(t *testing.T) {
	up, unready, gone := newBackend(t, true), newBackend(t, false), newBackend(t, true)
	f := NewFront([]string{up.addr(), unready.addr(), gone.addr()})
	// Readiness is read once, at Start: the test's to change.
	f.ReadyInterval = time.Hour
	if err := f.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Ready when the front last looked, refusing connections now.
	gone.Close()
	for i := range 12 {
		body := `{"stream":true}`
		if i%2 == 1 {
			body = `{"stream":false}`
		}
		resp, err := http.Post("http://"+f.Addr()+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, key)
		}
		if streamed := i%2 == 0; streamed == (len(key) > 0) {
			t.Fatalf("request %d (streamed %v) reached the gateway with Idempotency-Key %q", i, streamed, key)
		}
	}
	if n := unready.served.Load(); n != 0 {
		t.Errorf("the gateway that was not ready served %d requests", n)
	}
	if up.served.Load() != 12 || f.Retries() == 0 {
		t.Errorf("the ready gateway served %d of 12, front retries %d", up.served.Load(), f.Retries())
	}
}
