package responses

import (
	"context"
	"errors"
	"slices"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// getRecord reads a response record, not found in the OpenAI shape.
func (s *Service) getRecord(ctx context.Context, tenant, id string) (*Record, error) {
	rec, err := s.store.GetResponse(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil, notFoundf("", "not_found", "No response found with id '%s'.", id)
	}
	return rec, err
}

// Get returns a stored response.
func (s *Service) Get(ctx context.Context, tenant, id string) (*wire.Response, error) {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return rec.Response, nil
}

// Delete removes a stored response; a running background response is
// cancelled first.
func (s *Service) Delete(ctx context.Context, tenant, id string) (*wire.Deleted, error) {
	if _, err := s.getRecord(ctx, tenant, id); err != nil {
		return nil, err
	}
	if err := s.stopJob(ctx, tenant, id); err != nil {
		return nil, err
	}
	if err := s.store.DeleteResponse(ctx, tenant, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, notFoundf("", "not_found", "No response found with id '%s'.", id)
		}
		return nil, err
	}
	return &wire.Deleted{ID: id, Object: "response.deleted", Deleted: true}, nil
}

// stopJob stops the background job of response id and waits for it to
// end (or for ctx): here when it runs here, else through the store for
// the gateway that runs it (stopRemote).
func (s *Service) stopJob(ctx context.Context, tenant, id string) error {
	j := s.job(id)
	if j == nil {
		return s.stopRemote(ctx, tenant, id)
	}
	j.Cancel()
	select {
	case <-j.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel stops a background response and its engine request; it ends
// cancelled. Cancelling one that has ended returns it as it is.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (*wire.Response, error) {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if !rec.Response.Background {
		return nil, conflictf("", "invalid_request", "Only responses created with background: true can be cancelled.")
	}
	if rec.Response.Ended() {
		return rec.Response, nil
	}
	if err := s.stopJob(ctx, tenant, id); err != nil {
		return nil, err
	}
	return s.Get(ctx, tenant, id)
}

// InputItems pages through the input items of response id: what its
// model saw before it answered. A response created with
// previous_response_id saw its whole chain, every earlier turn's input
// and output, then its own input, compacted as load rebuilt it; one in a
// conversation lists its own turn's input.
func (s *Service) InputItems(ctx context.Context, tenant, id string, opts ListOptions) (*wire.ItemList, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if rec.Job != nil || rec.Input != nil {
		items, err := s.pendingInput(ctx, rec)
		if err != nil {
			return nil, err
		}
		return pageSlice(items, opts)
	}
	var items []wire.Item
	var more bool
	if rec.Conversation != "" {
		items, more, err = s.store.ListItems(ctx, tenant, ownInput(rec), opts)
	} else {
		items, more, err = s.store.ListContext(ctx, tenant, inputContext(rec), opts)
	}
	if err != nil {
		return nil, err
	}
	return newItemList(items, more), nil
}

// ownInput is the segment of an ended response's own input items.
func ownInput(rec *Record) Segment {
	return Segment{Chain: rec.Own.Chain, From: rec.Own.From, To: rec.Own.From + uint32(rec.Inputs)}
}

// inputContext is the part of an ended response's context its model saw:
// all of it but its own output, which ends it. A context that does not
// end with the response's own items, as EndResponse writes it, gives its
// own input alone.
func inputContext(rec *Record) []Segment {
	n := len(rec.Context)
	if n == 0 || rec.Context[n-1].Chain != rec.Own.Chain || rec.Context[n-1].To != rec.Own.To {
		return []Segment{ownInput(rec)}
	}
	segs := slices.Clone(rec.Context)
	segs[n-1].To = ownInput(rec).To
	return segs
}

// pendingInput is what the model of a response that has not ended sees:
// its previous response's context (if it is still stored), then its own
// input, compacted; in a conversation, its own input.
func (s *Service) pendingInput(ctx context.Context, rec *Record) ([]wire.Item, error) {
	if rec.Conversation != "" {
		return rec.Input, nil
	}
	var history []wire.Item
	if prev := rec.Response.PreviousResponseID; prev != nil {
		p, err := s.store.GetResponse(ctx, rec.Tenant, *prev)
		switch {
		case err == nil:
			if history, err = s.store.LoadContext(ctx, p.Context); err != nil {
				return nil, err
			}
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return compacted(append(history, rec.Input...)), nil
}

// Stream replays a background response's events after sequence number
// after, and follows it live while it runs, on this gateway or another.
func (s *Service) Stream(ctx context.Context, tenant, id string, after int, sink Sink) error {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !rec.Response.Background {
		return wire.Invalidf("stream", "invalid_value", "Only responses created with background: true can be streamed again.")
	}
	if j := s.job(id); j != nil {
		j.Work.follow(ctx, after, sink)
		return nil
	}
	return s.followStored(ctx, tenant, id, after, sink)
}

func (o *ListOptions) validate() error {
	if o.Limit == 0 {
		o.Limit = 20
	}
	if o.Limit < 1 || o.Limit > 100 {
		return wire.Invalidf("limit", "invalid_value", "Invalid 'limit': expected a value between 1 and 100, but got %d instead.", o.Limit)
	}
	switch o.Order {
	case "":
		o.Order = "desc"
	case "asc", "desc":
	default:
		return wire.Invalidf("order", "invalid_value", "Invalid value: '%s'. Supported values are: 'asc' and 'desc'.", o.Order)
	}
	return nil
}

// pageSlice pages through items held in memory.
func pageSlice(all []wire.Item, opts ListOptions) (*wire.ItemList, error) {
	ordered := make([]wire.Item, len(all))
	copy(ordered, all)
	if opts.Order == "desc" {
		for i, j := 0, len(ordered)-1; i < j; i, j = i+1, j-1 {
			ordered[i], ordered[j] = ordered[j], ordered[i]
		}
	}
	start := 0
	if opts.After != "" {
		start = -1
		for i := range ordered {
			if ordered[i].ID == opts.After {
				start = i + 1
			}
		}
		if start < 0 {
			return nil, unknownAfter(opts.After)
		}
	}
	page := ordered[start:]
	more := len(page) > opts.Limit
	if more {
		page = page[:opts.Limit]
	}
	return newItemList(page, more), nil
}

// unknownAfter refuses a cursor that names no item of the list.
func unknownAfter(id string) error {
	return wire.Invalidf("after", "invalid_value", "Invalid 'after': no item with id '%s' in this list.", id)
}

func newItemList(items []wire.Item, more bool) *wire.ItemList {
	l := &wire.ItemList{Object: "list", Data: items, HasMore: more}
	if l.Data == nil {
		l.Data = []wire.Item{}
	}
	if n := len(items); n > 0 {
		l.FirstID, l.LastID = &items[0].ID, &items[n-1].ID
	}
	return l
}

// ListOptions page through items: After is an item id cursor, Limit 1..100
// (default 20), Order "asc" or "desc" (default "desc").
type ListOptions struct {
	After string
	Limit int
	Order string
}
