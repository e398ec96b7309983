package netwake

import (
	"net"
	"syscall"
	"time"
)

// Conn is a connection whose reader can hold its socket's wakeups between
// reads. Its one reader calls Hold and Read; the rest of net.Conn is c's.
type Conn struct {
	net.Conn
	// rc is the socket; nil when c has none (Hold does nothing). held:
	// the receive low-water mark is raised, until a read finds nothing.
	rc   syscall.RawConn
	held bool
}

// NewConn wraps c.
func NewConn(c net.Conn) *Conn {
	w := &Conn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		w.rc, _ = sc.SyscallConn()
	}
	return w
}

// Hold raises the socket's receive low-water mark to n bytes: the poller
// hears of the socket only once n bytes have come or it ends, until a
// Read finds nothing to read. Outside Linux, or without a socket, it does
// nothing.
func (c *Conn) Hold(n int) {
	if c.held || c.rc == nil || !canHold {
		return
	}
	setRcvLowat(c.rc, n)
	c.held = true
}

// Read reads c. While its wakeups are held it takes what has come without
// waiting, so that a reader reading once an interval stays held with no
// system call but its read; the first read that finds nothing lowers the
// mark to a byte again and waits as usual, for the next byte, not for a
// full batch. A passed deadline fails both.
func (c *Conn) Read(p []byte) (int, error) {
	if c.held {
		if n := tryRead(c.rc, p); n > 0 {
			return n, nil
		}
		setRcvLowat(c.rc, 1)
		c.held = false
	}
	return c.Conn.Read(p)
}

// Poll takes what has come while c's wakeups are held, without waiting
// and with the mark left raised: n is 0 when nothing has, or when the
// connection has ended (the next Read says so). ok is false when c cannot
// be polled (not held, no socket, not Linux): Read it as usual. A reader
// that reads once an interval polls a quiet socket at the next interval's
// end instead of waking for its next byte whenever it comes.
func (c *Conn) Poll(p []byte) (n int, ok bool) {
	if !c.held {
		return 0, false
	}
	return tryRead(c.rc, p), true
}

// Wait is how long from now until the end of the interval of length every
// that last fell in, intervals cut from one clock for every caller; zero
// or less when that interval has ended.
func Wait(last, now time.Time, every time.Duration) time.Duration {
	return last.Truncate(every).Add(every).Sub(now)
}
