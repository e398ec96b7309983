package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// SGLang's prefill/decode disaggregation, as its router drives it: the
// router picks a prefill and a decode server, adds three fields to the
// request body and sends the same request to both at once.
//
//	bootstrap_host  the prefill server's host
//	bootstrap_port  its bootstrap server's port (--disaggregation-bootstrap-port)
//	bootstrap_room  a random 63-bit integer naming this request's KV
//
// An SGLang-flavoured engine of role prefill given the fields computes the
// prompt, answers one token (the decode server streams the answer) and
// holds the prompt's blocks under the room for Config.KVLease. One of role
// decode asks the prefill server's bootstrap endpoint for the room, which
// waits until the prefill has published it, at most
// Config.BootstrapTimeout; it then pulls the blocks at its link bandwidth,
// as the vLLM flavour does, and decodes. A room that never arrives, or
// fields that are malformed, are refused with 400 and the field named.
//
// The simulator serves the bootstrap endpoint on its main port, at
// BootstrapPath: a simulated prefill engine's bootstrap port is its own
// HTTP port. Engines of another flavour or of role both ignore the fields,
// as a server not started with --disaggregation-mode does.

// BootstrapPath is the simulated bootstrap server's endpoint: a decode
// engine claims a room's KV there.
const BootstrapPath = "/bootstrap/room"

// BootstrapFields are the raw bootstrap fields of a request, each absent
// or null when not sent.
type BootstrapFields struct {
	BootstrapHost json.RawMessage `json:"bootstrap_host,omitempty"`
	BootstrapPort json.RawMessage `json:"bootstrap_port,omitempty"`
	BootstrapRoom json.RawMessage `json:"bootstrap_room,omitempty"`
}

// Bootstrap is a request's parsed bootstrap fields.
type Bootstrap struct {
	Host string
	Port int
	// Room is at most math.MaxInt64: SGLang's rooms are 63-bit.
	Room uint64
}

// ParseBootstrap reads a request's bootstrap fields: nil when none is
// sent, an error naming the field when one is malformed or missing.
func ParseBootstrap(f BootstrapFields) (*Bootstrap, error) {
	absent := func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		return len(raw) == 0 || string(raw) == "null"
	}
	if absent(f.BootstrapHost) && absent(f.BootstrapPort) && absent(f.BootstrapRoom) {
		return nil, nil
	}
	var b Bootstrap
	switch {
	case absent(f.BootstrapHost):
		return nil, &paramError{param: "bootstrap_host", msg: "bootstrap_host is required with bootstrap_port and bootstrap_room"}
	case json.Unmarshal(f.BootstrapHost, &b.Host) != nil || b.Host == "":
		return nil, &paramError{param: "bootstrap_host", msg: "bootstrap_host must be a non-empty string (a batch of rooms is not supported)"}
	}
	if absent(f.BootstrapPort) {
		return nil, &paramError{param: "bootstrap_port", msg: "bootstrap_port is required with bootstrap_host and bootstrap_room"}
	}
	port, err := strconv.ParseUint(string(bytes.TrimSpace(f.BootstrapPort)), 10, 16)
	if err != nil || port == 0 {
		return nil, &paramError{param: "bootstrap_port", msg: fmt.Sprintf("bootstrap_port must be an integer port from 1 to 65535, got %.40s", f.BootstrapPort)}
	}
	b.Port = int(port)
	if absent(f.BootstrapRoom) {
		return nil, &paramError{param: "bootstrap_room", msg: "bootstrap_room is required with bootstrap_host and bootstrap_port"}
	}
	room, err := strconv.ParseUint(string(bytes.TrimSpace(f.BootstrapRoom)), 10, 64)
	if err != nil || room > math.MaxInt64 {
		return nil, &paramError{param: "bootstrap_room", msg: fmt.Sprintf("bootstrap_room must be an integer from 0 to 2^63-1, got %.40s", f.BootstrapRoom)}
	}
	b.Room = room
	return &b, nil
}

// bootstrapFor parses g's bootstrap fields for this engine: nil when the
// engine ignores them (another flavour, role both) or none was sent.
func (e *Engine) bootstrapFor(g *genRequest) (*Bootstrap, error) {
	if e.cfg.Flavor != FlavorSGLang || e.cfg.Role == RoleBoth {
		return nil, nil
	}
	b, err := ParseBootstrap(g.bootstrap)
	if err == nil && b != nil && g.kv != nil && (g.kv.DoRemoteDecode || g.kv.DoRemotePrefill) {
		return nil, &paramError{param: "kv_transfer_params", msg: "kv_transfer_params and bootstrap fields are two P/D protocols: send one"}
	}
	return b, err
}

// roomLease is the lease id of a bootstrap room.
func roomLease(room uint64) string { return "room-" + strconv.FormatUint(room, 10) }

// roomClaim is the bootstrap endpoint's request.
type roomClaim struct {
	Room       uint64 `json:"bootstrap_room"`
	PromptHash uint64 `json:"prompt_hash"`
}

// bootstrapLeg readies q for its side of an SGLang P/D request: a prefill
// engine holds its blocks under the room when it finishes; a decode
// engine claims the room's KV from the prefill engine, waiting for it,
// and pulls the prompt instead of computing it.
func (e *Engine) bootstrapLeg(ctx context.Context, b *Bootstrap, q *sequence, prompt string, promptTokens int) error {
	q.promptHash = promptHash(prompt)
	if e.cfg.Role == RolePrefill {
		q.leaseID = roomLease(b.Room)
		return nil
	}
	wait := e.cfg.scaled(e.cfg.BootstrapTimeout)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := claimRemote(wctx, bootstrapClient, b.Host, b.Port, BootstrapPath, roomClaim{Room: b.Room, PromptHash: q.promptHash})
	if err == nil {
		q.remote = promptTokens - 1
		return nil
	}
	if errors.Is(wctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("the prefill server at %s:%d sent no KV within %v", b.Host, b.Port, wait)
	}
	return &paramError{param: "bootstrap_room", msg: fmt.Sprintf("KVTransferError(bootstrap_room=%d): %v", b.Room, err)}
}

// bootstrapClient reaches prefill engines' bootstrap endpoints; each
// claim is bounded by the decoder's BootstrapTimeout instead.
var bootstrapClient = &http.Client{}

// scaled is d of simulated time in wall time.
func (cfg *Config) scaled(d time.Duration) time.Duration {
	if cfg.TimeScale > 0 {
		return time.Duration(float64(d) * cfg.TimeScale)
	}
	return d
}

// awaitRoom waits until lease id is held or ctx ends, and reports
// whether it is held. Any goroutine.
func (t *leaseTable) awaitRoom(ctx context.Context, id string) bool {
	for {
		t.mu.Lock()
		_, ok := t.m[id]
		if ok {
			t.mu.Unlock()
			return true
		}
		if t.added == nil {
			t.added = make(chan struct{})
		}
		added := t.added
		t.mu.Unlock()
		select {
		case <-added:
		case <-ctx.Done():
			return false
		}
	}
}

// handleBootstrap is the simulated bootstrap server: a decode engine
// claims a room, waiting for the prefill to publish it.
func (e *Engine) handleBootstrap(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if e.cfg.Flavor != FlavorSGLang || e.cfg.Role != RolePrefill {
		writeError(w, http.StatusNotFound, "this engine is not an SGLang prefill server (--disaggregation-mode prefill): it has no bootstrap server", "")
		return
	}
	var c roomClaim
	if err := json.Unmarshal(body, &c); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error(), "")
		return
	}
	wait := e.cfg.scaled(e.cfg.BootstrapTimeout)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	id := roomLease(c.Room)
	if !e.sched.leases.awaitRoom(ctx, id) {
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("bootstrap_room %d was not prefilled here within %v", c.Room, wait), "")
		return
	}
	err := e.sched.leases.claim(id, c.PromptHash, time.Now())
	select {
	case e.wake <- struct{}{}:
	default:
	}
	if err != nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("bootstrap_room %d: %v", c.Room, err), "")
		return
	}
	w.WriteHeader(http.StatusOK)
}
