package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadAllBody: a body of stated length is read in one allocation, and
// bodies of unstated length, or longer than stated, whole.
func TestReadAllBody(t *testing.T) {
	body := strings.Repeat("x", 170<<10)
	r := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
	if n := testing.AllocsPerRun(20, func() {
		r.Body = io.NopCloser(strings.NewReader(body))
		if b, err := readAllBody(r); err != nil || len(b) != len(body) {
			t.Fatalf("read %d bytes, %v", len(b), err)
		}
	}); n > 3 {
		// Two are the test's reader; io.ReadAll makes a dozen more.
		t.Errorf("%v allocations for a body of stated length, want 1 (and the test reader's 2)", n)
	}
	for _, stated := range []int64{-1, 10} {
		r := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
		r.ContentLength = stated
		if b, err := readAllBody(r); err != nil || string(b) != body {
			t.Errorf("stated length %d: read %d bytes, %v", stated, len(b), err)
		}
	}
}
