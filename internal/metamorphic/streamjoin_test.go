package metamorphic

import "testing"

// The default run's seeds exercise every way of reading a table and the
// deleting join sides (the generator is deterministic: this checks the
// derivations, not luck).
func TestDefaultSeedsCoverJoins(t *testing.T) {
	kinds := map[JoinKind]int{}
	deleting, joins, cross, global, globalReads := 0, 0, 0, 0, 0
	for _, s := range defaultSeedList {
		c := Generate(s, DefaultKnobs())
		for _, k := range c.readKinds() {
			kinds[k]++
		}
		deleting += len(c.deleters())
		joins += len(c.joins())
		for _, t := range c.crossReads() {
			cross++
			if c.Tables[t][0] == 'g' {
				globalReads++
			}
		}
		if c.globalInput() >= 0 {
			global++
		}
	}
	t.Logf("seeds %v: reads %v, joins %d, deleting join sides %d, reads of other inputs' tables %d (of global tables %d), global inputs %d",
		defaultSeedList, kinds, joins, deleting, cross, globalReads, global)
	for _, k := range []JoinKind{ReadLookup, ReadLeft, ReadInner} {
		if kinds[k] == 0 {
			t.Errorf("no node of the default seeds reads its table as a %s", k)
		}
	}
	if deleting == 0 {
		t.Error("no join side of the default seeds has deletes")
	}
	if cross == 0 || global == 0 || globalReads == 0 {
		t.Error("no node of the default seeds reads another input's table, or no case has a global input")
	}
}
