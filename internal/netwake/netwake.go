package netwake

import (
	"syscall"
	"time"
)

// Hold raises rc's receive low-water mark to n bytes: until Release, the
// poller hears of the socket only once n bytes have come or it ends, and
// a read that waits, waits for n bytes; TryRead takes what has come.
// Outside Linux, or when rc is nil, it does nothing.
func Hold(rc syscall.RawConn, n int) {
	if rc != nil {
		setRcvLowat(rc, n)
	}
}

// Release lowers rc's receive low-water mark to a byte, the default: the
// socket wakes its reader at each arrival again. Call it before a read
// that may wait.
func Release(rc syscall.RawConn) {
	if rc != nil {
		setRcvLowat(rc, 1)
	}
}

// TryRead reads into p what the held socket rc has, without waiting: the
// bytes read, or 0 when none have come (or the connection ended or
// failed), and the reader is to Release rc and read it the usual way,
// which waits for the next byte or says how it ended. A reader that reads
// a held socket this way while bytes keep coming stays held, without a
// Hold and a Release an interval.
func TryRead(rc syscall.RawConn, p []byte) int {
	if rc == nil || len(p) == 0 {
		return 0
	}
	return tryRead(rc, p)
}

// Wait is how long from now until the end of the interval of length every
// that last fell in, intervals cut from one clock for every caller; zero
// or less when that interval has ended.
func Wait(last, now time.Time, every time.Duration) time.Duration {
	return last.Truncate(every).Add(every).Sub(now)
}

// Socket is c's socket, for Hold and Release; nil when c has none.
func Socket(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
