//go:build race

package main

// raceEnabled shortens the heaviest end-to-end run under the race
// detector (STRAND_SOAK=1 keeps the full size).
const raceEnabled = true
