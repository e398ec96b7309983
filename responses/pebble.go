package responses

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// DefaultTTL is how long state is kept after its last write.
const DefaultTTL = 30 * 24 * time.Hour

// Key prefixes; doc.go describes the layout.
const (
	pfxResp  = "rs/r/"
	pfxItem  = "rs/i/"
	pfxHead  = "rs/h/"
	pfxLoc   = "rs/x/"
	pfxEvent = "rs/e/"
	pfxJob   = "rs/q/"
	pfxTTL   = "rs/t/"
	pfxMeta  = "m/"
)

// TTL index kinds.
const (
	ttlResponse = 'r'
	ttlChain    = 'h'
)

// PebbleOptions configure a PebbleStore.
type PebbleOptions struct {
	// TTL is how long a response, and a chain or conversation of items,
	// is kept after its last write. Default DefaultTTL (30 days).
	TTL time.Duration
	// Logger receives Pebble's own log lines; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests move it to expire state.
	Now func() time.Time
}

// EnsureDefaults fills the zero fields.
func (o *PebbleOptions) EnsureDefaults() {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// PebbleStore is the embedded Store: one Pebble database in a directory.
//
// Writers do not share a lock: each builds its own batch and commits it,
// and Pebble's commit pipeline groups concurrent synced batches into one
// WAL sync. Only appends to the same chain are serialised, by a striped
// lock on the chain id, because an append reads the chain's head.
//
// Every operation holds mu shared while it uses db, and Close holds it
// exclusively: Close waits for the operations in flight, and an operation
// after Close answers ErrClosed instead of using a closed database (which
// panics). Operations never nest, so no one takes mu twice; mu comes
// before the chain stripes.
type PebbleStore struct {
	db   *pebble.DB
	opts PebbleOptions
	mu   struct {
		sync.RWMutex
		// protects the field below, and db's life
		closed bool
	}
	// chains serialises read-modify-write of chain heads, by stripe.
	chains [256]sync.Mutex
}

// OpenPebble opens (creating if needed) the database in dir.
func OpenPebble(dir string, opts PebbleOptions) (*PebbleStore, error) {
	opts.EnsureDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("responses: %w", err)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{opts.Logger}})
	if err != nil {
		return nil, fmt.Errorf("responses: opening state store in %s: %w", dir, err)
	}
	return &PebbleStore{db: db, opts: opts}, nil
}

// Close waits for the operations in flight and closes the database.
// Operations after Close answer ErrClosed.
func (s *PebbleStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	return s.db.Close()
}

// enter starts an operation: it holds mu shared until leave, so Close
// cannot close the database under it. On error, nothing is held.
func (s *PebbleStore) enter(ctx context.Context) error {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

// leave ends an operation begun by enter.
func (s *PebbleStore) leave() { s.mu.RUnlock() }

func (s *PebbleStore) expiry() int64 { return s.opts.Now().Add(s.opts.TTL).Unix() }

// head is a chain's head: where its next item goes, who owns it, and, for
// a conversation, the conversation object itself.
type head struct {
	Tenant       string        `json:"tenant"`
	Next         uint32        `json:"next"`
	ExpiresAt    int64         `json:"expires_at"`
	Conversation *Conversation `json:"conversation,omitempty"`
}

// locator says where an item is stored.
type locator struct {
	Tenant string `json:"t"`
	Chain  string `json:"c"`
	Seq    uint32 `json:"s"`
}

func key(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n+5)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// locKey is the key of tenant's locator of item id. Item ids are the
// client's to choose, so each tenant has locators of its own; tenant
// names hold no '/' (admin allows letters, digits, '-', '_', '.').
func locKey(tenant, id string) []byte { return key(pfxLoc, tenant, "/", id) }

func itemKey(chain string, seq uint32) []byte {
	b := make([]byte, 0, len(pfxItem)+len(chain)+5)
	b = append(b, pfxItem...)
	b = append(b, chain...)
	b = append(b, '/')
	return binary.BigEndian.AppendUint32(b, seq)
}

func eventKey(id string, seq uint32) []byte {
	b := key(pfxEvent, id, "/")
	return binary.BigEndian.AppendUint32(b, seq)
}

func ttlKey(at int64, kind byte, id string) []byte {
	b := key(pfxTTL)
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = append(b, kind)
	return append(b, id...)
}

// prefixEnd is the first key after every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (s *PebbleStore) getJSON(k []byte, v any) error {
	b, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("responses: reading %q: %w", k, err)
	}
	defer closer.Close()
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("responses: decoding %q: %w", k, err)
	}
	return nil
}

func setJSON(b *pebble.Batch, k []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("responses: encoding %q: %w", k, err)
	}
	return b.Set(k, buf, nil)
}

// lockChains locks the stripes of chains in stripe order, so that two
// writers locking overlapping sets cannot deadlock.
func (s *PebbleStore) lockChains(chains ...string) (unlock func()) {
	var buf [4]int
	stripes := buf[:0]
	for _, c := range chains {
		h := fnv.New32a()
		h.Write([]byte(c))
		stripes = append(stripes, int(h.Sum32()%uint32(len(s.chains))))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, i := range stripes {
		s.chains[i].Lock()
	}
	return func() {
		for _, i := range stripes {
			s.chains[i].Unlock()
		}
	}
}

func (s *PebbleStore) readHead(chain string) (*head, error) {
	var h head
	if err := s.getJSON(key(pfxHead, chain), &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// writeHeadLocked writes h with a fresh expiry and moves its TTL entry.
func (s *PebbleStore) writeHeadLocked(b *pebble.Batch, chain string, h *head) error {
	exp := s.expiry()
	if h.ExpiresAt != 0 && h.ExpiresAt != exp {
		b.Delete(ttlKey(h.ExpiresAt, ttlChain, chain), nil)
	}
	h.ExpiresAt = exp
	b.Set(ttlKey(exp, ttlChain, chain), nil, nil)
	return setJSON(b, key(pfxHead, chain), h)
}

// appendLocked writes items at seq from.. of chain, with their locators.
func appendLocked(b *pebble.Batch, tenant, chain string, from uint32, items []Item) error {
	for i := range items {
		seq := from + uint32(i)
		if err := b.Set(itemKey(chain, seq), encodeItem(nil, &items[i]), nil); err != nil {
			return err
		}
		if err := setJSON(b, locKey(tenant, items[i].ID), locator{Tenant: tenant, Chain: chain, Seq: seq}); err != nil {
			return err
		}
	}
	return nil
}

func (s *PebbleStore) writeRecord(b *pebble.Batch, rec *Record) error {
	exp := s.expiry()
	if rec.ExpiresAt != 0 && rec.ExpiresAt != exp {
		b.Delete(ttlKey(rec.ExpiresAt, ttlResponse, rec.Response.ID), nil)
	}
	rec.ExpiresAt = exp
	b.Set(ttlKey(exp, ttlResponse, rec.Response.ID), nil, nil)
	if rec.Job != nil {
		b.Set(key(pfxJob, rec.Response.ID), nil, nil)
	} else {
		b.Delete(key(pfxJob, rec.Response.ID), nil)
	}
	return setJSON(b, key(pfxResp, rec.Response.ID), rec)
}

func commit(b *pebble.Batch, opts *pebble.WriteOptions) error {
	defer b.Close()
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("responses: commit: %w", err)
	}
	return nil
}

// GetResponse implements Store.
func (s *PebbleStore) GetResponse(ctx context.Context, tenant, id string) (*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	return s.readRecord(tenant, id)
}

// readRecord reads tenant's record of response id.
func (s *PebbleStore) readRecord(tenant, id string) (*Record, error) {
	var rec Record
	if err := s.getJSON(key(pfxResp, id), &rec); err != nil {
		return nil, err
	}
	if rec.Tenant != tenant {
		return nil, ErrNotFound
	}
	return &rec, nil
}

// PutResponse implements Store.
func (s *PebbleStore) PutResponse(ctx context.Context, rec *Record, sync bool) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	if err := s.writeRecord(b, rec); err != nil {
		b.Close()
		return err
	}
	if sync {
		return commit(b, pebble.Sync)
	}
	return commit(b, pebble.NoSync)
}

// EndResponse implements Store.
func (s *PebbleStore) EndResponse(ctx context.Context, rec *Record, base []Segment, items []Item, final *StreamEvent) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	id := rec.Response.ID
	n := uint32(len(items))
	chains := []string{id}
	if rec.Conversation != "" {
		chains = append(chains, rec.Conversation)
	}
	for _, sg := range base {
		chains = append(chains, sg.Chain)
	}
	unlock := s.lockChains(chains...)
	defer unlock()

	b := s.db.NewBatch()
	var chain string
	var h *head
	var err error
	switch {
	case rec.Conversation != "":
		chain = rec.Conversation
		if h, err = s.readHead(chain); err != nil || h.Tenant != rec.Tenant || h.Conversation == nil {
			b.Close()
			return fmt.Errorf("%w: conversation %s", ErrNotFound, chain)
		}
		rec.Context = []Segment{{Chain: chain, From: 0, To: h.Next + n}}
	case len(base) > 0:
		last := base[len(base)-1]
		h, err = s.readHead(last.Chain)
		if err == nil && h.Next == last.To && h.Conversation == nil {
			// The parent is the chain's tip: extend the chain in place.
			chain = last.Chain
			rec.Context = append(slices.Clone(base[:len(base)-1]), Segment{Chain: chain, From: last.From, To: last.To + n})
		} else {
			// A fork (the parent already has a child) or a turn after a
			// conversation response: start a segment of our own.
			chain, h = id, &head{Tenant: rec.Tenant}
			rec.Context = append(slices.Clone(base), Segment{Chain: chain, From: 0, To: n})
		}
		// Keep every chain this context reads alive as long as it.
		for _, sg := range base {
			if sg.Chain == chain {
				continue
			}
			if oh, err := s.readHead(sg.Chain); err == nil {
				if err := s.writeHeadLocked(b, sg.Chain, oh); err != nil {
					b.Close()
					return err
				}
			}
		}
	default:
		chain, h = id, &head{Tenant: rec.Tenant}
		rec.Context = []Segment{{Chain: chain, From: 0, To: n}}
	}
	from := h.Next
	if err := appendLocked(b, rec.Tenant, chain, from, items); err != nil {
		b.Close()
		return err
	}
	h.Next = from + n
	if err := s.writeHeadLocked(b, chain, h); err != nil {
		b.Close()
		return err
	}
	rec.Own = Segment{Chain: chain, From: from, To: from + n}
	rec.Input, rec.Job = nil, nil
	if err := s.writeRecord(b, rec); err != nil {
		b.Close()
		return err
	}
	if final != nil {
		b.Set(eventKey(id, uint32(final.Seq)), final.Data, nil)
	}
	return commit(b, pebble.Sync)
}

// DeleteResponse implements Store.
func (s *PebbleStore) DeleteResponse(ctx context.Context, tenant, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	rec, err := s.readRecord(tenant, id)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	b.Delete(key(pfxResp, id), nil)
	b.Delete(key(pfxJob, id), nil)
	b.Delete(ttlKey(rec.ExpiresAt, ttlResponse, id), nil)
	p := key(pfxEvent, id, "/")
	b.DeleteRange(p, prefixEnd(p), nil)
	return commit(b, pebble.Sync)
}

// LoadContext implements Store.
func (s *PebbleStore) LoadContext(ctx context.Context, segs []Segment) ([]Item, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var n int
	for _, sg := range segs {
		n += int(sg.To - sg.From)
	}
	items := make([]Item, 0, n)
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("responses: %w", err)
	}
	defer it.Close()
	for _, sg := range segs {
		it.SetBounds(itemKey(sg.Chain, sg.From), itemKey(sg.Chain, sg.To))
		for ok := it.First(); ok; ok = it.Next() {
			item, err := decodeStoredItem(it.Value())
			if err != nil {
				return nil, fmt.Errorf("responses: item %q: %w", it.Key(), err)
			}
			items = append(items, item)
		}
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("responses: %w", err)
		}
	}
	return items, nil
}

// ListItems implements Store.
func (s *PebbleStore) ListItems(ctx context.Context, tenant string, seg Segment, opts ListOptions) ([]Item, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	lo, hi := seg.From, seg.To
	if opts.After != "" {
		var loc locator
		if err := s.getJSON(locKey(tenant, opts.After), &loc); err != nil || loc.Tenant != tenant || loc.Chain != seg.Chain || loc.Seq < seg.From || loc.Seq >= seg.To {
			return nil, false, invalidf("after", "invalid_value", "Invalid 'after': no item with id '%s' in this list.", opts.After)
		}
		if opts.Order == "asc" {
			lo = loc.Seq + 1
		} else {
			hi = loc.Seq
		}
	}
	if lo >= hi {
		return []Item{}, false, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: itemKey(seg.Chain, lo), UpperBound: itemKey(seg.Chain, hi)})
	if err != nil {
		return nil, false, fmt.Errorf("responses: %w", err)
	}
	defer it.Close()
	items := make([]Item, 0, min(opts.Limit, int(hi-lo)))
	ok, step := it.First(), it.Next
	if opts.Order != "asc" {
		ok, step = it.Last(), it.Prev
	}
	for ; ok; ok = step() {
		if len(items) == opts.Limit {
			return items, true, nil
		}
		item, err := decodeStoredItem(it.Value())
		if err != nil {
			return nil, false, fmt.Errorf("responses: item %q: %w", it.Key(), err)
		}
		items = append(items, item)
	}
	return items, false, it.Error()
}

// GetItem implements Store.
func (s *PebbleStore) GetItem(ctx context.Context, tenant, id string) (Item, Segment, error) {
	if err := s.enter(ctx); err != nil {
		return Item{}, Segment{}, err
	}
	defer s.leave()
	var loc locator
	if err := s.getJSON(locKey(tenant, id), &loc); err != nil {
		return Item{}, Segment{}, err
	}
	if loc.Tenant != tenant {
		return Item{}, Segment{}, ErrNotFound
	}
	v, closer, err := s.db.Get(itemKey(loc.Chain, loc.Seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return Item{}, Segment{}, ErrNotFound
	}
	if err != nil {
		return Item{}, Segment{}, fmt.Errorf("responses: %w", err)
	}
	defer closer.Close()
	item, err := decodeStoredItem(v)
	return item, Segment{Chain: loc.Chain, From: loc.Seq, To: loc.Seq + 1}, err
}

// CreateConversation implements Store.
func (s *PebbleStore) CreateConversation(ctx context.Context, tenant string, c *Conversation, items []Item) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	unlock := s.lockChains(c.ID)
	defer unlock()
	b := s.db.NewBatch()
	if err := appendLocked(b, tenant, c.ID, 0, items); err != nil {
		b.Close()
		return err
	}
	if err := s.writeHeadLocked(b, c.ID, &head{Tenant: tenant, Next: uint32(len(items)), Conversation: c}); err != nil {
		b.Close()
		return err
	}
	return commit(b, pebble.Sync)
}

func (s *PebbleStore) conversationLocked(tenant, id string) (*head, error) {
	h, err := s.readHead(id)
	if err != nil {
		return nil, err
	}
	if h.Tenant != tenant || h.Conversation == nil {
		return nil, ErrNotFound
	}
	return h, nil
}

// GetConversation implements Store.
func (s *PebbleStore) GetConversation(ctx context.Context, tenant, id string) (*Conversation, Segment, error) {
	if err := s.enter(ctx); err != nil {
		return nil, Segment{}, err
	}
	defer s.leave()
	h, err := s.conversationLocked(tenant, id)
	if err != nil {
		return nil, Segment{}, err
	}
	return h.Conversation, Segment{Chain: id, From: 0, To: h.Next}, nil
}

// UpdateConversation implements Store.
func (s *PebbleStore) UpdateConversation(ctx context.Context, tenant, id string, metadata map[string]string) (*Conversation, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	unlock := s.lockChains(id)
	defer unlock()
	h, err := s.conversationLocked(tenant, id)
	if err != nil {
		return nil, err
	}
	h.Conversation.Metadata = metadata
	b := s.db.NewBatch()
	if err := s.writeHeadLocked(b, id, h); err != nil {
		b.Close()
		return nil, err
	}
	return h.Conversation, commit(b, pebble.Sync)
}

// DeleteConversation implements Store.
func (s *PebbleStore) DeleteConversation(ctx context.Context, tenant, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	unlock := s.lockChains(id)
	defer unlock()
	h, err := s.conversationLocked(tenant, id)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	if err := s.deleteChainLocked(b, id, h); err != nil {
		b.Close()
		return err
	}
	return commit(b, pebble.Sync)
}

// deleteChainLocked removes a chain's items, their locators and its head.
// A locator that a later item with the same id has taken over stays.
func (s *PebbleStore) deleteChainLocked(b *pebble.Batch, chain string, h *head) error {
	lo, hi := itemKey(chain, 0), itemKey(chain, h.Next)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		item, err := decodeStoredItem(it.Value())
		if err != nil || item.ID == "" {
			continue
		}
		k := locKey(h.Tenant, item.ID)
		var loc locator
		if s.getJSON(k, &loc) == nil && loc.Chain == chain {
			b.Delete(k, nil)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	b.DeleteRange(lo, hi, nil)
	b.Delete(key(pfxHead, chain), nil)
	b.Delete(ttlKey(h.ExpiresAt, ttlChain, chain), nil)
	return nil
}

// AppendItems implements Store.
func (s *PebbleStore) AppendItems(ctx context.Context, tenant, conv string, items []Item) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	unlock := s.lockChains(conv)
	defer unlock()
	h, err := s.conversationLocked(tenant, conv)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	if err := appendLocked(b, tenant, conv, h.Next, items); err != nil {
		b.Close()
		return err
	}
	h.Next += uint32(len(items))
	if err := s.writeHeadLocked(b, conv, h); err != nil {
		b.Close()
		return err
	}
	return commit(b, pebble.Sync)
}

// DeleteItem implements Store.
func (s *PebbleStore) DeleteItem(ctx context.Context, tenant, conv, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	unlock := s.lockChains(conv)
	defer unlock()
	if _, err := s.conversationLocked(tenant, conv); err != nil {
		return err
	}
	var loc locator
	if err := s.getJSON(locKey(tenant, id), &loc); err != nil {
		return err
	}
	if loc.Tenant != tenant || loc.Chain != conv {
		return ErrNotFound
	}
	b := s.db.NewBatch()
	b.Delete(itemKey(conv, loc.Seq), nil)
	b.Delete(locKey(tenant, id), nil)
	return commit(b, pebble.Sync)
}

// AppendEvent implements Store.
func (s *PebbleStore) AppendEvent(ctx context.Context, id string, seq int, event []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return s.db.Set(eventKey(id, uint32(seq)), event, pebble.NoSync)
}

// Events implements Store.
func (s *PebbleStore) Events(ctx context.Context, id string, after int) ([][]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	p := key(pfxEvent, id, "/")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(id, uint32(max(after+1, 0))), UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("responses: %w", err)
	}
	defer it.Close()
	var out [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, bytes.Clone(it.Value()))
	}
	return out, it.Error()
}

// DropEvents implements Store.
func (s *PebbleStore) DropEvents(ctx context.Context, id string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	p := key(pfxEvent, id, "/")
	return s.db.DeleteRange(p, prefixEnd(p), pebble.NoSync)
}

// PendingJobs implements Store.
func (s *PebbleStore) PendingJobs(ctx context.Context) ([]*Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	p := []byte(pfxJob)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("responses: %w", err)
	}
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		ids = append(ids, string(it.Key()[len(p):]))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	var recs []*Record
	for _, id := range ids {
		var rec Record
		if err := s.getJSON(key(pfxResp, id), &rec); err != nil {
			continue
		}
		if rec.Job != nil {
			recs = append(recs, &rec)
		}
	}
	return recs, nil
}

// Collect implements Store. A TTL entry may be stale (its record was
// written again later with a new expiry); the record's own expiry decides.
func (s *PebbleStore) Collect(ctx context.Context, now time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	lo := []byte(pfxTTL)
	hi := binary.BigEndian.AppendUint64([]byte(pfxTTL), uint64(now.Unix()+1))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, fmt.Errorf("responses: %w", err)
	}
	type entry struct {
		key  []byte
		kind byte
		id   string
	}
	var due []entry
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < len(pfxTTL)+9 {
			continue
		}
		due = append(due, entry{bytes.Clone(k), k[len(pfxTTL)+8], string(k[len(pfxTTL)+9:])})
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range due {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		b := s.db.NewBatch()
		b.Delete(e.key, nil)
		switch e.kind {
		case ttlResponse:
			var rec Record
			if s.getJSON(key(pfxResp, e.id), &rec) == nil && rec.ExpiresAt <= now.Unix() {
				b.Delete(key(pfxResp, e.id), nil)
				b.Delete(key(pfxJob, e.id), nil)
				p := key(pfxEvent, e.id, "/")
				b.DeleteRange(p, prefixEnd(p), nil)
				removed++
			}
		case ttlChain:
			unlock := s.lockChains(e.id)
			if h, err := s.readHead(e.id); err == nil && h.ExpiresAt <= now.Unix() {
				if err := s.deleteChainLocked(b, e.id, h); err == nil {
					removed++
				}
			}
			unlock()
		}
		if err := commit(b, pebble.NoSync); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// Meta implements Store. namespace must not contain '/'.
func (s *PebbleStore) Meta(namespace string) Meta {
	return &pebbleMeta{s: s, prefix: key(pfxMeta, namespace, "/")}
}

type pebbleMeta struct {
	s      *PebbleStore
	prefix []byte
}

func (m *pebbleMeta) key(k []byte) []byte { return append(bytes.Clone(m.prefix), k...) }

func (m *pebbleMeta) Put(ctx context.Context, k, v []byte) error {
	if err := m.s.enter(ctx); err != nil {
		return err
	}
	defer m.s.leave()
	return m.s.db.Set(m.key(k), v, pebble.Sync)
}

func (m *pebbleMeta) Get(ctx context.Context, k []byte) ([]byte, error) {
	if err := m.s.enter(ctx); err != nil {
		return nil, err
	}
	defer m.s.leave()
	v, closer, err := m.s.db.Get(m.key(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("responses: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

func (m *pebbleMeta) Delete(ctx context.Context, k []byte) error {
	if err := m.s.enter(ctx); err != nil {
		return err
	}
	defer m.s.leave()
	return m.s.db.Delete(m.key(k), pebble.Sync)
}

func (m *pebbleMeta) Scan(ctx context.Context, prefix []byte, fn func(k, v []byte) error) error {
	if err := m.s.enter(ctx); err != nil {
		return err
	}
	defer m.s.leave()
	lo := m.key(prefix)
	it, err := m.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return fmt.Errorf("responses: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key()[len(m.prefix):], it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// pebbleLogger sends Pebble's log lines to slog: its chatter at debug,
// its errors at warn.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Warn("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}

var (
	_ Store         = (*PebbleStore)(nil)
	_ Meta          = (*pebbleMeta)(nil)
	_ pebble.Logger = pebbleLogger{}
)
