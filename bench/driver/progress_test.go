package driver

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	p := newProgress(io.Discard, "agentic", 10)
	for i := range 4 {
		p.add(i == 0)
	}
	got := p.line(2*time.Second, false)
	want := "agentic [############..................] 4/10  2.0 req/s  1 errors  2s\n"
	if got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	p.tty = true
	if got := p.line(time.Second, true); !strings.HasPrefix(got, "\ragentic") || !strings.HasSuffix(got, " \n") {
		t.Errorf("tty line = %q", got)
	}
	p = newProgress(io.Discard, "isolation burst", 0)
	if got := p.line(time.Second, false); !strings.Contains(got, "0 done") {
		t.Errorf("unknown total: %q", got)
	}
}
