package metamorphic

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// coverSeeds is the range of seeds the default run's seeds are chosen
// from: before issue 33 item 7 the default run was seeds 1..coverSeeds.
const coverSeeds = 40

// defaultSeedList is the default run of TestMeta: seeds of 1..coverSeeds
// that together cover every capability (features) that seeds
// 1..coverSeeds cover, each seed that alone covers one kept, among them
// the group seeds 7, 15, 20, 28 (design §17) and the seeds of the only
// lookup, inner join and deleting join side (12, 13). TestDefaultSeedsCover
// checks it; with STRAND_SOAK=1 TestMeta runs 2000 seeds instead, and
// -meta.seeds=40 runs all of 1..40.
var defaultSeedList = []uint64{1, 4, 7, 9, 12, 13, 15, 20, 28, 34}

// features names the capabilities case c exercises: what the generator's
// knobs turn on, as the case's topology, log and plan show it. A default
// run that covers a feature runs at least one case with it.
func features(c *Case) []string {
	f := map[string]bool{}
	add := func(format string, args ...any) { f[fmt.Sprintf(format, args...)] = true }
	add("parts=%d", c.Parts)
	add("workers>1=%v", c.Workers > 1)
	add("inputs=%d", len(c.Inputs))
	add("poison-policy=%s", c.Poison)
	add("backoff=%v", c.Backoff)
	add("events>=%d", 50*(len(c.Gen)/50))
	for _, in := range c.Inputs {
		switch {
		case in.Global:
			add("input:global")
		case in.Foreign:
			add("input:foreign")
		}
		if in.Reseq {
			add("input:reseq dup-dlq=%v", in.DupDeadLetter)
		}
		if in.SkipTag != 0 {
			add("input:skip")
		}
		for _, t := range in.Types {
			add("type:%s", t.Kind)
			if t.Kind == KindFence {
				add("fence:%s", t.Fence)
			}
		}
	}
	writers := map[int]map[string]bool{}
	for _, n := range c.Nodes {
		kind := c.Inputs[n.Input].Types[n.Type].Kind
		add("node:depth=%d", n.Depth)
		if n.To {
			add("node:to")
		}
		if n.ForEach {
			add("node:foreach")
		}
		if n.CtxFolds && len(n.Tables) > 0 {
			add("node:project-context")
		}
		if len(n.Tables) > 1 {
			add("node:several-tables")
		}
		if n.Depth > 0 && c.Inputs[n.Input].Foreign {
			add("node:keyby-of-foreign")
		}
		if n.Depth > 0 {
			add("node:keyby-of-%s", kind)
		}
		for _, t := range n.Tables {
			if writers[t] == nil {
				writers[t] = map[string]bool{}
			}
			writers[t][n.Topic] = true
		}
	}
	for _, w := range writers {
		if len(w) > 1 {
			add("table:shared")
		}
	}
	for _, rec := range c.Log {
		add("record:%s", rec.Kind)
		for _, k := range rec.Ev.RK {
			switch k {
			case noKey:
				add("record:keyby-no-key")
			case panicKey:
				add("record:keyby-panics")
			}
		}
	}
	for _, fl := range c.Fail {
		add("failure:%s permanent=%v always=%v", fl.Mode, fl.Permanent, fl.Always)
		if n := c.Nodes[fl.Node]; fl.Handler >= len(n.Tables) {
			add("failure:side-effect")
		}
	}
	restarts := 0
	for i := range c.Chunks {
		if c.Clock[i] {
			add("plan:clock")
		}
		if c.Restart[i] {
			add("plan:restart reset=%v", c.Reset[i])
			restarts++
		}
	}
	if restarts > 1 {
		add("plan:restarts>1")
	}
	for _, b := range c.Batches {
		add("plan:batch-1000=%v", b == 1000)
	}
	if c.timeNode() >= 0 {
		add("time")
	}
	for _, j := range c.joins() {
		add("join inner=%v", j.Inner)
	}
	if len(c.deleters()) > 0 {
		add("join:deleting-side")
	}
	for _, k := range c.readKinds() {
		add("read:%s", k)
	}
	for _, t := range c.crossReads() {
		add("read:cross")
		if c.Tables[t][0] == 'g' {
			add("read:cross-global")
		}
	}
	if c.EvolveAt > 0 {
		add("evolve add=%v", c.EvolveAdd)
	}
	if g := c.Group; g != nil {
		add("group:instances=%d", g.Instances)
		add("group:standbys=%d", g.Standbys)
		add("group:snapshot-every=%d", g.SnapshotEvery)
		for _, op := range g.Ops {
			add("group:%s", op)
		}
	}
	return slices.Sorted(maps.Keys(f))
}

// coverage maps each feature the seeds' cases exercise to those seeds.
func coverage(seeds []uint64) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, s := range seeds {
		for _, f := range features(Generate(s, DefaultKnobs())) {
			out[f] = append(out[f], s)
		}
	}
	return out
}

// TestDefaultSeedsCover checks that the default run's seeds cover every
// feature seeds 1..coverSeeds cover, and keep every seed that alone
// covers one: the default run is shorter than seeds 1..coverSeeds, not
// weaker in what it exercises. The generator is deterministic: this
// checks the derivations, not luck.
func TestDefaultSeedsCover(t *testing.T) {
	all := make([]uint64, coverSeeds)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	full, chosen := coverage(all), coverage(defaultSeedList)
	var missing []string
	for f, seeds := range full {
		if len(chosen[f]) == 0 {
			missing = append(missing, fmt.Sprintf("%s (seeds %v)", f, seeds))
		}
		if len(seeds) == 1 && !slices.Contains(defaultSeedList, seeds[0]) {
			t.Errorf("seed %d alone covers %s and is not in the default run", seeds[0], f)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the default seeds %v miss what seeds 1..%d cover:\n%s", defaultSeedList, coverSeeds, strings.Join(missing, "\n"))
	}
	if t.Failed() {
		t.Logf("seeds that cover them all: %v", chooseSeeds(all, []uint64{7, 15, 20, 28}))
	}
	groups := 0
	for _, s := range defaultSeedList {
		if s < 1 || s > coverSeeds {
			t.Errorf("default seed %d is outside 1..%d", s, coverSeeds)
		}
		if groupSeed(s) {
			groups++
		}
	}
	if groups == 0 {
		t.Error("no default seed runs as a group")
	}
	t.Logf("%d features over seeds 1..%d, covered by the %d default seeds %v", len(full), coverSeeds, len(defaultSeedList), defaultSeedList)
}

// chooseSeeds is how defaultSeedList is chosen, for choosing it again
// when the generator changes (TestDefaultSeedsCover prints its answer when
// it fails): every seed of all that alone covers a feature, the seeds
// given, then greedily the seed that covers the most features still
// uncovered (a seed whose case is not a group's first: they run faster).
func chooseSeeds(all, given []uint64) []uint64 {
	full := coverage(all)
	chosen := map[uint64]bool{}
	for _, s := range given {
		chosen[s] = true
	}
	for _, seeds := range full {
		if len(seeds) == 1 {
			chosen[seeds[0]] = true
		}
	}
	covered := map[string]bool{}
	for f, seeds := range full {
		for _, s := range seeds {
			covered[f] = covered[f] || chosen[s]
		}
	}
	for len(covered) < len(full) || slices.Contains(slices.Collect(maps.Values(covered)), false) {
		best, bestN := uint64(0), 0
		for _, s := range all {
			if chosen[s] {
				continue
			}
			n := 0
			for _, f := range features(Generate(s, DefaultKnobs())) {
				if !covered[f] {
					n++
				}
			}
			if n > bestN || (n == bestN && n > 0 && groupSeed(best) && !groupSeed(s)) {
				best, bestN = s, n
			}
		}
		if bestN == 0 {
			break
		}
		chosen[best] = true
		for _, f := range features(Generate(best, DefaultKnobs())) {
			covered[f] = true
		}
	}
	return slices.Sorted(maps.Keys(chosen))
}
