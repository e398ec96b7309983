package kv

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/vmihailenco/msgpack/v5"
)

const testModel = "sim-llama"

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testPrompt is a prompt with at least three full blocks, and its tokens as
// the simulator would report them in BlockStored events.
func testPrompt(t testing.TB) (*prompt.Prompt, []uint32, []BlockHash) {
	p := &prompt.Prompt{Model: testModel, Messages: conversation(1)}
	tokens := prompt.Approx{}.Encode(nil, string(prompt.AppendRender(nil, p)))
	chain := hashPrompt(&Hasher{}, nil, p)
	if len(chain) < 3 {
		t.Fatalf("test prompt has %d blocks", len(chain))
	}
	return p, tokens, chain
}

func frames(t testing.TB, seq uint64, batch any) [][]byte {
	t.Helper()
	payload, err := msgpack.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return [][]byte{[]byte("kv"), s[:], payload}
}

func batchOf(events ...any) []any { return []any{1.0, events, nil} }

func stored(hashes []any, parent any, tokens []uint32, medium any) []any {
	return []any{"BlockStored", hashes, parent, tokens, DefaultBlockSize, nil, medium}
}

func matchOf(ix *Index, chain []BlockHash, ep int) Match {
	out := make([]Match, ep+1)
	ix.MatchPrefix(chain, out)
	return out[ep]
}

// TestSubscriberApply drives the subscriber's message handling directly.
func TestSubscriberApply(t *testing.T) {
	_, tokens, chain := testPrompt(t)
	bs := DefaultBlockSize
	ix := NewIndex(IndexOptions{})
	s, err := NewSubscriber(ix, SubscriberConfig{Endpoint: 2, Addr: "tcp://127.0.0.1:1", Model: testModel, RecoverAfter: time.Minute, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	seq := uint64(0)
	send := func(batch any) {
		t.Helper()
		s.handle(ctx, frames(t, seq, batch))
		seq++
	}

	t.Run("stored blocks map to the gateway's chain", func(t *testing.T) {
		send(batchOf(stored([]any{101, 102}, nil, tokens[:2*bs], "GPU")))
		send(batchOf(stored([]any{103}, 102, tokens[2*bs:3*bs], nil)))
		if m := matchOf(ix, chain, 2); m.Blocks != 3 || m.ByTier[HBM] != 3 || m.Stale {
			t.Fatalf("match = %+v, want 3 blocks in hbm", m)
		}
		// Offloaded to CPU, then evicted from HBM: still held, in CPU.
		send(batchOf(stored([]any{101, 102, 103}, nil, tokens[:3*bs], "CPU"),
			[]any{"BlockRemoved", []any{102, 103}, "GPU"}))
		if m := matchOf(ix, chain, 2); m.Blocks != 3 || m.ByTier[HBM] != 1 || m.ByTier[CPU] != 2 {
			t.Fatalf("match = %+v, want 1 hbm + 2 cpu", m)
		}
	})

	t.Run("shared blocks count for every replica of the pool", func(t *testing.T) {
		ix.SetGroup(2, 0)
		ix.SetGroup(5, 0)
		send(batchOf(stored([]any{101, 102, 103}, nil, tokens[:3*bs], "SHARED")))
		// Endpoint 5 never reported a block: the pool's store serves it.
		if m := matchOf(ix, chain, 5); m.Blocks != 3 || m.ByTier[Shared] != 3 {
			t.Fatalf("other replica: match = %+v, want 3 shared", m)
		}
		if m := matchOf(ix, chain, 2); m.Blocks != 3 || m.ByTier[HBM] != 1 || m.ByTier[CPU] != 2 {
			t.Fatalf("reporting replica: match = %+v, want its own hbm + cpu first", m)
		}
		send(batchOf([]any{"BlockRemoved", []any{101}, "SHARED"}))
		if m := matchOf(ix, chain, 5); m.Blocks != 0 {
			t.Fatalf("after removal from the store: match = %+v", m)
		}
		send(batchOf([]any{"BlockRemoved", []any{102, 103}, "SHARED"}))
		ix.SetGroup(2, -1)
		ix.SetGroup(5, -1)
	})

	t.Run("unmappable events are skipped", func(t *testing.T) {
		before := s.Stats().Skipped
		send(batchOf(
			stored([]any{201}, 999, tokens[:bs], "GPU"), // parent never seen
			stored([]any{202}, nil, tokens[:bs], "TAPE"),
			[]any{"BlockStored", []any{203}, nil, tokens[:2*bs], 32, nil, "GPU"},
		))
		if got := s.Stats().Skipped - before; got != 3 {
			t.Fatalf("skipped %d events, want 3", got)
		}
	})

	t.Run("gap marks stale until recovered", func(t *testing.T) {
		seq++ // one batch lost
		send(batchOf())
		if !ix.Stale(2) || s.Stats().Gaps != 1 {
			t.Fatalf("stale=%t gaps=%d after a gap", ix.Stale(2), s.Stats().Gaps)
		}
		clock = clock.Add(30 * time.Second)
		send(batchOf())
		if !ix.Stale(2) {
			t.Fatal("recovered before RecoverAfter")
		}
		clock = clock.Add(31 * time.Second)
		send(batchOf())
		if ix.Stale(2) {
			t.Fatal("not recovered after RecoverAfter of contiguous events")
		}
	})

	t.Run("decode error marks stale; clear recovers", func(t *testing.T) {
		s.handle(ctx, [][]byte{[]byte("kv"), make([]byte, 8), []byte{0xc1}})
		seq++
		s.handle(ctx, [][]byte{[]byte("kv")})
		if !ix.Stale(2) || s.Stats().DecodeErrors != 2 {
			t.Fatalf("stale=%t decode errors=%d", ix.Stale(2), s.Stats().DecodeErrors)
		}
		send(batchOf([]any{"AllBlocksCleared"}))
		if ix.Stale(2) || ix.Len() != 0 || s.mapping.Len() != 0 {
			t.Fatalf("after clear: stale=%t len=%d mappings=%d", ix.Stale(2), ix.Len(), s.mapping.Len())
		}
	})

	t.Run("publisher restart is a gap", func(t *testing.T) {
		seq = 0
		send(batchOf())
		if !ix.Stale(2) {
			t.Fatal("sequence going back did not mark stale")
		}
	})

	t.Run("mapping bounded by the capacity of the tiers in use", func(t *testing.T) {
		ix.SetCapacity(2, 2) // 2 blocks in each tier
		long := prompt.Approx{}.Encode(nil, strings.Repeat("0123456789abcdef", 64))
		var hashes []any
		for i := range len(long) / bs {
			hashes = append(hashes, 1000+i)
		}
		send(batchOf(stored(hashes, nil, long, "GPU")))
		// Only HBM holds blocks: the other tiers' capacity bounds nothing
		// of this engine's.
		if n := s.mapping.Len(); n != 2 {
			t.Fatalf("%d mappings, want 2 (HBM's capacity)", n)
		}
		if st := ix.EndpointStats(2); st.Blocks[HBM] != 2 {
			t.Fatalf("hbm holds %d blocks, want 2", st.Blocks[HBM])
		}
		// Offloaded blocks: the CPU tier's capacity counts too, from the
		// batch after the one that put blocks there.
		for i := range hashes {
			hashes[i] = 2000 + i
		}
		send(batchOf(stored(hashes, nil, long, "CPU")))
		send(batchOf(stored(hashes, nil, long, "CPU")))
		if n := s.mapping.Len(); n != 4 {
			t.Fatalf("%d mappings with the CPU tier in use, want 4", n)
		}
	})
}

func TestSubscriberConfigValidate(t *testing.T) {
	err := (&SubscriberConfig{Endpoint: -1, Addr: "localhost:5557", MinBackoff: time.Second, MaxBackoff: time.Millisecond, RecoverAfter: -1}).Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"endpoint id", "ZMQ address", "model", "RecoverAfter", "MinBackoff"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if err := (&SubscriberConfig{Addr: "tcp://127.0.0.1:5557", Model: "m"}).Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publisher numbers messages as vLLM's does.
type publisher struct {
	t    *testing.T
	sock zmq4.Socket
	seq  uint64
}

func (p *publisher) send(batch any) {
	p.t.Helper()
	if err := p.sock.Send(zmq4.NewMsgFrom(frames(p.t, p.seq, batch)...)); err != nil {
		p.t.Fatal(err)
	}
	p.seq++
}

// join sends empty batches until the subscriber receives one: a SUB socket
// misses what is published before its subscription reaches the publisher.
func (p *publisher) join(s *Subscriber) {
	before := s.Stats().Batches
	waitFor(p.t, "the subscription", func() bool {
		p.send(batchOf())
		return s.Stats().Batches > before
	})
}

// TestSubscriberZMQ runs the subscriber against a real PUB socket on
// loopback, dialling out (vLLM's default) and binding.
func TestSubscriberZMQ(t *testing.T) {
	for _, bind := range []bool{false, true} {
		name := "connect"
		if bind {
			name = "bind"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pubSock := zmq4.NewPub(ctx)
			defer pubSock.Close()
			addr := freeAddr(t)
			if !bind {
				if err := pubSock.Listen(addr); err != nil {
					t.Fatal(err)
				}
			}

			ix := NewIndex(IndexOptions{})
			const ep = 1
			s, err := NewSubscriber(ix, SubscriberConfig{
				Endpoint: ep, Addr: addr, Bind: bind, Topic: "kv", Model: testModel,
				RecoverAfter: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond, Logger: quietLog,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if bind {
				if err := pubSock.Dial(addr); err != nil {
					t.Fatal(err)
				}
			}

			pub := &publisher{t: t, sock: pubSock}
			pub.join(s)
			// Whatever was missed while joining, a clear makes the index exact.
			pub.send(batchOf([]any{"AllBlocksCleared"}))
			waitFor(t, "the clear", func() bool { return !ix.Stale(ep) && s.Stats().Events >= 1 })

			_, tokens, chain := testPrompt(t)
			bs := DefaultBlockSize
			pub.send(batchOf(stored([]any{11, 12}, nil, tokens[:2*bs], "GPU")))
			pub.send(batchOf(stored([]any{13}, 12, tokens[2*bs:3*bs], "GPU")))
			waitFor(t, "stored blocks", func() bool { return matchOf(ix, chain, ep).Blocks == 3 })
			pub.send(batchOf([]any{"BlockRemoved", []any{13}, "GPU"}))
			waitFor(t, "removed block", func() bool { return matchOf(ix, chain, ep).Blocks == 2 })

			gaps := s.Stats().Gaps // joining may have missed the first batches
			pub.seq++              // a lost batch
			pub.send(batchOf())
			waitFor(t, "stale after a gap", func() bool { return ix.Stale(ep) && matchOf(ix, chain, ep).Stale })
			waitFor(t, "recovery", func() bool {
				pub.send(batchOf())
				return !ix.Stale(ep)
			})
			if st := s.Stats(); st.Gaps != gaps+1 || !st.Connected || st.DecodeErrors != 0 {
				t.Fatalf("stats = %+v, want one more gap than %d, connected, no decode errors", st, gaps)
			}

			cancel()
			closing, stop := context.WithTimeout(context.Background(), 5*time.Second)
			defer stop()
			if err := s.Close(closing); err != nil {
				t.Fatalf("Close: %v (the subscription did not end within 5s)", err)
			}
		})
	}
}

// TestSubscriberReconnect restarts the publisher: the subscriber redials,
// and the restarted numbering shows as a gap.
func TestSubscriberReconnect(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	ix := NewIndex(IndexOptions{})
	s, err := NewSubscriber(ix, SubscriberConfig{
		Addr: addr, Model: testModel, RecoverAfter: time.Hour,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: quietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// The engine is not up yet: dialling fails and is retried.
	waitFor(t, "a failed dial", func() bool { return s.Stats().Reconnects >= 1 })

	start := func() *publisher {
		sock := zmq4.NewPub(ctx)
		if err := sock.Listen(addr); err != nil {
			t.Fatal(err)
		}
		return &publisher{t: t, sock: sock}
	}
	pub := start()
	pub.seq = 1 << 20 // far from where the restarted publisher will number
	pub.join(s)
	pub.send(batchOf([]any{"AllBlocksCleared"}))
	waitFor(t, "the clear", func() bool { return !ix.Stale(0) })

	pub.sock.Close()
	reconnects := s.Stats().Reconnects
	waitFor(t, "the lost connection", func() bool { return s.Stats().Reconnects > reconnects })
	pub = start()
	defer pub.sock.Close()
	pub.join(s)
	waitFor(t, "stale after the restart", func() bool { return ix.Stale(0) })

	cancel()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
