//go:build unix

package gateway

import "syscall"

// mapStage maps n bytes of anonymous memory for a stage; where the system
// will not, the stage is an ordinary slice, for the collector.
func mapStage(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, 0, n)
	}
	return b[:0]
}

// unmapStage gives a stage's memory back to the system. (A slice that
// mapStage made instead is not a mapping: syscall.Munmap refuses it, and
// the collector has it.)
func unmapStage(b []byte) {
	syscall.Munmap(b[:cap(b)])
}
