package kv

import (
	"net"
	"testing"
	"time"
)

// While events keep coming, the connection is read once an interval:
// a read after another waits for the end of the other's interval and
// takes in one what came meanwhile; the first read goes at once.
func TestBufferedConnReadsOnceAnInterval(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
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
