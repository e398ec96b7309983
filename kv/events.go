package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EngineHash is a block hash as an engine computes it. It is not a BlockHash:
// engines hash with their own tokenizer, algorithm and salt, so the
// subscriber maps each engine hash to the gateway's own.
type EngineHash uint64

// EventKind says what an Event reports.
type EventKind uint8

const (
	// BlockStored: the engine cached blocks.
	BlockStored EventKind = iota + 1
	// BlockRemoved: the engine evicted blocks.
	BlockRemoved
	// AllBlocksCleared: the engine emptied its cache.
	AllBlocksCleared
)

var eventKindNames = [...]string{"", "BlockStored", "BlockRemoved", "AllBlocksCleared"}

func (k EventKind) String() string {
	if int(k) > 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one KV event of vLLM's publisher.
type Event struct {
	Kind EventKind
	// BlockHashes are the blocks stored or removed, parents first.
	BlockHashes []EngineHash
	// ParentBlockHash is the engine hash of the block before the first
	// stored one, when HasParent.
	ParentBlockHash EngineHash
	HasParent       bool
	// TokenIDs are the tokens of the stored blocks, concatenated.
	TokenIDs []uint32
	// BlockSize is the engine's tokens per block.
	BlockSize int
	// LoRAID is the adapter the blocks were computed with (vLLM's
	// lora_int_id); 0 means none.
	LoRAID int64
	// LoRAName is that adapter's name, the model id requests name it by
	// (newer vLLM sends it); "" when the engine did not say.
	LoRAName string
	// Medium is where the blocks live ("GPU", "CPU", "DISK", ...); empty
	// when the engine did not say, which means GPU.
	Medium string
}

// EventBatch is one message of vLLM's publisher.
type EventBatch struct {
	// Timestamp is the publisher's wall clock, in seconds since the epoch.
	Timestamp float64
	Events    []Event
	// DataParallelRank is the publishing engine's data-parallel rank, or -1
	// when it did not say.
	DataParallelRank int
}

// ErrMalformedBatch classes every error of DecodeBatch.
var ErrMalformedBatch = errors.New("kv: malformed KV event batch")

// Field orders of vLLM's array-like encoding, after the tag. Fields beyond
// these (newer vLLM adds some) are skipped; trailing fields left at their
// defaults may be omitted.
var (
	blockStoredFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}
	blockRemovedFields = []string{"block_hashes", "medium"}
	batchFields        = []string{"ts", "events", "data_parallel_rank"}
)

// DecodeBatch decodes the msgpack payload of one KV event message. It
// accepts both of msgspec's encodings vLLM may use: array-like with a leading
// tag (["BlockStored", hashes, parent, ...], the default) and maps with a
// "type" key. A block hash may be an integer, taken as its 64 bits, or bytes
// (newer vLLM), taken as the xxhash64 of the bytes. Events of unknown types
// are skipped. Every error wraps ErrMalformedBatch.
func DecodeBatch(data []byte) (EventBatch, error) {
	dec := batchDecoder{d: msgpack.NewDecoder(bytes.NewReader(data)), size: len(data)}
	b, err := dec.batch()
	if err != nil {
		return EventBatch{}, fmt.Errorf("%w: %w", ErrMalformedBatch, err)
	}
	return b, nil
}

type batchDecoder struct {
	d    *msgpack.Decoder
	size int // bounds preallocation by what the input can hold
}

// container reads an array or map header: n elements, or n pairs.
func (bd *batchDecoder) container() (n int, isMap bool, err error) {
	c, err := bd.d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		n, err = bd.d.DecodeMapLen()
		return n, true, err
	}
	n, err = bd.d.DecodeArrayLen()
	if err == nil && n < 0 {
		err = errors.New("nil where an array or map belongs")
	}
	return n, false, err
}

func (bd *batchDecoder) batch() (EventBatch, error) {
	b := EventBatch{DataParallelRank: -1}
	n, isMap, err := bd.container()
	if err != nil {
		return b, err
	}
	for i := range n {
		name, err := bd.fieldName(isMap, batchFields, i)
		if err != nil {
			return b, err
		}
		switch name {
		case "ts":
			b.Timestamp, err = bd.d.DecodeFloat64()
		case "events":
			b.Events, err = bd.events()
		case "data_parallel_rank":
			var r int64
			var ok bool
			r, ok, err = bd.optInt()
			if ok {
				b.DataParallelRank = int(r)
			}
		default:
			err = bd.d.Skip()
		}
		if err != nil {
			return b, fmt.Errorf("%s: %w", name, err)
		}
	}
	return b, nil
}

// fieldName names the i-th element: the key read from a map, or the i-th
// name of fields for an array ("" beyond them).
func (bd *batchDecoder) fieldName(isMap bool, fields []string, i int) (string, error) {
	if isMap {
		return bd.d.DecodeString()
	}
	if i < len(fields) {
		return fields[i], nil
	}
	return "", nil
}

func (bd *batchDecoder) events() ([]Event, error) {
	n, err := bd.d.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	evs := make([]Event, 0, min(n, bd.size))
	for i := range n {
		ev, err := bd.event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if ev.Kind != 0 {
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

func (bd *batchDecoder) event() (Event, error) {
	var ev Event
	n, isMap, err := bd.container()
	if err != nil {
		return ev, err
	}
	var tag string
	var fields []string
	first := 0
	if !isMap {
		if n == 0 {
			return ev, errors.New("untagged event")
		}
		if tag, err = bd.d.DecodeString(); err != nil {
			return ev, fmt.Errorf("tag: %w", err)
		}
		switch tag {
		case "BlockStored":
			fields = blockStoredFields
		case "BlockRemoved":
			fields = blockRemovedFields
		}
		first = 1
	}
	for i := first; i < n; i++ {
		name, err := bd.fieldName(isMap, fields, i-first)
		if err != nil {
			return ev, err
		}
		if name == "type" {
			tag, err = bd.d.DecodeString()
		} else {
			err = bd.eventField(&ev, name)
		}
		if err != nil {
			return ev, fmt.Errorf("%s: %w", name, err)
		}
	}
	switch tag {
	case "BlockStored":
		ev.Kind = BlockStored
	case "BlockRemoved":
		ev.Kind = BlockRemoved
	case "AllBlocksCleared":
		ev.Kind = AllBlocksCleared
	case "":
		return ev, errors.New("event without a type")
	}
	return ev, nil
}

func (bd *batchDecoder) eventField(ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.BlockHashes, err = bd.hashes()
	case "parent_block_hash":
		if bd.isNil() {
			return bd.d.DecodeNil()
		}
		ev.ParentBlockHash, err = bd.hash()
		ev.HasParent = err == nil
	case "token_ids":
		ev.TokenIDs, err = bd.tokens()
	case "block_size":
		var v int64
		v, _, err = bd.optInt()
		if err == nil && (v < 0 || v > math.MaxInt32) {
			err = fmt.Errorf("out of range: %d", v)
		}
		ev.BlockSize = int(v)
	case "lora_id":
		ev.LoRAID, _, err = bd.optInt()
	case "medium":
		if bd.isNil() {
			return bd.d.DecodeNil()
		}
		ev.Medium, err = bd.d.DecodeString()
	case "lora_name":
		if bd.isNil() {
			return bd.d.DecodeNil()
		}
		ev.LoRAName, err = bd.d.DecodeString()
	default:
		err = bd.d.Skip()
	}
	return err
}

func (bd *batchDecoder) isNil() bool {
	c, err := bd.d.PeekCode()
	return err == nil && c == msgpcode.Nil
}

// optInt reads an integer or nil.
func (bd *batchDecoder) optInt() (int64, bool, error) {
	if bd.isNil() {
		return 0, false, bd.d.DecodeNil()
	}
	v, err := bd.d.DecodeInt64()
	return v, err == nil, err
}

func (bd *batchDecoder) hashes() ([]EngineHash, error) {
	n, err := bd.d.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	hs := make([]EngineHash, 0, min(n, bd.size))
	for range n {
		h, err := bd.hash()
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// hash reads an engine block hash: an integer as its 64 bits, or bytes (or,
// leniently, a string) as the xxhash64 of its bytes.
func (bd *batchDecoder) hash() (EngineHash, error) {
	c, err := bd.d.PeekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case msgpcode.IsBin(c):
		b, err := bd.d.DecodeBytes()
		return EngineHash(xxhash.Sum64(b)), err
	case msgpcode.IsString(c):
		s, err := bd.d.DecodeString()
		return EngineHash(xxhash.Sum64String(s)), err
	case c == msgpcode.Nil:
		return 0, errors.New("nil block hash")
	}
	v, err := bd.d.DecodeUint64()
	return EngineHash(v), err
}

func (bd *batchDecoder) tokens() ([]uint32, error) {
	n, err := bd.d.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	ts := make([]uint32, 0, min(n, bd.size))
	for range n {
		if bd.isNil() {
			return nil, errors.New("nil token id")
		}
		v, err := bd.d.DecodeInt64()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("token id out of range: %d", v)
		}
		ts = append(ts, uint32(v))
	}
	return ts, nil
}

// MediumTier maps an event's medium to a tier: "GPU" (or none) is HBM, "CPU"
// is CPU, "DISK" (any medium naming a disk) is Disk, and "SHARED", "REMOTE"
// or "LMCACHE" is Shared. ok is false for any other medium.
func MediumTier(medium string) (t Tier, ok bool) {
	switch m := strings.ToUpper(medium); {
	case m == "" || m == "GPU" || m == "HBM" || m == "CUDA" || m == "TPU":
		return HBM, true
	case m == "CPU":
		return CPU, true
	case strings.Contains(m, "DISK"):
		return Disk, true
	case m == "SHARED" || m == "REMOTE" || m == "LMCACHE":
		return Shared, true
	}
	return 0, false
}
