package dispatch

import (
	"github.com/cespare/xxhash/v2"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// SessionKey is the session spec's turn belongs to, as Begin derives it
// (sessions.Derive): a layer above that keys its own caches by session
// (the incremental token cache) uses this, not a derivation of its own.
func SessionKey(spec *Spec) string {
	key, _ := sessions.Derive(sessionInputs(spec))
	return key
}

// sessionInputs is what spec carries that may name its session.
func sessionInputs(spec *Spec) *sessions.Inputs {
	in := &sessions.Inputs{
		Header:           spec.ClientHeader,
		Conversation:     spec.Conversation,
		Chain:            spec.ChainRoot,
		PromptCacheKey:   spec.PromptCacheKey,
		SafetyIdentifier: spec.SafetyIdentifier,
		NewChain:         spec.NewChain,
	}
	if in.SafetyIdentifier != "" && spec.Prompt != nil {
		in.PrefixFingerprint = prefixFingerprint(spec.Prompt)
	}
	return in
}

// fingerprintBytes bounds the bytes of a prompt's opening that
// prefixFingerprint reads.
const fingerprintBytes = 64 << 10

// prefixFingerprint digests the opening of p as its chat template renders
// it: the messages up to and including the first user message (the
// system prompt and the first question), at most fingerprintBytes of
// them. A stateless client resends that opening unchanged on every turn of
// a conversation, so with a safety_identifier it names the conversation;
// the tools, which agents may change between turns, are left out. A text
// prompt contributes its first fingerprintBytes. It never returns 0 (0 is
// "no fingerprint" to sessions.Derive).
func prefixFingerprint(p *prompt.Prompt) uint64 {
	var d xxhash.Digest
	d.Reset()
	left := fingerprintBytes
	write := func(s string) {
		if left <= 0 {
			return
		}
		if len(s) > left {
			s = s[:left]
		}
		d.WriteString(s)
		left -= len(s)
	}
	if p.Messages == nil {
		write(p.Text)
	}
	for i := range p.Messages {
		m := &p.Messages[i]
		write("<|")
		write(m.Role)
		write("|>\n")
		write(m.Content)
		write("\n")
		if m.Role == "user" {
			break
		}
	}
	if h := d.Sum64(); h != 0 {
		return h
	}
	return 1
}
