package driver

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress draws a plain-text progress bar: requests done of total, rate,
// errors. On a terminal it redraws one line with \r; elsewhere (a file, a
// CI log) it writes a line every lineInterval.
type progress struct {
	w        io.Writer
	tty      bool
	label    string
	total    atomic.Int64
	done     atomic.Int64
	errs     atomic.Int64
	start    time.Time
	stop     chan struct{}
	finished sync.WaitGroup
}

const (
	ttyInterval  = 200 * time.Millisecond
	lineInterval = 5 * time.Second
	barWidth     = 30
	ttyLineWidth = 100
)

func newProgress(w io.Writer, label string, total int) *progress {
	if w == nil {
		w = os.Stderr
	}
	p := &progress{w: w, tty: isTerminal(w), label: label, start: time.Now(), stop: make(chan struct{})}
	p.total.Store(int64(total))
	return p
}

// isTerminal reports whether w is a character device, without a terminal
// library: good enough to choose between \r redraws and plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run draws until close; call it once, in its own goroutine.
func (p *progress) run() {
	p.finished.Add(1)
	go func() {
		defer p.finished.Done()
		every := lineInterval
		if p.tty {
			every = ttyInterval
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw(false)
			case <-p.stop:
				p.draw(true)
				return
			}
		}
	}()
}

func (p *progress) add(failed bool) {
	p.done.Add(1)
	if failed {
		p.errs.Add(1)
	}
}

func (p *progress) close() {
	close(p.stop)
	p.finished.Wait()
}

func (p *progress) draw(final bool) {
	if p.w == io.Discard {
		return
	}
	fmt.Fprint(p.w, p.line(time.Since(p.start), final))
}

// line renders one update. It is separate from draw so tests can read it.
func (p *progress) line(elapsed time.Duration, final bool) string {
	done, total, errs := p.done.Load(), p.total.Load(), p.errs.Load()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	var b strings.Builder
	if p.tty {
		b.WriteString("\r")
	}
	b.WriteString(p.label)
	b.WriteString(" ")
	if total > 0 {
		filled := int(float64(barWidth) * float64(min(done, total)) / float64(total))
		fmt.Fprintf(&b, "[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), done, total)
	} else {
		fmt.Fprintf(&b, "%d done", done)
	}
	fmt.Fprintf(&b, "  %.1f req/s  %d errors  %s", rate, errs, elapsed.Truncate(100*time.Millisecond))
	if p.tty {
		// Pad over the tail of a longer previous line.
		if n := ttyLineWidth - b.Len(); n > 0 {
			b.WriteString(strings.Repeat(" ", n))
		}
		if final {
			b.WriteString("\n")
		}
	} else {
		b.WriteString("\n")
	}
	return b.String()
}
