package responses

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// DefaultTTL is how long state is kept after its last write.
const DefaultTTL = 30 * 24 * time.Hour

// Key prefixes in the store's namespace; doc.go describes the layout.
const (
	pfxResp  = "r/"
	pfxItem  = "i/"
	pfxHead  = "h/"
	pfxLoc   = "x/"
	pfxEvent = "e/"
	pfxJob   = "q/"
	pfxLease = "l/"
	pfxStop  = "c/"
	pfxTTL   = "t/"
	pfxKey   = "k/"
)

// TTL index kinds.
const (
	ttlResponse = 'r'
	ttlChain    = 'h'
)

// StoreOptions configure a StateStore.
type StoreOptions struct {
	// TTL is how long a response, and a chain or conversation of items,
	// is kept after its last write. Default DefaultTTL (30 days).
	TTL time.Duration
	// Now is the clock; nil means time.Now. Tests move it to expire state.
	Now func() time.Time
}

// EnsureDefaults fills the zero fields.
func (o *StoreOptions) EnsureDefaults() {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// StateStore keeps responses, conversations, their items, background jobs
// and stream events, over a namespace of the state store (embedded Pebble,
// or a shared store behind the same state.Namespace), which owns the
// database, its syncs and its life; tests inject faults in that namespace.
//
// Every record carries its tenant. Methods that take a tenant check it
// and answer ErrNotFound for another tenant's id. Methods that take
// segments or a response id alone trust the caller to have read (and so
// checked) the owning record first.
//
// Writers do not share a lock: each builds its own batch and applies it,
// and the state store's commit pipeline groups concurrent synced batches
// into one WAL sync. Only appends to the same chain are serialised, by a
// striped lock on the chain id, because an append reads the chain's head.
// After the state store is closed, every method answers ErrClosed.
type StateStore struct {
	ns   state.Namespace
	opts StoreOptions
	// chains serialises read-modify-write of chain heads, by stripe.
	chains [256]sync.Mutex
}

// NewStore is the StateStore over ns, a namespace no one else writes.
func NewStore(ns state.Namespace, opts StoreOptions) *StateStore {
	opts.EnsureDefaults()
	return &StateStore{ns: ns, opts: opts}
}

func (s *StateStore) expiry() int64 { return s.opts.Now().Add(s.opts.TTL).Unix() }

// head is a chain's head: where its next item goes, who owns it, and, for
// a conversation, the conversation object itself.
type head struct {
	Tenant       string             `json:"tenant"`
	Next         uint32             `json:"next"`
	ExpiresAt    int64              `json:"expires_at"`
	Conversation *wire.Conversation `json:"conversation,omitempty"`
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

// chainKeys is the prefix of a chain's items. Chain ids are response and
// conversation ids, which hold no '/'.
func chainKeys(chain string) []byte { return key(pfxItem, chain, "/") }

func itemKey(chain string, seq uint32) []byte {
	b := make([]byte, 0, len(pfxItem)+len(chain)+5)
	b = append(b, pfxItem...)
	b = append(b, chain...)
	b = append(b, '/')
	return binary.BigEndian.AppendUint32(b, seq)
}

// eventKeys is the prefix of a response's stream events.
func eventKeys(id string) []byte { return key(pfxEvent, id, "/") }

func eventKey(id string, seq uint32) []byte {
	return binary.BigEndian.AppendUint32(eventKeys(id), seq)
}

func ttlKey(at int64, kind byte, id string) []byte {
	b := key(pfxTTL)
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = append(b, kind)
	return append(b, id...)
}

// classify gives an error of the state store the class the StateStore
// promises: ErrNotFound for a missing key, ErrClosed for a closed store,
// the 503 of ErrUnavailable for a store that failed (storeUnavailable).
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, state.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, state.ErrClosed):
		return ErrClosed
	case errors.Is(err, state.ErrUnavailable):
		return storeUnavailable(err)
	}
	return err
}

// unavailable reports an error that says nothing of the key read: the
// store is closed or failed, or the caller has given up. A read whose
// failure means "not found" or "start afresh" passes these on instead.
func unavailable(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (s *StateStore) apply(ctx context.Context, b *state.Batch) error {
	return classify(s.ns.Apply(ctx, b))
}

func (s *StateStore) scan(ctx context.Context, r state.Range, fn func(k, v []byte) error) error {
	return classify(s.ns.Scan(ctx, r, fn))
}

func (s *StateStore) getJSON(ctx context.Context, k []byte, v any) error {
	b, err := s.ns.Get(ctx, k)
	if err != nil {
		return classify(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("responses: decoding %q: %w", k, err)
	}
	return nil
}

func setJSON(b *state.Batch, k []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("responses: encoding %q: %w", k, err)
	}
	b.Put(k, buf)
	return nil
}

// lockChains locks the stripes of chains in stripe order, so that two
// writers locking overlapping sets cannot deadlock.
func (s *StateStore) lockChains(chains ...string) (unlock func()) {
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

func (s *StateStore) readHead(ctx context.Context, chain string) (*head, error) {
	var h head
	if err := s.getJSON(ctx, key(pfxHead, chain), &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// writeHeadLocked writes h with a fresh expiry and moves its TTL entry.
func (s *StateStore) writeHeadLocked(b *state.Batch, chain string, h *head) error {
	exp := s.expiry()
	if h.ExpiresAt != 0 && h.ExpiresAt != exp {
		b.Delete(ttlKey(h.ExpiresAt, ttlChain, chain))
	}
	h.ExpiresAt = exp
	b.Put(ttlKey(exp, ttlChain, chain), nil)
	return setJSON(b, key(pfxHead, chain), h)
}

// appendLocked writes items at seq from.. of chain, with their locators.
// The batch encodes each item as it writes it (storedItem): items must
// not change until it is applied.
func appendLocked(b *state.Batch, tenant, chain string, from uint32, items []wire.Item) error {
	for i := range items {
		seq := from + uint32(i)
		b.PutValue(itemKey(chain, seq), storedItem{&items[i]})
		if err := setJSON(b, locKey(tenant, items[i].ID), locator{Tenant: tenant, Chain: chain, Seq: seq}); err != nil {
			return err
		}
	}
	return nil
}

func (s *StateStore) writeRecord(b *state.Batch, rec *Record) error {
	exp := s.expiry()
	if rec.ExpiresAt != 0 && rec.ExpiresAt != exp {
		b.Delete(ttlKey(rec.ExpiresAt, ttlResponse, rec.Response.ID))
	}
	rec.ExpiresAt = exp
	b.Put(ttlKey(exp, ttlResponse, rec.Response.ID), nil)
	if rec.Job != nil {
		b.Put(key(pfxJob, rec.Response.ID), nil)
	} else {
		b.Delete(key(pfxJob, rec.Response.ID))
		if rec.Response.Background {
			// An ended response needs its cancel no more.
			b.Delete(jobKeys.CancelKey(rec.Response.ID))
		}
	}
	return setJSON(b, key(pfxResp, rec.Response.ID), rec)
}

// deleteRecord removes response id's record, its job entry and its
// events; its TTL entry is the caller's.
func deleteRecord(b *state.Batch, id string) {
	b.Delete(key(pfxResp, id))
	b.Delete(key(pfxJob, id))
	b.Delete(jobKeys.CancelKey(id))
	b.DeletePrefix(eventKeys(id))
}

// GetResponse reads a response record.
func (s *StateStore) GetResponse(ctx context.Context, tenant, id string) (*Record, error) {
	return s.readRecord(ctx, tenant, id)
}

// readRecord reads tenant's record of response id.
func (s *StateStore) readRecord(ctx context.Context, tenant, id string) (*Record, error) {
	var rec Record
	if err := s.getJSON(ctx, key(pfxResp, id), &rec); err != nil {
		return nil, err
	}
	if rec.Tenant != tenant {
		return nil, ErrNotFound
	}
	return &rec, nil
}

// PutResponse writes a record that has not ended (a background
// response as it is queued and started). sync makes it durable before
// returning. A record with a Job is listed by PendingJobs.
func (s *StateStore) PutResponse(ctx context.Context, rec *Record, sync bool) error {
	b := state.Batch{Sync: sync}
	if err := s.writeRecord(&b, rec); err != nil {
		return err
	}
	return s.apply(ctx, &b)
}

// EndResponse appends items (the response's input, then its output)
// after base, the context it continues, and writes rec and, if not
// nil, final (a background response's terminal stream event), all in
// one synced batch: the event log never announces an end the record
// does not hold. It sets rec.Context and rec.Own, clears rec.Input and
// rec.Job. With rec.Conversation set the items go to the end of that
// conversation and base is ignored.
func (s *StateStore) EndResponse(ctx context.Context, rec *Record, base []Segment, items []wire.Item, final *StreamEvent) error {
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

	b := state.Batch{Sync: true}
	var chain string
	var h *head
	var err error
	switch {
	case rec.Conversation != "":
		chain = rec.Conversation
		if h, err = s.readHead(ctx, chain); unavailable(err) {
			return err
		} else if err != nil || h.Tenant != rec.Tenant || h.Conversation == nil {
			return fmt.Errorf("%w: conversation %s", ErrNotFound, chain)
		}
		rec.Context = []Segment{{Chain: chain, From: 0, To: h.Next + n}}
	case len(base) > 0:
		last := base[len(base)-1]
		h, err = s.readHead(ctx, last.Chain)
		if unavailable(err) {
			return err
		}
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
			oh, err := s.readHead(ctx, sg.Chain)
			if unavailable(err) {
				return err
			}
			if err == nil {
				if err := s.writeHeadLocked(&b, sg.Chain, oh); err != nil {
					return err
				}
			}
		}
	default:
		chain, h = id, &head{Tenant: rec.Tenant}
		rec.Context = []Segment{{Chain: chain, From: 0, To: n}}
	}
	from := h.Next
	if err := appendLocked(&b, rec.Tenant, chain, from, items); err != nil {
		return err
	}
	h.Next = from + n
	if err := s.writeHeadLocked(&b, chain, h); err != nil {
		return err
	}
	rec.Own = Segment{Chain: chain, From: from, To: from + n}
	rec.Input, rec.Job = nil, nil
	if err := s.writeRecord(&b, rec); err != nil {
		return err
	}
	if final != nil {
		b.Put(eventKey(id, uint32(final.Seq)), final.Data)
	}
	return s.apply(ctx, &b)
}

// DeleteResponse removes a response and its events. Its items stay
// while a later response's context may use them; retention collects
// them with their chain.
func (s *StateStore) DeleteResponse(ctx context.Context, tenant, id string) error {
	rec, err := s.readRecord(ctx, tenant, id)
	if err != nil {
		return err
	}
	b := state.Batch{Sync: true}
	deleteRecord(&b, id)
	b.Delete(ttlKey(rec.ExpiresAt, ttlResponse, id))
	return s.apply(ctx, &b)
}

// LoadContext reads the items of segs in order: one range scan each.
func (s *StateStore) LoadContext(ctx context.Context, segs []Segment) ([]wire.Item, error) {
	var n int
	for _, sg := range segs {
		n += int(sg.To - sg.From)
	}
	items := make([]wire.Item, 0, n)
	for _, sg := range segs {
		r := state.Range{Start: itemKey(sg.Chain, sg.From), End: itemKey(sg.Chain, sg.To)}
		err := s.scan(ctx, r, func(k, v []byte) error {
			item, err := decodeStoredItem(v)
			if err != nil {
				return fmt.Errorf("responses: item %q: %w", k, err)
			}
			items = append(items, item)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return items, nil
}

// errStopScan stops a scan that has what it came for.
var errStopScan = errors.New("responses: scan stopped")

// ListItems pages through the items of one segment; opts.After names
// an item of tenant's in it.
func (s *StateStore) ListItems(ctx context.Context, tenant string, seg Segment, opts ListOptions) ([]wire.Item, bool, error) {
	return s.list(ctx, tenant, []Segment{seg}, opts, false)
}

// ListContext pages through the items of segs read as one list, as a
// model saw them: before the last compaction item, only the messages
// that outlive one (compacted); opts.After names an item of tenant's
// in it.
func (s *StateStore) ListContext(ctx context.Context, tenant string, segs []Segment, opts ListOptions) ([]wire.Item, bool, error) {
	return s.list(ctx, tenant, segs, opts, true)
}

// place is where an item lies in a list of segments: in segment seg, at
// seq of its chain.
type place struct {
	seg int
	seq uint32
}

func (p place) before(q place) bool {
	return p.seg < q.seg || p.seg == q.seg && p.seq < q.seq
}

// list pages through the items of segs read as one list; compact reads
// it as a model saw it: before the last compaction item, only the items
// that outlive one (compacted, chat.go).
//
// A page reads what lies between its cursor (or the end of the list it
// starts from) and its last item, and on to the next item kept, for
// has_more. Which items a compaction item drops is known only from where
// the last one lies, and the layout keeps no index of them: a page in asc
// order, or one after a cursor, first looks for it from the cursor (or
// the start) on, back from the end and by type alone; a first page in
// desc order meets it on its way.
func (s *StateStore) list(ctx context.Context, tenant string, segs []Segment, opts ListOptions, compact bool) ([]wire.Item, bool, error) {
	desc := opts.Order != "asc"
	lo, hi := place{}, place{seg: len(segs)}
	var cmp compaction
	var err error
	switch {
	case opts.After != "":
		var at place
		if at, cmp, err = s.cursor(ctx, tenant, segs, opts.After, compact); err != nil {
			return nil, false, err
		}
		if desc {
			hi = at
		} else {
			lo = place{at.seg, at.seq + 1}
		}
	case compact && !desc:
		if cmp, err = s.lastCompaction(ctx, segs, lo); err != nil {
			return nil, false, err
		}
	}
	items := make([]wire.Item, 0, min(opts.Limit, span(segs, lo, hi)))
	more := false
	err = s.scanPlaces(ctx, segs, lo, hi, desc, func(p place, k, v []byte) error {
		if compact && !cmp.found && storedCompaction(v) {
			// Met going back from the end: the last one.
			cmp = compaction{at: p, found: true}
		}
		item, err := decodeStoredItem(v)
		if err != nil {
			return fmt.Errorf("responses: item %q: %w", k, err)
		}
		if cmp.drops(p, &item) {
			return nil
		}
		if len(items) == opts.Limit {
			more = true
			return errStopScan
		}
		items = append(items, item)
		return nil
	})
	if err != nil && err != errStopScan {
		return nil, false, err
	}
	return items, more, nil
}

// compaction is where the last compaction item of a list lies, once
// found.
type compaction struct {
	at    place
	found bool
}

// drops reports whether the compaction item stands for it, at p.
func (c compaction) drops(p place, it *wire.Item) bool {
	return c.found && p.before(c.at) && !outlivesCompaction(it.Type, it.Role)
}

// cursor places tenant's item id, a paging cursor, in segs. With compact
// it also finds the last compaction item from the cursor on (any before
// it drops nothing the page holds), and refuses a cursor that the
// compaction item drops: that is no item of the list.
func (s *StateStore) cursor(ctx context.Context, tenant string, segs []Segment, id string, compact bool) (place, compaction, error) {
	at, err := s.locate(ctx, tenant, segs, id)
	if err != nil || !compact {
		return at, compaction{}, err
	}
	cmp, err := s.lastCompaction(ctx, segs, at)
	if err != nil || !cmp.found || !at.before(cmp.at) {
		return at, cmp, err
	}
	it, err := s.itemAt(ctx, segs, at)
	if err != nil {
		return place{}, compaction{}, err
	}
	if cmp.drops(at, &it) {
		return place{}, compaction{}, unknownAfter(id)
	}
	return at, cmp, nil
}

// locate finds tenant's item id in segs.
func (s *StateStore) locate(ctx context.Context, tenant string, segs []Segment, id string) (place, error) {
	var loc locator
	err := s.getJSON(ctx, locKey(tenant, id), &loc)
	if unavailable(err) {
		return place{}, err
	}
	if err == nil && loc.Tenant == tenant {
		for i, sg := range segs {
			if sg.Chain == loc.Chain && sg.From <= loc.Seq && loc.Seq < sg.To {
				return place{i, loc.Seq}, nil
			}
		}
	}
	return place{}, unknownAfter(id)
}

// lastCompaction finds the last compaction item of segs at or after
// from, going back from the end and reading types alone.
func (s *StateStore) lastCompaction(ctx context.Context, segs []Segment, from place) (compaction, error) {
	var cmp compaction
	err := s.scanPlaces(ctx, segs, from, place{seg: len(segs)}, true, func(p place, _, v []byte) error {
		if !storedCompaction(v) {
			return nil
		}
		cmp = compaction{at: p, found: true}
		return errStopScan
	})
	if err != nil && err != errStopScan {
		return compaction{}, err
	}
	return cmp, nil
}

// itemAt reads the item at p of segs.
func (s *StateStore) itemAt(ctx context.Context, segs []Segment, p place) (wire.Item, error) {
	k := itemKey(segs[p.seg].Chain, p.seq)
	v, err := s.ns.Get(ctx, k)
	if err != nil {
		return wire.Item{}, classify(err)
	}
	item, err := decodeStoredItem(v)
	if err != nil {
		return wire.Item{}, fmt.Errorf("responses: item %q: %w", k, err)
	}
	return item, nil
}

// clip is the part of segs[i] between lo and hi, as seqs [from, to).
func clip(segs []Segment, i int, lo, hi place) (from, to uint32) {
	from, to = segs[i].From, segs[i].To
	if i < lo.seg || i > hi.seg {
		return 0, 0
	}
	if i == lo.seg {
		from = max(from, lo.seq)
	}
	if i == hi.seg {
		to = min(to, hi.seq)
	}
	return from, max(from, to)
}

// span counts the places of segs between lo and hi.
func span(segs []Segment, lo, hi place) int {
	n := 0
	for i := range segs {
		from, to := clip(segs, i, lo, hi)
		n += int(to - from)
	}
	return n
}

// scanPlaces calls fn with each stored item of segs between lo and hi,
// in order, or back from hi when reverse: one range scan per segment it
// reaches. fn's errStopScan ends it.
func (s *StateStore) scanPlaces(ctx context.Context, segs []Segment, lo, hi place, reverse bool, fn func(p place, k, v []byte) error) error {
	for n := range segs {
		i := n
		if reverse {
			i = len(segs) - 1 - n
		}
		from, to := clip(segs, i, lo, hi)
		if from == to {
			continue
		}
		chain := segs[i].Chain
		r := state.Range{Start: itemKey(chain, from), End: itemKey(chain, to), Reverse: reverse}
		err := s.scan(ctx, r, func(k, v []byte) error {
			return fn(place{i, binary.BigEndian.Uint32(k[len(k)-4:])}, k, v)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// GetItem reads an item by id, wherever it is stored.
func (s *StateStore) GetItem(ctx context.Context, tenant, id string) (wire.Item, Segment, error) {
	var loc locator
	if err := s.getJSON(ctx, locKey(tenant, id), &loc); err != nil {
		return wire.Item{}, Segment{}, err
	}
	if loc.Tenant != tenant {
		return wire.Item{}, Segment{}, ErrNotFound
	}
	v, err := s.ns.Get(ctx, itemKey(loc.Chain, loc.Seq))
	if err != nil {
		return wire.Item{}, Segment{}, classify(err)
	}
	item, err := decodeStoredItem(v)
	return item, Segment{Chain: loc.Chain, From: loc.Seq, To: loc.Seq + 1}, err
}

// CreateConversation stores a new conversation with its first items.
func (s *StateStore) CreateConversation(ctx context.Context, tenant string, c *wire.Conversation, items []wire.Item) error {
	unlock := s.lockChains(c.ID)
	defer unlock()
	b := state.Batch{Sync: true}
	if err := appendLocked(&b, tenant, c.ID, 0, items); err != nil {
		return err
	}
	if err := s.writeHeadLocked(&b, c.ID, &head{Tenant: tenant, Next: uint32(len(items)), Conversation: c}); err != nil {
		return err
	}
	return s.apply(ctx, &b)
}

func (s *StateStore) conversationLocked(ctx context.Context, tenant, id string) (*head, error) {
	h, err := s.readHead(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.Tenant != tenant || h.Conversation == nil {
		return nil, ErrNotFound
	}
	return h, nil
}

// GetConversation reads a conversation and the segment of its items.
func (s *StateStore) GetConversation(ctx context.Context, tenant, id string) (*wire.Conversation, Segment, error) {
	h, err := s.conversationLocked(ctx, tenant, id)
	if err != nil {
		return nil, Segment{}, err
	}
	return h.Conversation, Segment{Chain: id, From: 0, To: h.Next}, nil
}

// UpdateConversation replaces a conversation's metadata.
func (s *StateStore) UpdateConversation(ctx context.Context, tenant, id string, metadata map[string]string) (*wire.Conversation, error) {
	unlock := s.lockChains(id)
	defer unlock()
	h, err := s.conversationLocked(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	h.Conversation.Metadata = metadata
	b := state.Batch{Sync: true}
	if err := s.writeHeadLocked(&b, id, h); err != nil {
		return nil, err
	}
	return h.Conversation, s.apply(ctx, &b)
}

// DeleteConversation removes a conversation and its items.
func (s *StateStore) DeleteConversation(ctx context.Context, tenant, id string) error {
	unlock := s.lockChains(id)
	defer unlock()
	h, err := s.conversationLocked(ctx, tenant, id)
	if err != nil {
		return err
	}
	b := state.Batch{Sync: true}
	if err := s.deleteChainLocked(ctx, &b, id, h); err != nil {
		return err
	}
	return s.apply(ctx, &b)
}

// deleteChainLocked removes a chain's items, their locators and its head.
// A locator that a later item with the same id has taken over stays.
func (s *StateStore) deleteChainLocked(ctx context.Context, b *state.Batch, chain string, h *head) error {
	// The ids first, the locators after the scan: a scan's callback may
	// not call into the state store.
	var ids []string
	r := state.Range{Start: itemKey(chain, 0), End: itemKey(chain, h.Next)}
	err := s.scan(ctx, r, func(_, v []byte) error {
		if item, err := decodeStoredItem(v); err == nil && item.ID != "" {
			ids = append(ids, item.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		k := locKey(h.Tenant, id)
		var loc locator
		if s.getJSON(ctx, k, &loc) == nil && loc.Chain == chain {
			b.Delete(k)
		}
	}
	b.DeletePrefix(chainKeys(chain))
	b.Delete(key(pfxHead, chain))
	b.Delete(ttlKey(h.ExpiresAt, ttlChain, chain))
	return nil
}

// AppendItems adds items to the end of a conversation.
func (s *StateStore) AppendItems(ctx context.Context, tenant, conv string, items []wire.Item) error {
	unlock := s.lockChains(conv)
	defer unlock()
	h, err := s.conversationLocked(ctx, tenant, conv)
	if err != nil {
		return err
	}
	b := state.Batch{Sync: true}
	if err := appendLocked(&b, tenant, conv, h.Next, items); err != nil {
		return err
	}
	h.Next += uint32(len(items))
	if err := s.writeHeadLocked(&b, conv, h); err != nil {
		return err
	}
	return s.apply(ctx, &b)
}

// DeleteItem removes one item from a conversation.
func (s *StateStore) DeleteItem(ctx context.Context, tenant, conv, id string) error {
	unlock := s.lockChains(conv)
	defer unlock()
	if _, err := s.conversationLocked(ctx, tenant, conv); err != nil {
		return err
	}
	var loc locator
	if err := s.getJSON(ctx, locKey(tenant, id), &loc); err != nil {
		return err
	}
	if loc.Tenant != tenant || loc.Chain != conv {
		return ErrNotFound
	}
	b := state.Batch{Sync: true}
	b.Delete(itemKey(conv, loc.Seq))
	b.Delete(locKey(tenant, id))
	return s.apply(ctx, &b)
}

// AppendEvent keeps a background response's stream event seq, unsynced:
// the response's next synced write makes it durable.
func (s *StateStore) AppendEvent(ctx context.Context, id string, seq int, event []byte) error {
	var b state.Batch // unsynced: the response's next synced write carries it
	b.Put(eventKey(id, uint32(seq)), event)
	return s.apply(ctx, &b)
}

// Events returns the stored events of a response after seq after.
func (s *StateStore) Events(ctx context.Context, id string, after int) ([][]byte, error) {
	r := state.Range{Start: eventKey(id, uint32(max(after+1, 0))), End: state.Prefix(eventKeys(id)).End}
	var out [][]byte
	err := s.scan(ctx, r, func(_, v []byte) error {
		out = append(out, bytes.Clone(v))
		return nil
	})
	return out, err
}

// DropEvents forgets a response's events (a job about to be re-run).
func (s *StateStore) DropEvents(ctx context.Context, id string) error {
	var b state.Batch
	b.DeletePrefix(eventKeys(id))
	return s.apply(ctx, &b)
}

// PendingJobs lists the background responses that have not ended.
func (s *StateStore) PendingJobs(ctx context.Context) ([]*Record, error) {
	var ids []string
	err := s.scan(ctx, state.Prefix([]byte(pfxJob)), func(k, _ []byte) error {
		ids = append(ids, string(k[len(pfxJob):]))
		return nil
	})
	if err != nil {
		return nil, err
	}
	var recs []*Record
	for _, id := range ids {
		var rec Record
		if err := s.getJSON(ctx, key(pfxResp, id), &rec); unavailable(err) {
			return nil, err
		} else if err != nil {
			continue
		}
		if rec.Job != nil {
			recs = append(recs, &rec)
		}
	}
	return recs, nil
}

// GetJob reads background response id's record, whatever its
// tenant, for the gateway that takes it over.
func (s *StateStore) GetJob(ctx context.Context, id string) (*Record, error) {
	var rec Record
	if err := s.getJSON(ctx, key(pfxResp, id), &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// Namespace is the state store's namespace under s, where the leases and
// cancel requests of background responses are kept (jobKeys).
func (s *StateStore) Namespace() state.Namespace { return s.ns }

// Collect deletes what expired before now and reports how many records
// it removed. A TTL entry may be stale (its record was written again
// later with a new expiry); the record's own expiry decides.
func (s *StateStore) Collect(ctx context.Context, now time.Time) (int, error) {
	type entry struct {
		key  []byte
		kind byte
		id   string
	}
	var due []entry
	r := state.Range{Start: []byte(pfxTTL), End: binary.BigEndian.AppendUint64([]byte(pfxTTL), uint64(now.Unix()+1))}
	err := s.scan(ctx, r, func(k, _ []byte) error {
		if len(k) >= len(pfxTTL)+9 {
			due = append(due, entry{bytes.Clone(k), k[len(pfxTTL)+8], string(k[len(pfxTTL)+9:])})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range due {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		// Unsynced: what is collected may come back after a crash, and
		// the next collection takes it again.
		var b state.Batch
		b.Delete(e.key)
		switch e.kind {
		case ttlResponse:
			var rec Record
			if s.getJSON(ctx, key(pfxResp, e.id), &rec) == nil && rec.ExpiresAt <= now.Unix() {
				deleteRecord(&b, e.id)
				removed++
			}
		case ttlChain:
			unlock := s.lockChains(e.id)
			if h, err := s.readHead(ctx, e.id); err == nil && h.ExpiresAt <= now.Unix() {
				if err := s.deleteChainLocked(ctx, &b, e.id, h); err == nil {
					removed++
				}
			}
			unlock()
		}
		if err := s.apply(ctx, &b); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// Secret returns the secret kept under name (k/<name>), generating and
// keeping one with gen when there is none; it is never collected. Two
// gateways starting at once on a shared store may both generate one; each
// reads back what was kept last, so they settle on one.
func (s *StateStore) Secret(ctx context.Context, name string, gen func() []byte) ([]byte, error) {
	k := []byte(pfxKey + name)
	v, err := s.ns.Get(ctx, k)
	if err == nil {
		return v, nil
	}
	if err = classify(err); !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err := s.ns.Put(ctx, k, gen()); err != nil {
		return nil, classify(err)
	}
	v, err = s.ns.Get(ctx, k)
	return v, classify(err)
}
