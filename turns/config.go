package turns

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Defaults of the flowControl section.
const (
	DefaultInteractiveTTL = 30 * time.Second
	DefaultStandardTTL    = time.Minute
	DefaultBackgroundTTL  = 5 * time.Minute

	DefaultInteractiveMaxQueued = 1024
	DefaultStandardMaxQueued    = 4096
	DefaultBackgroundMaxQueued  = 16384

	DefaultInteractiveMaxQueuedTokens = 4 << 20
	DefaultStandardMaxQueuedTokens    = 16 << 20
	DefaultBackgroundMaxQueuedTokens  = 64 << 20

	DefaultStandardMinShare   = 0.10
	DefaultBackgroundMinShare = 0.05

	DefaultQueueDepthPerEndpoint     = 5
	DefaultKVUtilization             = 0.8
	DefaultInFlightTokensPerEndpoint = 128 << 10
	DefaultInFlightTokensPerKVToken  = 2.0

	DefaultShedStart          = 0.8
	DefaultShedFull           = 1.0
	DefaultShedMaxProbability = 1.0
	DefaultShedExponent       = 2.0

	DefaultMaxInFlightPerEndpoint = 64
	// DefaultInteractiveReservedPerEndpoint is a sixteenth of the default
	// MaxInFlightPerEndpoint: enough for a person's turns to start at once
	// on every endpoint while agent loops fill the rest.
	DefaultInteractiveReservedPerEndpoint = 4
	// DefaultInteractiveReservedTokensPerEndpoint is two interactive
	// prompts of the size agents send (a system prompt and tools of a few
	// thousand tokens), kept as room in each endpoint's in-flight tokens.
	DefaultInteractiveReservedTokensPerEndpoint = 16 << 10
	// DefaultLowerBandQueueDepth lets a Standard or Background turn join an
	// engine's queue only while one request at most waits there, so an
	// Interactive turn sent to the same engine waits behind one at most.
	DefaultLowerBandQueueDepth = 2
	// DefaultBackgroundHeldPerEndpoint is how many Background turns per
	// available endpoint wait while no endpoint has room for them; past it
	// Background turns are shed at once, with Retry-After.
	DefaultBackgroundHeldPerEndpoint = 8
	DefaultHoldAt                    = 1.0
	DefaultPriorityCredit            = 4096
	DefaultTickInterval              = 50 * time.Millisecond
	// DefaultInteractiveReserveHold keeps the reserves for Interactive
	// turns five minutes after the last one: through a person's session,
	// think times included.
	DefaultInteractiveReserveHold = 5 * time.Minute
	DefaultRetryAfter             = time.Second

	// DefaultFleetQueueBound bounds a pool's queues at what its engines
	// start within a band's TTL (FlowControl.FleetQueueBound).
	DefaultFleetQueueBound = 1.0

	DefaultTenantWeight = 1.0
)

// Config is what New needs.
type Config struct {
	// FlowControl is the flowControl section of the config file.
	FlowControl FlowControl `yaml:"flowControl" json:"flowControl"`
	// Tenants are the known tenants; a turn from any other tenant gets
	// Tenant{Name: name} with its defaults.
	Tenants []Tenant `yaml:"tenants" json:"tenants"`
}

// FlowControl is the flowControl section of the config file. Zero fields
// take the defaults above.
type FlowControl struct {
	// Bands configures each band's queues.
	Bands BandsConfig `yaml:"bands" json:"bands"`
	// TargetUtilization is the share of each replica's slots that
	// turnpike_pool_desired_replicas aims to keep busy, in (0, 1].
	// Default 0.8.
	TargetUtilization float64 `yaml:"targetUtilization" json:"targetUtilization"`
	// Saturation says when an endpoint counts as saturated.
	Saturation SaturationConfig `yaml:"saturation" json:"saturation"`
	// Shed is the curve of the probability of shedding sheddable traffic
	// against pool saturation.
	Shed ShedCurve `yaml:"shed" json:"shed"`
	// MaxInFlightPerEndpoint is how many dispatched requests one available
	// endpoint is given at once; more wait in turnpike's queues, where
	// priority and fairness apply, instead of in the engine's FIFO.
	// Default 64 requests.
	MaxInFlightPerEndpoint int `yaml:"maxInFlightPerEndpoint" json:"maxInFlightPerEndpoint"`
	// InteractiveReservedPerEndpoint is how many of each available
	// endpoint's MaxInFlightPerEndpoint slots only Interactive turns may
	// take. Standard and Background turns are dispatched only while more
	// than the pool's reserve is free, so a backlog of agent turns never
	// takes the last slots; and while the pool is held (HoldAt), Interactive
	// turns may still fill the reserve, so a saturated pool holds agent
	// turns in turnpike's queues but lets a person's turn start. Default 4
	// requests; negative means no reserve (Interactive turns are held like
	// the others). Must be below MaxInFlightPerEndpoint.
	InteractiveReservedPerEndpoint int `yaml:"interactiveReservedPerEndpoint" json:"interactiveReservedPerEndpoint"`
	// InteractiveReservedTokensPerEndpoint is the in-flight token room
	// each endpoint keeps for Interactive turns: a Standard or Background
	// turn goes to an endpoint only while its in-flight tokens are more
	// than this below its threshold (SaturationConfig), so an Interactive
	// prompt's prefill finds the engine's KV cache and step budget free.
	// Default 16384 tokens, at most half an endpoint's threshold; negative
	// means none.
	InteractiveReservedTokensPerEndpoint int64 `yaml:"interactiveReservedTokensPerEndpoint" json:"interactiveReservedTokensPerEndpoint"`
	// LowerBandQueueDepth is the engine queue depth (waiting requests, as
	// for QueueDepthPerEndpoint) at which an endpoint has no room for
	// Standard and Background turns: an engine queues first come, first
	// served, so what lower bands leave waiting there an Interactive turn
	// waits behind, where the gateway's priority cannot reach; they wait
	// in the gateway's queue instead. Default 2 requests; at most
	// saturation.queueDepthPerEndpoint.
	LowerBandQueueDepth int `yaml:"lowerBandQueueDepth" json:"lowerBandQueueDepth"`
	// InteractiveReserveHold is how long after the last Interactive turn
	// of a model the reserves above are kept for its endpoints. A model
	// that has had no Interactive turn for that long gives Standard and
	// Background turns every endpoint's whole room, so that they never
	// wait while an engine has room kept for turns nobody sends; the first
	// Interactive turn after such a lull brings the reserves back for the
	// turns after it. Default 5m; negative keeps the reserves always.
	InteractiveReserveHold time.Duration `yaml:"interactiveReserveHold" json:"interactiveReserveHold"`
	// FleetQueueBound scales the bound that the pool's fleet puts on its
	// queues besides each band's MaxQueued and MaxQueuedTokens: a turn is
	// shed with 503 queue-full when the turns ahead of it in the pool's
	// queues are more than this many times what the pool's engines start
	// within its band's TTL at their measured pace, Seqs × TTL / hold
	// (Measurement.Seqs, the pool's smoothed dispatch-to-release time);
	// Background turns count every band's turns and the shorter of their
	// TTL and Standard's, so they are shed first. Default 1; negative means
	// none (the bands' caps alone).
	FleetQueueBound float64 `yaml:"fleetQueueBound" json:"fleetQueueBound"`
	// HoldAt is the pool saturation, 0..1, at or above which queued turns
	// are held even when request slots are free (Interactive turns only
	// up to the reserve, see InteractiveReservedPerEndpoint). Default 1.0
	// (every available endpoint past a threshold).
	HoldAt float64 `yaml:"holdAt" json:"holdAt"`
	// PriorityCredit is how much fair-share credit one point of turn-priority
	// score is worth when sessions of one tenant compete. Default 4096 tokens.
	PriorityCredit float64 `yaml:"priorityCredit" json:"priorityCredit"`
	// TickInterval is how often queued turns are re-examined without a
	// release: freshly scraped metrics, TTL expiry. Default 50ms. While
	// no turn is queued the ticker ticks once a second, and the next
	// turn queued wakes it.
	TickInterval time.Duration `yaml:"tickInterval" json:"tickInterval"`
	// RetryAfter is the Retry-After sent with overload sheds (saturated,
	// queue full, TTL expired, no endpoints). Default 1s.
	RetryAfter time.Duration `yaml:"retryAfter" json:"retryAfter"`
}

// BandsConfig holds one BandConfig per band.
type BandsConfig struct {
	// Interactive defaults: TTL 30s, 1024 turns, 4Mi tokens, no share.
	Interactive BandConfig `yaml:"interactive" json:"interactive"`
	// Standard defaults: TTL 1m, 4096 turns, 16Mi tokens, share 0.10.
	Standard BandConfig `yaml:"standard" json:"standard"`
	// Background defaults: TTL 5m, 16384 turns, 64Mi tokens, share 0.05,
	// 8 held per endpoint.
	Background BandConfig `yaml:"background" json:"background"`
}

// band returns the config of b, which must be valid.
func (bc *BandsConfig) band(b Band) *BandConfig {
	switch b {
	case Interactive:
		return &bc.Interactive
	case Standard:
		return &bc.Standard
	case Background:
		return &bc.Background
	}
	panic(fmt.Sprintf("turns: invalid band %d", uint8(b)))
}

// BandConfig configures one band's queue in each pool.
type BandConfig struct {
	// TTL is the longest a turn waits in the gateway's queue. An
	// Interactive or Standard turn about to wait it is sent to the best
	// engine, past the pool's room, while that engine's queue would start
	// it within the TTL, and is shed at once with 503 past-ttl when no
	// engine's would; a Background turn, or one of a pool with no
	// available endpoint, is shed when it has waited the TTL, with 408
	// ttl-expired, or 503 no-endpoints when the pool then has no available
	// endpoint. Default per band (see BandsConfig).
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// MaxQueued caps the turns waiting in this band, per pool; past it a
	// turn is shed with 503 queue-full. Default per band, in turns. The
	// pool's fleet bounds its queues too, often tighter
	// (FlowControl.FleetQueueBound).
	MaxQueued int `yaml:"maxQueued" json:"maxQueued"`
	// MaxQueuedTokens caps the estimated tokens waiting in this band, per
	// pool; a turn that would pass it is shed with 503 queue-full unless the
	// band is empty. Default per band, in tokens.
	MaxQueuedTokens int64 `yaml:"maxQueuedTokens" json:"maxQueuedTokens"`
	// HeldPerEndpoint caps the turns of this band that wait while the pool
	// has no room for the band (every endpoint short of it, the shared
	// slots taken, or the pool held), per available endpoint: past it a
	// turn is shed at once with 503 band-held and Retry-After instead of
	// waiting out its TTL. Not for Interactive. Default 8 for Background,
	// none for Standard (MaxQueued still applies); negative means none.
	HeldPerEndpoint int `yaml:"heldPerEndpoint" json:"heldPerEndpoint"`
	// MinShare is the fraction of dispatched tokens this band is guaranteed
	// while more urgent bands are backlogged, so strict priority cannot
	// starve it. Meaningless for Interactive. Default 0.10 for Standard and
	// 0.05 for Background; negative means none (pure strict priority).
	MinShare float64 `yaml:"minShare" json:"minShare"`
}

// SaturationConfig says when an endpoint counts as saturated. An endpoint's
// saturation is the largest of its ratios to its capacity, capped at 1:
// engine queue depth to QueueDepthPerEndpoint; requests in flight (the
// gateway's, or the engine's running and waiting when more) to the
// engine's max_num_seqs plus QueueDepthPerEndpoint; in-flight tokens to
// the engine's KV cache × InFlightTokensPerKVToken; and, while the engine
// queues, KV usage to KVUtilization. An endpoint whose metrics are stale is
// saturated. The engine's limits come from its scraped cache config info;
// an engine that does not report them is measured against
// MaxInFlightPerEndpoint and InFlightTokensPerEndpoint. A pool's
// saturation is the mean over its available endpoints, 1 when it has none;
// turns wait in the gateway only while every available endpoint is
// saturated.
type SaturationConfig struct {
	// QueueDepthPerEndpoint is the engine queue depth (waiting requests, as
	// scraped) at which an endpoint is saturated. Default 5 requests.
	QueueDepthPerEndpoint int `yaml:"queueDepthPerEndpoint" json:"queueDepthPerEndpoint"`
	// KVUtilization is the KV cache usage at which an endpoint that also
	// has requests waiting is saturated. High usage alone is not
	// saturation: an engine running a few long prompts reports most of its
	// cache in use and still admits more. Default 0.8 (a fraction, 0..1].
	KVUtilization float64 `yaml:"kvUtilization" json:"kvUtilization"`
	// InFlightTokensPerEndpoint is the estimated tokens in flight at which
	// an endpoint whose engine does not report its KV cache size is
	// saturated. Default 131072 tokens.
	InFlightTokensPerEndpoint int64 `yaml:"inFlightTokensPerEndpoint" json:"inFlightTokensPerEndpoint"`
	// InFlightTokensPerKVToken calibrates the in-flight threshold of an
	// endpoint whose engine reports its KV cache size (block size × GPU
	// blocks): it is saturated at this many in-flight tokens per token of
	// KV cache. The estimate counts a shared prefix once per request and
	// the whole output budget, so more than one is still room. Default
	// 2.0; negative uses InFlightTokensPerEndpoint for every endpoint.
	InFlightTokensPerKVToken float64 `yaml:"inFlightTokensPerKVToken" json:"inFlightTokensPerKVToken"`
}

// ShedCurve is the probability of shedding a sheddable turn (Background,
// or Standard from a tenant over its fair share) at pool saturation s:
//
//	p(s) = 0                                              for s < Start
//	p(s) = MaxProbability · ((s − Start)/(Full − Start))^Exponent  between
//	p(s) = MaxProbability                                 for s ≥ Full
//
// Interactive turns are never shed by this curve.
type ShedCurve struct {
	// Start is the saturation where shedding begins. Default 0.8.
	Start float64 `yaml:"start" json:"start"`
	// Full is the saturation where shedding reaches MaxProbability.
	// Default 1.0.
	Full float64 `yaml:"full" json:"full"`
	// MaxProbability is the highest shed probability. Default 1.0.
	MaxProbability float64 `yaml:"maxProbability" json:"maxProbability"`
	// Exponent shapes the curve: 1 is linear, 2 starts gently. Default 2.
	Exponent float64 `yaml:"exponent" json:"exponent"`
}

// EnsureDefaults fills zero fields with the defaults.
func (fc *FlowControl) EnsureDefaults() {
	if fc.TargetUtilization == 0 {
		fc.TargetUtilization = DefaultTargetUtilization
	}
	fc.Bands.Interactive.ensureDefaults(DefaultInteractiveTTL, DefaultInteractiveMaxQueued, DefaultInteractiveMaxQueuedTokens, 0)
	fc.Bands.Standard.ensureDefaults(DefaultStandardTTL, DefaultStandardMaxQueued, DefaultStandardMaxQueuedTokens, DefaultStandardMinShare)
	fc.Bands.Background.ensureDefaults(DefaultBackgroundTTL, DefaultBackgroundMaxQueued, DefaultBackgroundMaxQueuedTokens, DefaultBackgroundMinShare)
	if fc.Bands.Background.HeldPerEndpoint == 0 {
		fc.Bands.Background.HeldPerEndpoint = DefaultBackgroundHeldPerEndpoint
	}
	s := &fc.Saturation
	if s.QueueDepthPerEndpoint == 0 {
		s.QueueDepthPerEndpoint = DefaultQueueDepthPerEndpoint
	}
	if s.KVUtilization == 0 {
		s.KVUtilization = DefaultKVUtilization
	}
	if s.InFlightTokensPerEndpoint == 0 {
		s.InFlightTokensPerEndpoint = DefaultInFlightTokensPerEndpoint
	}
	if s.InFlightTokensPerKVToken == 0 {
		s.InFlightTokensPerKVToken = DefaultInFlightTokensPerKVToken
	}
	c := &fc.Shed
	if c.Start == 0 {
		c.Start = DefaultShedStart
	}
	if c.Full == 0 {
		c.Full = DefaultShedFull
	}
	if c.MaxProbability == 0 {
		c.MaxProbability = DefaultShedMaxProbability
	}
	if c.Exponent == 0 {
		c.Exponent = DefaultShedExponent
	}
	if fc.MaxInFlightPerEndpoint == 0 {
		fc.MaxInFlightPerEndpoint = DefaultMaxInFlightPerEndpoint
	}
	if fc.InteractiveReservedPerEndpoint == 0 {
		fc.InteractiveReservedPerEndpoint = DefaultInteractiveReservedPerEndpoint
	}
	if fc.InteractiveReservedTokensPerEndpoint == 0 {
		fc.InteractiveReservedTokensPerEndpoint = DefaultInteractiveReservedTokensPerEndpoint
	}
	if fc.LowerBandQueueDepth == 0 {
		fc.LowerBandQueueDepth = DefaultLowerBandQueueDepth
	}
	if fc.InteractiveReserveHold == 0 {
		fc.InteractiveReserveHold = DefaultInteractiveReserveHold
	}
	if fc.FleetQueueBound == 0 {
		fc.FleetQueueBound = DefaultFleetQueueBound
	}
	if fc.HoldAt == 0 {
		fc.HoldAt = DefaultHoldAt
	}
	if fc.PriorityCredit == 0 {
		fc.PriorityCredit = DefaultPriorityCredit
	}
	if fc.TickInterval == 0 {
		fc.TickInterval = DefaultTickInterval
	}
	if fc.RetryAfter == 0 {
		fc.RetryAfter = DefaultRetryAfter
	}
}

func (bc *BandConfig) ensureDefaults(ttl time.Duration, maxQueued int, maxTokens int64, share float64) {
	if bc.TTL == 0 {
		bc.TTL = ttl
	}
	if bc.MaxQueued == 0 {
		bc.MaxQueued = maxQueued
	}
	if bc.MaxQueuedTokens == 0 {
		bc.MaxQueuedTokens = maxTokens
	}
	if bc.MinShare == 0 {
		bc.MinShare = share
	}
}

// interactiveReserve is InteractiveReservedPerEndpoint with "none" as 0.
func (fc *FlowControl) interactiveReserve() int {
	return max(fc.InteractiveReservedPerEndpoint, 0)
}

// interactiveReservedTokens is InteractiveReservedTokensPerEndpoint with
// "none" as 0.
func (fc *FlowControl) interactiveReservedTokens() int64 {
	return max(fc.InteractiveReservedTokensPerEndpoint, 0)
}

// lowerBandQueueDepth is LowerBandQueueDepth, at least 1.
func (fc *FlowControl) lowerBandQueueDepth() int {
	return max(fc.LowerBandQueueDepth, 1)
}

// heldLimit is the most turns of band b that wait in a pool of endpoints
// available endpoints while it has no room for b; negative means no limit.
func (fc *FlowControl) heldLimit(b Band, endpoints int) int {
	if b == Interactive {
		return -1
	}
	n := fc.Bands.band(b).HeldPerEndpoint
	if n <= 0 {
		return -1
	}
	return n * max(endpoints, 1)
}

// Validate reports every problem at once, each a pools.FieldError whose
// field starts "flowControl.". Call it after EnsureDefaults.
func (fc *FlowControl) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError("flowControl."+field, format, args...))
	}
	for _, b := range Bands {
		bc := fc.Bands.band(b)
		where := "bands." + b.String()
		if bc.TTL <= 0 {
			bad(where+".ttl", "%v is not positive", bc.TTL)
		}
		if bc.MaxQueued <= 0 {
			bad(where+".maxQueued", "%d is not positive", bc.MaxQueued)
		}
		if bc.MaxQueuedTokens <= 0 {
			bad(where+".maxQueuedTokens", "%d is not positive", bc.MaxQueuedTokens)
		}
		if b == Interactive && bc.HeldPerEndpoint != 0 {
			bad(where+".heldPerEndpoint", "%d: Interactive turns are never shed for a held band", bc.HeldPerEndpoint)
		}
		if bc.MinShare >= 0.5 {
			bad(where+".minShare", "%g is not below 0.5", bc.MinShare)
		}
	}
	s := fc.Saturation
	if s.QueueDepthPerEndpoint <= 0 {
		bad("saturation.queueDepthPerEndpoint", "%d is not positive", s.QueueDepthPerEndpoint)
	}
	if s.KVUtilization <= 0 || s.KVUtilization > 1 {
		bad("saturation.kvUtilization", "%g is not in (0, 1]", s.KVUtilization)
	}
	if math.IsNaN(s.InFlightTokensPerKVToken) || math.IsInf(s.InFlightTokensPerKVToken, 0) {
		bad("saturation.inFlightTokensPerKVToken", "%g is not a finite number", s.InFlightTokensPerKVToken)
	}
	if s.InFlightTokensPerEndpoint <= 0 {
		bad("saturation.inFlightTokensPerEndpoint", "%d is not positive", s.InFlightTokensPerEndpoint)
	}
	c := fc.Shed
	if c.Start < 0 || c.Start > 1 {
		bad("shed.start", "%g is not in [0, 1]", c.Start)
	}
	if c.Full <= c.Start || c.Full > 1 {
		bad("shed.full", "%g is not in (start, 1]", c.Full)
	}
	if c.MaxProbability < 0 || c.MaxProbability > 1 {
		bad("shed.maxProbability", "%g is not in [0, 1]", c.MaxProbability)
	}
	if c.Exponent <= 0 {
		bad("shed.exponent", "%g is not positive", c.Exponent)
	}
	if fc.MaxInFlightPerEndpoint <= 0 {
		bad("maxInFlightPerEndpoint", "%d is not positive", fc.MaxInFlightPerEndpoint)
	}
	if fc.MaxInFlightPerEndpoint > 0 && fc.InteractiveReservedPerEndpoint >= fc.MaxInFlightPerEndpoint {
		bad("interactiveReservedPerEndpoint", "%d is not below maxInFlightPerEndpoint (%d)", fc.InteractiveReservedPerEndpoint, fc.MaxInFlightPerEndpoint)
	}
	if fc.LowerBandQueueDepth < 0 || (s.QueueDepthPerEndpoint > 0 && fc.LowerBandQueueDepth > s.QueueDepthPerEndpoint) {
		bad("lowerBandQueueDepth", "%d is not in [1, saturation.queueDepthPerEndpoint (%d)]", fc.LowerBandQueueDepth, s.QueueDepthPerEndpoint)
	}
	if math.IsNaN(fc.FleetQueueBound) || math.IsInf(fc.FleetQueueBound, 0) {
		bad("fleetQueueBound", "%g is not a finite number", fc.FleetQueueBound)
	}
	if fc.HoldAt <= 0 || fc.HoldAt > 1 {
		bad("holdAt", "%g is not in (0, 1]", fc.HoldAt)
	}
	if fc.PriorityCredit < 0 {
		bad("priorityCredit", "%g is negative", fc.PriorityCredit)
	}
	if fc.TickInterval <= 0 {
		bad("tickInterval", "%v is not positive", fc.TickInterval)
	}
	if !(fc.TargetUtilization > 0 && fc.TargetUtilization <= 1) {
		bad("targetUtilization", "%g is not in (0, 1]", fc.TargetUtilization)
	}
	if fc.RetryAfter < 0 {
		bad("retryAfter", "%v is negative", fc.RetryAfter)
	}
	return errors.Join(errs...)
}

// Tenant is one tenant's flow-control settings. The admin API owns the
// list; SetTenants publishes it.
type Tenant struct {
	// Name is the tenant as authentication names it. Required, unique.
	Name string `yaml:"name" json:"name"`
	// Weight is the tenant's share of a contended band relative to the
	// other tenants' weights, by tokens. Default 1.
	Weight float64 `yaml:"weight" json:"weight"`
	// DefaultBand is the band of the tenant's turns that give no hint.
	// Default standard.
	DefaultBand Band `yaml:"defaultBand" json:"defaultBand"`
	// MaxBand is the most urgent band the tenant may use; hints above it
	// are capped. Default interactive.
	MaxBand Band `yaml:"maxBand" json:"maxBand"`
	// Quota bounds the tenant's traffic. Zero fields mean unlimited.
	Quota Quota `yaml:"quota" json:"quota"`
	// Models are the model names the tenant may ask for, as a client names
	// them: served names and the aliases and rule matches of the models:
	// section. Any other model is not found for the tenant (404
	// model_not_found, as if it did not exist), and /v1/models lists only
	// these. The fallbacks a rule gives are the gateway's own choice and
	// need not be listed. Default none listed: every model.
	Models []string `yaml:"models" json:"models,omitempty"`
}

// MayUse reports whether the tenant may ask for model by that name.
func (t *Tenant) MayUse(model string) bool {
	return len(t.Models) == 0 || slices.Contains(t.Models, model)
}

// Quota bounds one tenant's traffic across all pools. A turn past a limit
// is shed with 429 and a Retry-After of when it would fit. Flow control
// holds Concurrent; the budgets a minute are the budgets package's,
// kept in the state store so that gateways sharing it share them.
type Quota struct {
	// RequestsPerMinute is a budget of this many requests over a sliding
	// minute. Default 0 (unlimited).
	RequestsPerMinute int `yaml:"requestsPerMinute" json:"requestsPerMinute"`
	// TokensPerMinute is a budget of this many tokens over a sliding
	// minute, charged the turn's cost (its prompt, counted exactly, plus
	// the output it may generate) before admission and corrected by the
	// tokens the engine counted when it ends. Default 0 (unlimited).
	TokensPerMinute int64 `yaml:"tokensPerMinute" json:"tokensPerMinute"`
	// Concurrent caps the tenant's turns held by Acquire, queued or
	// dispatched. Default 0 (unlimited), in requests.
	Concurrent int `yaml:"concurrent" json:"concurrent"`
	// Models are budgets of the tenant's turns on one served model each,
	// by its name, besides the tenant-wide ones. Default none.
	Models map[string]ModelQuota `yaml:"models" json:"models,omitempty"`
}

// ModelQuota is a tenant's budget on one model. Zero fields mean
// unlimited.
type ModelQuota struct {
	// RequestsPerMinute and TokensPerMinute are as Quota's, for the turns
	// on the model alone.
	RequestsPerMinute int   `yaml:"requestsPerMinute" json:"requestsPerMinute"`
	TokensPerMinute   int64 `yaml:"tokensPerMinute" json:"tokensPerMinute"`
}

// Budgeted reports whether q sets a budget of requests or tokens a
// minute, tenant-wide or on a model.
func (q *Quota) Budgeted() bool {
	return q.RequestsPerMinute > 0 || q.TokensPerMinute > 0 || len(q.Models) > 0
}

// EnsureDefaults fills zero fields with the defaults.
func (t *Tenant) EnsureDefaults() {
	if t.Weight == 0 {
		t.Weight = DefaultTenantWeight
	}
	if t.DefaultBand == 0 {
		t.DefaultBand = Standard
	}
	if t.MaxBand == 0 {
		t.MaxBand = Interactive
	}
}

// ValidateTenants reports every problem in a tenant list at once, each a
// pools.FieldError whose field starts "tenants[i].". Call it after
// EnsureDefaults on each tenant.
func ValidateTenants(ts []Tenant) error {
	var errs []error
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		bad := func(field, format string, args ...any) {
			errs = append(errs, fieldError(fmt.Sprintf("tenants[%d].%s", i, field), format, args...))
		}
		switch {
		case t.Name == "":
			bad("name", "required")
		case seen[t.Name]:
			bad("name", "duplicate tenant %q", t.Name)
		}
		seen[t.Name] = true
		if t.Weight <= 0 {
			bad("weight", "%g is not positive", t.Weight)
		}
		if !t.DefaultBand.Valid() {
			bad("defaultBand", "%v is not a band", t.DefaultBand)
		}
		if !t.MaxBand.Valid() {
			bad("maxBand", "%v is not a band", t.MaxBand)
		}
		if t.Quota.RequestsPerMinute < 0 {
			bad("quota.requestsPerMinute", "%d is negative", t.Quota.RequestsPerMinute)
		}
		if t.Quota.TokensPerMinute < 0 {
			bad("quota.tokensPerMinute", "%d is negative", t.Quota.TokensPerMinute)
		}
		if t.Quota.Concurrent < 0 {
			bad("quota.concurrent", "%d is negative", t.Quota.Concurrent)
		}
		for m, mq := range t.Quota.Models {
			if m == "" {
				bad("quota.models", "a model's name is empty")
			}
			if mq.RequestsPerMinute < 0 {
				bad("quota.models."+m+".requestsPerMinute", "%d is negative", mq.RequestsPerMinute)
			}
			if mq.TokensPerMinute < 0 {
				bad("quota.models."+m+".tokensPerMinute", "%d is negative", mq.TokensPerMinute)
			}
		}
		for i, m := range t.Models {
			if m == "" {
				bad(fmt.Sprintf("models[%d]", i), "is empty")
			}
		}
	}
	return errors.Join(errs...)
}

// fieldError is a problem of the config field at path, in turns' words.
func fieldError(path, format string, args ...any) error {
	return fmt.Errorf("turns: %w", pools.FieldErrorf(path, format, args...))
}
