package kv

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// While events keep coming, the connection is read once an interval:
// a read after another waits for the end of the other's interval and
// takes in one what came meanwhile; the first read goes at once.
func TestBufferedConnReadsOnceAnInterval(t *testing.T) {
	w, nc := loopbackPair(t)
	const every = 500 * time.Millisecond
	c := newBufferedConn(nc, every)
	defer c.Close()

	buf := make([]byte, 64)
	w.Write([]byte("one"))
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "one" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	first := c.last
	w.Write([]byte("two"))
	w.Write([]byte("three"))
	n, err = c.Read(buf)
	if err != nil || string(buf[:n]) != "twothree" {
		t.Fatalf("second read: %q, %v; want both writes at once", buf[:n], err)
	}
	if end := first.Truncate(every).Add(every); c.last.Before(end) {
		t.Fatalf("the second read returned %v after the first, before the end of its interval (%v after it)", c.last.Sub(first), end.Sub(first))
	}
}

// TestBufferedConnPollsAQuietConnection: a connection that has sent
// nothing by the end of an interval is polled again at the end of the
// next, so that what it sends meanwhile is read then, with the other
// connections' events, not as soon as it comes.
func TestBufferedConnPollsAQuietConnection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a raised receive mark holds the poller's wakeups on Linux only; elsewhere the reader waits for the next byte")
	}
	w, nc := loopbackPair(t)
	const every = time.Second
	c := newBufferedConn(nc, every)
	defer c.Close()

	buf := make([]byte, 64)
	w.Write([]byte("one"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "one" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	first := c.last
	read := make(chan string, 1)
	go func() {
		n, err := c.Read(buf)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(buf[:n])
	}()
	// Nothing by the end of the first interval; "two" well inside the
	// second.
	end := first.Truncate(every).Add(every)
	time.Sleep(time.Until(end.Add(every * 2 / 5)))
	w.Write([]byte("two"))
	if got := <-read; got != "two" {
		t.Fatalf("second read: %q, want two", got)
	}
	if next := end.Add(every); c.last.Before(next) {
		t.Fatalf("the second read returned %v after the first, before the end of the interval its byte came in (%v after it)", c.last.Sub(first), next.Sub(first))
	}
}

// loopbackPair is a TCP connection over loopback: the writer's end and the
// reader's, both closed when the test ends.
func loopbackPair(t *testing.T) (w, r net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if w, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if r, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	return w, r
}
