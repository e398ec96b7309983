//go:build race

package responses

// raceEnabled: the race detector changes allocation counts, so tests of
// them skip.
const raceEnabled = true
