package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/turnpike-gateway/turnpike/accelerators"
)

// KVTransferParams is vLLM's kv_transfer_params, the field of a request
// and of a non-streamed answer through which a router disaggregates
// prefill and decode (vLLM's NIXL connector):
//
//   - The prefill leg carries {do_remote_decode: true, do_remote_prefill:
//     false, remote_*: null}. A prefill engine computes the prompt, holds
//     its blocks for a lease and answers {do_remote_prefill: true,
//     do_remote_decode: false, remote_block_ids, remote_engine_id,
//     remote_request_id, remote_host, remote_port, tp_size}.
//   - The decode leg carries those answered params verbatim. A decode
//     engine pulls the blocks from remote_host:remote_port at its link
//     bandwidth instead of recomputing, then decodes.
//
// Params with neither flag set are ignored.
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int32 `json:"remote_block_ids"`
	RemoteRequestID *string `json:"remote_request_id"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
}

// PullPath is the prefill engine's side channel a decode engine claims a
// lease on, the simulator's stand-in for NIXL's handshake and read: the
// blocks are released at the prefiller when claimed, and the decoder
// spends the transfer time in its own schedule.
const PullPath = "/kv_transfer/pull"

// Lease refusals. A decode engine answers a request whose params name a
// lease it cannot claim with 400 and the refusal's text; nothing is
// recomputed (vLLM with kv_load_failure_policy fail).
var (
	errLeaseUnknown  = errors.New("unknown remote_request_id: no KV blocks are held for it")
	errLeaseExpired  = errors.New("the KV blocks' lease expired before they were pulled")
	errLeaseMismatch = errors.New("the KV blocks were computed for another prompt")
)

// lease is a prefilled request's blocks held for a decoder.
type lease struct {
	blocks  []int32
	tokens  int
	prompt  uint64 // xxhash of the prompt text
	expires time.Time
}

// leaseTable holds the leases. Decoders claim them from handler
// goroutines without waiting for the engine loop, as NIXL's one-sided
// reads do not involve the prefiller's scheduler; the loop frees the
// claimed blocks at its next iteration, and alone adds and expires
// leases.
type leaseTable struct {
	mu sync.Mutex
	// protects the fields below
	m map[string]*lease
	// released are claimed leases' blocks, for the loop to free.
	released [][]int32
	// added is closed, and replaced, whenever a lease is added: decoders
	// waiting for an SGLang bootstrap room look again (awaitRoom).
	added chan struct{}
}

// pullBody is the side channel's request.
type pullBody struct {
	EngineID   string `json:"engine_id"`
	RequestID  string `json:"request_id"`
	PromptHash uint64 `json:"prompt_hash"`
}

// hold keeps a finished prefill's blocks under its lease instead of
// freeing them; they are freed when claimed or expired.
func (s *scheduler) hold(q *sequence) {
	q.leaseBlocks = append([]int32(nil), q.blocks...)
	l := &lease{blocks: q.blocks, tokens: q.promptTokens, prompt: q.promptHash, expires: s.now().Add(s.leaseFor)}
	s.leases.mu.Lock()
	s.leases.m[q.leaseID] = l
	if s.leases.added != nil {
		close(s.leases.added)
		s.leases.added = nil
	}
	s.leases.mu.Unlock()
	q.blocks = nil
	q.stored = 0
}

// releaseBlocks frees a lease's blocks; they stay in the prefix cache.
func (s *scheduler) releaseBlocks(blocks []int32) {
	for i := len(blocks) - 1; i >= 0; i-- {
		s.kv.release(blocks[i])
	}
}

// releaseClaimed frees the blocks of the leases claimed since the last
// call. Loop only.
func (s *scheduler) releaseClaimed() {
	s.leases.mu.Lock()
	released := s.leases.released
	s.leases.released = nil
	s.leases.mu.Unlock()
	for _, b := range released {
		s.releaseBlocks(b)
	}
}

// claim hands lease id to a decoder, or says why not; a lease named by a
// decoder is given up either way. Any goroutine.
func (t *leaseTable) claim(id string, prompt uint64, now time.Time) error {
	t.mu.Lock()
	l := t.m[id]
	if l != nil {
		delete(t.m, id)
		t.released = append(t.released, l.blocks)
	}
	t.mu.Unlock()
	switch {
	case l == nil:
		return errLeaseUnknown
	case !now.Before(l.expires):
		return errLeaseExpired
	case l.prompt != prompt:
		return errLeaseMismatch
	}
	return nil
}

// expireLeases frees the leases run out by now and returns the earliest
// expiry still pending (zero when none). Loop only.
func (s *scheduler) expireLeases() time.Time {
	now := s.now()
	var next time.Time
	var expired [][]int32
	s.leases.mu.Lock()
	for id, l := range s.leases.m {
		if !now.Before(l.expires) {
			delete(s.leases.m, id)
			expired = append(expired, l.blocks)
			continue
		}
		if next.IsZero() || l.expires.Before(next) {
			next = l.expires
		}
	}
	s.leases.mu.Unlock()
	for _, b := range expired {
		s.releaseBlocks(b)
	}
	return next
}

// transferTime is how long pulling tokens of KV takes on this engine's
// link.
func (s *scheduler) transferTime(tokens int) (time.Duration, float64) {
	bytes := float64(tokens) * s.model.KVBytesPerToken()
	bw := s.linkBandwidth
	if bw <= 0 {
		return accelerators.HostTransferTime(s.acc, bytes), bytes
	}
	return time.Duration(bytes / bw * float64(time.Second)), bytes
}

// loadWait is how long until the first pulling sequence has its KV, 0
// when none is pulling.
func (s *scheduler) loadWait() time.Duration {
	var w time.Duration
	for _, q := range s.running {
		if q.loading {
			if d := max(q.loadUntil-s.clock, 1); w == 0 || d < w {
				w = d
			}
		}
	}
	return w
}

// leaseDuration is the lease in wall time.
func (cfg *Config) leaseDuration() time.Duration { return cfg.scaled(cfg.KVLease) }

// kvRole checks params against the engine's role and the request, and
// reports whether they ask for anything.
func (e *Engine) kvRole(p *KVTransferParams, stream bool) error {
	switch {
	case p == nil:
		return nil
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return &paramError{param: "kv_transfer_params", msg: "do_remote_decode and do_remote_prefill cannot both be true"}
	case p.DoRemoteDecode && e.cfg.Role == RoleDecode:
		return &paramError{param: "kv_transfer_params", msg: "this engine is a KV consumer (role decode): it cannot prefill for a remote decoder"}
	case p.DoRemotePrefill && e.cfg.Role == RolePrefill:
		return &paramError{param: "kv_transfer_params", msg: "this engine is a KV producer (role prefill): it cannot load remote KV"}
	case p.DoRemoteDecode && stream:
		return &paramError{param: "stream", msg: "a prefill for a remote decoder is answered whole: stream must be false"}
	case p.DoRemotePrefill && (p.RemoteEngineID == nil || p.RemoteRequestID == nil || p.RemoteHost == nil || p.RemotePort == nil):
		return &paramError{param: "kv_transfer_params", msg: "do_remote_prefill needs remote_engine_id, remote_request_id, remote_host and remote_port"}
	}
	return nil
}

// answerParams are the params a prefill engine answers with, after the
// sequence finished.
func (e *Engine) answerParams(r *http.Request, q *sequence) *KVTransferParams {
	host, port := e.advertised(r)
	engineID, reqID := e.engineID, q.leaseID
	return &KVTransferParams{
		DoRemotePrefill: true,
		RemoteEngineID:  &engineID,
		RemoteBlockIDs:  q.leaseBlocks,
		RemoteRequestID: &reqID,
		RemoteHost:      &host,
		RemotePort:      &port,
		TPSize:          1,
	}
}

// advertised is the host and port a decoder reaches this engine at.
func (e *Engine) advertised(r *http.Request) (string, int) {
	host, portStr, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, portStr = r.Host, "80"
	}
	if e.cfg.AdvertiseHost != "" {
		host = e.cfg.AdvertiseHost
	}
	port, _ := strconv.Atoi(portStr)
	return host, port
}

// promptHash identifies a prompt between prefiller and decoder.
func promptHash(prompt string) uint64 { return xxhash.Sum64String(prompt) }

// pull claims the lease p names from its prefill engine. The blocks'
// transfer is then charged by the scheduler.
func (e *Engine) pull(ctx context.Context, p *KVTransferParams, prompt uint64) error {
	return claimRemote(ctx, pullClient, *p.RemoteHost, *p.RemotePort, PullPath, pullBody{EngineID: *p.RemoteEngineID, RequestID: *p.RemoteRequestID, PromptHash: prompt})
}

// claimRemote posts a claim to a prefill engine's side channel at path
// and returns the refusal it answers, if any.
func claimRemote(ctx context.Context, client *http.Client, host string, port int, path string, claim any) error {
	b, _ := json.Marshal(claim)
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("could not reach the prefill engine: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	var eb errorBody
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&eb)
	if eb.Error.Message == "" {
		eb.Error.Message = resp.Status
	}
	return errors.New(eb.Error.Message)
}

// pullClient reaches prefill engines' side channels.
var pullClient = &http.Client{Timeout: 30 * time.Second}

// handlePull is the side channel: a decoder claims a lease.
func (e *Engine) handlePull(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var pb pullBody
	if err := json.Unmarshal(body, &pb); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error(), "")
		return
	}
	if pb.EngineID != e.engineID {
		writeError(w, http.StatusNotFound, fmt.Sprintf("remote_engine_id %q is not this engine (%s): it restarted or never prefilled the request", pb.EngineID, e.engineID), "")
		return
	}
	err := e.sched.leases.claim(pb.RequestID, pb.PromptHash, time.Now())
	// The loop frees what was claimed, or given up, at its next step.
	select {
	case e.wake <- struct{}{}:
	default:
	}
	if err != nil {
		writeError(w, http.StatusNotFound, err.Error(), "")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// errKVTransfer wraps a refused pull as the decode request's error.
func errKVTransfer(reqID string, err error) error {
	return &paramError{param: "kv_transfer_params", msg: fmt.Sprintf("KV transfer for remote request %s failed: %v", reqID, err)}
}
