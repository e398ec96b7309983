package affinity

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Defaults of PDConfig.
const (
	// DefaultPDUncachedTokens is llm-d's default for its prefix-based P/D
	// decider: a prompt with fewer uncached tokens at the decoder than
	// this is prefilled by the decoder itself, where the transfer and the
	// extra leg cost more than the prefill they save.
	DefaultPDUncachedTokens = 512
	// DefaultPDPrefillTimeout bounds the prefill leg; past it the decoder
	// prefills the turn itself.
	DefaultPDPrefillTimeout = 30 * time.Second
	// DefaultPDMaxPrefillQueue: a turn is prefilled on its decoder when
	// every prefiller it could pair with already has this many of the
	// gateway's requests in flight, as NVIDIA Dynamo's disaggregated
	// router prefills locally past its prefill queue's bound: a queued
	// prefill leg would wait longer than the decoder takes to prefill.
	DefaultPDMaxPrefillQueue = 3
)

// PDConfig is routing.pd: when a model served by decode pools (role
// decode) and prefill pools (role prefill) disaggregates a turn.
type PDConfig struct {
	// UncachedTokens: a turn is disaggregated when its prompt tokens not
	// already cached at the chosen decoder are at least this many
	// (llm-d's nonCachedTokens); 1 disaggregates every turn the decoder
	// does not hold whole, a negative value none. Zero means 512.
	UncachedTokens int `yaml:"uncachedTokens" json:"uncachedTokens"`
	// PrefillTimeout bounds the prefill leg, after which the decoder
	// prefills locally. Default 30s.
	PrefillTimeout time.Duration `yaml:"prefillTimeout" json:"prefillTimeout"`
	// MaxPrefillQueue: a turn is prefilled on its decoder, not
	// disaggregated, when every available prefiller of a compatible
	// revision already has at least this many requests in flight from
	// the gateway (its gateways, active-active). Zero means 3; a
	// negative value never.
	MaxPrefillQueue int `yaml:"maxPrefillQueue" json:"maxPrefillQueue"`
	// CompatibleRevisions are groups of engine revisions whose prefill
	// and decode legs may pair (their KV layouts agree); a revision always
	// pairs with itself. A turn whose decoder has no prefiller of a
	// compatible revision runs aggregated on the decoder.
	CompatibleRevisions [][]string `yaml:"compatibleRevisions" json:"compatibleRevisions"`
}

// Compatible reports whether a prefiller of revision prefill may hand its
// KV to a decoder of revision decode: the same revision, or two that one
// of CompatibleRevisions lists together.
func (c *PDConfig) Compatible(prefill, decode string) bool {
	if prefill == decode {
		return true
	}
	for _, g := range c.CompatibleRevisions {
		if slices.Contains(g, prefill) && slices.Contains(g, decode) {
			return true
		}
	}
	return false
}

// EnsureDefaults fills unset fields.
func (c *PDConfig) EnsureDefaults() {
	if c.UncachedTokens == 0 {
		c.UncachedTokens = DefaultPDUncachedTokens
	}
	if c.PrefillTimeout == 0 {
		c.PrefillTimeout = DefaultPDPrefillTimeout
	}
	if c.MaxPrefillQueue == 0 {
		c.MaxPrefillQueue = DefaultPDMaxPrefillQueue
	}
}

// Validate reports every problem at once.
func (c *PDConfig) Validate() error {
	var errs []error
	if c.PrefillTimeout < 0 {
		errs = append(errs, fmt.Errorf("affinity: pd.prefillTimeout %v is negative", c.PrefillTimeout))
	}
	for i, g := range c.CompatibleRevisions {
		if len(g) < 2 {
			errs = append(errs, fmt.Errorf("affinity: pd.compatibleRevisions[%d] %v: a group pairs two revisions or more", i, g))
		}
		if slices.Contains(g, "") {
			errs = append(errs, fmt.Errorf("affinity: pd.compatibleRevisions[%d] %v: a revision is named", i, g))
		}
	}
	return errors.Join(errs...)
}

// P/D decision reasons, the label of turnpike_pd_decisions_total.
const (
	// PDDisaggregated: prefill on a prefill endpoint, decode on the decoder.
	PDDisaggregated = "disaggregated"
	// PDCachedAtDecoder: the uncached part of the prompt is below the
	// threshold; the decoder prefills it.
	PDCachedAtDecoder = "below_threshold"
	// PDNoPrefiller: no prefill endpoint is available.
	PDNoPrefiller = "no_prefiller"
	// PDDisabled: the threshold is negative.
	PDDisabled = "disabled"
	// PDRevisionMismatch: prefill endpoints are available, none of a
	// revision compatible with the decoder's; the decoder prefills.
	PDRevisionMismatch = "revision_mismatch"
	// PDPrefillQueueFull: every compatible prefiller has MaxPrefillQueue
	// requests in flight; the decoder prefills.
	PDPrefillQueueFull = "prefill_queue_full"
)

// PDReasons lists every decision reason.
var PDReasons = []string{PDDisaggregated, PDCachedAtDecoder, PDNoPrefiller, PDDisabled, PDRevisionMismatch, PDPrefillQueueFull}

// PDDecision is the decider's verdict on one turn.
type PDDecision struct {
	// Disaggregate: send a prefill leg first.
	Disaggregate bool
	// Reason is one of PDReasons.
	Reason string
	// Uncached is the prompt tokens the decoder does not hold.
	Uncached int
}

// Decide is the prefix-based P/D decider, run after the decoder was
// picked: promptTokens long, cachedTokens of it held at the decoder,
// prefillers the prefill endpoints available of a revision compatible
// with the decoder's, incompatible those available of another, queued the
// fewest requests in flight at one of prefillers (0 when not counted).
func (c *PDConfig) Decide(promptTokens, cachedTokens, prefillers, incompatible, queued int) PDDecision {
	d := PDDecision{Uncached: max(promptTokens-cachedTokens, 0)}
	switch {
	case c.UncachedTokens < 0:
		d.Reason = PDDisabled
	case d.Uncached < c.UncachedTokens:
		d.Reason = PDCachedAtDecoder
	case prefillers == 0 && incompatible > 0:
		d.Reason = PDRevisionMismatch
	case prefillers == 0:
		d.Reason = PDNoPrefiller
	case c.MaxPrefillQueue > 0 && queued >= c.MaxPrefillQueue:
		d.Reason = PDPrefillQueueFull
	default:
		d.Disaggregate, d.Reason = true, PDDisaggregated
	}
	return d
}

// LeastInFlight is the fewest requests in flight at an available endpoint
// of eps (its gateways', active-active), 0 when none is available.
func LeastInFlight(eps []*pools.Endpoint) int {
	least := -1
	for _, ep := range eps {
		if ep.Available() {
			if n := int(ep.InFlight()); least < 0 || n < least {
				least = n
			}
		}
	}
	return max(least, 0)
}

// Available counts the endpoints of eps that could take a request now.
func Available(eps []*pools.Endpoint) int {
	n := 0
	for _, ep := range eps {
		if ep.Available() {
			n++
		}
	}
	return n
}
