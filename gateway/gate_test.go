package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestGateBeforeDecoding: while the gate's one slot is taken, a chat
// request that cannot be interactive waits before it is decoded, and one
// that asks for interactive is answered; the slot given back lets the
// first through.
func TestGateBeforeDecoding(t *testing.T) {
	be := newBackend(t, okChat)
	s, front, _ := newGatewayGated(t, pools.Options{}, nil, 1, be)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, leave, err := s.dispatch.Enter(ctx, "", http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	post := func(band string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"test-model","messages":[{"role":"user","content":"hi"}]}`))
		if band != "" {
			req.Header.Set(dispatch.PriorityHeader, band)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s request: status %d", band, resp.StatusCode)
		}
		return nil
	}
	standard := make(chan error, 1)
	go func() { standard <- post("") }()
	for gateWaiting(t, s.opts.Metrics) != 1 {
		if ctx.Err() != nil {
			t.Fatal("the standard request never waited at the gate")
		}
		time.Sleep(time.Millisecond)
	}
	if err := post("interactive"); err != nil {
		t.Fatal(err)
	}
	if be.hits.Load() != 1 {
		t.Fatalf("engine hits %d while the standard request waits, want the interactive one only", be.hits.Load())
	}
	leave()
	if err := <-standard; err != nil {
		t.Fatal(err)
	}
	if be.hits.Load() != 2 {
		t.Errorf("engine hits %d, want 2", be.hits.Load())
	}
}

func gateWaiting(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "turnpike_gate_waiting_requests" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no turnpike_gate_waiting_requests")
	return 0
}
