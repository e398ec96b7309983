//go:build unix

package gateway

import "syscall"

// processCPU is the CPU time the process has spent, user and system, in
// nanoseconds; false where it cannot be read.
func processCPU() (int64, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
