//go:build !linux

package netwake

import "syscall"

// canHold: elsewhere a mark does not hold the poller's wakeups.
const canHold = false

// setRcvLowat does nothing: the mark's hold on the poller is Linux's.
func setRcvLowat(syscall.RawConn, int) {}

// tryRead reads nothing: a held socket is read the usual way.
func tryRead(syscall.RawConn, []byte) int { return 0 }
