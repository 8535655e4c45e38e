//go:build race

package topology_test

// raceEnabled shortens tests whose children run ten times slower under the
// race detector.
const raceEnabled = true
