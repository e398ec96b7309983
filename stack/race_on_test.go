//go:build race

package stack

// raceEnabled: heap measurements are skipped under the race detector.
const raceEnabled = true
