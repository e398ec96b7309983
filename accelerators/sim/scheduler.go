package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// scheduler is the engine's continuous-batching core, after vLLM's v1
// scheduler: each step it gives every running sequence its next tokens
// (one when decoding, a chunk when prefilling), preempting the newest
// running sequences when the KV cache cannot grow, then admits waiting
// sequences first come, first served while the token budget, the sequence
// cap and the cache allow. It has no goroutine and no locks: the engine
// loop calls schedule, sleeps the step's duration, then apply.
type scheduler struct {
	acc        accelerators.Accelerator
	model      accelerators.Model
	blockSize  int
	maxSeqs    int
	maxBatched int
	// byPriority is the priority scheduling policy: the waiting queue in
	// (priority, arrival) order and the lowest-priority running sequence
	// preempted first; else first come, first served.
	byPriority bool

	kv      *kvCache
	metrics *metrics

	waiting []*sequence
	running []*sequence
	// batch is the current step's work, reused between steps.
	batch []scheduled
	// hits is admit's scratch list of cached blocks found; loads the
	// lower-tier hits after them, per medium.
	hits  []int32
	loads []tierLoad
	// clock is simulated time: the sum of step durations plus idle time.
	clock time.Duration

	// leases hold prefilled requests' blocks for remote decoders, for
	// leaseFor of wall time (now); linkBandwidth prices pulls (0: the
	// accelerator's host link).
	leases        *leaseTable
	leaseFor      time.Duration
	now           func() time.Time
	linkBandwidth float64
}

// scheduled is one sequence's share of a step: n tokens to compute.
type scheduled struct {
	q *sequence
	n int
}

func newScheduler(cfg *Config, acc accelerators.Accelerator, model accelerators.Model, kv *kvCache, m *metrics) *scheduler {
	return &scheduler{
		acc:           acc,
		model:         model,
		blockSize:     cfg.BlockSize,
		maxSeqs:       cfg.MaxNumSeqs,
		maxBatched:    cfg.MaxBatchedTokens,
		byPriority:    cfg.SchedulingPolicy == SchedulingPriority,
		kv:            kv,
		metrics:       m,
		leases:        &leaseTable{m: map[string]*lease{}},
		leaseFor:      cfg.leaseDuration(),
		now:           time.Now,
		linkBandwidth: cfg.KVLinkBandwidth,
	}
}

// enqueue queues a new sequence at the current simulated time.
func (s *scheduler) enqueue(q *sequence) {
	q.arrival = s.clock
	s.requeue(q, false)
}

// requeue puts q in the waiting queue: under first come, first served
// last, or first when preempted (as vLLM prepends it); under the priority
// policy in (priority, arrival) order.
func (s *scheduler) requeue(q *sequence, preempted bool) {
	at := len(s.waiting)
	if s.byPriority {
		at, _ = slices.BinarySearchFunc(s.waiting, q, waitOrder)
	} else if preempted {
		at = 0
	}
	s.waiting = slices.Insert(s.waiting, at, q)
}

// waitOrder orders sequences under the priority policy: lower priority
// value first, then earlier arrival, then lower id (arrival ties between
// the sequences enqueued at one step).
func waitOrder(a, b *sequence) int {
	return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.id, b.id))
}

// victim is the index of the running sequence to preempt when the cache
// cannot grow: the newest, or under the priority policy the one of the
// lowest priority (the highest value), the newest among those.
func (s *scheduler) victim() int {
	v := len(s.running) - 1
	if s.byPriority {
		for i, q := range s.running {
			if w := s.running[v]; waitOrder(q, w) > 0 {
				v = i
			}
		}
	}
	return v
}

// schedule plans the next step and returns its simulated duration. An
// empty batch means there is nothing to run.
func (s *scheduler) schedule() time.Duration {
	s.batch = s.batch[:0]
	s.dropCancelled()
	budget := s.maxBatched
	preempted := false
	for i := 0; i < len(s.running) && budget > 0; i++ {
		q := s.running[i]
		if q.loading {
			if s.clock < q.loadUntil {
				continue // its KV is still on the wire
			}
			q.loading = false
			s.store(q)
		}
		n := min(q.numTokens()-q.computed, budget)
		for !s.growBlocks(q, q.computed+n) {
			// Out of blocks: preempt the newest running sequence, or the
			// lowest-priority one (it may be q itself), and recompute it
			// later, as vLLM does.
			v := s.victim()
			victim := s.running[v]
			s.running = slices.Delete(s.running, v, v+1)
			if v < i {
				// Already given its share of this step: take it back.
				i--
				for j, b := range s.batch {
					if b.q == victim {
						budget += b.n
						s.batch = slices.Delete(s.batch, j, j+1)
						break
					}
				}
				n = min(q.numTokens()-q.computed, budget)
			}
			s.preempt(victim)
			preempted = true
			if victim == q {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		s.batch = append(s.batch, scheduled{q, n})
		budget -= n
	}
	// A step that preempted has no room to admit anyone.
	for !preempted && len(s.waiting) > 0 && len(s.running) < s.maxSeqs && budget > 0 {
		if !s.admit(s.waiting[0], &budget) {
			break // the head waits for blocks; FCFS keeps the rest behind it
		}
		// Pop by copying so the queue's array is reused, not leaked.
		n := copy(s.waiting, s.waiting[1:])
		s.waiting[n] = nil
		s.waiting = s.waiting[:n]
	}
	if len(s.batch) == 0 {
		// Nothing to compute, but a pull may be under way: wait for it.
		return s.loadWait()
	}
	return s.stepTime()
}

// admit starts q if the cache can hold its first chunk after the prefix
// hit, and schedules that chunk.
func (s *scheduler) admit(q *sequence, budget *int) bool {
	bs := s.blockSize
	// Never hit the whole sequence: its last token must be computed to
	// sample the next one.
	maxHit := min(q.completeTokens(), q.numTokens()-1) / bs
	s.hits = s.hits[:0]
	idle := 0
	for i := range maxHit {
		id, ok := s.kv.lookup(q.hashAt(i, bs))
		if !ok {
			break
		}
		s.hits = append(s.hits, id)
		if s.kv.blocks[id].ref == 0 {
			idle++ // counted in available, but will not be free to take
		}
	}
	hits := len(s.hits)
	computed := hits * bs
	if q.remote > computed && !q.admitted {
		return s.admitRemote(q, hits, idle)
	}
	if lower, load, slowest := s.lowerHits(q, hits, maxHit); lower > 0 {
		return s.admitLoad(q, hits, lower, idle, load, slowest)
	}
	n := min(q.numTokens()-computed, *budget)
	need := ceilDiv(computed+n, bs) - hits
	if need > s.kv.available()-idle {
		return false
	}
	for _, id := range s.hits {
		s.kv.touch(id)
		q.blocks = append(q.blocks, id)
	}
	q.stored = hits
	q.computed = computed
	s.growBlocks(q, computed+n)
	if !q.admitted {
		q.admitted = true
		q.cachedTokens = computed
		s.metrics.admitted(q.promptTokens, computed)
	}
	s.running = append(s.running, q)
	s.batch = append(s.batch, scheduled{q, n})
	*budget -= n
	return true
}

// admitRemote starts q, whose prompt a prefill engine computed: it takes
// blocks for the whole prompt and pulls the KV its prefix cache lacks at
// the link bandwidth, outside the step's token budget (the transfer runs
// beside the batch, as NIXL's reads do). Once the KV is in, q computes
// its last prompt token and decodes.
func (s *scheduler) admitRemote(q *sequence, hits, idle int) bool {
	need := ceilDiv(q.numTokens(), s.blockSize) - hits
	if need > s.kv.available()-idle {
		return false
	}
	for _, id := range s.hits {
		s.kv.touch(id)
		q.blocks = append(q.blocks, id)
	}
	computed := hits * s.blockSize
	q.stored = hits
	s.growBlocks(q, q.numTokens())
	q.admitted = true
	q.cachedTokens = computed
	s.metrics.admitted(q.promptTokens, computed)
	d, bytes := s.transferTime(q.remote - computed)
	s.metrics.kvTransfer(d, bytes)
	q.computed = q.remote
	q.loading = true
	q.loadUntil = s.clock + d
	s.running = append(s.running, q)
	return true
}

// tierLoad is the part of a prefix hit found in one lower tier.
type tierLoad struct {
	medium string
	tokens int
}

// lowerHits continues q's prefix match below HBM from block hits: how many
// blocks the lower tiers hold, the time to load them into HBM, and the
// slowest medium they come from. s.loads gets the tokens per medium.
func (s *scheduler) lowerHits(q *sequence, hits, maxHit int) (lower int, load time.Duration, slowest string) {
	s.loads = s.loads[:0]
	bs := s.blockSize
	blockBytes := float64(bs) * s.model.KVBytesPerToken()
	var seconds float64
	for i := hits; i < maxHit; i++ {
		bw, medium, ok := s.kv.lower.lookup(q.hashAt(i, bs))
		if !ok {
			break
		}
		lower++
		seconds += blockBytes / bw
		if n := len(s.loads); n > 0 && s.loads[n-1].medium == medium {
			s.loads[n-1].tokens += bs
		} else {
			s.loads = append(s.loads, tierLoad{medium, bs})
		}
		if mediumRank(medium) > mediumRank(slowest) {
			slowest = medium
		}
	}
	return lower, time.Duration(seconds * float64(time.Second)), slowest
}

// mediumRank orders media fastest first; "" (none) ranks lowest.
func mediumRank(medium string) int {
	switch medium {
	case MediumCPU:
		return 1
	case MediumDisk:
		return 2
	case MediumShared:
		return 3
	}
	return 0
}

// admitLoad starts q, whose prefix continues below HBM after hits blocks
// for lower more: it takes HBM blocks for them and loads their KV for
// load, outside the step's token budget (the copy runs beside the batch,
// as the offloading connectors' loads do), then prefills the rest.
func (s *scheduler) admitLoad(q *sequence, hits, lower, idle int, load time.Duration, slowest string) bool {
	if lower+1 > s.kv.available()-idle {
		return false
	}
	for _, id := range s.hits {
		s.kv.touch(id)
		q.blocks = append(q.blocks, id)
	}
	bs := s.blockSize
	computed := (hits + lower) * bs
	q.stored = hits
	s.growBlocks(q, computed)
	if !q.admitted {
		q.admitted = true
		q.cachedTokens = computed
		s.metrics.admitted(q.promptTokens, hits*bs)
	}
	s.metrics.tierLoad(s.loads, slowest, load)
	q.computed = computed
	q.loading = true
	q.loadUntil = s.clock + load
	s.running = append(s.running, q)
	return true
}

// growBlocks gives q blocks for its first tokens tokens, or reports false
// and takes none when the cache cannot.
func (s *scheduler) growBlocks(q *sequence, tokens int) bool {
	need := ceilDiv(tokens, s.blockSize) - len(q.blocks)
	if need <= 0 {
		return true
	}
	if need > s.kv.available() {
		return false
	}
	for range need {
		q.blocks = append(q.blocks, s.kv.alloc())
	}
	return true
}

// stepTime is the roofline duration of the planned batch: prefill of the
// chunks' tokens (compute-bound) plus one decode step over the decoding
// sequences and their whole contexts (bandwidth-bound).
func (s *scheduler) stepTime() time.Duration {
	var prefill, batch, context int
	for _, b := range s.batch {
		if b.n == 1 && b.q.generated > 0 && b.q.computed == b.q.numTokens()-1 {
			batch++
			context += b.q.numTokens()
		} else {
			prefill += b.n
		}
	}
	return accelerators.PrefillTime(s.acc, s.model, prefill) +
		accelerators.DecodeStepTime(s.acc, s.model, batch, context)
}

// apply completes the planned step, which took dur: KV is computed for the
// scheduled tokens, full blocks enter the prefix cache, each sequence that
// caught up samples one token, and finished sequences leave.
func (s *scheduler) apply(dur time.Duration) {
	s.clock += dur
	now := s.clock
	sampled := 0
	finished := false
	for _, b := range s.batch {
		q := b.q
		q.computed += b.n
		s.store(q)
		if q.computed < q.numTokens() {
			continue // a prefill chunk; the rest comes next step
		}
		q.generated++
		sampled++
		if q.generated == 1 {
			q.firstToken = now
			s.metrics.ttft.Observe((now - q.arrival).Seconds())
		} else {
			s.metrics.itl.Observe((now - q.lastToken).Seconds())
		}
		q.lastToken = now
		q.produced.Store(int32(q.generated))
		if q.generated >= q.out.tokens {
			s.store(q)
			if q.leaseID != "" {
				s.hold(q)
			} else {
				s.freeBlocks(q)
			}
			s.metrics.e2e.Observe((now - q.arrival).Seconds())
			q.finish(nil)
			finished = true
			continue
		}
		q.signal()
	}
	if sampled > 0 {
		s.metrics.generationTokens.Add(float64(sampled))
	}
	if finished {
		s.running = compact(s.running, func(q *sequence) bool { return !q.done.Load() })
	}
}

// store puts q's full, complete, computed blocks in the prefix cache.
func (s *scheduler) store(q *sequence) {
	bs := s.blockSize
	full := min(q.computed, q.completeTokens()) / bs
	for ; q.stored < full; q.stored++ {
		i := q.stored
		h := q.hashAt(i, bs)
		var parent uint64
		if i > 0 {
			parent = q.hashes[i-1]
		}
		toks := q.tokens[i*bs : (i+1)*bs]
		if s.kv.store(q.blocks[i], h, parent, i > 0, toks) {
			s.kv.events.storedLoRA(h, parent, i > 0, toks, q.loraID, q.adapter)
		}
	}
}

// freeBlocks returns q's blocks, last first, so that the LRU evicts a
// sequence's tail before its shared head.
func (s *scheduler) freeBlocks(q *sequence) {
	for i := len(q.blocks) - 1; i >= 0; i-- {
		s.kv.release(q.blocks[i])
	}
	q.blocks = q.blocks[:0]
	q.stored = 0
}

// preempt frees a running sequence's blocks and puts it back at the head
// of the queue; it will be recomputed, mostly from the prefix cache.
func (s *scheduler) preempt(q *sequence) {
	s.freeBlocks(q)
	q.computed = 0
	q.loading, q.remote = false, 0
	s.requeue(q, true)
}

// dropCancelled removes sequences whose client went away.
func (s *scheduler) dropCancelled() {
	keep := func(q *sequence) bool {
		if !q.cancelled.Load() {
			return true
		}
		s.freeBlocks(q)
		q.finish(errCancelled)
		return false
	}
	s.waiting = compact(s.waiting, keep)
	s.running = compact(s.running, keep)
}

// busy reports whether any sequence is queued or running.
func (s *scheduler) busy() bool { return len(s.waiting)+len(s.running) > 0 }

// compact keeps the elements for which keep is true, in order, in place.
func compact(qs []*sequence, keep func(*sequence) bool) []*sequence {
	out := qs[:0]
	for _, q := range qs {
		if keep(q) {
			out = append(out, q)
		}
	}
	clear(qs[len(out):])
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
