package dispatch

import (
	"net/http"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/sessions"
)

func TestPrefixFingerprint(t *testing.T) {
	msgs := func(ms ...string) *prompt.Prompt {
		p := &prompt.Prompt{Model: "m"}
		for i := 0; i+1 < len(ms); i += 2 {
			p.Messages = append(p.Messages, prompt.Message{Role: ms[i], Content: ms[i+1]})
		}
		return p
	}
	first := msgs("system", "be brief", "user", "fix the build")
	later := msgs("system", "be brief", "user", "fix the build", "assistant", "done", "user", "now the tests")
	withTools := msgs("system", "be brief", "user", "fix the build")
	withTools.Tools = []byte(`[{"type":"function","function":{"name":"f"}}]`)
	if prefixFingerprint(first) != prefixFingerprint(later) {
		t.Error("a later turn of the same conversation has another fingerprint")
	}
	if prefixFingerprint(first) != prefixFingerprint(withTools) {
		t.Error("the tools changed the fingerprint")
	}
	for name, p := range map[string]*prompt.Prompt{
		"another question":      msgs("system", "be brief", "user", "write docs"),
		"another system prompt": msgs("system", "be verbose", "user", "fix the build"),
		"roles differ":          msgs("developer", "be brief", "user", "fix the build"),
	} {
		if prefixFingerprint(p) == prefixFingerprint(first) {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	// Only the opening's first fingerprintBytes count: a huge first
	// message costs no more to digest.
	huge := strings.Repeat("x", fingerprintBytes)
	if prefixFingerprint(msgs("system", huge, "user", "a")) != prefixFingerprint(msgs("system", huge, "user", "b")) {
		t.Error("read beyond fingerprintBytes")
	}
	if prefixFingerprint(&prompt.Prompt{Text: "abc"}) == prefixFingerprint(&prompt.Prompt{Text: "abd"}) {
		t.Error("text prompts fingerprint alike")
	}
}

// TestSessionInputs: a Spec's session fields reach sessions.Derive, the
// safety identifier with the prompt's fingerprint.
func TestSessionInputs(t *testing.T) {
	p := &prompt.Prompt{Messages: []prompt.Message{{Role: "user", Content: "hi"}}}
	spec := &Spec{SafetyIdentifier: "u1", Prompt: p, NewChain: "resp_1"}
	key, src := sessions.Derive(sessionInputs(spec))
	if src != sessions.SourceSafetyIdentifier || !strings.HasPrefix(key, "sid:u1:") {
		t.Errorf("safety identifier: %q, %v", key, src)
	}
	spec.PromptCacheKey = "thread-1"
	if key, src = sessions.Derive(sessionInputs(spec)); key != "thread-1" || src != sessions.SourcePromptCacheKey {
		t.Errorf("prompt cache key: %q, %v", key, src)
	}
	spec.ClientHeader = http.Header{"Session-Id": {"codex-1"}}
	if key, src = sessions.Derive(sessionInputs(spec)); key != "codex-1" || src != sessions.SourceHeader {
		t.Errorf("header: %q, %v", key, src)
	}
	if _, src = sessions.Derive(sessionInputs(&Spec{NewChain: "resp_1"})); src != sessions.SourceNewChain {
		t.Errorf("new chain: %v", src)
	}
}
