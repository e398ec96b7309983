package responses

import (
	"context"
	"errors"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

func convNotFound(id string) *apierror.Error {
	return notFoundf("", "not_found", "Conversation with id '%s' not found.", id)
}

func (s *Service) convErr(id string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return convNotFound(id)
	}
	return err
}

// CreateConversation makes a conversation from a POST /v1/conversations
// body: optional items and metadata.
func (s *Service) CreateConversation(ctx context.Context, tenant string, body []byte) (*wire.Conversation, error) {
	items, metadata, _, err := wire.DecodeConversationBody(body, "items", "metadata")
	if err != nil {
		return nil, err
	}
	if items, err = s.resolveInput(ctx, tenant, items); err != nil {
		return nil, err
	}
	if metadata == nil {
		metadata = map[string]string{}
	}
	c := &wire.Conversation{ID: newID(conversationPrefix), Object: "conversation", CreatedAt: s.cfg.Now().Unix(), Metadata: metadata}
	if err := s.store.CreateConversation(ctx, tenant, c, items); err != nil {
		return nil, err
	}
	return c, nil
}

// GetConversation returns a conversation.
func (s *Service) GetConversation(ctx context.Context, tenant, id string) (*wire.Conversation, error) {
	c, _, err := s.store.GetConversation(ctx, tenant, id)
	if err != nil {
		return nil, s.convErr(id, err)
	}
	return c, nil
}

// UpdateConversation replaces a conversation's metadata from a
// {"metadata": {...}} body.
func (s *Service) UpdateConversation(ctx context.Context, tenant, id string, body []byte) (*wire.Conversation, error) {
	_, metadata, has, err := wire.DecodeConversationBody(body, "metadata")
	if err != nil {
		return nil, err
	}
	if !has {
		return nil, wire.Invalidf("metadata", "missing_required_parameter", "Missing required parameter: 'metadata'.")
	}
	if metadata == nil {
		metadata = map[string]string{}
	}
	c, err := s.store.UpdateConversation(ctx, tenant, id, metadata)
	if err != nil {
		return nil, s.convErr(id, err)
	}
	return c, nil
}

// DeleteConversation removes a conversation and its items. Responses made
// in it stay.
func (s *Service) DeleteConversation(ctx context.Context, tenant, id string) (*wire.Deleted, error) {
	if err := s.store.DeleteConversation(ctx, tenant, id); err != nil {
		return nil, s.convErr(id, err)
	}
	return &wire.Deleted{ID: id, Object: "conversation.deleted", Deleted: true}, nil
}

// ConversationItems pages through a conversation's items.
func (s *Service) ConversationItems(ctx context.Context, tenant, id string, opts ListOptions) (*wire.ItemList, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	_, seg, err := s.store.GetConversation(ctx, tenant, id)
	if err != nil {
		return nil, s.convErr(id, err)
	}
	items, more, err := s.store.ListItems(ctx, tenant, seg, opts)
	if err != nil {
		return nil, err
	}
	return newItemList(items, more), nil
}

// AddConversationItems appends the items of an {"items": [...]} body and
// returns them as a list.
func (s *Service) AddConversationItems(ctx context.Context, tenant, id string, body []byte) (*wire.ItemList, error) {
	items, err := wire.DecodeConversationItems(body)
	if err != nil {
		return nil, err
	}
	if items, err = s.resolveInput(ctx, tenant, items); err != nil {
		return nil, err
	}
	if err := s.store.AppendItems(ctx, tenant, id, items); err != nil {
		return nil, s.convErr(id, err)
	}
	return newItemList(items, false), nil
}

// ConversationItem returns one item of a conversation.
func (s *Service) ConversationItem(ctx context.Context, tenant, conv, id string) (*wire.Item, error) {
	if _, _, err := s.store.GetConversation(ctx, tenant, conv); err != nil {
		return nil, s.convErr(conv, err)
	}
	it, seg, err := s.store.GetItem(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) || (err == nil && seg.Chain != conv) {
		return nil, notFoundf("", "not_found", "Item with id '%s' not found in conversation '%s'.", id, conv)
	}
	if err != nil {
		return nil, err
	}
	return &it, nil
}

// DeleteConversationItem removes one item and returns the conversation.
func (s *Service) DeleteConversationItem(ctx context.Context, tenant, conv, id string) (*wire.Conversation, error) {
	c, _, err := s.store.GetConversation(ctx, tenant, conv)
	if err != nil {
		return nil, s.convErr(conv, err)
	}
	if err := s.store.DeleteItem(ctx, tenant, conv, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, notFoundf("", "not_found", "Item with id '%s' not found in conversation '%s'.", id, conv)
		}
		return nil, err
	}
	return c, nil
}
