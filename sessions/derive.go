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
	// SourceChain: the root of the previous_response_id chain.
	SourceChain
	// SourcePromptCacheKey: the request's prompt_cache_key.
	SourcePromptCacheKey
)

var sourceNames = [...]string{"none", "header", "conversation", "chain", "prompt-cache-key"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// Headers are the request headers that name a session, in order of
// precedence: turnpike's own, then those agents already send.
var Headers = []string{"X-Session-Id", "X-Claude-Code-Session-Id", "X-Session-Affinity", "Session_id"}

// MaxKeyLen bounds a session key, in bytes. A longer key (they come from
// clients) is replaced by a digest of it, so that memory per session stays
// bounded while distinct keys stay distinct.
const MaxKeyLen = 128

// Derive names the session of a request from, in order: a session header,
// the Responses conversation id, the root of the previous_response_id chain,
// the prompt_cache_key. It returns "" and SourceNone for a sessionless
// request. Keys are opaque and scoped by tenant by the Store, not here.
func Derive(h http.Header, conversation, chainRoot, promptCacheKey string) (key string, source Source) {
	for _, name := range Headers {
		if v := h.Get(name); v != "" {
			return bounded(v), SourceHeader
		}
	}
	switch {
	case conversation != "":
		return bounded(conversation), SourceConversation
	case chainRoot != "":
		return bounded(chainRoot), SourceChain
	case promptCacheKey != "":
		return bounded(promptCacheKey), SourcePromptCacheKey
	}
	return "", SourceNone
}

func bounded(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	return "xxh:" + strconv.FormatUint(xxhash.Sum64String(key), 16) + ":" + strconv.Itoa(len(key))
}
