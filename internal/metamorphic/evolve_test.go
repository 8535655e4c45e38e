package metamorphic

import "testing"

// TestEvolveFires checks that the evolve knob changes the topology in most
// cases of seeds 1..coverSeeds, with every other knob on: it is not a knob
// that other capabilities turn off. A property of the generator (no case
// is run).
func TestEvolveFires(t *testing.T) {
	k := DefaultKnobs()
	if !k.Evolve {
		t.Fatal("the evolve knob is off by default")
	}
	fired, restarts := 0, 0
	for s := uint64(1); s <= coverSeeds; s++ {
		c := Generate(s, k)
		if c.EvolveAt > 0 {
			fired++
			if c.EvolveTable < 0 || c.EvolveTable >= len(c.Tables) {
				t.Fatalf("seed %d: evolve table %d of %d tables", s, c.EvolveTable, len(c.Tables))
			}
		}
		for i, r := range c.Restart {
			if r && (i >= len(c.Reset) || !c.Reset[i]) {
				restarts++
				break
			}
		}
	}
	t.Logf("evolution in %d of %d seeds (%d have a restart that is not a reset)", fired, coverSeeds, restarts)
	if fired*2 < restarts {
		t.Errorf("evolution in %d of %d seeds with a restart that is not a reset: want at least half", fired, restarts)
	}
}
