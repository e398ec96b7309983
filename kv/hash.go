package kv

import (
	"encoding/binary"
	"math/bits"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// DefaultBlockSize is the number of tokens in one KV-cache block, the paged
// block size of vLLM, SGLang and the simulator.
const DefaultBlockSize = 16

// BlockHash identifies a block of tokens together with every token before it:
// it is the chained hash of the block and its parent. Two prompts share a
// BlockHash only if they share the whole prefix up to the end of that block.
type BlockHash uint64

// Hasher cuts token ids into blocks and hashes them into chains. The zero
// value is ready to use with DefaultBlockSize. A Hasher must not be changed
// once in use; it is safe for concurrent use.
type Hasher struct {
	// BlockSize is the number of tokens per block. Zero means DefaultBlockSize.
	// It must equal the engines' block size for engine KV events to line up.
	BlockSize int
}

// BlockTokens is the number of tokens per block: BlockSize, or
// DefaultBlockSize when that is zero or h is nil.
func (h *Hasher) BlockTokens() int {
	if h == nil || h.BlockSize <= 0 {
		return DefaultBlockSize
	}
	return h.BlockSize
}

// ModelSeed is the parent of a model's first block.
func ModelSeed(model string) BlockHash {
	return BlockHash(xxhash.Sum64String(model))
}

// blockBufs recycles the buffer one block is hashed from.
var blockBufs = sync.Pool{New: func() any { return new([]byte) }}

// HashTokens appends the chain of hashes of the full blocks of tokens, as the
// first blocks of a model's prompt, to dst.
func (h *Hasher) HashTokens(dst []BlockHash, model string, tokens []uint32) []BlockHash {
	return h.HashTokensFrom(dst, ModelSeed(model), tokens)
}

// HashTokensFrom appends the chain of hashes of the full blocks of tokens,
// continuing the chain after parent, to dst.
func (h *Hasher) HashTokensFrom(dst []BlockHash, parent BlockHash, tokens []uint32) []BlockHash {
	buf := blockBufs.Get().(*[]byte)
	dst = h.chain(dst, buf, parent, tokens)
	blockBufs.Put(buf)
	return dst
}

// chain hashes each full block as xxhash64 of the parent hash (8 bytes, little
// endian) followed by the block's token ids (4 bytes each, little endian).
func (h *Hasher) chain(dst []BlockHash, scratch *[]byte, parent BlockHash, tokens []uint32) []BlockHash {
	bs := h.BlockTokens()
	if bs == DefaultBlockSize {
		for len(tokens) >= bs {
			parent = BlockHash(hashBlock16(uint64(parent), tokens[:16:16]))
			dst = append(dst, parent)
			tokens = tokens[bs:]
		}
		return dst
	}
	return chainCopying(dst, scratch, bs, parent, tokens)
}

// chainCopying is chain for any block size: each block is laid out as
// its bytes and hashed.
func chainCopying(dst []BlockHash, scratch *[]byte, bs int, parent BlockHash, tokens []uint32) []BlockHash {
	need := 8 + 4*bs
	if cap(*scratch) < need {
		*scratch = make([]byte, need)
	}
	buf := (*scratch)[:need]
	for len(tokens) >= bs {
		binary.LittleEndian.PutUint64(buf, uint64(parent))
		for i, t := range tokens[:bs] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], t)
		}
		parent = BlockHash(xxhash.Sum64(buf))
		dst = append(dst, parent)
		tokens = tokens[bs:]
	}
	return dst
}

// xxhash64 primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
)

// hashBlock16 is xxhash64 (seed 0) of the 72 bytes a 16-token block
// hashes — parent, then the ids, all little endian — computed on the
// values, without laying the bytes out: the gateway hashes every block of
// every prompt, and a long agent prompt has thousands.
func hashBlock16(parent uint64, t []uint32) uint64 {
	_ = t[15]
	lane := func(i int) uint64 { return uint64(t[i]) | uint64(t[i+1])<<32 }
	// The seed-0 accumulators, wrapping as the algorithm wants.
	p1, p2 := prime1, prime2
	v1, v2, v3, v4 := p1+p2, p2, uint64(0), -p1
	// Stripe 1: parent and ids 0–5; stripe 2: ids 6–13.
	v1, v2, v3, v4 = round(v1, parent), round(v2, lane(0)), round(v3, lane(2)), round(v4, lane(4))
	v1, v2, v3, v4 = round(v1, lane(6)), round(v2, lane(8)), round(v3, lane(10)), round(v4, lane(12))
	h := bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
	h = mergeRound(h, v1)
	h = mergeRound(h, v2)
	h = mergeRound(h, v3)
	h = mergeRound(h, v4)
	h += 72
	// The last 8 bytes: ids 14 and 15.
	h ^= round(0, lane(14))
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

func round(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func mergeRound(acc, val uint64) uint64 {
	val = round(0, val)
	acc ^= val
	return acc*prime1 + prime4
}
