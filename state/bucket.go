package state

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Draw is one token bucket of a Namespace.Draw: the bucket called Key
// holds at most Size and refills Size every Per, continuously; a bucket
// never drawn from is full. Draw takes Cost from it when it holds Need.
// A negative Cost gives back (a refund, or a charge corrected down); a
// level never rises past Size.
type Draw struct {
	Key  []byte
	Size float64
	Per  time.Duration
	// Need is the level the bucket must hold for the draw, usually the
	// cost, at most Size (a cost dearer than the whole bucket fits only
	// a full one).
	Need float64
	Cost float64
}

// bucketEngine is the engine's side of Namespace.Draw: draw takes every
// draw's cost at once when each bucket holds its need (or force), and
// writes each bucket's level after into levels.
type bucketEngine interface {
	draw(ctx context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []float64) (bool, error)
}

func (n *namespace) Draw(ctx context.Context, now time.Time, draws []Draw, force bool, levels []float64) (bool, error) {
	if len(levels) < len(draws) {
		panic(fmt.Sprintf("state: %d levels for %d draws", len(levels), len(draws)))
	}
	for i := range draws {
		if !(draws[i].Size > 0) || draws[i].Per <= 0 {
			panic(fmt.Sprintf("state: bucket %q of size %v per %v", draws[i].Key, draws[i].Size, draws[i].Per))
		}
	}
	if err := n.db.enter(ctx); err != nil {
		return false, err
	}
	defer n.db.leave()
	mark := n.db.health.begin()
	ok, err := n.db.eng.(bucketEngine).draw(ctx, n.prefix, now, draws, force, levels)
	return ok, n.db.health.end(ctx, mark, err)
}

// refilled is the level of a bucket that held level at t, at now: what
// the time between added, at most size. A clock that went back adds
// nothing.
func refilled(level float64, t, now time.Time, d *Draw) float64 {
	if el := now.Sub(t); el > 0 {
		level += d.Size * float64(el) / float64(d.Per)
	}
	return math.Min(level, d.Size)
}

// bucketTable holds the buckets of an embedded store, in this process's
// memory: an embedded store has one process, whose restart refills them.
type bucketTable struct {
	mu struct {
		sync.Mutex
		// protect the fields below
		held map[string]heldBucket // by prefix+key
		// sweep counts draws: every 1024th drops the buckets full again.
		sweep uint64
	}
}

type heldBucket struct {
	level float64
	at    time.Time
	// full is when the bucket is full again, undrawn: then it is the
	// same as none, and may go.
	full time.Time
}

func (b *bucketTable) draw(prefix []byte, now time.Time, draws []Draw, force bool, levels []float64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := true
	for i := range draws {
		d := &draws[i]
		levels[i] = d.Size
		if h, found := b.mu.held[string(prefix)+string(d.Key)]; found {
			levels[i] = refilled(h.level, h.at, now, d)
		}
		ok = ok && levels[i] >= d.Need
	}
	if !ok && !force {
		return false
	}
	if b.mu.held == nil {
		b.mu.held = make(map[string]heldBucket)
	}
	for i := range draws {
		d := &draws[i]
		k := string(prefix) + string(d.Key)
		levels[i] = math.Min(levels[i]-d.Cost, d.Size)
		at := now
		if h, found := b.mu.held[k]; found && h.at.After(at) {
			at = h.at // never move a bucket's clock back
		}
		full := at.Add(time.Duration((d.Size - levels[i]) / d.Size * float64(d.Per)))
		b.mu.held[k] = heldBucket{level: levels[i], at: at, full: full}
	}
	if b.mu.sweep++; b.mu.sweep%1024 == 0 {
		for k, h := range b.mu.held {
			if h.full.Before(now) {
				delete(b.mu.held, k)
			}
		}
	}
	return true
}

func (f flat) draw(_ context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []float64) (bool, error) {
	return f.buckets.draw(prefix, now, draws, force, levels), nil
}

// drawBuckets is Draw in one script, so that gateways drawing from one
// bucket at once each see the other's draw. KEYS are the buckets;
// ARGV[1] is now in ms, ARGV[2] "1" to force; then four per bucket: size,
// per (ms), need, cost. A bucket is a hash {l: level, t: ms of l}; it
// expires once it would be full again, which is what a missing one is.
// Levels go back as strings: Lua's numbers are doubles, Redis's replies
// integers.
var drawBuckets = redis.NewScript(`
local now = tonumber(ARGV[1])
local lv, ok = {}, true
for i, k in ipairs(KEYS) do
  local a = 2 + 4 * (i - 1)
  local size, per = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local v = redis.call('HMGET', k, 'l', 't')
  local level = size
  if v[1] then
    level = tonumber(v[1])
    local t = tonumber(v[2])
    if now > t then level = level + (now - t) * size / per end
    if level > size then level = size end
  end
  lv[i] = level
  if level < tonumber(ARGV[a + 3]) then ok = false end
end
if ARGV[2] == '1' then ok = true end
local out = {ok and 1 or 0}
for i, k in ipairs(KEYS) do
  local a = 2 + 4 * (i - 1)
  local size, per = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  if ok then
    local level = lv[i] - tonumber(ARGV[a + 4])
    if level > size then level = size end
    lv[i] = level
    local t = now
    local old = tonumber(redis.call('HGET', k, 't') or '0')
    if old > t then t = old end
    redis.call('HSET', k, 'l', tostring(level), 't', tostring(t))
    redis.call('PEXPIRE', k, math.ceil((size - level) * per / size) + 1000)
  end
  out[i + 1] = tostring(lv[i])
end
return out
`)

// bucketKey is the Redis key of a bucket: under the namespace's hash tag
// (every bucket of one draw in one slot), apart from its values and
// index, so scans never see it.
func (e *redisEngine) bucketKey(prefix, key []byte) string {
	return e.opts.KeyPrefix + "{" + string(prefix) + "}b" + string(key)
}

func (e *redisEngine) draw(ctx context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []float64) (bool, error) {
	keys := make([]string, len(draws))
	args := make([]any, 0, 2+4*len(draws))
	f := "0"
	if force {
		f = "1"
	}
	args = append(args, now.UnixMilli(), f)
	for i := range draws {
		d := &draws[i]
		keys[i] = e.bucketKey(prefix, d.Key)
		args = append(args, d.Size, max(d.Per.Milliseconds(), 1), d.Need, d.Cost)
	}
	out, err := drawBuckets.Run(ctx, e.client, keys, args...).Slice()
	if err == nil && len(out) != len(draws)+1 {
		err = fmt.Errorf("the script answered %d values for %d buckets", len(out), len(draws))
	}
	if err != nil {
		e.errs.draw.Add(1)
		return false, fmt.Errorf("state: redis: drawing from bucket %q: %w", draws[0].Key, err)
	}
	for i := range draws {
		s, _ := out[i+1].(string)
		if levels[i], err = strconv.ParseFloat(s, 64); err != nil {
			return false, fmt.Errorf("state: redis: bucket %q's level %q: %w", draws[i].Key, s, err)
		}
	}
	n, _ := out[0].(int64)
	return n == 1, nil
}
