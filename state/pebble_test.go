package state

import (
	"bytes"
	"log/slog"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// sized is a Value of n bytes of c.
type sized struct {
	c byte
	n int
}

func (s sized) Len() int { return s.n }

func (s sized) AppendTo(b []byte) []byte {
	for range s.n {
		b = append(b, s.c)
	}
	return b
}

// TestPebbleBatchSized: a Pebble batch is allocated once, at
// the size its ops need, whatever their mix and sizes, so a large value
// is held once in it and never copied as it grows; a Value is written
// into it as given.
func TestPebbleBatchSized(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts: the race detector drops pooled batches at random")
	}
	db, err := OpenPebble(t.TempDir(), PebbleOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := db.eng.(flat).e.(*pebbleEngine)
	long := bytes.Repeat([]byte("k"), 300)
	for _, tc := range []struct {
		name string
		fill func(b *Batch)
	}{
		{"one large value", func(b *Batch) { b.PutValue([]byte("i/chain/0001"), sized{'a', 400 << 10}) }},
		{"large value first", func(b *Batch) {
			b.PutValue([]byte("i/chain/0001"), sized{'a', 1 << 20})
			b.Put([]byte("t/x"), nil)
			b.Delete([]byte("q/r1"))
		}},
		{"a response's writes", func(b *Batch) {
			b.Put([]byte("t/12345678hchain"), nil)
			b.PutValue([]byte("i/chain/0001"), sized{'a', 128})
			b.Put([]byte("x/tenant/msg_1"), []byte(`{"t":"tenant","c":"chain","s":1}`))
			b.PutValue([]byte("i/chain/0002"), sized{'b', 70 << 10})
			b.Put([]byte("h/chain"), []byte(`{"tenant":"tenant","next":2}`))
			b.Delete([]byte("q/r1"))
			b.DeletePrefix([]byte("e/r1/"))
			b.Put([]byte("r/r1"), bytes.Repeat([]byte("r"), 3000))
		}},
		{"long keys, empty values", func(b *Batch) {
			for range 20 {
				b.Put(long, nil)
				b.PutValue(long, sized{'c', 0})
				b.DeletePrefix(long)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			tc.fill(&b)
			prefix := []byte("rs/")
			size := pebbleBatchSize(prefix, &b)
			var pb *pebble.Batch
			alloc := allocated(func() {
				if pb, err = e.batch(prefix, &b); err != nil {
					t.Fatal(err)
				}
			})
			defer pb.Close()
			// A batch from Pebble's pool may bring a larger buffer along;
			// a new one is its size, rounded up to the heap's 8 KiB pages,
			// and the batch itself, when the pool has none.
			repr := pb.Repr()
			if len(repr) > size || cap(repr) < size || alloc > size+10<<10 {
				t.Errorf("batch of %d bytes in a buffer of %d, %d bytes allocated; sized %d", len(repr), cap(repr), alloc, size)
			}
			if waste := size - len(repr); waste > 32+10*b.Len() {
				t.Errorf("sized %d for %d bytes", size, len(repr))
			}
		})
	}
}

// allocated is the bytes the process allocates on its heap while f
// runs.
func allocated(f func()) int {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return int(s[0].Value.Uint64() - before)
}

// TestPebbleFormatAndCompression: a store that an older version created
// at Pebble's defaults opens with its data, moved up to pebbleFormat, and
// the tables it writes from then on are compressed with MinLZ, not
// Snappy.
func TestPebbleFormatAndCompression(t *testing.T) {
	dir := t.TempDir()
	old, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Set([]byte("r/old"), []byte("kept"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := OpenPebble(dir, PebbleOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := db.eng.(flat).e.(*pebbleEngine)
	if v, err := e.get([]byte("r/old")); err != nil || string(v) != "kept" {
		t.Fatalf("the older store's value: %q, %v", v, err)
	}
	if got := e.db.FormatMajorVersion(); got != pebbleFormat {
		t.Errorf("format %v, want %v", got, pebbleFormat)
	}
	if err := e.db.Set([]byte("r/new"), bytes.Repeat([]byte("a response's text "), 4096), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := e.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	// Each table's compression_stats: algorithm:compressed/uncompressed
	// bytes, by algorithm.
	var flushed string
	for _, level := range levels {
		for _, tbl := range level {
			if tbl.Properties.CompressionName != "Snappy" { // not the older store's
				flushed = tbl.Properties.CompressionStats
			}
		}
	}
	if !strings.Contains(flushed, "MinLZ") || strings.Contains(flushed, "Snappy") {
		t.Errorf("the flushed table's compression: %q, want MinLZ", flushed)
	}
}
