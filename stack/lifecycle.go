package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// lifecycle starts the stack's long-lived components in dependency order
// and stops them in the reverse order: the one place that order lives.
type lifecycle struct {
	log *slog.Logger
	// stops run last added first.
	stops []namedStop
}

type namedStop struct {
	name string
	stop func(ctx context.Context) error
}

// start runs start (nil: the component needs no starting) and, once it has
// succeeded, owes stop (nil: nothing to stop) to Close.
func (l *lifecycle) start(ctx context.Context, name string, start, stop func(ctx context.Context) error) error {
	if start != nil {
		if err := start(ctx); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
	}
	if stop != nil {
		l.stops = append(l.stops, namedStop{name, stop})
	}
	return nil
}

// close stops every started component, last started first, and joins
// their errors.
func (l *lifecycle) close(ctx context.Context) error {
	var errs []error
	for i := len(l.stops) - 1; i >= 0; i-- {
		s := l.stops[i]
		if err := s.stop(ctx); err != nil {
			l.log.Warn("stopping failed", "component", s.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
		}
	}
	l.stops = nil
	return errors.Join(errs...)
}

// noErr adapts a stop that cannot fail.
func noErr(f func()) func(context.Context) error {
	return func(context.Context) error { f(); return nil }
}

// startNoErr adapts a start that cannot fail.
func startNoErr(f func()) func(context.Context) error {
	return func(context.Context) error { f(); return nil }
}
