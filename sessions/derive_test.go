package sessions

import (
	"net/http"
	"strings"
	"testing"
)

func TestDerive(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	for _, tc := range []struct {
		name                    string
		header                  map[string]string
		conversation, root, pck string
		wantKey                 string
		wantSource              Source
	}{
		{name: "sessionless", wantSource: SourceNone},
		{name: "x-session-id", header: map[string]string{"x-session-id": "h1"}, wantKey: "h1", wantSource: SourceHeader},
		{name: "claude code", header: map[string]string{"x-claude-code-session-id": "cc"}, wantKey: "cc", wantSource: SourceHeader},
		{name: "x-session-affinity", header: map[string]string{"x-session-affinity": "aff"}, wantKey: "aff", wantSource: SourceHeader},
		{name: "session_id", header: map[string]string{"session_id": "sid"}, wantKey: "sid", wantSource: SourceHeader},
		{
			name:    "x-session-id wins over the others",
			header:  map[string]string{"session_id": "sid", "x-session-affinity": "aff", "x-session-id": "h1"},
			wantKey: "h1", wantSource: SourceHeader,
		},
		{
			name:         "header wins over the body",
			header:       map[string]string{"x-claude-code-session-id": "cc"},
			conversation: "conv_1", root: "resp_1", pck: "pck",
			wantKey: "cc", wantSource: SourceHeader,
		},
		{name: "conversation", conversation: "conv_1", root: "resp_1", pck: "pck", wantKey: "conv_1", wantSource: SourceConversation},
		{name: "chain root", root: "resp_1", pck: "pck", wantKey: "resp_1", wantSource: SourceChain},
		{name: "prompt cache key", pck: "pck", wantKey: "pck", wantSource: SourcePromptCacheKey},
		{name: "long key is digested", pck: long, wantKey: bounded(long), wantSource: SourcePromptCacheKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			key, src := Derive(h, tc.conversation, tc.root, tc.pck)
			if key != tc.wantKey || src != tc.wantSource {
				t.Errorf("Derive = %q, %v; want %q, %v", key, src, tc.wantKey, tc.wantSource)
			}
			if len(key) > MaxKeyLen {
				t.Errorf("key of %d bytes, beyond MaxKeyLen", len(key))
			}
		})
	}
	if bounded(long) == bounded(long+"x") {
		t.Error("two long keys digest alike")
	}
}
