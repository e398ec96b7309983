package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Prefill/decode disaggregation, vLLM's proxy protocol without a
// sidecar. For a model served by prefill and decode pools, each turn:
//
//  1. picks the decoder (prefix and load, the policy as for any turn);
//  2. asks the decider (routing.pd) whether the prompt's tokens not
//     cached at that decoder are worth a prefill elsewhere;
//  3. if so, picks a prefiller (prefix and prefill queue) and sends the
//     prefill leg: the client's body with kv_transfer_params
//     {do_remote_decode: true, do_remote_prefill: false, remote_*: null},
//     stream false, max_tokens 1 and no stream_options;
//  4. sends the decode leg to the decoder: the client's body with the
//     kv_transfer_params the prefiller answered, verbatim. Its answer is
//     the turn's, streamed or not, as the client asked.
//
// Both legs carry the same X-Request-Id. A prefill leg that fails or
// times out is retried on another prefiller only for 502, 503, 504 or a
// connection failure (as llm-d does), then given up: the decoder
// prefills the turn itself. A decode leg that fails before its first
// byte goes to another decoder with the same params; one that refuses
// them (the lease expired, the prefiller restarted) is sent again
// without them. The usage the client sees reports the prefiller's
// cached tokens: what the turn's prefill found in cache.

// P/D fallbacks, the label of turnpike_pd_fallbacks_total.
const (
	pdFallbackPrefillFailed = "prefill_failed"
	pdFallbackKVRefused     = "kv_refused"
)

// P/D flavours, the flavor label of the P/D series: the protocol of the
// decoder's pool (pdFlavor).
const (
	pdVLLM   = "vllm"
	pdSGLang = "sglang"
)

// pdMetrics are the P/D series, each labelled by flavour.
type pdMetrics struct {
	decisions  *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	prefillLeg *prometheus.HistogramVec
	decodeLeg  *prometheus.HistogramVec
	transfer   *prometheus.HistogramVec
}

var pdBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newPDMetrics() *pdMetrics {
	m := &pdMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_pd_decisions_total",
			Help: "Turns of disaggregated models by the P/D decider's verdict: disaggregated, below_threshold (the decoder prefilled), no_prefiller, disabled, revision_mismatch (no prefiller of a revision compatible with the decoder's), prefill_queue_full (every compatible prefiller had routing.pd.maxPrefillQueue requests in flight; the decoder prefilled).",
		}, []string{"flavor", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_pd_fallbacks_total",
			Help: "Disaggregated turns the decoder prefilled after all: prefill_failed (the prefill leg failed or timed out), kv_refused (the decoder could not pull the prefilled KV).",
		}, []string{"flavor", "reason"}),
		prefillLeg: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_pd_prefill_leg_seconds",
			Help:    "Duration of successful prefill legs, from send to the prefiller's whole answer.",
			Buckets: pdBuckets,
		}, []string{"flavor"}),
		decodeLeg: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_pd_decode_leg_seconds",
			Help:    "Duration of decode legs after a prefill leg, from send to the end of the answer.",
			Buckets: pdBuckets,
		}, []string{"flavor"}),
		transfer: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_pd_kv_transfer_seconds",
			Help:    "Time from the prefill leg's answer to the decode leg's first streamed token: the decoder's KV pull and its first step.",
			Buckets: pdBuckets,
		}, []string{"flavor"}),
	}
	for _, f := range []string{pdVLLM, pdSGLang} {
		for _, r := range affinity.PDReasons {
			m.decisions.WithLabelValues(f, r)
		}
		for _, r := range []string{pdFallbackPrefillFailed, pdFallbackKVRefused} {
			m.fallbacks.WithLabelValues(f, r)
		}
	}
	return m
}

func (m *pdMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.fallbacks, m.prefillLeg, m.decodeLeg, m.transfer}
}

// pdLeg is what a disaggregated turn keeps of its prefill leg.
type pdLeg struct {
	prefiller *pools.Endpoint
	// cached is the prefiller's cached prompt tokens, reported to the
	// client.
	cached int
	// prefilled is when the prefill answered; decodeSent when the decode
	// leg went out.
	prefilled, decodeSent time.Time
	// flavor is pdVLLM or pdSGLang; sglang is the prefill leg running
	// beside an SGLang decode leg, nil for vLLM's.
	flavor string
	sglang *sglangPrefill
}

// prefillParams are the kv_transfer_params of a prefill leg.
var prefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// retryablePrefill: llm-d retries a prefill leg on these statuses only.
func retryablePrefill(err error) bool {
	if ue, ok := errors.AsType[*pools.UpstreamError](err); ok {
		switch ue.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return errors.Is(err, pools.ErrUpstream) || errors.Is(err, pools.ErrBreakerOpen)
}

// sendPD runs the turn's engine request on a disaggregated model: the
// decoder first, the decider, the prefill leg when it says so, then the
// decode leg. It leaves t as send does: holding the answer or failed.
func (t *Turn) sendPD(ctx context.Context) error {
	d, spec := t.d, t.spec
	t.header = engineHeader(spec)
	if t.header.Get("X-Request-Id") == "" {
		if t.header == nil {
			t.header = http.Header{}
		}
		t.header.Set("X-Request-Id", newRequestID())
	}
	var buf [16]*pools.Endpoint
	decoders := t.candidates(d.reg.EndpointsFor(buf[:0], spec.Model))
	if len(decoders) == 0 {
		return d.modelNotFound(spec.Model)
	}
	// A session handed over stays on its draining decoder while its new
	// one is warmed.
	decoder := t.stayingOn()
	t.stayed = decoder != nil
	if decoder == nil {
		var err error
		if decoder, err = t.pick(ctx, &t.route, decoders); err != nil {
			return fmt.Errorf("%w: %w", ErrNoEndpoint, err)
		}
	}
	// A prefiller pairs only with decoders of its protocol and of a
	// compatible revision.
	flavor := pdFlavor(decoder)
	var pbuf [16]*pools.Endpoint
	prefillers := d.reg.PrefillEndpointsFor(pbuf[:0], spec.Model)
	n, incompatible := 0, 0
	for _, ep := range prefillers {
		switch {
		case pdFlavor(ep) != flavor:
		case !d.pd.Compatible(ep.Revision(), decoder.Revision()):
			if ep.Available() {
				incompatible++
			}
		default:
			prefillers[n] = ep
			n++
		}
	}
	prefillers = prefillers[:n]
	cached := 0
	switch {
	case t.route.Routing.Endpoint == decoder:
		cached = t.route.Routing.CachedBlocks * d.hasher.BlockTokens()
	case t.stayed:
		cached = t.stayCached(decoder)
	}
	verdict := d.pd.Decide(t.route.PromptTokens, cached, affinity.Available(prefillers), incompatible, affinity.LeastInFlight(prefillers))
	d.pdm.decisions.WithLabelValues(flavor, verdict.Reason).Inc()
	if verdict.Disaggregate && flavor == pdSGLang {
		return t.sendSGLang(ctx, decoder, prefillers)
	}
	body := spec.Body
	if verdict.Disaggregate {
		pctx, span := d.tr.Start(ctx, tracing.SpanPrefill, trace.SpanKindInternal)
		b, ok := t.prefill(pctx, prefillers)
		endPrefill(span, ok)
		if ok {
			body = b
		} else {
			d.pdm.fallbacks.WithLabelValues(pdVLLM, pdFallbackPrefillFailed).Inc()
		}
	}
	if t.pd != nil {
		t.pd.decodeSent = time.Now()
		ctx, t.decode = d.tr.Start(ctx, tracing.SpanDecode, trace.SpanKindInternal)
	}
	t.picked = decoder
	if err := t.send(ctx, body, nil); err != nil {
		return err
	}
	if t.pd != nil && t.resp.StatusCode == http.StatusBadRequest {
		// The decoder could not pull the KV: prefill there after all.
		ee := readEngineError(t.resp)
		t.dropAnswer(ee)
		if ee.Param != "kv_transfer_params" {
			return ee
		}
		d.log.Info("decoder refused the prefilled KV; it prefills the turn", "cause", ee.Message)
		d.pdm.fallbacks.WithLabelValues(pdVLLM, pdFallbackKVRefused).Inc()
		t.pd = nil
		return t.send(ctx, spec.Body, nil)
	}
	return nil
}

// prefill runs the prefill leg and returns the decode leg's body, or
// false when the decoder must prefill.
func (t *Turn) prefill(ctx context.Context, prefillers []*pools.Endpoint) ([]byte, bool) {
	d, spec := t.d, t.spec
	leg, err := prefillBody(spec.Body)
	if err != nil {
		return nil, false
	}
	req := t.prefillRequest()
	pctx, cancel := context.WithTimeout(ctx, d.pd.PrefillTimeout)
	defer cancel()
	tokens := int64(t.route.PromptTokens + 1)
	for attempt := 0; attempt <= d.reg.Options().MaxRetries && len(prefillers) > 0; attempt++ {
		ep, err := t.pick(pctx, &req, prefillers)
		if err != nil {
			return nil, false
		}
		start := time.Now()
		params, usage, err := t.prefillOn(pctx, ep, leg, tokens)
		if err == nil {
			t.prefillDone(&req, ep, usage, time.Since(start), pdVLLM)
			decode, err := decodeBody(spec.Body, params)
			if err != nil {
				return nil, false
			}
			t.pd = &pdLeg{prefiller: ep, cached: usage.PromptTokensDetails.CachedTokens, prefilled: time.Now(), flavor: pdVLLM}
			return decode, true
		}
		d.policy.Done(&req, ep, affinity.Outcome{Err: err})
		if ctx.Err() != nil || !retryablePrefill(err) {
			d.log.Info("prefill leg failed; the decoder prefills", "prefiller", ep.ID, "err", err)
			return nil, false
		}
		prefillers = without(prefillers, ep)
	}
	return nil, false
}

// prefillRequest is the routing request of the turn's prefill leg.
func (t *Turn) prefillRequest() affinity.Request {
	return affinity.Request{
		Model:                t.spec.Model,
		Tenant:               t.spec.Tenant,
		PromptTokens:         t.route.PromptTokens,
		ExpectedOutputTokens: 1,
		Interactive:          t.route.Interactive,
		Band:                 t.route.Band,
		Hashes:               t.route.Hashes,
		Prefill:              true,
	}
}

// prefillDone tells routing and the metrics of a prefill leg that ep
// answered after took, reporting usage.
func (t *Turn) prefillDone(req *affinity.Request, ep *pools.Endpoint, usage Usage, took time.Duration, flavor string) {
	t.d.policy.Done(req, ep, affinity.Outcome{
		PromptTokens: usage.PromptTokens, CachedTokens: usage.PromptTokensDetails.CachedTokens,
		CompletionTokens: usage.CompletionTokens, TTFT: took,
	})
	t.d.pdm.prefillLeg.WithLabelValues(flavor).Observe(took.Seconds())
	// The decoder was picked first: its pick is the turn's routing.
	t.d.revm.prefillLeg(ep, t.route.Routing.Endpoint)
}

// prefillOn sends the prefill leg to ep and reads the params and usage
// it answers.
func (t *Turn) prefillOn(ctx context.Context, ep *pools.Endpoint, leg []byte, tokens int64) (json.RawMessage, Usage, error) {
	return t.d.prefillOn(ctx, ep, t.spec.Path, t.withPriority(ep, leg), t.header, tokens)
}

// prefillOn sends a prefill leg, leg, to ep at path and reads the params
// and usage it answers: a turn's, or a hand-off's warm-up's.
func (d *Dispatcher) prefillOn(ctx context.Context, ep *pools.Endpoint, path string, leg []byte, header http.Header, tokens int64) (json.RawMessage, Usage, error) {
	ctx, span := d.tr.Start(ctx, tracing.SpanEngine, trace.SpanKindClient)
	resp, err := d.reg.Client().Send(ctx, ep, path, leg, d.traced(ctx, header), tokens)
	startEngine(span, ep, resp, err)
	defer span.End()
	if err != nil {
		return nil, Usage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, Usage{}, readEngineError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	if err != nil {
		return nil, Usage{}, fmt.Errorf("%w: reading %s: %w", pools.ErrUpstream, ep.ID, err)
	}
	var answer struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
		Usage            Usage           `json:"usage"`
	}
	if err := json.Unmarshal(b, &answer); err != nil {
		return nil, Usage{}, fmt.Errorf("%w: %s: prefill answer: %w", pools.ErrUpstream, ep.ID, err)
	}
	if len(answer.KVTransferParams) == 0 || string(answer.KVTransferParams) == "null" {
		return nil, Usage{}, fmt.Errorf("%w: %s answered the prefill leg without kv_transfer_params (is it a prefill engine?)", pools.ErrUpstream, ep.ID)
	}
	return answer.KVTransferParams, answer.Usage, nil
}

// prefillBody is the prefill leg of the request body: as vLLM's proxy
// sends it, one token asked for, not streamed, with the prefill's
// kv_transfer_params.
func prefillBody(body []byte) ([]byte, error) {
	one := []byte("1")
	return jsonscan.Edit(body, []jsonscan.Member{
		{Key: "kv_transfer_params", Value: prefillParams},
		{Key: "stream", Value: []byte("false")},
		{Key: "max_tokens", Value: one},
		{Key: "max_completion_tokens", Value: one, Replace: true},
	}, "stream_options")
}

// decodeBody is the decode leg: the client's body with the prefill's
// params as its kv_transfer_params (in place of any the client sent).
func decodeBody(body []byte, params json.RawMessage) ([]byte, error) {
	return jsonscan.Edit(body, []jsonscan.Member{{Key: "kv_transfer_params", Value: params}})
}

// pdUsage is the usage the client sees of a disaggregated turn: the
// decoder's, with the prefiller's cached tokens.
func (t *Turn) pdUsage() {
	if t.pd.sglang != nil && !t.pd.sglangSettled() {
		return
	}
	t.usage.PromptTokensDetails.CachedTokens = min(t.pd.cached, t.usage.PromptTokens)
}

// pdRewrite puts the turn's usage in a non-streamed answer.
func (t *Turn) pdRewrite(b []byte) []byte {
	if !t.hasUsage {
		return b
	}
	u, _ := json.Marshal(t.usage)
	out, err := jsonscan.Edit(b, []jsonscan.Member{{Key: "usage", Value: u}})
	if err != nil {
		return b
	}
	return out
}

// pdEnd observes a disaggregated turn's decode leg.
func (t *Turn) pdEnd() {
	m := t.d.pdm
	if l := t.pd.sglang; l != nil {
		l.cancelDecode()
		select {
		case <-l.done:
			if l.err == nil {
				t.pd.prefilled = l.at
			}
		default: // still draining: no transfer time to observe
		}
	}
	m.decodeLeg.WithLabelValues(t.pd.flavor).Observe(time.Since(t.pd.decodeSent).Seconds())
	if !t.firstData.IsZero() && !t.pd.prefilled.IsZero() && t.firstData.After(t.pd.prefilled) {
		m.transfer.WithLabelValues(t.pd.flavor).Observe(t.firstData.Sub(t.pd.prefilled).Seconds())
	}
}

// pdFlavor is the P/D protocol of ep's pool: SGLang's bootstrap fields for
// engine sglang, vLLM's kv_transfer_params otherwise.
func pdFlavor(ep *pools.Endpoint) string {
	if ep.Pool.Config.Engine == pools.EngineSGLang {
		return pdSGLang
	}
	return pdVLLM
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dropAnswer gives up the engine's answer for cause before its first byte
// reached the client: the engine's span and the body end, routing hears of
// the failure, and the turn holds no endpoint, so that it can send again.
func (t *Turn) dropAnswer(cause error) {
	t.endEngine(cause)
	t.resp.Body.Close()
	t.d.policy.Done(&t.route, t.ep, affinity.Outcome{Err: cause})
	t.resp, t.ep = nil, nil
}
