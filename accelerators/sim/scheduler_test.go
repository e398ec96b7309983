package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// newTestScheduler is a scheduler without an engine loop, driven by hand.
func newTestScheduler(t testing.TB, numBlocks, maxSeqs, maxBatched int) *scheduler {
	t.Helper()
	cfg := (&Config{MaxNumSeqs: maxSeqs, MaxBatchedTokens: maxBatched}).EnsureDefaults()
	acc, _ := accelerators.LookupAccelerator(cfg.Accelerator)
	model, _ := accelerators.LookupModel(cfg.Model)
	m := newMetrics(cfg.Flavor, cfg.ServedModelName, cfg.BlockSize, numBlocks, cfg.MaxNumSeqs, cfg.MaxBatchedTokens)
	return newScheduler(cfg, acc, model, newKVCache(numBlocks, cfg.BlockSize, nil), m)
}

// testSeq is a sequence answering prompt with exactly outTokens tokens.
func testSeq(id uint64, prompt string, outTokens int) *sequence {
	return newSequence(id, prompt, planText(id, outTokens, true, false))
}

// drain runs steps until nothing is left, at most limit of them.
func drain(t testing.TB, s *scheduler, limit int, each func()) int {
	t.Helper()
	steps := 0
	for s.busy() {
		if steps++; steps > limit {
			t.Fatalf("still busy after %d steps: %d running, %d waiting", limit, len(s.running), len(s.waiting))
		}
		s.apply(s.schedule())
		if each != nil {
			each()
		}
		checkInvariants(t, s)
	}
	return steps
}

// checkInvariants verifies the KV cache's books after a step.
func checkInvariants(t testing.TB, s *scheduler) {
	t.Helper()
	kv := s.kv
	refs := make(map[int32]int32)
	for _, q := range s.running {
		for _, id := range q.blocks {
			refs[id]++
		}
	}
	for _, l := range s.leases.m {
		for _, id := range l.blocks {
			refs[id]++
		}
	}
	used := 0
	for id := range kv.blocks {
		b := &kv.blocks[id]
		if b.ref != refs[int32(id)] {
			t.Fatalf("block %d: ref %d, running sequences hold %d", id, b.ref, refs[int32(id)])
		}
		if b.ref > 0 {
			used++
		}
		if b.node != 0 && (b.ref != 0 || !b.cached) {
			t.Fatalf("block %d in LRU with ref %d cached %v", id, b.ref, b.cached)
		}
	}
	if used != kv.used || len(kv.free)+kv.lru.Len()+used != len(kv.blocks) {
		t.Fatalf("books: used %d (counted %d), free %d, lru %d, total %d", kv.used, used, len(kv.free), kv.lru.Len(), len(kv.blocks))
	}
}

func prompt(seed, bytes int) string {
	var b strings.Builder
	for b.Len() < bytes {
		fmt.Fprintf(&b, "%d:%s ", seed, words[(b.Len()*7+seed)%len(words)])
	}
	return b.String()[:bytes]
}

func TestSchedulerPrefixHitShortensTTFT(t *testing.T) {
	s := newTestScheduler(t, 1000, 256, 8192)
	p := prompt(1, 8000) // 2000 tokens
	first := testSeq(1, p, 8)
	s.enqueue(first)
	drain(t, s, 100, nil)
	second := testSeq(2, p, 8)
	s.enqueue(second)
	drain(t, s, 100, nil)

	if first.cachedTokens != 0 {
		t.Errorf("first request: %d cached tokens, want 0", first.cachedTokens)
	}
	// 2000 tokens: 124 full blocks below the last token.
	if want := 124 * 16; second.cachedTokens != want {
		t.Errorf("repeat: %d cached tokens, want %d", second.cachedTokens, want)
	}
	ttft1, ttft2 := first.firstToken-first.arrival, second.firstToken-second.arrival
	if ttft2*10 > ttft1 {
		t.Errorf("repeat TTFT %v not well below first %v", ttft2, ttft1)
	}
}

func TestSchedulerFollowUpTurnHits(t *testing.T) {
	s := newTestScheduler(t, 1000, 256, 8192)
	msgs := []ChatMessage{{Role: "user", Content: TextContent(prompt(3, 1000))}}
	p1 := RenderChat(msgs, nil)
	turn1 := testSeq(1, p1, 100)
	s.enqueue(turn1)
	drain(t, s, 500, nil)

	msgs = append(msgs,
		ChatMessage{Role: "assistant", Content: TextContent(turn1.out.text)},
		ChatMessage{Role: "user", Content: TextContent("and then?")})
	p2 := RenderChat(msgs, nil)
	if !strings.HasPrefix(p2, p1+turn1.out.text) {
		t.Fatal("follow-up prompt does not extend the first prompt and answer")
	}
	turn2 := testSeq(2, p2, 4)
	s.enqueue(turn2)
	drain(t, s, 100, nil)
	// Every full block of turn 1's computed context is reused.
	computed := turn1.promptTokens + turn1.out.tokens - 1
	if want := computed / 16 * 16; turn2.cachedTokens < want-16 {
		t.Errorf("follow-up: %d cached tokens, want about %d", turn2.cachedTokens, want)
	}
}

func TestSchedulerQueuesWhenCacheFull(t *testing.T) {
	tests := []struct {
		name      string
		numBlocks int
		seqs      int
		promptLen int // bytes
		out       int
	}{
		{"queue and preempt", 12, 4, 200, 30},
		{"one at a time", 6, 5, 300, 10},
		{"many small", 40, 64, 60, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestScheduler(t, tt.numBlocks, 256, 8192)
			var seqs []*sequence
			for i := range tt.seqs {
				q := testSeq(uint64(i+1), prompt(i, tt.promptLen), tt.out)
				seqs = append(seqs, q)
				s.enqueue(q)
			}
			queued := false
			drain(t, s, 10000, func() {
				if len(s.waiting) > 0 && len(s.running) > 0 {
					queued = true
				}
			})
			if !queued {
				t.Error("no step had requests both waiting and running")
			}
			for _, q := range seqs {
				if !q.done.Load() || q.err != nil || q.generated != tt.out {
					t.Errorf("seq %d: done %v err %v generated %d, want %d", q.id, q.done.Load(), q.err, q.generated, tt.out)
				}
			}
			if s.kv.used != 0 {
				t.Errorf("%d blocks still referenced", s.kv.used)
			}
		})
	}
}

func TestSchedulerChunkedPrefill(t *testing.T) {
	s := newTestScheduler(t, 1000, 256, 1024)
	q := testSeq(1, prompt(5, 4*3000), 2) // 3000 tokens
	s.enqueue(q)
	steps := 0
	for q.generated == 0 {
		d := s.schedule()
		if got := s.batch[0].n; got > 1024 {
			t.Fatalf("step scheduled %d tokens, budget 1024", got)
		}
		s.apply(d)
		steps++
	}
	if steps != 3 {
		t.Errorf("first token after %d steps, want 3 chunks", steps)
	}
}

func TestSchedulerCancel(t *testing.T) {
	s := newTestScheduler(t, 100, 256, 8192)
	a, b := testSeq(1, prompt(1, 400), 50), testSeq(2, prompt(2, 400), 50)
	s.enqueue(a)
	s.enqueue(b)
	s.apply(s.schedule())
	a.cancelled.Store(true)
	drain(t, s, 100, nil)
	if a.err != errCancelled || b.err != nil || b.generated != 50 {
		t.Errorf("a: %v; b: %v after %d tokens", a.err, b.err, b.generated)
	}
}

// BenchmarkSimStep is one engine step of a busy replica: 256 sequences
// decoding at 2k-token contexts, finished ones replaced by repeats of
// their prompt (prefix hits plus a short prefill), so steps mix decode
// with prefill as under load.
func BenchmarkSimStep(b *testing.B) {
	s := newTestScheduler(b, 60000, 256, 8192)
	var seqs []*sequence
	for i := range 256 {
		q := testSeq(uint64(i+1), prompt(i, 8000), 64+i%64)
		seqs = append(seqs, q)
		s.enqueue(q)
	}
	for range 300 { // warm up: admit everyone, fill the cache
		s.apply(s.schedule())
		recycle(s, seqs)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.apply(s.schedule())
		recycle(s, seqs)
	}
}

// recycle re-queues finished sequences as fresh requests, reusing them.
func recycle(s *scheduler, seqs []*sequence) {
	for _, q := range seqs {
		if q.done.Load() {
			q.done.Store(false)
			q.computed, q.generated, q.stored = 0, 0, 0
			q.produced.Store(0)
			s.enqueue(q)
		}
	}
}

func TestSimStepDoesNotAllocate(t *testing.T) {
	s := newTestScheduler(t, 20000, 64, 8192)
	var seqs []*sequence
	for i := range 64 {
		q := testSeq(uint64(i+1), prompt(i, 2000), 32+i%16)
		seqs = append(seqs, q)
		s.enqueue(q)
	}
	for range 200 {
		s.apply(s.schedule())
		recycle(s, seqs)
	}
	allocs := testing.AllocsPerRun(200, func() {
		s.apply(s.schedule())
		recycle(s, seqs)
	})
	if allocs != 0 {
		t.Errorf("a warm step allocates %v times", allocs)
	}
}

// TestSchedulerPriorityPolicy: under the priority policy waiting
// sequences start lowest priority value first, then by arrival; first
// come, first served starts them in arrival order.
func TestSchedulerPriorityPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   string
	}{
		{SchedulingFCFS, "1 2 3 4 5"},
		{SchedulingPriority, "1 3 5 4 2"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			s := newTestScheduler(t, 1000, 1, 8192)
			s.byPriority = tc.policy == SchedulingPriority
			// Sequence 1 starts at once; the others wait for its slot.
			for i, prio := range []int{0, 2, 0, 1, 0} {
				q := testSeq(uint64(i+1), prompt(i, 400), 3)
				q.priority = prio
				s.enqueue(q)
				if i == 0 {
					s.apply(s.schedule())
				}
			}
			var order []string
			seen := map[uint64]bool{}
			drain(t, s, 1000, func() {
				for _, q := range s.running {
					if !seen[q.id] {
						seen[q.id] = true
						order = append(order, fmt.Sprint(q.id))
					}
				}
			})
			if got := strings.Join(order, " "); got != tc.want {
				t.Fatalf("started %s, want %s", got, tc.want)
			}
		})
	}
}

// TestSchedulerPreemptsLowestPriority: when the KV cache cannot grow, the
// priority policy preempts the running sequence of the lowest priority
// (the highest value), not the newest as first come, first served does.
func TestSchedulerPreemptsLowestPriority(t *testing.T) {
	for _, tc := range []struct {
		policy    string
		preempted uint64
	}{
		{SchedulingFCFS, 2},
		{SchedulingPriority, 1},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			// Two sequences whose prompts fill the cache but for a block:
			// the first decode step that needs a new block preempts one.
			s := newTestScheduler(t, 13, 256, 8192)
			s.byPriority = tc.policy == SchedulingPriority
			low := testSeq(1, prompt(1, 6*16*TokenBytes-TokenBytes), 40)
			low.priority = 2
			high := testSeq(2, prompt(2, 6*16*TokenBytes-TokenBytes), 40)
			s.enqueue(low)
			s.enqueue(high)
			var preempted uint64
			drain(t, s, 10000, func() {
				for _, q := range s.waiting {
					if q.admitted && preempted == 0 {
						preempted = q.id
					}
				}
			})
			if preempted != tc.preempted {
				t.Fatalf("preempted sequence %d first, want %d", preempted, tc.preempted)
			}
			for _, q := range []*sequence{low, high} {
				if !q.done.Load() || q.err != nil || q.generated != 40 {
					t.Errorf("seq %d: done %v err %v generated %d", q.id, q.done.Load(), q.err, q.generated)
				}
			}
		})
	}
}

// TestSchedulerPreemptsEarlierLowPriority: under the priority policy the
// victim can run ahead of the sequence that needs its blocks; its share
// of the step, already planned, is taken back, so no step computes a
// sequence that is no longer running.
func TestSchedulerPreemptsEarlierLowPriority(t *testing.T) {
	s := newTestScheduler(t, 13, 256, 8192)
	s.byPriority = true
	low := testSeq(1, prompt(1, 6*16*TokenBytes-TokenBytes), 40)
	low.priority = 2
	s.enqueue(low)
	s.apply(s.schedule()) // low runs first, its prompt in 6 of the 13 blocks
	high := testSeq(2, prompt(2, 6*16*TokenBytes-TokenBytes), 40)
	s.enqueue(high)
	preemptedBehind := false
	for steps := 0; s.busy(); steps++ {
		if steps > 10000 {
			t.Fatal("still busy after 10000 steps")
		}
		wasFirst := len(s.running) == 2 && s.running[0] == low
		d := s.schedule()
		for _, b := range s.batch {
			if !slices.Contains(s.running, b.q) {
				t.Fatalf("step %d computes sequence %d, which is not running", steps, b.q.id)
			}
		}
		if wasFirst && slices.Contains(s.waiting, low) {
			preemptedBehind = true
		}
		s.apply(d)
		checkInvariants(t, s)
	}
	if !preemptedBehind {
		t.Fatal("low was never preempted from ahead of high")
	}
	for _, q := range []*sequence{low, high} {
		if !q.done.Load() || q.err != nil || q.generated != 40 {
			t.Errorf("seq %d: done %v err %v generated %d", q.id, q.done.Load(), q.err, q.generated)
		}
	}
}
