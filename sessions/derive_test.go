package sessions

import (
	"net/http"
	"strings"
	"testing"
)

func TestDerive(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	// body is every body source at once: each row keeps the ones it
	// tests and those below them, so a row also shows what it outranks.
	body := Inputs{Conversation: "conv_1", Chain: "chain", PromptCacheKey: "pck", SafetyIdentifier: "user-1", PrefixFingerprint: 0xabc, NewChain: "resp_new"}
	from := func(level int) Inputs {
		in := body
		fields := []*string{&in.Conversation, &in.Chain, &in.PromptCacheKey, &in.SafetyIdentifier, &in.NewChain}
		for _, f := range fields[:level] {
			*f = ""
		}
		if level > 3 {
			in.PrefixFingerprint = 0
		}
		return in
	}
	for _, tc := range []struct {
		name       string
		header     map[string]string
		in         Inputs
		wantKey    string
		wantSource Source
	}{
		{name: "sessionless", wantSource: SourceNone},
		{name: "x-session-id", header: map[string]string{"x-session-id": "h1"}, wantKey: "h1", wantSource: SourceHeader},
		{name: "session-id (Codex)", header: map[string]string{"session-id": "codex"}, wantKey: "codex", wantSource: SourceHeader},
		{name: "session_id", header: map[string]string{"session_id": "sid"}, wantKey: "sid", wantSource: SourceHeader},
		{name: "thread-id (Codex)", header: map[string]string{"thread-id": "thr"}, wantKey: "thr", wantSource: SourceHeader},
		{name: "claude code", header: map[string]string{"x-claude-code-session-id": "cc"}, wantKey: "cc", wantSource: SourceHeader},
		{name: "x-session-affinity", header: map[string]string{"x-session-affinity": "aff"}, wantKey: "aff", wantSource: SourceHeader},
		{
			name:    "x-session-id wins over the others",
			header:  map[string]string{"session_id": "sid", "x-session-affinity": "aff", "x-session-id": "h1", "session-id": "s", "thread-id": "t"},
			wantKey: "h1", wantSource: SourceHeader,
		},
		{
			name:    "session-id wins over thread-id",
			header:  map[string]string{"thread-id": "t", "session-id": "s", "x-claude-code-session-id": "cc"},
			wantKey: "s", wantSource: SourceHeader,
		},
		{
			name:   "header wins over the body",
			header: map[string]string{"x-claude-code-session-id": "cc"},
			in:     from(0), wantKey: "cc", wantSource: SourceHeader,
		},
		{name: "conversation", in: from(0), wantKey: "conv_1", wantSource: SourceConversation},
		{name: "chain", in: from(1), wantKey: "chain", wantSource: SourceChain},
		{name: "prompt cache key", in: from(2), wantKey: "pck", wantSource: SourcePromptCacheKey},
		{name: "safety identifier and fingerprint", in: from(3), wantKey: "sid:user-1:abc", wantSource: SourceSafetyIdentifier},
		{name: "new chain", in: from(4), wantKey: "resp_new", wantSource: SourceNewChain},
		{
			name: "safety identifier without a fingerprint names no session",
			in:   Inputs{SafetyIdentifier: "user-1", NewChain: "resp_new"}, wantKey: "resp_new", wantSource: SourceNewChain,
		},
		{name: "fingerprint without a safety identifier names no session", in: Inputs{PrefixFingerprint: 1}, wantSource: SourceNone},
		{name: "long key is digested", in: Inputs{PromptCacheKey: long}, wantKey: bounded(long), wantSource: SourcePromptCacheKey},
		{name: "long safety identifier is digested", in: Inputs{SafetyIdentifier: long, PrefixFingerprint: 1}, wantKey: safetyKey(long, 1), wantSource: SourceSafetyIdentifier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if tc.header != nil {
				in.Header = http.Header{}
				for k, v := range tc.header {
					in.Header.Set(k, v)
				}
			}
			key, src := Derive(&in)
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
	if safetyKey("u", 1) == safetyKey("u", 2) || safetyKey("u", 1) == safetyKey("v", 1) {
		t.Error("two users' or two prefixes' sessions share a key")
	}
}
