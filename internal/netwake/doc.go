// Package netwake is machinery with no domain: it lets a reader that
// reads a connection once an interval, not as each piece arrives, keep
// the pieces from waking the process meanwhile.
//
// A Go program hears of a socket's data from the runtime's poller, which
// the kernel tells of each arrival whether or not a goroutine waits to
// read: a stream of tokens a write at a time costs a wakeup a token.
// [Conn.Hold] raises the socket's receive low-water mark (SO_RCVLOWAT)
// so that Linux tells the poller nothing until that many bytes have come
// or the connection ends; [Conn.Read] takes what has come without
// waiting, and lowers the mark again before a read that waits. [Wait]
// cuts time into intervals on one clock, so that every reader batching on
// the same interval wakes at the same moment: one wakeup an interval for
// them all.
package netwake
