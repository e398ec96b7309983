//go:build !race

package sessions

const raceEnabled = false
