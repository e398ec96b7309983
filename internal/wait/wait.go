// Package wait joins a component's goroutines on Close, up to a deadline:
// the one shape of "wait for the group, or give up when ctx ends" that the
// components' Close(ctx) methods share.
//
// It imports nothing of ours.
package wait

import (
	"context"
	"sync"
)

// Group waits until wg's goroutines have returned or ctx ends, whichever
// is first, and returns ctx's error in the second case. The goroutines it
// gave up on keep running; the waiter it starts ends with them.
func Group(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
