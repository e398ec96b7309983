package sessions

import (
	"net/http"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Source says where a session key came from.
type Source uint8

const (
	// SourceNone: the request is sessionless.
	SourceNone Source = iota
	// SourceHeader: an explicit session header.
	SourceHeader
	// SourceConversation: the Responses conversation id.
	SourceConversation
	// SourceChain: the session of the previous_response_id chain.
	SourceChain
	// SourcePromptCacheKey: the request's prompt_cache_key.
	SourcePromptCacheKey
	// SourceSafetyIdentifier: the request's safety_identifier with a
	// fingerprint of the prompt's opening.
	SourceSafetyIdentifier
	// SourceNewChain: the id of the Responses response that starts a
	// chain, when nothing else names the session.
	SourceNewChain
)

var sourceNames = [...]string{"none", "header", "conversation", "chain", "prompt-cache-key", "safety-identifier", "new-chain"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// Headers are the request headers that name a session, in order of
// precedence: turnpike's own, then those agents already send (the Codex
// CLI's session-id and thread-id, Claude Code's, and the affinity and
// underscore spellings other clients use).
var Headers = []string{
	"X-Session-Id",
	"Session-Id",
	"Session_id",
	"Thread-Id",
	"X-Claude-Code-Session-Id",
	"X-Session-Affinity",
}

// MaxKeyLen bounds a session key, in bytes. A longer key (they come from
// clients) is replaced by a digest of it, so that memory per session stays
// bounded while distinct keys stay distinct.
const MaxKeyLen = 128

// Inputs is what a request carries that may name its session. Every field
// is optional; "" (0 for PrefixFingerprint) is absent.
type Inputs struct {
	// Header is the client's request header, read for Headers.
	Header http.Header
	// Conversation is the Responses conversation id.
	Conversation string
	// Chain is the session of the previous_response_id chain the request
	// continues: the session its first response was counted in.
	Chain string
	// PromptCacheKey is the body's prompt_cache_key.
	PromptCacheKey string
	// SafetyIdentifier is the body's safety_identifier. Alone it names a
	// user, not a conversation, so it counts only with PrefixFingerprint.
	SafetyIdentifier string
	// PrefixFingerprint digests the opening of the prompt (the system
	// prompt and first user message, which a stateless client resends
	// unchanged every turn); see the dispatch package.
	PrefixFingerprint uint64
	// NewChain is the id of a Responses response that starts a chain: the
	// last resort, so that its follow-ups (which name it as their chain)
	// join it.
	NewChain string
}

// Derive names the session of a request from, in order: a session header
// (Headers), the Responses conversation, the session of the
// previous_response_id chain, the prompt_cache_key, the safety_identifier
// with the prompt's fingerprint, the id of a response starting a new
// chain. It returns "" and SourceNone for a sessionless request. Keys are
// opaque and scoped by tenant by the Store, not here. It is the one
// derivation of chat completions and Responses alike.
func Derive(in *Inputs) (key string, source Source) {
	if in.Header != nil {
		for _, name := range Headers {
			if v := in.Header.Get(name); v != "" {
				return bounded(v), SourceHeader
			}
		}
	}
	switch {
	case in.Conversation != "":
		return bounded(in.Conversation), SourceConversation
	case in.Chain != "":
		return bounded(in.Chain), SourceChain
	case in.PromptCacheKey != "":
		return bounded(in.PromptCacheKey), SourcePromptCacheKey
	case in.SafetyIdentifier != "" && in.PrefixFingerprint != 0:
		return safetyKey(in.SafetyIdentifier, in.PrefixFingerprint), SourceSafetyIdentifier
	case in.NewChain != "":
		return bounded(in.NewChain), SourceNewChain
	}
	return "", SourceNone
}

// safetyKey joins a safety identifier and a prompt fingerprint into one
// key, bounded like the others.
func safetyKey(id string, fingerprint uint64) string {
	return bounded("sid:" + id + ":" + strconv.FormatUint(fingerprint, 16))
}

func bounded(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	return "xxh:" + strconv.FormatUint(xxhash.Sum64String(key), 16) + ":" + strconv.Itoa(len(key))
}
