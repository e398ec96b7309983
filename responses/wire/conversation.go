package wire

import "github.com/turnpike-gateway/turnpike/apierror"

// MaxConversationItems bounds the items a create or add request carries.
const MaxConversationItems = 20

// decodeConversationBody reads {items, metadata} strictly.
func DecodeConversationBody(body []byte, allowed ...string) (items []Item, metadata map[string]string, hasMetadata bool, err error) {
	fields, err := decodeObject(body, "")
	if err != nil {
		return nil, nil, false, err
	}
	if err := allowKeys(fields, "", allowed...); err != nil {
		e := err.(*apierror.Error)
		e.Param = e.Param[1:]
		e.Message = "Unknown parameter: '" + e.Param + "'."
		return nil, nil, false, e
	}
	if raw, ok := fields["items"]; ok && !isNull(raw) {
		if items, err = DecodeItems(raw, "items"); err != nil {
			return nil, nil, false, err
		}
		if len(items) > MaxConversationItems {
			return nil, nil, false, Invalidf("items", "array_above_max_length", "Invalid 'items': array too long. Expected an array with maximum length %d, but got %d instead.", MaxConversationItems, len(items))
		}
	}
	if raw, ok := fields["metadata"]; ok {
		hasMetadata = true
		if !isNull(raw) {
			if metadata, err = DecodeMetadata(raw); err != nil {
				return nil, nil, false, err
			}
		}
	}
	return items, metadata, hasMetadata, nil
}

// decodeConversationItems reads the {"items": [...]} body of a request
// that adds items to a conversation: items is required.
func DecodeConversationItems(body []byte) ([]Item, error) {
	fields, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	if _, ok := fields["items"]; !ok {
		return nil, Invalidf("items", "missing_required_parameter", "Missing required parameter: 'items'.")
	}
	items, _, _, err := DecodeConversationBody(body, "items")
	return items, err
}
