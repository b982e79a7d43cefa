//go:build !race

package sim

// raceEnabled reports a -race build (heavy tests skip themselves under it).
const raceEnabled = false
