//go:build race

package hf

// raceEnabled: heap measurements are skipped under the race detector.
const raceEnabled = true
