package responses

import (
	"context"

	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// Engine is what the service needs of the turn path below it:
// *dispatch.Dispatcher, which runs every turn through sessions, flow
// control, routing and the fleet. Control flows down: the service calls
// it and owns each Turn it gets until it ends the turn.
type Engine interface {
	// Begin runs a turn up to the engine's answer; see dispatch.Dispatcher.
	Begin(ctx context.Context, spec *dispatch.Spec) (*dispatch.Turn, error)
	// Serves reports whether tenant may ask for model and a pool serves it.
	Serves(tenant, model string) bool
	// ContextLength is the model's context window in tokens, 0 if unknown.
	ContextLength(model string) int
	// Tokenizer is the tokenizer the turns of model are counted with.
	Tokenizer(model string) prompt.Tokenizer
}

var _ Engine = (*dispatch.Dispatcher)(nil)
