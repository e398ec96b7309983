package responses

import (
	"context"
	"encoding/json"
	"time"

	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// Store keeps responses, conversations, their items, background jobs and
// stream events. StateStore is the implementation, over a namespace of
// the state store (embedded Pebble, or a shared store behind the same
// state.Namespace).
//
// Every record carries its tenant. Methods that take a tenant check it
// and answer ErrNotFound for another tenant's id. Methods that take
// segments or a response id alone trust the caller to have read (and so
// checked) the owning record first.
type Store interface {
	// GetResponse reads a response record.
	GetResponse(ctx context.Context, tenant, id string) (*Record, error)
	// PutResponse writes a record that has not ended (a background
	// response as it is queued and started). sync makes it durable before
	// returning. A record with a Job is listed by PendingJobs.
	PutResponse(ctx context.Context, rec *Record, sync bool) error
	// EndResponse appends items (the response's input, then its output)
	// after base, the context it continues, and writes rec and, if not
	// nil, final (a background response's terminal stream event), all in
	// one synced batch: the event log never announces an end the record
	// does not hold. It sets rec.Context and rec.Own, clears rec.Input and
	// rec.Job. With rec.Conversation set the items go to the end of that
	// conversation and base is ignored.
	EndResponse(ctx context.Context, rec *Record, base []Segment, items []wire.Item, final *StreamEvent) error
	// DeleteResponse removes a response and its events. Its items stay
	// while a later response's context may use them; retention collects
	// them with their chain.
	DeleteResponse(ctx context.Context, tenant, id string) error
	// LoadContext reads the items of segs in order: one range scan each.
	LoadContext(ctx context.Context, segs []Segment) ([]wire.Item, error)
	// ListItems pages through the items of one segment; opts.After names
	// an item of tenant's in it.
	ListItems(ctx context.Context, tenant string, seg Segment, opts ListOptions) ([]wire.Item, bool, error)
	// ListContext pages through the items of segs read as one list, as a
	// model saw them: before the last compaction item, only the messages
	// that outlive one (compacted); opts.After names an item of tenant's
	// in it.
	ListContext(ctx context.Context, tenant string, segs []Segment, opts ListOptions) ([]wire.Item, bool, error)
	// GetItem reads an item by id, wherever it is stored.
	GetItem(ctx context.Context, tenant, id string) (wire.Item, Segment, error)

	// CreateConversation stores a new conversation with its first items.
	CreateConversation(ctx context.Context, tenant string, c *wire.Conversation, items []wire.Item) error
	// GetConversation reads a conversation and the segment of its items.
	GetConversation(ctx context.Context, tenant, id string) (*wire.Conversation, Segment, error)
	// UpdateConversation replaces a conversation's metadata.
	UpdateConversation(ctx context.Context, tenant, id string, metadata map[string]string) (*wire.Conversation, error)
	// DeleteConversation removes a conversation and its items.
	DeleteConversation(ctx context.Context, tenant, id string) error
	// AppendItems adds items to the end of a conversation.
	AppendItems(ctx context.Context, tenant, conv string, items []wire.Item) error
	// DeleteItem removes one item from a conversation.
	DeleteItem(ctx context.Context, tenant, conv, id string) error

	// AppendEvent keeps a background response's stream event seq, unsynced:
	// the response's next synced write makes it durable.
	AppendEvent(ctx context.Context, id string, seq int, event []byte) error
	// Events returns the stored events of a response after seq after.
	Events(ctx context.Context, id string, after int) ([][]byte, error)
	// DropEvents forgets a response's events (a job about to be re-run).
	DropEvents(ctx context.Context, id string) error
	// PendingJobs lists the background responses that have not ended.
	PendingJobs(ctx context.Context) ([]*Record, error)
	// GetJob reads background response id's record, whatever its
	// tenant, for the gateway that takes it over.
	GetJob(ctx context.Context, id string) (*Record, error)
	// Namespace is the state store's namespace under the Store, where
	// the leases and cancel requests of background responses are kept
	// (jobKeys).
	Namespace() state.Namespace

	// Secret returns the secret kept under name, generating and keeping
	// one with gen when there is none; it is never collected.
	Secret(ctx context.Context, name string, gen func() []byte) ([]byte, error)

	// Collect deletes what expired before now and reports how many records
	// it removed.
	Collect(ctx context.Context, now time.Time) (int, error)

	// Health is nil while the store answers, else an error of class
	// ErrUnavailable; it asks the store nothing (state.DB.Health).
	Health() error
}

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
