package turns

import (
	"math"
	"time"
)

// Turn is one request as flow control sees it: who sent it, how urgent it
// is, what it will cost, and what the session says about it. The turn path
// fills it from the authenticated tenant, the request's raw hints and the
// session state.
type Turn struct {
	// Tenant is the authenticated tenant's name.
	Tenant string
	// Hints are the request's own urgency hints; Acquire classifies them
	// against the tenant's bands (Classify).
	Hints Hints
	// Band, when set, is the turn's band instead of the one Hints give,
	// for callers that chose it themselves (load generators). Acquire caps
	// it at the tenant's MaxBand.
	Band Band
	// SessionKey identifies the session the turn continues; "" means a
	// turn of its own. Fairness within a tenant is shared by session.
	SessionKey string
	// Warm reports that an endpoint still holds the session's KV prefix, so
	// the turn is cheap to serve now and dearer later.
	Warm bool
	// SessionTurns is how many turns the session has taken before this one.
	SessionTurns int
	// MeanGap is the session's mean time between the end of one turn and the
	// start of the next; zero when unknown (a first turn).
	MeanGap time.Duration
	// InputTokens is the prompt length, in tokens.
	InputTokens int
	// CachedTokens is how many of them an endpoint is believed to hold
	// already (the session's pinned prefix); the rest is the prefill the
	// turn will cost. Zero when unknown.
	CachedTokens int
	// ExpectedOutputTokens is the gateway's estimate of the output length
	// (max_output_tokens or a per-model guess), in tokens.
	ExpectedOutputTokens int
	// Enqueued is when the turn arrived; zero means when Acquire is called.
	// A turn's score ages from here.
	Enqueued time.Time
}

// Cost is the turn's estimated token cost, the unit of fair sharing and of
// the tokens-per-minute quota: input plus expected output, at least 1.
func (t *Turn) Cost() int64 {
	c := int64(max(t.InputTokens, 0)) + int64(max(t.ExpectedOutputTokens, 0))
	return max(c, 1)
}

// Weights of the turn-priority score. See Score.
const (
	// ScoreWarm is what a warm KV prefix is worth: reusing it now saves a
	// prefill that waiting would likely cost (the prefix gets evicted).
	ScoreWarm = 1.0
	// ScoreHuman is what a human-paced session is worth over a long, fast
	// agent loop; a person is waiting on every one of their turns.
	ScoreHuman = 2.0
	// ScoreShort is what a short prefill is worth over a long one: served
	// first, it is done soon and frees its place, so the queue's median
	// wait falls the most for the least delay to the rest.
	ScoreShort = 1.0
	// ScoreAgePerSecond is what each second of waiting is worth, so a turn
	// that waits long enough overtakes any younger one: after
	// (ScoreHuman + ScoreWarm + ScoreShort) / ScoreAgePerSecond = 40 s of
	// extra wait.
	ScoreAgePerSecond = 0.1
)

// What makes a prefill short: at or under ShortPrefillFull uncached
// tokens it is worth all of ScoreShort, at ShortPrefillNone or more
// nothing, and between on a log scale, so that each doubling of the work
// costs the same.
const (
	ShortPrefillFull = 2 << 10
	ShortPrefillNone = 32 << 10
)

// What makes a session an agent loop rather than a person.
const (
	// LoopTurnsFrom and LoopTurnsFull bound how long a session has run: at
	// or below LoopTurnsFrom turns it looks human, at LoopTurnsFull or more
	// it has run long.
	LoopTurnsFrom = 4
	LoopTurnsFull = 20
	// LoopGapFull and LoopGapTo bound how fast a session runs: a mean gap at
	// or under LoopGapFull is machine speed, one at LoopGapTo or over is
	// human think time.
	LoopGapFull = time.Second
	LoopGapTo   = 10 * time.Second
)

// Score is a turn's priority within its band and tenant: higher goes first.
//
//	Score = ScoreWarm·warm + ScoreHuman·(1 − loop) + ScoreShort·short + ScoreAgePerSecond·waited
//
// warm is 1 when an endpoint holds the session's KV prefix, else 0. short
// ∈ [0,1] is how short the turn's prefill is: 1 at ShortPrefillFull
// uncached tokens or fewer, 0 at ShortPrefillNone or more, linear in the
// log of the tokens between. waited
// is seconds since t.Enqueued. loop ∈ [0,1] says how much the session looks
// like a runaway agent loop: the product of how long it has run (0 at
// LoopTurnsFrom turns, 1 at LoopTurnsFull, linear between) and how fast
// (0 at a mean gap of LoopGapTo, 1 at LoopGapFull or under, linear between).
// A session without a measured gap is not fast. So a long, fast loop scores
// up to ScoreHuman less than a human turn, a warm turn ScoreWarm more than a
// cold one, a short prefill up to ScoreShort more than a long one (shortest
// first is what shortens a queue's median wait most), and age overtakes
// them all in bounded time: nothing starves.
//
// Score is a pure function; the queues use its age-free part, which orders
// turns the same way at every instant because every queued turn ages at the
// same rate.
func Score(t *Turn, now time.Time) float64 {
	waited := max(now.Sub(t.Enqueued), 0)
	return baseScore(t) + ScoreAgePerSecond*waited.Seconds()
}

// baseScore is the age-free part of Score.
func baseScore(t *Turn) float64 {
	s := ScoreHuman * (1 - loopiness(t.SessionTurns, t.MeanGap))
	if t.Warm {
		s += ScoreWarm
	}
	return s + ScoreShort*shortness(t.InputTokens-t.CachedTokens)
}

// shortness is how short a prefill of n uncached tokens is, 0..1.
func shortness(n int) float64 {
	x := math.Log2(float64(max(n, 1)))
	return 1 - ramp(x, math.Log2(ShortPrefillFull), math.Log2(ShortPrefillNone))
}

// loopiness is how much a session with the given history looks like an
// agent loop, 0..1.
func loopiness(turns int, gap time.Duration) float64 {
	long := ramp(float64(turns), LoopTurnsFrom, LoopTurnsFull)
	if gap <= 0 {
		return 0
	}
	fast := 1 - ramp(gap.Seconds(), LoopGapFull.Seconds(), LoopGapTo.Seconds())
	return long * fast
}

// ramp is 0 at or below lo, 1 at or above hi, linear between.
func ramp(x, lo, hi float64) float64 {
	switch {
	case x <= lo:
		return 0
	case x >= hi:
		return 1
	}
	return (x - lo) / (hi - lo)
}
