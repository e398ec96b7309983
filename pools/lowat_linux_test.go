package pools

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// While a stream's connection holds its wakeups, the tokens the engine
// sends tell the poller nothing, and reads take them as long as some have
// come; the first read that finds none waits for the next token as usual.
func TestHoldWakeups(t *testing.T) {
	tokens := make(chan string)
	srv, _ := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for tok := range tokens {
			io.WriteString(w, "data: "+tok+"\n\n")
			w.(http.Flusher).Flush()
		}
	})
	defer close(tokens)
	resp := h1Post(t, newTestH1(), context.Background(), srv.URL, []byte(`{}`))
	defer resp.Body.Close()
	body := resp.Body.(*h1Body)

	// A second poller of our own on the connection's socket, edge
	// triggered as the runtime's.
	raw, err := body.c.Conn.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	raw.Control(func(f uintptr) { fd = int(f) })
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | 1<<31 /* EPOLLET */, Fd: int32(fd)}); err != nil {
		t.Fatal(err)
	}
	events := func() int {
		evs := make([]syscall.EpollEvent, 1)
		n, err := syscall.EpollWait(ep, evs, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// arrived waits until the socket holds the events of these tokens,
	// unread, each in a chunk of its own.
	arrived := func(toks ...string) {
		t.Helper()
		n := 0
		for _, tok := range toks {
			n += len(fmt.Sprintf("%x\r\ndata: %s\n\n\r\n", len("data: "+tok+"\n\n"), tok))
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			var got int32
			raw.Control(func(f uintptr) {
				syscall.Syscall(syscall.SYS_IOCTL, f, syscall.TIOCINQ, uintptr(unsafe.Pointer(&got)))
			})
			if int(got) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the socket holds %d bytes, want %d", got, n)
			}
		}
	}
	read := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		n, err := body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}

	// send has the engine send toks, waits for them to arrive, and
	// checks how many events the poller heard and what one read takes.
	send := func(what string, wantEvents int, toks ...string) {
		t.Helper()
		events()
		want := ""
		for _, tok := range toks {
			tokens <- tok
			want += "data: " + tok + "\n\n"
		}
		arrived(toks...)
		if n := events(); n != wantEvents {
			t.Fatalf("%s: %d events, want %d", what, n, wantEvents)
		}
		if got := read(); got != want {
			t.Fatalf("%s: read %q, want %q at once", what, got, want)
		}
	}
	send("a token on a connection not held", 1, "a")
	HoldWakeups(resp.Body)
	send("three tokens on a held connection", 0, "b", "c", "d")
	// A read that found tokens leaves the connection held.
	send("a token after a read of the held connection", 0, "e")

	// A read that finds nothing releases it and waits for the next token,
	// not for a full batch.
	body.c.SetReadDeadline(time.Now().Add(time.Minute))
	got := make(chan string)
	go func() { got <- read() }()
	for lowat := 0; lowat != 1; time.Sleep(time.Millisecond) {
		raw.Control(func(fd uintptr) {
			lowat, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
		})
	}
	tokens <- "f"
	if g := <-got; g != "data: f\n\n" {
		t.Fatalf("read %q once released", g)
	}
}
