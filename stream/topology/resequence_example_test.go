package topology_test

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Note is an event that carries its number within its key.
type Note struct {
	Key  string
	Seq  uint64
	Text string
}

// ExampleSourceNode_Resequence applies events published out of order in
// their sequence order, holds one whose predecessor is missing, and skips
// the gap once it has waited a minute on the driver's clock.
func ExampleSourceNode_Resequence() {
	tb := &exampleTB{}
	defer tb.done()
	notes := stream.DeclareFunc(1, func(n Note) string { return n.Key }, stream.WithSequence(func(n Note) uint64 { return n.Seq }))
	t := topology.New("notes")
	src := topology.Source[string](t, "notes").Resequence(topology.WithGapPolicy(stream.GapSkip, time.Minute))
	log := topology.NewTable[string, string](t, "log", stream.JSON[string]())
	topology.Project(topology.On(src, notes), log, func(v *string, n Note) error { *v += n.Text; return nil })
	d := topologytest.NewDriver(tb, t)

	topologytest.Pipe(d, notes, Note{"k", 2, "b"}, Note{"k", 1, "a"}, Note{"k", 2, "b"}, Note{"k", 5, "e"}, Note{"k", 3, "c"})
	d.Advance()
	v, _, _ := log.Get(context.Background(), "k")
	held, _ := d.App().Held(context.Background(), "notes", 0, []byte("k"))
	fmt.Printf("applied %q, held %d (seq %d), duplicates %d\n", v, len(held), held[0].Headers.Seq, d.App().Stats()[0].Total.Duplicates)

	d.AdvanceClock(time.Minute) // the gap (4) times out: skipped
	d.Advance()
	v, _, _ = log.Get(context.Background(), "k")
	gaps, _ := d.App().Gaps(context.Background(), "notes", 0, []byte("k"))
	fmt.Printf("applied %q, gap %d..%d\n", v, gaps[0].From, gaps[0].To)
	// Output:
	// applied "abc", held 1 (seq 5), duplicates 1
	// applied "abce", gap 4..4
}
