//go:build race

package testrun

// raceEnabled reports whether the binary is built with -race.
const raceEnabled = true
