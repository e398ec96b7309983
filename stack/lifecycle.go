package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// component is the one life cycle of the gateway's long-lived parts: New
// builds one without starting anything, Start starts it, Close stops it
// and joins what it started, up to its context.
type component interface {
	Start(ctx context.Context) error
	Close(ctx context.Context) error
}

// lifecycle starts the stack's components in dependency order and closes
// them in the reverse order.
type lifecycle struct {
	log *slog.Logger
	// closes run last added first.
	closes []namedClose
}

type namedClose struct {
	name  string
	close func(ctx context.Context) error
}

// start starts c and, once it has started, owes its Close to close.
func (l *lifecycle) start(ctx context.Context, name string, c component) error {
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	l.closes = append(l.closes, namedClose{name, c.Close})
	return nil
}

// opened owes close to Close, for what is opened rather than started and
// closes without a context: the state store.
func (l *lifecycle) opened(name string, close func() error) {
	l.closes = append(l.closes, namedClose{name, func(context.Context) error { return close() }})
}

// close closes every started component, last started first, and joins
// their errors.
func (l *lifecycle) close(ctx context.Context) error {
	var errs []error
	for i := len(l.closes) - 1; i >= 0; i-- {
		c := l.closes[i]
		if err := c.close(ctx); err != nil {
			l.log.Warn("stopping failed", "component", c.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", c.name, err))
		}
	}
	l.closes = nil
	return errors.Join(errs...)
}

// Every long-lived component of the gateway has the one life cycle.
var (
	_ component = (*pools.Registry)(nil)
	_ component = (*kv.Subscriber)(nil)
	_ component = subscriptions(nil)
	_ component = (*kv.Peers)(nil)
	_ component = (*pools.LoadShare)(nil)
	_ component = (*tracing.Provider)(nil)
	_ component = (*sessions.AsyncPinStore)(nil)
	_ component = (*sessions.Store)(nil)
	_ component = (*turns.Controller)(nil)
	_ component = (*responses.Service)(nil)
	_ component = (*batch.Service)(nil)
	_ component = (*batch.Intake)(nil)
	_ component = (*admin.Service)(nil)
	_ component = (*gateway.Server)(nil)
	_ component = (*Stack)(nil)
	_ component = (*sim.Fleets)(nil)
)
