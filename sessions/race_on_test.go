//go:build race

package sessions

// raceEnabled: heap measurements are skipped under the race detector.
const raceEnabled = true
