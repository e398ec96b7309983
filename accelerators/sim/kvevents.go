package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// KV event tags, the class names vLLM's msgspec structs carry as tag.
const (
	EventBlockStored      = "BlockStored"
	EventBlockRemoved     = "BlockRemoved"
	EventAllBlocksCleared = "AllBlocksCleared"
)

// eventHWM bounds the events queued for slow subscribers; past it, batches
// are dropped and subscribers see a gap in sequence numbers, as with vLLM.
const eventHWM = 10000

type eventKind uint8

const (
	evStored eventKind = iota
	evRemoved
	evCleared
)

// kvEvent is one event of a step's batch. Its hashes and tokens are ranges
// of the log's shared slices, so recording allocates nothing once warm.
type kvEvent struct {
	kind           eventKind
	medium         string
	parent         uint64
	hasParent      bool
	hashLo, hashHi int
	tokLo, tokHi   int
	// loraID and loraName are the adapter of stored blocks; 0 and "" for
	// the base model.
	loraID   int64
	loraName string
}

// eventLog collects the KV events of one engine step. A nil log records
// nothing, which is how an engine without a publisher skips the work.
type eventLog struct {
	blockSize int
	events    []kvEvent
	hashes    []uint64
	tokens    []uint32
}

func (l *eventLog) empty() bool { return l == nil || len(l.events) == 0 }

func (l *eventLog) reset() {
	l.events, l.hashes, l.tokens = l.events[:0], l.hashes[:0], l.tokens[:0]
}

// stored records a block stored in HBM after parent.
func (l *eventLog) stored(hash, parent uint64, hasParent bool, tokens []uint32) {
	l.storedIn(hash, parent, hasParent, tokens, MediumGPU)
}

// storedLoRA is stored for a block computed with adapter name (id).
func (l *eventLog) storedLoRA(hash, parent uint64, hasParent bool, tokens []uint32, id int64, name string) {
	if l == nil {
		return
	}
	n := len(l.events)
	l.storedIn(hash, parent, hasParent, tokens, MediumGPU)
	if len(l.events) > n {
		l.events[n].loraID, l.events[n].loraName = id, name
	}
}

// storedIn records a block stored in medium after parent. Consecutive
// blocks of one chain and medium merge into one BlockStored, as vLLM
// reports a request's blocks.
func (l *eventLog) storedIn(hash, parent uint64, hasParent bool, tokens []uint32, medium string) {
	if l == nil {
		return
	}
	if n := len(l.events); n > 0 {
		last := &l.events[n-1]
		if last.kind == evStored && last.medium == medium && last.hashHi == len(l.hashes) && last.tokHi == len(l.tokens) && last.loraID == 0 &&
			hasParent && l.hashes[last.hashHi-1] == parent {
			l.hashes = append(l.hashes, hash)
			l.tokens = append(l.tokens, tokens...)
			last.hashHi, last.tokHi = len(l.hashes), len(l.tokens)
			return
		}
	}
	l.events = append(l.events, kvEvent{
		kind: evStored, medium: medium, parent: parent, hasParent: hasParent,
		hashLo: len(l.hashes), hashHi: len(l.hashes) + 1,
		tokLo: len(l.tokens), tokHi: len(l.tokens) + len(tokens),
	})
	l.hashes = append(l.hashes, hash)
	l.tokens = append(l.tokens, tokens...)
}

// removed records a block evicted from HBM.
func (l *eventLog) removed(hash uint64) { l.removedFrom(hash, MediumGPU) }

// removedFrom records a block evicted from medium, merged into a
// preceding BlockRemoved of the same medium.
func (l *eventLog) removedFrom(hash uint64, medium string) {
	if l == nil {
		return
	}
	if n := len(l.events); n > 0 {
		last := &l.events[n-1]
		if last.kind == evRemoved && last.medium == medium && last.hashHi == len(l.hashes) {
			l.hashes = append(l.hashes, hash)
			last.hashHi++
			return
		}
	}
	l.events = append(l.events, kvEvent{kind: evRemoved, medium: medium, hashLo: len(l.hashes), hashHi: len(l.hashes) + 1})
	l.hashes = append(l.hashes, hash)
}

func (l *eventLog) cleared() {
	if l != nil {
		l.events = append(l.events, kvEvent{kind: evCleared})
	}
}

// encode writes the step's events as vLLM's KVEventBatch: the msgpack
// array [ts, [event...], data_parallel_rank], each event an array led by
// its tag:
//
//	["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil, medium, lora_name|nil]
//	["BlockRemoved", block_hashes, medium]
//	["AllBlocksCleared"]
func (l *eventLog) encode(enc *msgpack.Encoder, ts float64) error {
	var err error
	try := func(e error) {
		if err == nil {
			err = e
		}
	}
	try(enc.EncodeArrayLen(3))
	try(enc.EncodeFloat64(ts))
	try(enc.EncodeArrayLen(len(l.events)))
	for _, ev := range l.events {
		switch ev.kind {
		case evStored:
			try(enc.EncodeArrayLen(8))
			try(enc.EncodeString(EventBlockStored))
			l.encodeHashes(enc, ev, try)
			if ev.hasParent {
				try(enc.EncodeUint64(ev.parent))
			} else {
				try(enc.EncodeNil())
			}
			try(enc.EncodeArrayLen(ev.tokHi - ev.tokLo))
			for _, t := range l.tokens[ev.tokLo:ev.tokHi] {
				try(enc.EncodeUint32(t))
			}
			try(enc.EncodeInt(int64(l.blockSize)))
			if ev.loraID != 0 {
				try(enc.EncodeInt(ev.loraID))
			} else {
				try(enc.EncodeNil())
			}
			try(enc.EncodeString(ev.medium))
			if ev.loraName != "" {
				try(enc.EncodeString(ev.loraName))
			} else {
				try(enc.EncodeNil())
			}
		case evRemoved:
			try(enc.EncodeArrayLen(3))
			try(enc.EncodeString(EventBlockRemoved))
			l.encodeHashes(enc, ev, try)
			try(enc.EncodeString(ev.medium))
		case evCleared:
			try(enc.EncodeArrayLen(1))
			try(enc.EncodeString(EventAllBlocksCleared))
		}
	}
	try(enc.EncodeNil()) // data_parallel_rank
	return err
}

func (l *eventLog) encodeHashes(enc *msgpack.Encoder, ev kvEvent, try func(error)) {
	try(enc.EncodeArrayLen(ev.hashHi - ev.hashLo))
	for _, h := range l.hashes[ev.hashLo:ev.hashHi] {
		try(enc.EncodeUint64(h))
	}
}

// kvPublisher is the engine's ZMQ PUB socket for KV events. It is used by
// the engine loop only; the socket queues and sends on its own goroutines.
type kvPublisher struct {
	sock  zmq4.Socket
	topic []byte
	seq   uint64
	buf   bytes.Buffer
	enc   *msgpack.Encoder
}

func newKVPublisher(addr, topic string) (*kvPublisher, error) {
	sock := zmq4.NewPub(context.Background())
	if err := sock.SetOption(zmq4.OptionHWM, eventHWM); err != nil {
		sock.Close()
		return nil, fmt.Errorf("sim: kv events: %w", err)
	}
	if err := sock.Listen(addr); err != nil {
		sock.Close()
		return nil, fmt.Errorf("sim: kv events: %w", err)
	}
	p := &kvPublisher{sock: sock, topic: []byte(topic)}
	p.enc = msgpack.NewEncoder(&p.buf)
	return p, nil
}

// addr is the bound endpoint, with the real port when 0 was asked for.
func (p *kvPublisher) addr() string {
	a := p.sock.Addr()
	if a == nil {
		return ""
	}
	return a.Network() + "://" + strings.TrimPrefix(a.String(), "tcp://")
}

// publish sends one step's batch as [topic, seq (u64 big-endian), payload].
func (p *kvPublisher) publish(l *eventLog, ts float64) error {
	p.buf.Reset()
	if err := l.encode(p.enc, ts); err != nil {
		return fmt.Errorf("sim: kv events: encode: %w", err)
	}
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, p.seq)
	p.seq++
	payload := bytes.Clone(p.buf.Bytes())
	return p.sock.SendMulti(zmq4.NewMsgFrom(p.topic, seq, payload))
}

// close closes the socket. A subscriber's connection that its gateway
// closed first is no failure of the publisher's.
func (p *kvPublisher) close() error {
	if err := p.sock.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
