package sessions

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// brokenPins is a PinStore that cannot load its pins.
type brokenPins struct{ MemPinStore }

func (*brokenPins) LoadPins(context.Context) ([]Pin, error) { return nil, errors.New("store down") }

// TestStoreStartAndClose: Start brings back the pins of a previous run, or
// starts without them when the PinStore fails; Close joins the sweep, and
// closing twice is harmless.
func TestStoreStartAndClose(t *testing.T) {
	ctx := context.Background()
	var saved MemPinStore
	saved.PutPin(ctx, "acme", "sess-1", "10.0.0.1:8000")
	for _, c := range []struct {
		name string
		pins PinStore
		want string
	}{
		{"restored", &saved, "10.0.0.1:8000"},
		{"store down", &brokenPins{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewStore(Options{Pins: c.pins, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if ep, _ := s.Pinned("acme", "sess-1", time.Now()); ep != c.want {
				t.Errorf("pinned to %q after Start, want %q", ep, c.want)
			}
			if err := s.Start(ctx); err == nil {
				t.Error("a second Start succeeded")
			}
			for range 2 {
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
