package wait

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestGroup(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Group(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Group with a goroutine still running and ctx ended = %v, want context.Canceled", err)
	}
	close(release)
	if err := Group(t.Context(), &wg); err != nil {
		t.Fatalf("Group after the goroutine returned = %v, want nil", err)
	}
}
