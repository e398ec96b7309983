package sim

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/accelerators"
)

// newTierScheduler is newTestScheduler with lower KV tiers and an event
// log.
func newTierScheduler(t testing.TB, numBlocks int, cfg Config) (*scheduler, *eventLog) {
	t.Helper()
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	acc, _ := accelerators.LookupAccelerator(cfg.Accelerator)
	model, _ := accelerators.LookupModel(cfg.Model)
	events := &eventLog{blockSize: cfg.BlockSize}
	m := newMetrics(cfg.Flavor, cfg.ServedModelName, cfg.BlockSize, numBlocks, cfg.MaxNumSeqs, cfg.MaxBatchedTokens)
	c := newKVCache(numBlocks, cfg.BlockSize, events)
	c.lower = cfg.lowerTiers(acc, events)
	return newScheduler(&cfg, acc, model, c, m), events
}

// run serves prompt to completion and returns the sequence.
func run(t testing.TB, s *scheduler, id uint64, p string) *sequence {
	t.Helper()
	q := testSeq(id, p, 4)
	s.enqueue(q)
	drain(t, s, 1000, nil)
	return q
}

// tierEvents tallies the log's blocks by kind and medium.
func tierEvents(l *eventLog) map[string]int {
	n := map[string]int{}
	for _, ev := range l.events {
		kind := map[eventKind]string{evStored: "stored ", evRemoved: "removed ", evCleared: "cleared"}[ev.kind]
		n[kind+ev.medium] += ev.hashHi - ev.hashLo
	}
	return n
}

func TestTierEvictedBlocksMoveDownAndLoad(t *testing.T) {
	// HBM of 200 blocks holds one 125-block prompt and most of a second;
	// the first prompt's tail is evicted to make room.
	a, b := prompt(1, 8000), prompt(2, 8000)
	for _, tc := range []struct {
		name      string
		cpuBlocks int
	}{{"hbm only", 0}, {"cpu tier", 400}} {
		t.Run(tc.name, func(t *testing.T) {
			s, events := newTierScheduler(t, 200, Config{KVCPUBlocks: tc.cpuBlocks})
			first := run(t, s, 1, a)
			run(t, s, 2, b)
			moved := tierEvents(events)
			events.reset()
			again := run(t, s, 3, a)
			ttftFirst, ttftAgain := first.firstToken-first.arrival, again.firstToken-again.arrival

			evicted := moved["removed GPU"]
			if evicted == 0 {
				t.Fatal("no block was evicted from HBM")
			}
			if tc.cpuBlocks == 0 {
				if moved["stored CPU"] != 0 {
					t.Errorf("blocks stored in CPU without a CPU tier: %v", moved)
				}
				if again.cachedTokens >= 124*16 {
					t.Errorf("repeat: %d cached tokens with its tail evicted", again.cachedTokens)
				}
				return
			}
			if moved["stored CPU"] != evicted {
				t.Errorf("%d blocks left HBM, %d entered the CPU tier: %v", evicted, moved["stored CPU"], moved)
			}
			// The whole prefix hits: the head in HBM, the tail in CPU.
			if want := 124 * 16; again.cachedTokens != want {
				t.Errorf("repeat: %d cached tokens, want %d", again.cachedTokens, want)
			}
			if ttftAgain*10 > ttftFirst {
				t.Errorf("repeat TTFT %v not well below the first %v: a CPU hit costs a load, not a recompute", ttftAgain, ttftFirst)
			}
			loaded := testutil.ToFloat64(s.metrics.tierHitTokens.WithLabelValues(MediumCPU))
			if loaded == 0 || int(loaded)+s.metricsHBMHits(t) != 124*16 {
				t.Errorf("CPU tier hit tokens %v", loaded)
			}
		})
	}
}

// metricsHBMHits is the HBM prefix hits the last admission counted.
func (s *scheduler) metricsHBMHits(t testing.TB) int {
	t.Helper()
	return int(testutil.ToFloat64(s.metrics.prefixHits))
}

func TestTierLoadCostsBandwidth(t *testing.T) {
	// Loading from a tier takes its bandwidth: the same hit from a slow
	// disk takes longer than from host memory.
	ttft := func(cfg Config) time.Duration {
		s, _ := newTierScheduler(t, 200, cfg)
		run(t, s, 1, prompt(1, 8000))
		run(t, s, 2, prompt(2, 8000))
		q := run(t, s, 3, prompt(1, 8000))
		if q.cachedTokens != 124*16 {
			t.Fatalf("%+v: %d cached tokens, want %d", cfg, q.cachedTokens, 124*16)
		}
		return q.firstToken - q.arrival
	}
	cpu := ttft(Config{KVCPUBlocks: 400})
	disk := ttft(Config{KVDiskBlocks: 400, KVDiskBandwidth: 1e9})
	if disk <= cpu {
		t.Errorf("TTFT from a 1 GB/s disk %v not above from host memory %v", disk, cpu)
	}
}

func TestTierCascadeToShared(t *testing.T) {
	// Tiny tiers: HBM 130, CPU 4, disk 4, shared 200 blocks. Evictions
	// cascade down, each move reported with its medium.
	shared := NewSharedKV(200, DefaultBlockSize, 0)
	s, events := newTierScheduler(t, 130, Config{KVCPUBlocks: 4, KVDiskBlocks: 4, SharedKV: shared})
	run(t, s, 1, prompt(1, 8000))
	run(t, s, 2, prompt(2, 8000))
	n := tierEvents(events)
	evicted := n["removed GPU"]
	if evicted <= 8 {
		t.Fatalf("only %d blocks left HBM: %v", evicted, n)
	}
	if n["stored CPU"] != evicted || n["removed CPU"] != evicted-4 ||
		n["stored DISK"] != evicted-4 || n["removed DISK"] != evicted-8 ||
		n["stored SHARED"] != evicted-8 || n["removed SHARED"] != 0 {
		t.Errorf("cascade of %d evicted blocks: %v", evicted, n)
	}
	if shared.Len() != evicted-8 {
		t.Errorf("shared store holds %d blocks, want %d", shared.Len(), evicted-8)
	}

}

func TestSharedTierServesEveryReplica(t *testing.T) {
	// Engine A offloads a whole prompt to the shared store (no local
	// tiers, HBM too small to keep it past the next prompt); engine B,
	// which never saw it, loads it from there.
	shared := NewSharedKV(1000, DefaultBlockSize, 0)
	a, aEvents := newTierScheduler(t, 130, Config{SharedKV: shared})
	run(t, a, 1, prompt(1, 8000))
	run(t, a, 2, prompt(2, 8000))
	run(t, a, 3, prompt(3, 8000))
	if n := tierEvents(aEvents); n["stored SHARED"] == 0 {
		t.Fatalf("nothing offloaded to the shared store: %v", n)
	}
	b, _ := newTierScheduler(t, 200, Config{SharedKV: shared})
	cold := run(t, b, 1, prompt(4, 8000))
	q := run(t, b, 2, prompt(1, 8000))
	if want := 124 * 16; q.cachedTokens != want {
		t.Errorf("replica B: %d cached tokens of a prompt A offloaded, want %d", q.cachedTokens, want)
	}
	if got := testutil.ToFloat64(b.metrics.tierHitTokens.WithLabelValues(MediumShared)); got != 124*16 {
		t.Errorf("shared hit tokens %v, want %d", got, 124*16)
	}
	// 8B on an H100: 256 MB over 6.25 GB/s against a 2000-token prefill.
	if ttft, coldTTFT := q.firstToken-q.arrival, cold.firstToken-cold.arrival; ttft >= coldTTFT {
		t.Errorf("shared hit TTFT %v not below a cold prompt's %v", ttft, coldTTFT)
	}
}

func TestTierEventsEncodeMedium(t *testing.T) {
	l := &eventLog{blockSize: 2}
	l.storedIn(11, 0, false, []uint32{1, 2}, MediumCPU)
	l.storedIn(12, 11, true, []uint32{3, 4}, MediumCPU) // same chain and medium: merged
	l.storedIn(13, 12, true, []uint32{5, 6}, MediumDisk)
	l.removed(11)
	l.removedFrom(12, MediumShared)
	n := tierEvents(l)
	want := map[string]int{"stored CPU": 2, "stored DISK": 1, "removed GPU": 1, "removed SHARED": 1}
	if len(l.events) != 4 {
		t.Errorf("%d events, want 4 (merged by chain and medium)", len(l.events))
	}
	for k, v := range want {
		if n[k] != v {
			t.Errorf("%s: %d blocks, want %d (all %v)", k, n[k], v, n)
		}
	}
}

func TestBlockTierLRU(t *testing.T) {
	tr := newBlockTier(MediumCPU, 2, 2, 1)
	put := func(h uint64) (uint64, bool) {
		ev, has, _ := tr.put(tierBlock{hash: h, tokens: []uint32{uint32(h), uint32(h)}})
		if has && (ev.tokens[0] != uint32(ev.hash)) {
			t.Fatalf("evicted %d with tokens %v", ev.hash, ev.tokens)
		}
		return ev.hash, has
	}
	put(1)
	put(2)
	tr.has(1) // 2 is now least recent
	if h, has := put(3); !has || h != 2 {
		t.Errorf("evicted %d (%v), want 2", h, has)
	}
	if _, has := put(1); has {
		t.Error("putting a held block evicted one")
	}
	if tr.len() != 2 || !tr.has(1) || !tr.has(3) || tr.has(2) {
		t.Errorf("tier holds the wrong blocks")
	}
	if got := tr.clear(nil); len(got) != 2 || tr.len() != 0 {
		t.Errorf("clear returned %v, left %d", got, tr.len())
	}
}
