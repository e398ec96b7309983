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

// A Draw is one budget of a Namespace.Draw: the budget called Key allows
// Size every Per, counted over a sliding window of Per (the current
// period's count plus the previous one's, weighted by how much of it the
// window still covers), so that no span of Per takes much more than Size.
// Draw takes Cost from it when Need remains. A negative Cost gives back
// (a refund, or a charge corrected down).
type Draw struct {
	Key  []byte
	Size float64
	Per  time.Duration
	// Need is what must remain of the budget for the draw, usually the
	// cost, at most Size (a cost dearer than the whole budget fits only
	// an unspent one).
	Need float64
	Cost float64
}

// Level is a budget's state after a Draw.
type Level struct {
	// Remaining is what is left of Size now, at most Size (negative when a
	// settlement took more than was left).
	Remaining float64
	// Wait is how long until Need remains; 0 when it does.
	Wait time.Duration
	// Reset is how long until the whole Size remains.
	Reset time.Duration
}

// bucketEngine is the engine's side of Namespace.Draw: draw takes every
// draw's cost at once when each budget has its need (or force), and
// writes each budget's state after into levels.
type bucketEngine interface {
	draw(ctx context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []Level) (bool, error)
}

func (n *namespace) Draw(ctx context.Context, now time.Time, draws []Draw, force bool, levels []Level) (bool, error) {
	if len(levels) < len(draws) {
		panic(fmt.Sprintf("state: %d levels for %d draws", len(levels), len(draws)))
	}
	for i := range draws {
		if !(draws[i].Size > 0) || draws[i].Per <= 0 {
			panic(fmt.Sprintf("state: budget %q of size %v per %v", draws[i].Key, draws[i].Size, draws[i].Per))
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

// window is a budget's counts: cur in period idx (now / per), prev in
// the one before.
type window struct {
	per       time.Duration
	idx       int64
	cur, prev float64
}

// at is w rolled forward to period idx.
func (w window) at(idx int64) window {
	switch {
	case w.idx == idx:
		return w
	case w.idx == idx-1:
		return window{per: w.per, idx: idx, prev: w.cur}
	case w.idx > idx:
		return w // a clock gone back: the latest period stands
	}
	return window{per: w.per, idx: idx}
}

// level is the budget's state at e into the window's period.
func (w window) level(d *Draw, e float64) Level {
	per := float64(d.Per)
	used := math.Max(w.prev*(1-e/per)+w.cur, 0)
	l := Level{Remaining: d.Size - used}
	// Wait: within this period, prev's weight fading; else into the next,
	// where cur is prev.
	if l.Remaining < d.Need {
		room := d.Size - d.Need
		if w.cur <= room && w.prev > 0 {
			l.Wait = time.Duration(math.Max(per*(1-(room-w.cur)/w.prev)-e, 0))
		} else {
			l.Wait = time.Duration(per - e + math.Max(per*(1-room/w.cur), 0))
		}
	}
	switch {
	case w.cur > 0:
		l.Reset = time.Duration(2*per - e)
	case w.prev > 0:
		l.Reset = time.Duration(per - e)
	}
	return l
}

// bucketTable holds the budgets of an embedded store, in this process's
// memory: an embedded store has one process, whose restart forgets them.
type bucketTable struct {
	mu struct {
		sync.Mutex
		// protect the fields below
		held map[string]window // by prefix+key
		// sweep counts draws: every 1024th drops the windows two periods old.
		sweep uint64
	}
}

func (b *bucketTable) draw(prefix []byte, now time.Time, draws []Draw, force bool, levels []Level) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := true
	ws := make([]window, len(draws))
	for i := range draws {
		d := &draws[i]
		idx, e := periodOf(now, d.Per)
		ws[i] = b.mu.held[string(prefix)+string(d.Key)].at(idx)
		ws[i].per = d.Per
		levels[i] = ws[i].level(d, e)
		ok = ok && levels[i].Remaining >= d.Need
	}
	if !ok && !force {
		return false
	}
	if b.mu.held == nil {
		b.mu.held = make(map[string]window)
	}
	for i := range draws {
		d := &draws[i]
		_, e := periodOf(now, d.Per)
		ws[i].cur += d.Cost
		b.mu.held[string(prefix)+string(d.Key)] = ws[i]
		levels[i] = ws[i].level(d, e)
	}
	if b.mu.sweep++; b.mu.sweep%1024 == 0 {
		for k, w := range b.mu.held {
			if idx, _ := periodOf(now, w.per); w.idx < idx-1 {
				delete(b.mu.held, k)
			}
		}
	}
	return true
}

// periodOf is now's period of length per, and how far into it now is.
func periodOf(now time.Time, per time.Duration) (int64, float64) {
	ns := now.UnixNano()
	return ns / int64(per), float64(ns % int64(per))
}

func (f flat) draw(_ context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []Level) (bool, error) {
	return f.buckets.draw(prefix, now, draws, force, levels), nil
}

// drawBuckets is Draw in one script, so that gateways drawing from one
// budget at once each see the other's draw. KEYS are the budgets; ARGV[1]
// is now in ms, ARGV[2] "1" to force; then four per budget: size, per
// (ms), need, cost. A budget is a hash {i: period, c: its count, p: the
// previous period's}, which expires two periods on, when it counts
// nothing. Each budget's state goes back as three strings (remaining,
// wait and reset in ms): Lua's numbers are doubles, Redis's replies
// integers.
var drawBuckets = redis.NewScript(`
local now = tonumber(ARGV[1])
local ws, ok = {}, true
local function level(w, size, per, need)
  local e = now - w.i * per
  if e < 0 then e = 0 end
  local used = w.p * (1 - e / per) + w.c
  if used < 0 then used = 0 end
  local rem, wait, reset = size - used, 0, 0
  if rem < need then
    local room = size - need
    if w.c <= room and w.p > 0 then
      wait = per * (1 - (room - w.c) / w.p) - e
      if wait < 0 then wait = 0 end
    else
      local more = per * (1 - room / w.c)
      if more < 0 then more = 0 end
      wait = per - e + more
    end
  end
  if w.c > 0 then reset = 2 * per - e elseif w.p > 0 then reset = per - e end
  return rem, wait, reset
end
for n, k in ipairs(KEYS) do
  local a = 2 + 4 * (n - 1)
  local size, per, need = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local idx = math.floor(now / per)
  local v = redis.call('HMGET', k, 'i', 'c', 'p')
  local w = {i = idx, c = 0, p = 0}
  if v[1] then
    local i, c, p = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
    if i == idx or i > idx then w = {i = i, c = c, p = p}
    elseif i == idx - 1 then w.p = c end
  end
  ws[n] = w
  if level(w, size, per, need) < need then ok = false end
end
if ARGV[2] == '1' then ok = true end
local out = {ok and 1 or 0}
for n, k in ipairs(KEYS) do
  local a = 2 + 4 * (n - 1)
  local size, per, need = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local w = ws[n]
  if ok then
    w.c = w.c + tonumber(ARGV[a + 4])
    redis.call('HSET', k, 'i', tostring(w.i), 'c', tostring(w.c), 'p', tostring(w.p))
    redis.call('PEXPIRE', k, math.ceil(2 * per) + 1000)
  end
  local rem, wait, reset = level(w, size, per, need)
  out[#out + 1] = tostring(rem)
  out[#out + 1] = tostring(wait)
  out[#out + 1] = tostring(reset)
end
return out
`)

// bucketKey is the Redis key of a bucket: under the namespace's hash tag
// (every bucket of one draw in one slot), apart from its values and
// index, so scans never see it.
func (e *redisEngine) bucketKey(prefix, key []byte) string {
	return e.opts.KeyPrefix + "{" + string(prefix) + "}b" + string(key)
}

func (e *redisEngine) draw(ctx context.Context, prefix []byte, now time.Time, draws []Draw, force bool, levels []Level) (bool, error) {
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
	if err == nil && len(out) != 3*len(draws)+1 {
		err = fmt.Errorf("the script answered %d values for %d budgets", len(out), len(draws))
	}
	if err != nil {
		e.errs.draw.Add(1)
		return false, fmt.Errorf("state: redis: drawing from budget %q: %w", draws[0].Key, err)
	}
	for i := range draws {
		var v [3]float64
		for j := range v {
			s, _ := out[1+3*i+j].(string)
			if v[j], err = strconv.ParseFloat(s, 64); err != nil {
				return false, fmt.Errorf("state: redis: budget %q's state %q: %w", draws[i].Key, s, err)
			}
		}
		levels[i] = Level{Remaining: v[0], Wait: time.Duration(v[1] * float64(time.Millisecond)), Reset: time.Duration(v[2] * float64(time.Millisecond))}
	}
	n, _ := out[0].(int64)
	return n == 1, nil
}
