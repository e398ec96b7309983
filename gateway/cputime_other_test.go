//go:build !unix

package gateway

// processCPU is not read here.
func processCPU() (int64, bool) { return 0, false }
