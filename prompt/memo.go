package prompt

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// A Memo remembers the chat bodies of recent turns so that the next turn
// of a conversation is read, rendered and hashed only past what it shares
// with the last one. An agent resends its whole history every turn, and on
// a long session nearly all of a body is the previous body again: parsing,
// tokenizing and hashing it anew is most of what the gateway spends on the
// turn.
//
// A turn's body is matched to an earlier one by the opening of its
// messages array (its first bytes: the start of the system prompt), then
// message by message by a running xxhash64 of the array up to each
// message's end, before any of it is decoded. The messages up to the last that matches
// are taken from the earlier turn, already decoded; parsing resumes after
// them. Everything outside the messages array (the model, the budgets,
// the tools) is parsed anew, in any order. A hash collision would only
// make routing see another prompt than the one forwarded, which the
// engine reads as sent.
//
// Only bodies of at least MinMemoBody bytes are remembered. The memo
// holds at most its byte budget of decoded text and hashes, evicting the
// least recently used. Text that several turns share (a conversation's
// history, or the system prompt of an agent's sessions) is held, and
// counted, once.
//
// A Memo is safe for concurrent use. Its zero value is not; use NewMemo.
type Memo struct {
	mu sync.Mutex
	// protects the fields below
	max, size int64
	min       int                     // bodies shorter than min are not remembered
	byOpening map[uint64][]*memoEntry // most recent first
	lru       lru.List[*memoEntry]    // most recent at the front

	hits, misses atomic.Uint64
}

// MinMemoBody is the smallest body a Memo remembers: below it a body is
// read at once and the memo would only cost.
const MinMemoBody = 16 << 10

// memoCandidates is how many turns of one opening the memo keeps: the
// sessions of one agent share their system prompt, hence their opening,
// and each must still find its own last turn. Looking them all up costs
// about one hash of the body, not one a candidate.
const memoCandidates = 32

// NewMemo returns a Memo holding at most maxBytes.
func NewMemo(maxBytes int64) *Memo {
	return &Memo{max: maxBytes, min: MinMemoBody, byOpening: make(map[uint64][]*memoEntry)}
}

// memoEntry is one remembered body. It never changes once published,
// except for chain, which the turn's dispatcher sets once it has hashed
// the prompt.
type memoEntry struct {
	opening uint64
	// ends[i] is the offset just past messages[i], counted from the
	// messages array's '['; sums[i] the xxhash64 of the array up to it.
	ends []int
	sums []uint64
	// msgs are the messages, their strings owned by the memo: in the
	// arenas of texts, texts[i] holding those of the messages from
	// texts[i].first to the next span's first.
	msgs  []Message
	texts []textSpan
	// size is what the memo counts for the entry besides its texts, which
	// it counts once however many entries share them: its tables and its
	// chain.
	size  int64
	elem  lru.Node // in Memo.lru; 0 once dropped
	chain atomic.Pointer[Chain]
}

// memoText is an arena of message text. The turn that decoded the
// messages owns it, and the later turns of the conversation that resume
// from them share it; the memo counts its bytes once, while any
// remembered entry holds it.
type memoText struct {
	bytes   int64
	holders int // remembered entries holding it; under Memo.mu
}

// textSpan is the arena of an entry's messages from first on.
type textSpan struct {
	first int
	text  *memoText
}

// maxTextSpans bounds the arenas one entry's messages are spread over:
// each turn that resumes from the last adds one for its new messages, and
// past this many the entry copies all its text into one of its own, so
// that a long session's entries do not each carry a span a turn.
const maxTextSpans = 8

// Chain is what the routing of a remembered turn computed from its
// prompt, kept for the next turn of its conversation: the render offsets
// of its messages and the KV-cache block hashes of its tokens.
type Chain struct {
	// Model is the prompt's model, which seeds the hash chain; Tools the
	// xxhash64 of its raw tools (ToolsKey), which render before the
	// messages.
	Model string
	Tools uint64
	// Ends[i] is the render offset just past message i.
	Ends []int
	// Blocks are the block hashes of the prompt's full blocks of
	// BlockBytes bytes of render each.
	Blocks     []uint64
	BlockBytes int
}

// Prior is what a Memo knew of a request: its first Messages messages are
// those of an earlier turn, whose Chain (nil until that turn's routing set
// it) says how they rendered and hashed. Remember records this request's
// own chain for the turn after it.
type Prior struct {
	// Messages is how many of the request's messages the earlier turn had.
	Messages int
	from     *memoEntry
	self     *memoEntry
	memo     *Memo
}

// Chain is the earlier turn's chain, or nil.
func (p *Prior) Chain() *Chain {
	if p == nil || p.from == nil {
		return nil
	}
	return p.from.chain.Load()
}

// Remember keeps c as this request's chain, for the next turn; only the
// first chain remembered counts. c must not change afterwards.
func (p *Prior) Remember(c *Chain) {
	if p == nil || p.self == nil || !p.self.chain.CompareAndSwap(nil, c) {
		return
	}
	n := int64(8*len(c.Ends) + 8*len(c.Blocks))
	m := p.memo
	m.mu.Lock()
	if p.self.elem != 0 {
		p.self.size += n
		m.size += n
	}
	m.mu.Unlock()
}

// ToolsKey is the xxhash64 a Chain keeps of a prompt's raw tools.
func ToolsKey(tools []byte) uint64 { return xxhash.Sum64(tools) }

// ParseChat is ParseChat, reading past the messages a remembered body
// shares with body and remembering body for the next turn. The Request's
// Prior is set when the memo has body (nil when it does not: a short or
// refused body).
func (m *Memo) ParseChat(body []byte) (*Request, error) { return m.ParseChatIn(body, nil) }

// ParseChatIn is ParseChat with the strings it decodes (those with
// escapes) in text's capacity as far as it goes: the Request aliases text
// as it aliases body, and text, like body, must not change while the
// Request is in use. A caller that recycles bodies' buffers lends one
// with each body, so that a body's decoded strings cost no allocation.
func (m *Memo) ParseChatIn(body, text []byte) (*Request, error) {
	if m == nil || len(body) < m.min {
		return parse(body, text, true)
	}
	p := parser{Decoder: jsonscan.Decoder{Data: body, Skims: true}, chat: true, r: new(Request), contentErr: -1, memo: m}
	p.UseText(text)
	if err := p.body(); err != nil {
		return nil, jsonError(err)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.track != nil && p.messagesSeen == 1 && len(p.msgs) >= 2 {
		p.r.Prior = m.remember(&p)
	}
	return p.r, nil
}

// memoTrack follows the messages array of a body as it is parsed, for
// Memo: the running hash of the body, each message's end and hash.
type memoTrack struct {
	base    int // the offset of the messages array's '['
	digest  xxhash.Digest
	hashed  int // body[base:hashed] is in digest
	ends    []int
	sums    []uint64
	opening uint64
	from    *memoEntry
	resumed int // messages taken from from
	// replaces is the remembered turn whose messages this body extends,
	// which it replaces once remembered.
	replaces *memoEntry
	// seen: the memo had a body with this opening, a turn or a probe.
	seen bool
}

// newMemoTrack follows a messages array at base. Its ends and sums are
// made by memoResume, or by the messages loop when nothing resumed.
func newMemoTrack(base int) *memoTrack {
	return &memoTrack{base: base, hashed: base, digest: *xxhash.New()}
}

// openingBytes is how much of a messages array keys the memo: the start
// of the system prompt, the same on every turn of a conversation, so that
// a body is matched before any of it is decoded.
const openingBytes = 512

// memoResume is called by the messages loop once it has entered the array
// at base: it looks for an earlier turn that shares the array's first
// messages and, when one does, takes them, decoded, and moves off past
// them. It returns how many it took.
func (p *parser) memoResume() int {
	t := p.track
	array := p.Data[t.base:]
	t.opening = xxhash.Sum64(array[:min(len(array), openingBytes)])
	from, k, digest, seen := p.memo.lookup(t.opening, array)
	t.seen = seen
	if from != nil && k == len(from.ends) {
		t.replaces = from
	}
	if k == 0 {
		return 0
	}
	t.from, t.resumed, t.digest = from, k, digest
	// The slices are sized for the k messages taken and a guess at the
	// rest of the array, not at all of it: an agent's next turn adds a
	// message or two to a long history.
	n := k + messagesGuess(len(array)-from.ends[k-1])
	p.msgs = slices.Grow(p.msgs, n)
	p.msgs = append(p.msgs, from.msgs[:k]...)
	t.ends = append(make([]int, 0, n), from.ends[:k]...)
	t.sums = append(make([]uint64, 0, n), from.sums[:k]...)
	p.Off = t.base + from.ends[k-1]
	t.hashed = p.Off
	return k
}

// memoStep is called by the messages loop after each message it parsed,
// which ends at p.Off: it hashes the array up to there.
func (p *parser) memoStep() {
	t := p.track
	t.digest.Write(p.Data[t.hashed:p.Off])
	t.hashed = p.Off
	t.ends = append(t.ends, p.Off-t.base)
	t.sums = append(t.sums, t.digest.Sum64())
}

// lookup finds, among the turns with opening, the one that shares the
// most messages with array (a body from its messages array's '['). It
// returns it, how many messages it shares, and the digest of array up to
// their end; and whether any body with this opening, probes included, was
// remembered.
func (m *Memo) lookup(opening uint64, array []byte) (_ *memoEntry, _ int, _ xxhash.Digest, seen bool) {
	m.mu.Lock()
	cands := m.byOpening[opening]
	var buf [memoCandidates]*memoEntry
	cands = append(buf[:0], cands...)
	m.mu.Unlock()

	// The array is hashed once, whatever the candidates: a candidate can
	// share more than the best so far only if it has the best's messages
	// up to where the body left the best, and then its check goes on from
	// there.
	var best *memoEntry
	var bestDigest xxhash.Digest
	bestK := 0
	for _, e := range cands {
		seen = true
		if e.probe() {
			continue
		}
		k, dig := 0, *xxhash.New()
		if best != nil {
			last := bestK - 1
			if len(e.ends) <= bestK || e.ends[last] != best.ends[last] || e.sums[last] != best.sums[last] {
				continue
			}
			k, dig = bestK, bestDigest
		}
		at := 0
		if k > 0 {
			at = e.ends[k-1]
		}
		for k < len(e.ends) && e.ends[k] <= len(array) {
			next := dig
			next.Write(array[at:e.ends[k]])
			if next.Sum64() != e.sums[k] {
				break
			}
			dig, at = next, e.ends[k]
			k++
		}
		if k > bestK {
			best, bestK, bestDigest = e, k, dig
		}
	}
	if best == nil {
		m.misses.Add(1)
	} else {
		m.hits.Add(1)
	}
	return best, bestK, bestDigest, seen
}

// remember publishes the body p parsed. The strings of its own messages
// are copied out of the body, which the caller reuses; those taken from an
// earlier turn are shared with it.
func (m *Memo) remember(p *parser) *Prior {
	t := p.track
	e := &memoEntry{opening: t.opening, ends: t.ends, sums: t.sums}
	if !t.seen {
		// The first body with its opening may be the only one: a probe
		// marks it, costing no copy, and the next turn is remembered whole.
		e.size = int64(len(e.ends)) * 16
		m.publish(e, t)
		return nil
	}
	e.msgs = make([]Message, len(p.msgs))
	copy(e.msgs, p.msgs)
	start := t.resumed // the first message whose strings alias the body
	if start > 0 {
		e.texts = make([]textSpan, 0, min(len(t.from.texts), maxTextSpans)+1)
		// The shared messages' arenas, as far as they go.
		for _, sp := range t.from.texts {
			if sp.first >= start {
				break
			}
			e.texts = append(e.texts, sp)
		}
		if len(e.texts) >= maxTextSpans {
			e.texts, start = e.texts[:0], 0
		}
	}
	n, ncalls := 0, 0
	for i := start; i < len(e.msgs); i++ {
		n += messageBytes(&e.msgs[i])
		ncalls += len(e.msgs[i].ToolCalls)
	}
	arena := make([]byte, 0, n)
	var calls []ToolCall
	if ncalls > 0 {
		calls = make([]ToolCall, 0, ncalls)
	}
	for i := start; i < len(e.msgs); i++ {
		msg := &e.msgs[i]
		msg.Role, arena = intern(arena, msg.Role)
		msg.Content, arena = intern(arena, msg.Content)
		if len(msg.ToolCalls) > 0 {
			at := len(calls)
			for _, tc := range msg.ToolCalls {
				var c ToolCall
				c.Name, arena = intern(arena, tc.Name)
				c.Arguments, arena = intern(arena, tc.Arguments)
				calls = append(calls, c)
			}
			msg.ToolCalls = calls[at:len(calls):len(calls)]
		}
	}
	// The request reads the memo's copies from now on: they outlive the
	// body.
	copy(p.msgs, e.msgs)
	if start < len(e.msgs) {
		// A memoText of its own, not a field of e: the later turns that
		// share the arena must not keep the rest of e alive.
		own := &memoText{bytes: int64(cap(arena)) + int64(cap(calls))*int64(unsafe.Sizeof(ToolCall{}))}
		e.texts = append(e.texts, textSpan{first: start, text: own})
	}
	e.size = int64(len(e.ends))*(16+int64(unsafe.Sizeof(Message{}))) + int64(cap(e.texts))*int64(unsafe.Sizeof(textSpan{}))

	m.publish(e, t)
	return &Prior{Messages: t.resumed, from: t.from, self: e, memo: m}
}

// publish adds e, replacing what it supersedes: the turn it extends, and
// the probes of its opening once it is a turn.
func (m *Memo) publish(e *memoEntry, t *memoTrack) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cands := m.byOpening[e.opening]
	// The earlier turn this one extends is now this one's prefix: it
	// goes, as does any older entry past the candidate bound.
	kept := make([]*memoEntry, 0, min(len(cands)+1, memoCandidates))
	kept = append(kept, e)
	for _, c := range cands {
		if c == t.replaces || (c.probe() && !e.probe()) || len(kept) == memoCandidates {
			m.drop(c)
			continue
		}
		kept = append(kept, c)
	}
	m.byOpening[e.opening] = kept
	e.elem = m.lru.PushFront(e)
	m.size += e.size
	for _, sp := range e.texts {
		if sp.text.holders == 0 {
			m.size += sp.text.bytes
		}
		sp.text.holders++
	}
	for m.size > m.max && m.lru.Len() > 1 {
		old := *m.lru.Value(m.lru.Back())
		m.drop(old)
		list := m.byOpening[old.opening]
		for i, c := range list {
			if c == old {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(m.byOpening, old.opening)
		} else {
			m.byOpening[old.opening] = list
		}
	}
}

// probe reports whether e only marks an opening, without its messages.
func (e *memoEntry) probe() bool { return e.msgs == nil }

// drop removes e from the LRU; the caller fixes byOpening.
func (m *Memo) drop(e *memoEntry) {
	if e.elem != 0 {
		m.lru.Remove(e.elem)
		e.elem = 0
		m.size -= e.size
		for _, sp := range e.texts {
			if sp.text.holders--; sp.text.holders == 0 {
				m.size -= sp.text.bytes
			}
		}
	}
}

func messageBytes(m *Message) int {
	n := len(m.Role) + len(m.Content)
	for _, tc := range m.ToolCalls {
		n += len(tc.Name) + len(tc.Arguments)
	}
	return n
}

// intern copies s into arena, which has room for it.
func intern(arena []byte, s string) (string, []byte) {
	if s == "" {
		return "", arena
	}
	at := len(arena)
	arena = append(arena, s...)
	return unsafe.String(&arena[at], len(s)), arena
}

// MemoStats is what a Memo holds and how it has done.
type MemoStats struct {
	Bytes, Entries int64
	Hits, Misses   uint64
}

// Stats reports the memo's size and its lookups so far.
func (m *Memo) Stats() MemoStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoStats{Bytes: m.size, Entries: int64(m.lru.Len()), Hits: m.hits.Load(), Misses: m.misses.Load()}
}
