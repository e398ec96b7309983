package kv

import (
	"bufio"
	"context"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
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

// bufferedTransport is TCP with each connection's reads buffered.
type bufferedTransport struct{ transport.Transport }

func (t bufferedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.Transport.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return newBufferedConn(c), nil
}

func (t bufferedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.Transport.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return bufferedListener{l}, nil
}

type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newBufferedConn(c), nil
}

// bufferedConn reads c through a buffer; writes go straight to c.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func newBufferedConn(c net.Conn) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, zmqReadBuffer)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
