package budgets

import (
	"context"
	"net/http"
	"sync"
)

// Note carries the state of a request's budgets from the turn that
// reserved them (deep under the handler, perhaps several turns of one
// request) to the handler that writes the answer's headers. Its zero
// value is empty; a nil Note takes and sets nothing.
type Note struct {
	mu     sync.Mutex
	limits Limits // zero: no budget, no header
}

type noteKey struct{}

// WithNote returns ctx carrying a new Note, which Reserve fills for every
// turn begun under ctx, the last one's state winning.
func WithNote(ctx context.Context) (context.Context, *Note) {
	n := new(Note)
	return context.WithValue(ctx, noteKey{}, n), n
}

func noteOf(ctx context.Context) *Note {
	n, _ := ctx.Value(noteKey{}).(*Note)
	return n
}

func (n *Note) put(l *Limits) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.limits = *l
	n.mu.Unlock()
}

// Set writes the noted budgets' headers into h, if a turn noted any.
func (n *Note) Set(h http.Header) {
	if n == nil {
		return
	}
	n.mu.Lock()
	l := n.limits
	n.mu.Unlock()
	l.Set(h)
}
