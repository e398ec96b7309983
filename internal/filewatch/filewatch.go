package filewatch

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher watches the directory of one file. Build it with New.
type Watcher struct {
	w    *fsnotify.Watcher
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New watches the directory of path. Watch before the first read of the
// file, so that a change between the two is not lost.
func New(path string) (*Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("filewatch: %w", err)
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("filewatch: watch %s: %w", dir, err)
	}
	return &Watcher{w: w, stop: make(chan struct{})}, nil
}

// Run calls fn from a goroutine of its own until Close: at every change
// in the directory (event names it), at every watch error (err), and
// every resync when no change came. Any change in the directory may be
// the file's. Run is called once.
func (w *Watcher) Run(resync time.Duration, fn func(event string, err error)) {
	w.wg.Go(func() {
		t := time.NewTicker(resync)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case ev, ok := <-w.w.Events:
				if !ok {
					return
				}
				fn(ev.String(), nil)
			case err, ok := <-w.w.Errors:
				if !ok {
					return
				}
				fn("", err)
			case <-t.C:
				fn("resync", nil)
			}
		}
	})
}

// Close stops watching and waits, up to ctx, for a call of Run's fn in
// progress to return.
func (w *Watcher) Close(ctx context.Context) error {
	w.once.Do(func() {
		close(w.stop)
		w.w.Close()
	})
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("filewatch: close: %w", ctx.Err())
	}
}
