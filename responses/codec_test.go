package responses

import (
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// codecItems are items of every version of the stored form, with
// strings whose lengths take one, two and three bytes to write.
func codecItems() []wire.Item {
	long, longer := strings.Repeat("a", 200), strings.Repeat("b", 20000)
	return []wire.Item{
		{},
		{Type: wire.ItemMessage, ID: "msg_1", Status: "completed", Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: "héllo"}, {Type: "input_text", Text: longer}}},
		{Type: wire.ItemFunctionCall, ID: "fc_1", CallID: "c", Name: "f", Namespace: "ns", Arguments: long},
		{Type: wire.ItemReasoning, ID: "rs_1", Summary: []wire.ContentPart{{Type: wire.PartSummary, Text: long}}, EncryptedContent: longer},
		{Type: wire.ItemCompaction, ID: "cmp_1", Content: []wire.ContentPart{{Type: wire.PartSummary, Text: "sum"}}, EncryptedContent: "AQ"},
		{Type: wire.ItemMCPCall, ID: "mcp_1", ServerLabel: "s", Name: "add", Arguments: "{}", Error: longer, ApprovalRequestID: "mcpr_1"},
		{Type: wire.ItemMCPApprovalResponse, ID: "mcpa_1", ApprovalRequestID: "mcpr_1", Approve: &approved},
		{Type: wire.ItemMCPApprovalResponse, ID: "mcpa_2", ApprovalRequestID: "mcpr_2", Approve: &denied},
	}
}

// TestStoredItem (issue 32): an item the store writes into its batch
// says its length before it is written, and writes the stored form
// encodeItem makes, which reads back.
func TestStoredItem(t *testing.T) {
	for _, it := range codecItems() {
		v := storedItem{&it}
		b := v.AppendTo(make([]byte, 0, v.Len()))
		if v.Len() != len(b) || string(b) != string(encodeItem(nil, &it)) {
			t.Errorf("%.60v: said %d bytes, wrote %d", it, v.Len(), len(b))
		}
		if got, err := decodeStoredItem(b); err != nil || got.ID != it.ID || got.Text() != it.Text() || got.Error != it.Error {
			t.Errorf("%.60v read back as %.60v, %v", it, got, err)
		}
	}
}

// FuzzStoredItemLen: for any item the store can hold, the length a
// stored item says is the length it writes.
func FuzzStoredItemLen(f *testing.F) {
	for _, it := range codecItems() {
		f.Add(encodeItem(nil, &it))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := decodeStoredItem(b)
		if err != nil {
			return
		}
		if n, enc := encodedItemLen(&it), encodeItem(nil, &it); n != len(enc) {
			t.Fatalf("%+v: length %d, encoded in %d", it, n, len(enc))
		}
	})
}
