package iggytest

import "testing"

// TestScenariosRealServer runs the same scenarios against a real Iggy 0.8
// server when STRAND_IGGY_ADDR (and STRAND_IGGY_USER, STRAND_IGGY_PASSWORD,
// default iggy/iggy) are set, so the broker can be compared with the real
// thing; otherwise it skips.
func TestScenariosRealServer(t *testing.T) {
	tg := realTarget(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, tg) })
	}
}
