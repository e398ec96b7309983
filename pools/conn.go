package pools

import (
	"context"
	"errors"
	"io"
	"net"
)

// wholeBodyConn is a connection to an engine that writes a request body
// held in memory with one write.
//
// net/http writes a body of known length by copying it through an
// io.LimitedReader, which hides the bytes.Reader beneath, so io.Copy falls
// back to a 32 KiB buffer: a 170 KB agent prompt costs a copy into that
// buffer and six writes, each a trip through the kernel's TCP stack (on
// loopback, through the receiver's too). ReadFrom sees through the limit
// and hands the reader the connection, one write for the rest of the body.
type wholeBodyConn struct {
	net.Conn
}

// ReadFrom writes what r holds. A limited io.WriterTo (net/http's body
// over a bytes.Reader) writes itself, up to the limit, in as few writes as
// it can: one, for a bytes.Reader. Anything else is copied as io.Copy
// would.
func (c wholeBodyConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if wt, ok := lr.R.(io.WriterTo); ok {
			w := &cappedWriter{w: c.Conn, left: lr.N}
			n, err := wt.WriteTo(w)
			lr.N -= n
			return n, err
		}
	}
	// Without this connection's ReadFrom in the way, io.Copy uses the
	// connection's own (splice, sendfile) or a buffer.
	return io.Copy(c.Conn, r)
}

// errPastLimit is a body longer than its limit (the request's
// ContentLength): the limit's bytes are written and the request fails with
// this error, as a failed body read.
var errPastLimit = errors.New("pools: request body longer than its length")

// cappedWriter writes at most left bytes to w.
type cappedWriter struct {
	w    io.Writer
	left int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	var err error
	if int64(len(p)) > c.left {
		p, err = p[:max(c.left, 0)], errPastLimit
	}
	n, werr := c.w.Write(p)
	c.left -= int64(n)
	if werr != nil {
		return n, werr
	}
	return n, err
}

// dialWholeBody wraps dial's connections in wholeBodyConn.
func dialWholeBody(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wholeBodyConn{conn}, nil
	}
}
