package gateway

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// A body long enough that its length may prove it longer than its
// model's context (Server.contextFloor) is read first into a stage: a
// buffer outside the Go heap, where it is checked. A body refused there
// never reaches the heap, and its memory goes back to the system the
// moment it is refused, not at the collector's next cycle, which under a
// high GOGC is minutes away once a burst has passed. A chat body let
// through is copied to where its handler keeps it (for the moment of the
// copy it costs twice its size); a Responses body is decoded from its
// stage, the request copying what it keeps.

// Staging sizes.
const (
	// stageGrain rounds stages up, so that bodies of about one size reuse
	// one.
	stageGrain = 64 << 10
	// stagesKept bounds the stages kept for reuse (two of the default
	// body limit); the rest are unmapped as soon as their body is done.
	stagesKept = 64 << 20
)

// stagePool keeps stages for reuse, up to max bytes of them. It must not
// be copied.
type stagePool struct {
	max int
	// mapped is the bytes of stages in use or kept.
	mapped atomic.Int64
	mu     struct {
		sync.Mutex
		// protects the fields below
		free  [][]byte
		bytes int
	}
}

// get returns an empty stage of capacity at least n.
func (p *stagePool) get(n int) []byte {
	p.mu.Lock()
	best := -1
	for i, b := range p.mu.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.mu.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.mu.free[best]
		last := len(p.mu.free) - 1
		p.mu.free[best], p.mu.free[last] = p.mu.free[last], nil
		p.mu.free = p.mu.free[:last]
		p.mu.bytes -= cap(b)
		p.mu.Unlock()
		return b[:0]
	}
	p.mu.Unlock()
	b := mapStage((n + stageGrain - 1) / stageGrain * stageGrain)
	p.mapped.Add(int64(cap(b)))
	return b
}

// put takes back a stage nothing refers to any more: kept for reuse while
// the pool has room, else unmapped.
func (p *stagePool) put(b []byte) {
	p.mu.Lock()
	if p.mu.bytes+cap(b) <= p.max {
		p.mu.free = append(p.mu.free, b)
		p.mu.bytes += cap(b)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.mapped.Add(-int64(cap(b)))
	unmapStage(b)
}

// readChecked reads a body of kind with read, which is given the staged
// bytes to copy, or nil to read the request's body itself, and refuses
// it (refuseOverContext) before it is decoded. A body that states a
// length past contextFloor is staged and checked before read copies it.
func (s *Server) readChecked(c echo.Context, kind prompt.BodyKind, param string, read func(staged []byte) ([]byte, error)) ([]byte, error) {
	r := c.Request()
	if n := r.ContentLength; n > s.contextFloor[kind] && s.opts.MaxTokenBytes >= 0 {
		staged, err := s.stage(r.Body, int(n))
		if staged != nil {
			defer s.stages.put(staged)
		}
		if err != nil {
			return nil, err
		}
		if err := s.refuseOverContext(staged, kind, param); err != nil {
			return nil, err
		}
		return read(staged)
	}
	body, err := read(nil)
	if err != nil {
		return nil, err
	}
	return body, s.refuseOverContext(body, kind, param)
}

// stage reads the n bytes of body into a stage.
func (s *Server) stage(body io.Reader, n int) ([]byte, error) {
	b := s.stages.get(n)[:n]
	if _, err := io.ReadFull(body, b); err != nil {
		return b, err
	}
	return b, nil
}
