package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/state"
)

// Idempotency keys. A POST /v1/responses or /v1/chat/completions that is
// not streamed and carries an Idempotency-Key header is answered once per
// tenant and key, for Options.IdempotencyTTL: its first request claims the
// key in the state store (Options.Idempotency) and runs; a 2xx answer is
// kept under the key, and every retry of the same request (same route and
// body) gets that answer again, marked Idempotent-Replayed: true, on
// whichever gateway of the store it lands. A retry that comes while the
// first still runs waits for its answer, up to idempotencyWait, then gets
// 409 idempotency_key_in_use with Retry-After (the OpenAI SDKs retry a 409).
// An answer that is not a 2xx is not kept: the key is freed and the next
// retry runs again. The claim lasts idempotencyClaim and is renewed while
// the request runs, so a retry of a request whose gateway died runs once
// the claim has run out. A key sent with another route or body is a 400
// idempotency_key_reused. Streamed requests are not covered: a stream cut
// short cannot be answered again from a record (a Responses stream resumes
// from GET /v1/responses/{id}?stream=true&starting_after=N).

// Defaults and bounds of idempotency keys.
const (
	// DefaultIdempotencyTTL is the default of Options.IdempotencyTTL.
	DefaultIdempotencyTTL = time.Hour
	// idempotencyClaim is how long a claim on a key lasts unrenewed; the
	// request holding it renews it every third of it.
	idempotencyClaim = 10 * time.Second
	// idempotencyWait bounds a retry's wait for the answer of a request
	// of its key that runs still.
	idempotencyWait = time.Minute
	// maxIdempotencyKey is the longest key taken, in bytes.
	maxIdempotencyKey = 255
	// maxIdempotentAnswer bounds an answer kept, in bytes: a longer one
	// is not kept, and its key is freed.
	maxIdempotentAnswer = 8 << 20
	// idempotencyWrite bounds the store write that ends a request's
	// claim, made after the request may have ended.
	idempotencyWrite = 5 * time.Second
)

// Headers of idempotency keys.
const (
	headerIdempotencyKey      = "Idempotency-Key"
	headerIdempotentReplayed  = "Idempotent-Replayed"
	headerShouldRetry         = "X-Should-Retry"
	idempotentResponsesRoute  = "/v1/responses"
	idempotentChatRoute       = "/v1/chat/completions"
	idempotencyRecordsVersion = 1
)

// Kinds of idempotency records.
const (
	recordRunning byte = 'r'
	recordDone    byte = 'd'
)

// idempotencyRecord is what the store keeps under a key: a claim of a
// request running (nonce tells one claim from another), or its answer.
type idempotencyRecord struct {
	kind   byte
	digest [sha256.Size]byte
	// nonce names a claim.
	nonce [16]byte
	// status, contentType and body are a kept answer's.
	status      int
	contentType string
	body        []byte
}

// encode lays r out as: version, kind, digest, then the nonce (a claim)
// or the status (2 bytes), the content type's length (1 byte), the
// content type and the body (an answer).
func (r *idempotencyRecord) encode() []byte {
	out := make([]byte, 0, 2+len(r.digest)+len(r.nonce)+3+len(r.contentType)+len(r.body))
	out = append(out, idempotencyRecordsVersion, r.kind)
	out = append(out, r.digest[:]...)
	if r.kind == recordRunning {
		return append(out, r.nonce[:]...)
	}
	out = binary.BigEndian.AppendUint16(out, uint16(r.status))
	out = append(out, byte(len(r.contentType)))
	out = append(out, r.contentType...)
	return append(out, r.body...)
}

var errIdempotencyRecord = errors.New("gateway: malformed idempotency record")

// decodeIdempotencyRecord reads a record encode wrote; the body aliases b.
func decodeIdempotencyRecord(b []byte) (idempotencyRecord, error) {
	var r idempotencyRecord
	head := 2 + len(r.digest)
	if len(b) < head || b[0] != idempotencyRecordsVersion {
		return r, errIdempotencyRecord
	}
	r.kind = b[1]
	copy(r.digest[:], b[2:head])
	rest := b[head:]
	switch r.kind {
	case recordRunning:
		if len(rest) != len(r.nonce) {
			return r, errIdempotencyRecord
		}
		copy(r.nonce[:], rest)
	case recordDone:
		if len(rest) < 3 || len(rest) < 3+int(rest[2]) {
			return r, errIdempotencyRecord
		}
		r.status = int(binary.BigEndian.Uint16(rest))
		n := int(rest[2])
		r.contentType = string(rest[3 : 3+n])
		r.body = rest[3+n:]
		if r.status < 200 || r.status > 299 {
			return r, errIdempotencyRecord
		}
	default:
		return r, errIdempotencyRecord
	}
	return r, nil
}

// checkIdempotencyKey refuses a key that is empty, longer than
// maxIdempotencyKey or holds anything but printable ASCII.
func checkIdempotencyKey(key string) error {
	if len(key) == 0 || len(key) > maxIdempotencyKey {
		return apierror.Invalid("", "invalid_idempotency_key", "The Idempotency-Key header must be 1 to %d characters long.", maxIdempotencyKey)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return apierror.Invalid("", "invalid_idempotency_key", "The Idempotency-Key header must hold printable ASCII characters only.")
		}
	}
	return nil
}

// streamed reports whether body asks for a stream ("stream": true). A body
// that is not a JSON object is not streamed: its handler refuses it.
func streamed(body []byte) bool {
	v, ok, err := jsonscan.Lookup(body, "stream")
	return err == nil && ok && string(v) == "true"
}

// idempotencyDigest is what a retry must repeat: the route and the body.
func idempotencyDigest(route string, body []byte) [sha256.Size]byte {
	h := sha256.New()
	io.WriteString(h, route)
	h.Write([]byte{0})
	h.Write(body)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// idempotencyStoreKey is the store's key of tenant's key: the tenant's
// length first, so that no two tenants' keys meet.
func idempotencyStoreKey(tenant, key string) []byte {
	out := binary.AppendUvarint(nil, uint64(len(tenant)))
	out = append(out, tenant...)
	return append(out, key...)
}

// idempotencyMetrics count what became of the requests with a key.
type idempotencyMetrics struct {
	outcomes *prometheus.CounterVec
}

// Outcomes of a request with an Idempotency-Key.
const (
	idemRan      = "ran"      // it ran, and its answer was kept
	idemNotKept  = "not_kept" // it ran, and its answer was not kept
	idemReplayed = "replayed" // the kept answer was sent again
	idemReused   = "reused"   // the key came with another request: 400
	idemInUse    = "in_use"   // a request of the key ran still: 409
	idemStreamed = "streamed" // a stream: not covered
	// idemWaited counts, besides its outcome, a retry that found a
	// request of its key running and waited for it.
	idemWaited = "waited"
)

func newIdempotencyMetrics(reg *prometheus.Registry) *idempotencyMetrics {
	m := &idempotencyMetrics{outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_idempotent_requests_total",
		Help: "Requests with an Idempotency-Key header, by outcome: ran (answer kept), not_kept (answer not a 2xx, or too long; the key freed), replayed (the kept answer sent again), reused (the key sent with another request: 400), in_use (a request of the key still running: 409), streamed (not covered); and waited, besides its outcome, for a retry that waited for the first request of its key.",
	}, []string{"outcome"})}
	for _, o := range []string{idemRan, idemNotKept, idemReplayed, idemReused, idemInUse, idemStreamed, idemWaited} {
		m.outcomes.WithLabelValues(o)
	}
	reg.MustRegister(m.outcomes)
	return m
}

// idempotent is the /v1 middleware of idempotency keys: it answers a
// non-streamed POST of the Responses or chat route with an Idempotency-Key
// once (answerOnce) and lets every other request through.
func (s *Server) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		key := r.Header.Get(headerIdempotencyKey)
		route := c.Path()
		if key == "" || s.opts.Idempotency == nil || r.Method != http.MethodPost ||
			route != idempotentResponsesRoute && route != idempotentChatRoute {
			return next(c)
		}
		if err := checkIdempotencyKey(key); err != nil {
			return err
		}
		// The body is read here once, to be compared with a retry's;
		// the handler reads it again from memory.
		var buf bytes.Buffer
		if r.ContentLength > 0 {
			buf.Grow(int(r.ContentLength))
		}
		if r.Body != nil {
			if _, err := buf.ReadFrom(r.Body); err != nil {
				return err
			}
		}
		body := buf.Bytes()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if streamed(body) {
			s.idem.outcomes.WithLabelValues(idemStreamed).Inc()
			return next(c)
		}
		return s.answerOnce(c, next, idempotencyStoreKey(tenantOf(c), key), idempotencyDigest(route, body))
	}
}

// answerOnce runs the request under key's claim, or answers it with the
// answer kept under key, waiting while another request of the key runs.
func (s *Server) answerOnce(c echo.Context, next echo.HandlerFunc, key []byte, digest [sha256.Size]byte) error {
	ctx := c.Request().Context()
	recs := s.opts.Idempotency
	deadline := time.Now().Add(idempotencyWait)
	pause := 5 * time.Millisecond
	waited := false
	for {
		v, err := recs.Get(ctx, key)
		if errors.Is(err, state.ErrNotFound) {
			claim := idempotencyRecord{kind: recordRunning, digest: digest}
			rand.Read(claim.nonce[:])
			held := claim.encode()
			ok, err := recs.Create(ctx, key, held, idempotencyClaim)
			if err != nil {
				return err
			}
			if ok {
				return s.runClaimed(c, next, key, held, digest)
			}
			continue // another request of the key claimed it first
		}
		if err != nil {
			return err
		}
		rec, err := decodeIdempotencyRecord(v)
		if err != nil {
			return apierror.Internal(err)
		}
		if rec.digest != digest {
			s.idem.outcomes.WithLabelValues(idemReused).Inc()
			return apierror.Invalid("", "idempotency_key_reused",
				"This Idempotency-Key was sent first with a different request (route or body). A retry must repeat the request exactly; a new request needs a new key.").
				WithHeader(headerShouldRetry, "false")
		}
		if rec.kind == recordDone {
			s.idem.outcomes.WithLabelValues(idemReplayed).Inc()
			c.Response().Header().Set(headerIdempotentReplayed, "true")
			return c.Blob(rec.status, rec.contentType, rec.body)
		}
		if time.Now().After(deadline) {
			s.idem.outcomes.WithLabelValues(idemInUse).Inc()
			return apierror.Conflict("", "idempotency_key_in_use",
				"A request with this Idempotency-Key is still being answered. Retry after the indicated delay to get its answer.").
				WithHeader("Retry-After", "1")
		}
		if !waited {
			waited = true
			s.idem.outcomes.WithLabelValues(idemWaited).Inc()
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// runClaimed runs the request whose claim held is under key, renewing the
// claim while it runs; then it keeps a 2xx answer under key in the claim's
// place, or frees the key.
func (s *Server) runClaimed(c echo.Context, next echo.HandlerFunc, key, held []byte, digest [sha256.Size]byte) error {
	recs := s.opts.Idempotency
	bg := context.WithoutCancel(c.Request().Context())
	stop, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(idempotencyClaim / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if ok, err := recs.Swap(bg, key, held, held, idempotencyClaim); !ok || err != nil {
					s.log.Warn("renewing an idempotency key's claim failed: a retry may run the request again", "err", err)
				}
			}
		}
	}()
	// A handler that panics leaves the key free as it unwinds.
	ended := false
	defer func() {
		if ended {
			return
		}
		close(stop)
		<-renewed
		ctx, cancel := context.WithTimeout(bg, idempotencyWrite)
		defer cancel()
		recs.Swap(ctx, key, held, nil, 0)
	}()
	res := c.Response()
	rec := &answerRecorder{ResponseWriter: res.Writer}
	res.Writer = rec
	err := next(c)
	res.Writer = rec.ResponseWriter
	ended = true
	close(stop)
	<-renewed

	ctx, cancel := context.WithTimeout(bg, idempotencyWrite)
	defer cancel()
	var kept []byte // nil frees the key
	if err == nil && res.Committed && res.Status/100 == 2 && !rec.over {
		done := idempotencyRecord{kind: recordDone, digest: digest, status: res.Status, contentType: res.Header().Get(echo.HeaderContentType), body: rec.body.Bytes()}
		if len(done.contentType) > 255 {
			done.contentType = echo.MIMEApplicationJSON
		}
		kept = done.encode()
	}
	ttl := s.opts.IdempotencyTTL
	ok, serr := recs.Swap(ctx, key, held, kept, ttl)
	switch {
	case serr != nil || !ok:
		s.log.Warn("ending an idempotency key's claim failed: a retry may run the request again", "kept", kept != nil, "err", serr)
		s.idem.outcomes.WithLabelValues(idemNotKept).Inc()
	case kept != nil:
		s.idem.outcomes.WithLabelValues(idemRan).Inc()
	default:
		s.idem.outcomes.WithLabelValues(idemNotKept).Inc()
	}
	return err
}

// answerRecorder copies what is written through it, up to
// maxIdempotentAnswer; past it, over is set and nothing more is kept.
// The request's goroutine alone writes through it.
type answerRecorder struct {
	http.ResponseWriter
	body bytes.Buffer
	over bool
}

func (a *answerRecorder) Write(p []byte) (int, error) {
	if !a.over {
		if a.body.Len()+len(p) > maxIdempotentAnswer {
			a.over = true
			a.body = bytes.Buffer{}
		} else {
			a.body.Write(p)
		}
	}
	return a.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *answerRecorder) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// Flush passes a flush on, for handlers that flush what they write.
func (a *answerRecorder) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
