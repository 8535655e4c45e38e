//go:build !race

package planner_test

// raceEnabled reports whether the race detector is on; it slows the
// exhaustive test about eightfold.
const raceEnabled = false
