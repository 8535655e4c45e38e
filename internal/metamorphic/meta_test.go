package metamorphic

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

func TestMain(m *testing.M) {
	if code, ok := crashtest.Main(map[string]func([]string) int{crashRole: crashChild}); ok {
		os.Exit(code) // the crash test's child process
	}
	testrun.Verify(m)
}

var (
	seedFlag   = flag.Uint64("seed", 0, "run only this seed (also STRAND_META_SEED)")
	seeds      = flag.Int("meta.seeds", 0, "how many seeds to run from -meta.first (default: the default seeds of cover_test.go, 10 of 1..40 that cover what 1..40 do; with STRAND_SOAK=1, STRAND_META_SEEDS or 2000)")
	first      = flag.Uint64("meta.first", 0, "the first seed of the run (default 1; with STRAND_SOAK=1 one from the clock, printed)")
	duration   = flag.Duration("meta.duration", 0, "stop starting seeds after this long (0: no bound)")
	events     = flag.Int("meta.events", 0, "at most this many events per case (default 150)")
	shrink     = flag.Bool("meta.shrink", false, "shrink a failing case (always done when one seed is replayed with -seed)")
	groupsOnly = flag.Bool("meta.groups-only", false, "run only the seeds whose case runs as a group (Knobs.Group), e.g. for a soak of groups")

	knobFlags = []struct {
		name, usage string
		get         func(*Knobs) *bool
	}{
		{"shared-tables", "tables fed by several inputs (issue 23, defect 1)", func(k *Knobs) *bool { return &k.SharedTables }},
		{"isolation", "permanent and exhausted failures among healthy events (issue 23, defect 2)", func(k *Knobs) *bool { return &k.Isolation }},
		{"foreign", "a foreign source now and then", func(k *Knobs) *bool { return &k.Foreign }},
		{"keyby", "KeyBy steps, chains of two", func(k *Knobs) *bool { return &k.KeyBy }},
		{"to", "To steps", func(k *Knobs) *bool { return &k.To }},
		{"foreach", "ForEach side effects", func(k *Knobs) *bool { return &k.ForEach }},
		{"resequence", "the re-sequencer with disorder and duplicates", func(k *Knobs) *bool { return &k.Resequence }},
		{"poison", "poison records and events KeyBy cannot key", func(k *Knobs) *bool { return &k.Poison }},
		{"hold-poison", "the BlockPoisonedKey policy now and then", func(k *Knobs) *bool { return &k.HoldPoison }},
		{"failures", "transient handler failures", func(k *Knobs) *bool { return &k.Failures }},
		{"restarts", "restarts of the App", func(k *Knobs) *bool { return &k.Restarts }},
		{"time", "a table with deletes, a TTL and timers", func(k *Knobs) *bool { return &k.Time }},
		{"resets", "some restarts are resets (topology.Reset: rebuild, publish nothing again)", func(k *Knobs) *bool { return &k.Resets }},
		{"joins", "a table-table join of two tables", func(k *Knobs) *bool { return &k.Joins }},
		{"lookups", "fenced nodes look up a table of their own input", func(k *Knobs) *bool { return &k.Lookups }},
		{"cross-reads", "fenced nodes read a table of other inputs; an input made global", func(k *Knobs) *bool { return &k.CrossReads }},
		{"stream-joins", "some of those read it with a stream-table join (ProjectJoin, left or inner)", func(k *Knobs) *bool { return &k.StreamJoins }},
		{"group", "a share of the cases run as a group of instances that stop, crash, restart and join (group.go)", func(k *Knobs) *bool { return &k.Group }},
		{"evolve", "the topology changes at a restart: a table added or with a new version, built in the background", func(k *Knobs) *bool { return &k.Evolve }},
	}
	knobValues = map[string]*bool{}
)

func init() {
	def := DefaultKnobs()
	for _, kf := range knobFlags {
		knobValues[kf.name] = flag.Bool("meta."+kf.name, *kf.get(&def), kf.usage)
	}
}

// testKnobs returns the knobs the flags set, and the flags that differ
// from the defaults (for the replay line).
func testKnobs() (Knobs, string) {
	k, def := DefaultKnobs(), DefaultKnobs()
	var diff []string
	for _, kf := range knobFlags {
		v := *knobValues[kf.name]
		*kf.get(&k) = v
		if v != *kf.get(&def) {
			diff = append(diff, fmt.Sprintf("-meta.%s=%v", kf.name, v))
		}
	}
	if *events > 0 {
		k.MaxEvents = *events
		diff = append(diff, fmt.Sprintf("-meta.events=%d", *events))
	}
	return k, strings.Join(diff, " ")
}

// reportingTB adds the case's seed and replay line to the driver's own
// failures (an App that stopped, a commit that did not come).
type reportingTB struct {
	*testing.T
	c      *Case
	replay string
}

func (r reportingTB) Fatalf(format string, args ...any) {
	r.T.Helper()
	r.T.Fatalf("%s\n%s", fmt.Sprintf(format, args...), Report(r.c, fmt.Errorf("the driver failed"), r.replay))
}

func (r reportingTB) Errorf(format string, args ...any) {
	r.T.Helper()
	r.T.Errorf("%s\nseed %d, replay: %s", fmt.Sprintf(format, args...), r.c.Seed, r.replay)
}

// runCase runs c and fails t with a report of the first differences, and
// of the smallest case that still fails if shrinking.
func runCase(t *testing.T, c *Case, replay string, shrinking bool) {
	t.Helper()
	x := Expect(c)
	o, err := Run(reportingTB{T: t, c: c, replay: replay}, c)
	if err == nil {
		if o.Group != "" {
			t.Logf("seed %d: %s", c.Seed, o.Group)
		}
		err = Compare(c, x, o)
	}
	if err == nil {
		return
	}
	if shrinking && errors.Is(err, ErrMismatch) {
		if small, serr := Shrink(c, 80); serr != nil {
			t.Errorf("shrunk from %d to %d events (the events' ids are the original ones; replay the original):\n%s",
				len(c.Gen), len(small.Gen), Report(small, serr, replay))
		}
	}
	t.Fatal(Report(c, err, replay))
}

func envInt(name string) (uint64, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// TestMeta runs generated cases with the capabilities the -meta.* flags
// allow and compares each with the reference model.
func TestMeta(t *testing.T) {
	knobs, flags := testKnobs()
	if s, ok := envInt("STRAND_META_SEED"); ok && *seedFlag == 0 {
		*seedFlag = s
	}
	if *seedFlag != 0 {
		runCase(t, Generate(*seedFlag, knobs), Replay(*seedFlag, flags), true)
		return
	}
	// The default run: the seeds of 1..coverSeeds that cover every
	// capability those cover (cover_test.go); a soak, -meta.seeds or
	// -meta.first: a range of seeds.
	list := defaultSeedList
	n, base := uint64(coverSeeds), uint64(1)
	if crashtest.Soak() {
		n, base = 2000, uint64(time.Now().UnixNano()%1_000_000_000)
		if s, ok := envInt("STRAND_META_SEEDS"); ok {
			n = s
		}
		list = nil
	}
	if *seeds > 0 {
		n, list = uint64(*seeds), nil
	}
	if *first > 0 {
		base, list = *first, nil
	}
	if list == nil {
		for s := base; s < base+n; s++ {
			list = append(list, s)
		}
		t.Logf("seeds %d..%d", base, base+n-1)
	} else {
		t.Logf("seeds %v (those of 1..%d that cover what 1..%d cover; -meta.seeds=%d runs them all)", list, coverSeeds, coverSeeds, coverSeeds)
	}
	start := time.Now()
	for i, s := range list {
		if *duration > 0 && time.Since(start) > *duration {
			t.Logf("stopped after %v: %d seeds run, the last %d", time.Since(start).Round(time.Second), i, list[max(i-1, 0)])
			break
		}
		c := Generate(s, knobs)
		if *groupsOnly && c.Group == nil {
			continue
		}
		// In the default run a group case runs in parallel with the
		// others (after the rest, at most -test.parallel at once): it
		// waits on sessions and on the group settling more than it
		// computes.
		par := c.Group != nil && !crashtest.Soak() && *duration == 0
		if !t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			if par {
				t.Parallel()
			}
			runCase(t, c, Replay(s, flags), *shrink)
		}) {
			break
		}
	}
}
