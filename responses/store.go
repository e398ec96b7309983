package responses

import (
	"encoding/json"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// Record is what the store keeps for a response: the client-visible object
// plus what turnpike needs to rebuild its context.
type Record struct {
	Tenant    string         `json:"tenant"`
	ExpiresAt int64          `json:"expires_at"`
	Response  *wire.Response `json:"response"`
	// Conversation is the conversation the response belongs to, if any.
	Conversation string `json:"conversation,omitempty"`
	// Session is the session the response's turn was counted in (see
	// sessions.Derive); a response continuing it with
	// previous_response_id continues the session.
	Session string `json:"session,omitempty"`
	// Input is the response's own input items until it ends; then they
	// live in the chain at the head of Own.
	Input []wire.Item `json:"input,omitempty"`
	// Context is the response's whole context, its own items included:
	// the manifest a next turn continues. Usually one segment.
	Context []Segment `json:"context,omitempty"`
	// Own is the response's own items in the chain; the first Inputs of
	// them are its input items.
	Own    Segment `json:"own"`
	Inputs int     `json:"inputs"`
	// Job is the create request of a background response that has not
	// ended, kept so it can be re-run after a restart.
	Job *Job `json:"job,omitempty"`
}

// Job is a background response's work: its decoded request body, and how
// many times it has been started.
type Job struct {
	Request  json.RawMessage `json:"request"`
	Attempts int             `json:"attempts"`
}

// Segment is a run of consecutive items of one chain, [From, To).
type Segment struct {
	Chain string `json:"c"`
	From  uint32 `json:"f"`
	To    uint32 `json:"t"`
}

// StreamEvent is one stream event of a background response: its sequence
// number and its JSON.
type StreamEvent struct {
	Seq  int
	Data []byte
}
