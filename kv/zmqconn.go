package kv

import (
	"bufio"
	"context"
	"net"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/turnpike-gateway/turnpike/internal/netwake"
)

// bufferedTCP names the zmq4 transport a Subscriber dials and listens on
// for a tcp:// address: TCP whose reads go through a buffer. zmq4 reads a
// message frame by frame, each frame's header and then its body by
// io.ReadFull on the connection, so a batch of three frames costs six
// system calls on a bare TCP connection; through the buffer, one takes in
// what the kernel holds, often several batches.
const bufferedTCP = "turnpike+tcp"

// zmqReadBuffer is the size of a connection's read buffer: a batch of
// KV events is a few hundred bytes to a few kilobytes.
const zmqReadBuffer = 64 << 10

func init() {
	if err := zmq4.RegisterTransport(bufferedTCP, bufferedTransport{transport.New("tcp")}); err != nil {
		panic(err)
	}
}

// zmqAddr is addr on the buffered transport when it is a tcp:// one.
func zmqAddr(addr string) string {
	if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
		return bufferedTCP + "://" + rest
	}
	return addr
}

// readIntervalKey carries a Subscriber's ReadInterval, in the context its
// socket dials or listens with, to the connections of bufferedTransport.
type readIntervalKey struct{}

// bufferedTransport is TCP with each connection's reads buffered.
type bufferedTransport struct{ transport.Transport }

func (t bufferedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.Transport.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	every, _ := ctx.Value(readIntervalKey{}).(time.Duration)
	return newBufferedConn(c, every), nil
}

func (t bufferedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.Transport.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	every, _ := ctx.Value(readIntervalKey{}).(time.Duration)
	return bufferedListener{l, every}, nil
}

type bufferedListener struct {
	net.Listener
	every time.Duration
}

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newBufferedConn(c, l.every), nil
}

// bufferedConn reads c through a buffer, from the connection at most once
// every interval (SubscriberConfig.ReadInterval) while data keeps coming;
// writes go straight to c.
type bufferedConn struct {
	// Conn's wakeups are held between the reads of an interval.
	*netwake.Conn
	r     *bufio.Reader
	every time.Duration
	// last is when the last read from the connection returned, zero
	// before the first.
	last time.Time
}

func newBufferedConn(c net.Conn, every time.Duration) *bufferedConn {
	b := &bufferedConn{Conn: netwake.NewConn(c), every: every}
	b.r = bufio.NewReaderSize(connReads{b}, zmqReadBuffer)
	return b
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connReads is the connection as its buffer reads it.
type connReads struct{ c *bufferedConn }

// quietPolls is how many intervals' ends a connection that has sent
// nothing is polled at before its reader waits for its next byte: an
// engine whose events pause for a step or two is read with the others at
// an interval's end, in the one wakeup they share, and one that has gone
// quiet costs no more polls until it sends again.
const quietPolls = 4

// Read waits for the end of the interval of the last read, the socket's
// wakeups held meanwhile, and takes what came; when nothing has, it polls
// again at the end of the next interval, up to quietPolls times, and then
// waits for the next byte (netwake.Conn.Read).
func (r connReads) Read(p []byte) (int, error) {
	c := r.c
	for polls := 0; c.every > 0 && !c.last.IsZero(); polls++ {
		if wait := netwake.Wait(c.last, time.Now(), c.every); wait > 0 {
			c.Conn.Hold(zmqReadBuffer)
			time.Sleep(wait)
		}
		if polls == quietPolls {
			break
		}
		n, ok := c.Conn.Poll(p)
		if !ok {
			break
		}
		c.last = time.Now()
		if n > 0 {
			return n, nil
		}
	}
	n, err := c.Conn.Read(p)
	c.last = time.Now()
	return n, err
}
