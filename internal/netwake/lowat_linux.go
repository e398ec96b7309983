package netwake

import "syscall"

// canHold: Linux keeps a raised mark's readiness from the poller.
const canHold = true

// setRcvLowat sets the socket's SO_RCVLOWAT: Linux neither reports it
// readable to the poller nor wakes a waiting read before n bytes have
// come (or the connection ends), while a read that does not wait takes
// whatever has come. A failure (the connection closed meanwhile) is
// ignored: a socket left at its old mark is read all the same.
func setRcvLowat(rc syscall.RawConn, n int) {
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	})
}

// tryRead reads what the socket holds, without waiting: 0 when nothing
// has come, or the connection ended or failed (the usual read says which).
func tryRead(rc syscall.RawConn, p []byte) int {
	n := 0
	rc.Read(func(fd uintptr) bool {
		if m, err := syscall.Read(int(fd), p); err == nil && m > 0 {
			n = m
		}
		return true // done, whatever came: never wait here
	})
	return n
}
