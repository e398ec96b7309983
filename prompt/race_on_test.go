//go:build race

package prompt

// raceEnabled: heap measurements are skipped under the race detector.
const raceEnabled = true
