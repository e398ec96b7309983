package kv

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// loadHex reads a fixture of hex bytes; '#' starts a comment.
func loadHex(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for line := range strings.Lines(string(raw)) {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func seqTokens(from, n int) []uint32 {
	ts := make([]uint32, n)
	for i := range ts {
		ts[i] = uint32(from + i)
	}
	return ts
}

func TestDecodeBatchFixtures(t *testing.T) {
	toks1 := seqTokens(100, 32)
	toks1[5] = 40000
	h2 := EngineHash(0xffedcba987543211) // -0x12345678abcdef as 64 bits
	b1 := make([]byte, 32)
	b2 := make([]byte, 32)
	for i := range 32 {
		b1[i], b2[i] = byte(i), byte(32+i)
	}

	for _, tc := range []struct {
		file string
		want EventBatch
	}{
		{"vllm_array_int_hashes.hex", EventBatch{
			Timestamp: 1717171717.5,
			Events: []Event{
				{Kind: BlockStored, BlockHashes: []EngineHash{0xf3a1c2d4e5b60718, h2}, TokenIDs: toks1, BlockSize: 16, Medium: "GPU"},
				{Kind: BlockRemoved, BlockHashes: []EngineHash{h2}, Medium: "CPU"},
				{Kind: AllBlocksCleared},
			},
			DataParallelRank: 0,
		}},
		{"vllm_array_bytes_hashes.hex", EventBatch{
			Timestamp: 1717171718.25,
			Events: []Event{
				{Kind: BlockStored, BlockHashes: []EngineHash{EngineHash(xxhash.Sum64(b2))},
					ParentBlockHash: EngineHash(xxhash.Sum64(b1)), HasParent: true,
					TokenIDs: seqTokens(200, 16), BlockSize: 16, LoRAID: 3, LoRAName: "adapter-x", Medium: "CPU"},
				{Kind: BlockRemoved, BlockHashes: []EngineHash{EngineHash(xxhash.Sum64(b1))}},
			},
			DataParallelRank: -1,
		}},
		{"vllm_map.hex", EventBatch{
			Timestamp: 1717171719,
			Events: []Event{
				{Kind: BlockStored, BlockHashes: []EngineHash{1, 2}, ParentBlockHash: 7, HasParent: true, TokenIDs: toks1, BlockSize: 16, Medium: "DISK"},
				{Kind: BlockRemoved, BlockHashes: []EngineHash{2}, Medium: "DISK"},
				{Kind: AllBlocksCleared},
			},
			DataParallelRank: 2,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := DecodeBatch(loadHex(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDecodeBatchEncodings encodes the same batch both ways msgspec can and
// checks they decode alike.
func TestDecodeBatchEncodings(t *testing.T) {
	toks := seqTokens(1, 32)
	hashBytes := []byte("0123456789abcdef0123456789abcdef")
	want := EventBatch{
		Timestamp: 12.5,
		Events: []Event{
			{Kind: BlockStored, BlockHashes: []EngineHash{10, EngineHash(xxhash.Sum64(hashBytes))}, ParentBlockHash: 9, HasParent: true, TokenIDs: toks, BlockSize: 16, LoRAID: 1, Medium: "GPU"},
			{Kind: BlockRemoved, BlockHashes: []EngineHash{10}},
			{Kind: AllBlocksCleared},
		},
		DataParallelRank: 1,
	}
	arrayLike := []any{12.5, []any{
		[]any{"BlockStored", []any{10, hashBytes}, 9, toks, 16, 1, "GPU"},
		// An event type this gateway does not know is skipped.
		[]any{"BlockPinned", []any{10}},
		[]any{"BlockRemoved", []any{10}},
		[]any{"AllBlocksCleared"},
	}, 1}
	mapped := map[string]any{
		"ts": 12.5,
		"events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{10, hashBytes}, "parent_block_hash": 9,
				"token_ids": toks, "block_size": 16, "lora_id": 1, "medium": "GPU", "extra_keys": []any{"x"}},
			map[string]any{"type": "BlockPinned", "block_hashes": []any{10}},
			map[string]any{"type": "BlockRemoved", "block_hashes": []any{10}, "medium": nil},
			map[string]any{"type": "AllBlocksCleared"},
		},
		"data_parallel_rank": 1,
	}
	for name, v := range map[string]any{"array-like": arrayLike, "map": mapped} {
		t.Run(name, func(t *testing.T) {
			b, err := msgpack.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"not a container", "hello"},
		{"nil batch", nil},
		{"ts not a number", []any{"now", []any{}}},
		{"events not an array", []any{1.0, "x"}},
		{"untagged event", []any{1.0, []any{[]any{}}}},
		{"tag not a string", []any{1.0, []any{[]any{7}}}},
		{"map event without type", []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}}},
		{"nil block hash", []any{1.0, []any{[]any{"BlockRemoved", []any{nil}}}}},
		{"negative token id", []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 16}}}},
		{"token id too large", []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{int64(1) << 40}, 16}}}},
		{"block size negative", []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{}, -16}}}},
		{"medium not a string", []any{1.0, []any{[]any{"BlockRemoved", []any{1}, 5}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := msgpack.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeBatch(b); !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("err = %v, want ErrMalformedBatch", err)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		b := loadHex(t, "vllm_array_int_hashes.hex")
		for n := range len(b) {
			if _, err := DecodeBatch(b[:n]); !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("%d of %d bytes: err = %v", n, len(b), err)
			}
		}
	})
}

func TestMediumTier(t *testing.T) {
	for _, tc := range []struct {
		medium string
		want   Tier
		ok     bool
	}{
		{"", HBM, true}, {"GPU", HBM, true}, {"gpu", HBM, true},
		{"CPU", CPU, true}, {"DISK", Disk, true}, {"LOCAL_DISK", Disk, true},
		{"SHARED", Shared, true}, {"TAPE", 0, false},
	} {
		got, ok := MediumTier(tc.medium)
		if got != tc.want || ok != tc.ok {
			t.Errorf("MediumTier(%q) = %v, %v; want %v, %v", tc.medium, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, name := range []string{"vllm_array_int_hashes.hex", "vllm_array_bytes_hashes.hex", "vllm_map.hex"} {
		f.Add(loadHex(f, name))
	}
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("error not classed: %v", err)
			}
			return
		}
		for _, ev := range b.Events {
			if ev.Kind < BlockStored || ev.Kind > AllBlocksCleared {
				t.Fatalf("event of kind %v returned", ev.Kind)
			}
		}
	})
}
