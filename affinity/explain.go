package affinity

import (
	"math"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/pools"
)

// The causes of a cache miss, the cause label of
// turnpike_affinity_cache_misses_total. A miss is a turn whose engine
// reported fewer cached prompt tokens than the index predicted on the
// endpoint picked, by more than one block. Each miss has exactly one
// cause, the first of this list that holds.
const (
	// MissAnotherAdapter: the turn asked for a LoRA adapter of the
	// endpoint. Its blocks chain from the adapter (kv.ModelSeed), and an
	// engine drops an adapter's cache with the adapter (unloaded for
	// another, or loaded again under another id) without a KV event per
	// block.
	MissAnotherAdapter = "another_adapter"
	// MissAnotherTier: part of the predicted prefix was held only in a
	// tier below HBM (CPU, disk, shared), which the engine had to load
	// back and may have recomputed, or not counted as cached.
	MissAnotherTier = "another_tier"
	// MissUnknown: the index could not tell what the engine did: the
	// endpoint sends no KV events, or its entries were stale (an event gap)
	// when it was picked.
	MissUnknown = "unknown"
	// MissEvicted: the engine's KV events reported blocks removed from the
	// endpoint, or its cache cleared, between the pick and the turn's end.
	MissEvicted = "evicted"
	// MissNeverThere: KV events flowed and reported nothing removed, yet
	// the engine had not cached what the index counted: the index held the
	// blocks from routing's records ahead of the engine (this gateway's or
	// a peer's), for a turn whose prefill the engine had not finished, or
	// failed, when this turn arrived.
	MissNeverThere = "never_there"
)

// missCause indexes the causes above in pre-resolved counters.
type missCause uint8

const (
	causeAnotherAdapter missCause = iota
	causeAnotherTier
	causeUnknown
	causeEvicted
	causeNeverThere
	numCauses
)

var causeNames = [numCauses]string{MissAnotherAdapter, MissAnotherTier, MissUnknown, MissEvicted, MissNeverThere}

// Results of a prediction, the result label of
// turnpike_affinity_cache_predictions_total.
const (
	// PredictionHit: the engine's cached tokens were within one block of
	// the prediction.
	PredictionHit = "hit"
	// PredictionMiss: the engine cached fewer, by more than one block.
	PredictionMiss = "miss"
	// PredictionSurplus: the engine cached more, by more than one block.
	PredictionSurplus = "surplus"
)

// CacheHeader is the request header that asks for the prediction in the
// answer, and the answer's header that carries it (CachePrediction.String).
const CacheHeader = "x-turnpike-cache-prediction"

// CachePrediction is what the index predicted of a turn's cached prompt
// tokens when it was routed.
type CachePrediction struct {
	// Endpoint is the endpoint picked.
	Endpoint string
	// Predicted is the prompt tokens predicted cached on Endpoint; BestOther
	// the most on any other candidate. Both count whole blocks, at most
	// the blocks an engine reuses of the prompt (deliverable).
	Predicted, BestOther int
}

// String is the value of CacheHeader:
// "predicted=1024; best_other=0; endpoint=10.0.0.7:8000".
func (p CachePrediction) String() string {
	return "predicted=" + strconv.Itoa(p.Predicted) + "; best_other=" + strconv.Itoa(p.BestOther) + "; endpoint=" + p.Endpoint
}

// CachePrediction reports what the last Pick predicted cached of req's
// prompt, against the gateway's estimate of its length; false when no
// index was consulted (a policy without one, or no pick yet).
func (req *Request) CachePrediction() (CachePrediction, bool) {
	r := &req.Routing
	if r.Endpoint == nil || r.BlockSize == 0 {
		return CachePrediction{}, false
	}
	prompt := max(req.PromptTokens, len(req.Hashes)*r.BlockSize)
	return CachePrediction{
		Endpoint:  r.Endpoint.ID,
		Predicted: deliverable(r.CachedBlocks, prompt, r.BlockSize),
		BestOther: deliverable(r.BestOtherBlocks, prompt, r.BlockSize),
	}, true
}

// deliverable is the tokens of blocks cached blocks an engine reuses of a
// prompt of prompt tokens: as vLLM, it computes the prompt's last token
// again, so it reuses at most the whole blocks before it.
func deliverable(blocks, prompt, blockSize int) int {
	return max(min(blocks, (prompt-1)/blockSize), 0) * blockSize
}

// CacheAccuracy is one endpoint's account of predictions against what
// its engine delivered, since the policy was built.
type CacheAccuracy struct {
	// Turns are the turns answered with usage whose prompt was looked up.
	Turns int64
	// PredictedTokens and DeliveredTokens sum the tokens predicted cached
	// and the engine's cached tokens over Turns.
	PredictedTokens, DeliveredTokens int64
	// Misses counts the misses by cause (MissEvicted, ...); causes with
	// none are absent.
	Misses map[string]int64
}

// cacheAccount is CacheAccuracy's live counters for one endpoint.
type cacheAccount struct {
	turns, predicted, delivered atomic.Int64
	misses                      [numCauses]atomic.Int64
}

// accuracy is a's counts as CacheAccuracy.
func (a *cacheAccount) accuracy() CacheAccuracy {
	out := CacheAccuracy{Turns: a.turns.Load(), PredictedTokens: a.predicted.Load(), DeliveredTokens: a.delivered.Load()}
	for i := range a.misses {
		if n := a.misses[i].Load(); n > 0 {
			if out.Misses == nil {
				out.Misses = map[string]int64{}
			}
			out.Misses[causeNames[i]] = n
		}
	}
	return out
}

// cacheMetrics are the collectors of predictions against deliveries.
type cacheMetrics struct {
	errTokens prometheus.Histogram
	errShare  prometheus.Histogram
	results   [3]prometheus.Counter // hit, miss, surplus
	misses    [numCauses]prometheus.Counter
}

// predictionErrorBuckets are signed tokens, predicted − delivered: a block
// either way, then powers of four to 64k tokens.
var predictionErrorBuckets = func() []float64 {
	up := prometheus.ExponentialBuckets(16, 4, 7)
	b := make([]float64, 0, 2*len(up)+1)
	for i := len(up) - 1; i >= 0; i-- {
		b = append(b, -up[i])
	}
	b = append(b, 0)
	return append(b, up...)
}()

// predictionShareBuckets are |predicted − delivered| over the prompt's
// tokens; 0.05 is the accuracy the bench reports.
var predictionShareBuckets = []float64{0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1}

func newCacheMetrics(r prometheus.Registerer) (*cacheMetrics, error) {
	errTokens := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "turnpike_affinity_cache_prediction_error_tokens",
		Help:    "Prompt tokens predicted cached on the picked endpoint minus those the engine reported cached, per turn with engine usage.",
		Buckets: predictionErrorBuckets,
	})
	errShare := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "turnpike_affinity_cache_prediction_error_share",
		Help:    "|predicted − engine's cached tokens| over the prompt's tokens, per turn with engine usage.",
		Buckets: predictionShareBuckets,
	})
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_affinity_cache_predictions_total",
		Help: "Turns whose cached tokens were predicted, by result: hit (within one block), miss (the engine cached fewer), surplus (it cached more).",
	}, []string{"result"})
	misses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_affinity_cache_misses_total",
		Help: "Turns whose engine cached fewer prompt tokens than predicted, by more than one block, by cause: evicted, never_there, another_tier, another_adapter, unknown.",
	}, []string{"cause"})
	if r != nil {
		var err error
		if errTokens, err = register(r, errTokens); err != nil {
			return nil, err
		}
		if errShare, err = register(r, errShare); err != nil {
			return nil, err
		}
		if results, err = register(r, results); err != nil {
			return nil, err
		}
		if misses, err = register(r, misses); err != nil {
			return nil, err
		}
	}
	m := &cacheMetrics{errTokens: errTokens, errShare: errShare}
	for i, name := range []string{PredictionHit, PredictionMiss, PredictionSurplus} {
		m.results[i] = results.WithLabelValues(name)
	}
	for i, name := range causeNames {
		m.misses[i] = misses.WithLabelValues(name)
	}
	return m, nil
}

// turnCache is what Done knows of one turn's prediction and its outcome,
// the inputs of the miss's cause.
type turnCache struct {
	predicted, delivered, prompt, blockSize int
	adapter                                 bool // the turn asked for a LoRA adapter
	lowerTier                               int  // predicted blocks held only below HBM
	events                                  bool // the endpoint sends KV events
	stale                                   bool // its entries were stale at the pick
	removed                                 bool // its engine removed blocks since the pick
}

// miss reports whether the engine delivered fewer than predicted by more
// than one block.
func (t *turnCache) miss() bool { return t.predicted-t.delivered > t.blockSize }

// cause is the miss's cause: the first of the list at MissAnotherAdapter
// that holds.
func (t *turnCache) cause() missCause {
	switch {
	case t.adapter:
		return causeAnotherAdapter
	case t.lowerTier > 0:
		return causeAnotherTier
	case !t.events || t.stale:
		return causeUnknown
	case t.removed:
		return causeEvicted
	}
	return causeNeverThere
}

// explain compares the prediction Pick made for req on ep with the
// engine's usage o, in the metrics and ep's account.
func (p *CacheAware) explain(req *Request, ep *pools.Endpoint, o Outcome) {
	r := &req.Routing
	t := turnCache{
		predicted: deliverable(r.CachedBlocks, o.PromptTokens, p.blockSize),
		delivered: min(max(o.CachedTokens, 0), o.PromptTokens),
		prompt:    o.PromptTokens,
		blockSize: p.blockSize,
	}
	diff := t.predicted - t.delivered
	p.cache.errTokens.Observe(float64(diff))
	p.cache.errShare.Observe(math.Abs(float64(diff)) / float64(t.prompt))
	acct := p.accounts.entry(ep.Index)
	acct.turns.Add(1)
	acct.predicted.Add(int64(t.predicted))
	acct.delivered.Add(int64(t.delivered))
	switch {
	case diff < -p.blockSize:
		p.cache.results[2].Inc()
		return
	case !t.miss():
		p.cache.results[0].Inc()
		return
	}
	p.cache.results[1].Inc()
	t.adapter = ep.IsAdapter(req.Model)
	t.lowerTier = r.LowerTierBlocks
	t.events = ep.KVEvents != ""
	t.stale = r.Stale
	t.removed = p.index.EngineRemovals(ep.Index) != r.EngineRemovals
	c := t.cause()
	p.cache.misses[c].Inc()
	acct.misses[c].Add(1)
}

// CacheAccuracy is ep's account of predictions against deliveries since
// the policy was built; false when none of its turns was looked up.
func (p *CacheAware) CacheAccuracy(ep *pools.Endpoint) (CacheAccuracy, bool) {
	if a := p.accounts.load(ep.Index); a != nil {
		return a.accuracy(), true
	}
	return CacheAccuracy{}, false
}

// CacheAccuracyOf is p's account of ep's predictions, for a policy that
// keeps one (CacheAware, Reloadable); false otherwise.
func CacheAccuracyOf(p Policy, ep *pools.Endpoint) (CacheAccuracy, bool) {
	if a, ok := p.(interface {
		CacheAccuracy(*pools.Endpoint) (CacheAccuracy, bool)
	}); ok {
		return a.CacheAccuracy(ep)
	}
	return CacheAccuracy{}, false
}
