package kv

import (
	"encoding/binary"
	"sync"
	"unsafe"

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

func (h *Hasher) blockSize() int {
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

// littleEndian: token ids in memory are already the bytes a block hashes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// chain hashes each full block as xxhash64 of the parent hash (8 bytes, little
// endian) followed by the block's token ids (4 bytes each, little endian).
func (h *Hasher) chain(dst []BlockHash, scratch *[]byte, parent BlockHash, tokens []uint32) []BlockHash {
	bs := h.blockSize()
	if littleEndian {
		// Hash the ids where they lie instead of copying every block.
		var d xxhash.Digest
		var p [8]byte
		for len(tokens) >= bs {
			d.Reset()
			binary.LittleEndian.PutUint64(p[:], uint64(parent))
			d.Write(p[:])
			d.Write(unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*bs))
			parent = BlockHash(d.Sum64())
			dst = append(dst, parent)
			tokens = tokens[bs:]
		}
		return dst
	}
	return chainCopying(dst, scratch, bs, parent, tokens)
}

// chainCopying is chain for any byte order: each block is copied out as
// little-endian bytes first.
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
