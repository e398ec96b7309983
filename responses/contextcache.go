package responses

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/turnpike-gateway/turnpike/internal/lru"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// DefaultContextCacheBytes is Config.ContextCacheBytes's default: about
// 150 agent sessions of 100k tokens each.
const DefaultContextCacheBytes = 64 << 20

// contextHeadroom is the room a turn's copy of a cached context leaves
// after its input for the response's output, so that the next entry is
// made in place.
const contextHeadroom = 8

// itemSize and partSize are the memory of a wire.Item besides its strings
// and parts, and of a part besides its strings.
const (
	itemSize = int64(unsafe.Sizeof(wire.Item{}))
	partSize = int64(unsafe.Sizeof(wire.ContentPart{}))
)

// conversationPrefix starts the id of a conversation, and so the name of
// its chain.
const conversationPrefix = "conv_"

// contextCache keeps the decoded contexts of the responses that ended
// last on this gateway, each under its response's id, so that the next
// turn of a chain copies its context and decodes nothing but what it adds:
// a turn's cost stays flat in the length of its history instead of one
// decode of every stored item.
//
// An entry is exactly what StateStore.LoadContext returns for its
// response's manifest: the manifest it was made for is kept with it and
// compared with the record's, which the turn reads anyway (a response
// deleted is not found there, so not continued from here), and the items
// a response adds go through the stored form (encodeItem, decodeStoredItem)
// before they join the entry. Items in a response chain are never
// rewritten, only collected with the records that read them; a context
// that reads a conversation's chain, whose items can be deleted, is not
// cached.
//
// A turn takes its chain's entry out of the cache, items and rendered
// messages, no copy and no decoding, grows it in place by what it adds and
// puts it back under its own response's id once that is stored, so a
// turn's cost does not grow with its history. A second turn from the same
// response meanwhile (a fork, a retry of a failed turn) loads from the
// store, and caches its own context again. Memory is
// bounded by Config.ContextCacheBytes, the least recently used entries going
// first. A contextCache is safe for concurrent use; a nil one caches
// nothing.
type contextCache struct {
	// hits counts the contexts taken from the cache.
	hits atomic.Uint64
	mu   struct {
		sync.Mutex
		// protects the fields below
		entries *lru.Cache[string, *cachedContext]
	}
}

// cachedContext is a response's whole context, decoded: the items of its
// manifest segs, whose strings and parts take about strs bytes.
type cachedContext struct {
	segs  []Segment
	items []wire.Item
	strs  int64
	// body is the engine body's messages rendered from the first items,
	// for the next turn to copy rather than encode again (renderChatFrom);
	// nil when there is none.
	body *renderedPrefix
}

// cost is about the memory e holds.
func (e *cachedContext) cost() int64 {
	n := int64(cap(e.items))*itemSize + e.strs
	if e.body != nil {
		n += int64(max(e.body.held, cap(e.body.buf)) + len(e.body.instructions))
	}
	return n
}

// newContextCache returns a cache of at most maxBytes; nil, which caches
// nothing, when maxBytes is not positive.
func newContextCache(maxBytes int64) *contextCache {
	if maxBytes <= 0 {
		return nil
	}
	c := &contextCache{}
	c.mu.entries = lru.NewCache(maxBytes, func(_ string, e *cachedContext) int64 { return e.cost() })
	return c
}

// take takes the context of response id out of the cache when it is
// cached for the manifest segs: its items, with room for extra more, the
// bytes of their strings and parts, and its rendered messages (nil for
// none); false when it is not cached.
func (c *contextCache) take(id string, segs []Segment, extra int) ([]wire.Item, int64, *renderedPrefix, bool) {
	if c == nil {
		return nil, 0, nil, false
	}
	c.mu.Lock()
	e, ok := c.mu.entries.Get(id)
	ok = ok && slices.Equal(e.segs, segs)
	if ok {
		c.mu.entries.Remove(id)
	}
	c.mu.Unlock()
	if !ok {
		return nil, 0, nil, false
	}
	c.hits.Add(1)
	// Grown by about a quarter when out of room, as append would, so a
	// chain's next turns find room in place.
	items := e.items
	if cap(items)-len(items) < extra {
		items = slices.Grow(items, extra+len(items)/4)
	}
	return items, e.strs, e.body, true
}

// put caches the context of rec, a response just stored with the items
// added: base, the items of the context it continued (their strings and
// parts baseStrs bytes), then added as they were stored, and body, the
// messages rendered from its first items (nil for none). base and body
// become the entry's, base's capacity reused; the caller gives them up.
// The entry of prev, the response rec continued, goes.
func (c *contextCache) put(prev string, rec *Record, base []wire.Item, baseStrs int64, added []wire.Item, body *renderedPrefix) {
	if c == nil || rec.Conversation != "" {
		return
	}
	for _, sg := range rec.Context {
		if strings.HasPrefix(sg.Chain, conversationPrefix) {
			return
		}
	}
	items, strs := base, baseStrs
	var b []byte
	for i := range added {
		b = encodeItem(b[:0], &added[i])
		it, err := decodeStoredItem(b)
		if err != nil {
			// Not what the store holds: cache nothing.
			c.drop(prev)
			return
		}
		items = append(items, it)
		strs += int64(len(b)) + int64(len(it.Content)+len(it.Summary))*partSize
	}
	e := &cachedContext{segs: slices.Clone(rec.Context), items: items, strs: strs, body: body}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev != "" {
		c.mu.entries.Remove(prev)
	}
	c.mu.entries.Add(rec.Response.ID, e)
}

// drop forgets the entry of response id.
func (c *contextCache) drop(id string) {
	if c == nil || id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.entries.Remove(id)
}

// contextStrings is about the bytes of the strings and parts of items as
// StateStore.LoadContext returns them.
func contextStrings(items []wire.Item) int64 {
	var n int64
	for i := range items {
		it := &items[i]
		n += int64(len(it.Type) + len(it.ID) + len(it.Status) + len(it.Role) + len(it.CallID) + len(it.Name) +
			len(it.Arguments) + len(it.Output) + len(it.Namespace) + len(it.EncryptedContent) +
			len(it.ServerLabel) + len(it.Error) + len(it.ApprovalRequestID))
		for _, p := range it.Content {
			n += int64(len(p.Type)+len(p.Text)) + partSize
		}
		for _, p := range it.Summary {
			n += int64(len(p.Type)+len(p.Text)) + partSize
		}
	}
	return n
}

// loadChain reads the context of t.base, the manifest of the response t
// continues, from the context cache or else the store, with room for in
// more items and the output after them, and notes it in t.
func (s *Service) loadChain(ctx context.Context, t *turn, in int) ([]wire.Item, error) {
	items, strs, body, ok := s.contexts.take(t.req.PreviousResponseID, t.base, in+contextHeadroom)
	t.prefix = body
	if !ok {
		var err error
		if items, err = s.store.LoadContext(ctx, t.base); err != nil {
			return nil, err
		}
		strs = contextStrings(items)
	}
	t.nbase, t.baseStrs = len(items), strs
	return items, nil
}

// rememberContext caches the context of t's response, just stored with
// the items added, when it continued one from the store: a chain is
// cached from its second turn on, for a response that starts one may
// never be continued (and its next turn loads little).
func (s *Service) rememberContext(t *turn, added []wire.Item) {
	if !t.continued() {
		return
	}
	// The turn's own copy of the context it continued.
	base := t.history[:t.nbase]
	body := t.next
	if body == nil {
		body = t.prefix
	}
	s.contexts.put(t.req.PreviousResponseID, t.rec, base, t.baseStrs, added, body)
}

// render renders items, t's context, into t's engine request. When items
// are t's whole history, the messages of the context t continues are
// copied from the prefix the context cache kept of them rather than
// encoded again, and the messages of this rendering are kept for the
// next turn.
func (t *turn) render(items []wire.Item) error {
	whole := len(items) > 0 && len(items) == len(t.history) && &items[0] == &t.history[0]
	var pre *renderedPrefix
	if whole {
		pre, t.prefix = t.prefix, nil
	}
	body, p, next, err := renderChatFrom(t.req, items, pre, whole && t.continued())
	if err != nil {
		return fmt.Errorf("responses: rendering the engine request: %w", err)
	}
	t.body, t.prompt = body, p
	if next != nil {
		t.next = next
	}
	return nil
}

// continued reports whether t continues a response's context read from
// the store or the context cache (not a conversation, not a WebSocket
// connection's own), so that its history is that context and its input,
// as its response's entry in the cache will be.
func (t *turn) continued() bool {
	return t.base != nil && t.conversation == "" && len(t.history)-len(t.input) == t.nbase
}
