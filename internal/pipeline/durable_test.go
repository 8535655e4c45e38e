package pipeline

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/testfs"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/deadletter"
)

// rowVisible reports whether a scan of family f of partition pt shows the
// row key: what the outboxes' readers would find, whether or not its
// commit returned.
func rowVisible(t *testing.T, db *state.DB, f state.Family, pt uint32, key []byte) bool {
	t.Helper()
	found := false
	err := db.Rows(context.Background(), f, pt, func(k, _ []byte) error {
		found = found || bytes.Equal(k, key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestDeadLetterNotPublishedBeforeItsCommitReturned holds the WAL sync of
// the commit that writes a dead letter, so that Pebble shows its row while
// the commit has not returned, and makes the dead-letter publisher read
// the store in that window (a retry of an earlier letter): the letter must
// not leave before its commit returned — a crash there would take the
// commit back and the next run would send the letter again.
func TestDeadLetterNotPublishedBeforeItsCommitReturned(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := newProcFixture(t, 1, nil)
	fs := testfs.NewSyncHold(vfs.Default)
	db, err := state.Open(fx.dir, state.WithFS(fs)) // Sync durability
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(t, db)
	defer fs.Release()

	sink := failingSink(1, 0) // the first try of letter 0 fails: a retry reads the store again
	first := make(chan struct{})
	goOn := make(chan struct{})
	var once sync.Once
	hooks := Hooks{BeforeDeadLetterSend: func(uint32, []deadletter.Letter) error {
		once.Do(func() { close(first); <-goOn })
		return nil
	}}
	p := newProc(t, fx, db, WithDeadLetterSink(sink), WithHooks(hooks), WithDeadLetterBackoff(time.Millisecond, time.Millisecond))
	_, off0 := fx.pipePoison("a")
	r := startProcessor(p)
	<-first // the publisher holds letter 0 in hand

	fs.Hold()
	_, off1 := fx.pipePoison("b")
	waitFor(t, "letter 1's row visible while its commit waits for the WAL sync", func() bool {
		return rowVisible(t, db, state.FamilyDeadLetters, 0, rows.DeadLetterKey(procSource, off1))
	})
	close(goOn) // the try fails; the retry reads the store, which shows letter 1
	waitFor(t, "letter 0 published by the retry", func() bool {
		return byID(sink)[deadletter.Letter{Source: procSource, Partition: 0, Offset: off0}.ID()] == 1
	})
	id1 := deadletter.Letter{Source: procSource, Partition: 0, Offset: off1}.ID()
	if n := byID(sink)[id1]; n != 0 {
		t.Fatalf("letter %d published %d times before its commit returned", off1, n)
	}
	if st := p.Stats(); len(st.Partitions) == 1 && st.Partitions[0].Next > off1 {
		t.Fatalf("checkpoint %d: the commit of offset %d returned while its WAL sync was held", st.Partitions[0].Next, off1)
	}

	fs.Release()
	waitFor(t, "letter 1 published once its commit returned", func() bool { return byID(sink)[id1] == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for id, n := range byID(sink) {
		if n != 1 {
			t.Errorf("letter %x published %d times", id, n)
		}
	}
}

// outboxKeys counts the messages of s by key.
func outboxKeys(s *memconn.Topic) map[string]int {
	out := map[string]int{}
	for _, m := range s.Messages() {
		out[string(m.Key)]++
	}
	return out
}

// TestOutboxMessageNotPublishedBeforeItsCommitReturned is the dead-letter
// test's twin for To/KeyBy messages, on the path that reads rows back from
// the store (a run that starts with messages an earlier run left): while
// the commit of a new message waits for its WAL sync, a retry that reads
// the store must not publish it.
func TestOutboxMessageNotPublishedBeforeItsCommitReturned(t *testing.T) {
	defer goleak.VerifyNone(t)
	fx := emitFixture(t, 1)
	fs := testfs.NewSyncHold(vfs.Default)
	db, err := state.Open(fx.dir, state.WithFS(fs)) // Sync durability
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(t, db)
	defer fs.Release()

	// Run 1 leaves x's message in the store: its sink refuses everything.
	fx.pipeDeposit(t, "x", 1) // odd: one message, to topic A
	refusing := failingSink(1<<30, 0)
	p := newProc(t, fx, db, WithOutboxSinks(map[string]connector.Sink{outTopicA: refusing, outTopicB: newMemSink()}),
		WithOutboxGrace(0), WithDeadLetterBackoff(time.Millisecond, time.Millisecond))
	r := startProcessor(p)
	waitFor(t, "x committed", func() bool { return caughtUp(p, fx.src) })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Run 2 reads x's row back from the store; its first try is held, then
	// fails, and the retry reads the store again while y's commit waits
	// for its WAL sync.
	a := failingSink(1, 0)
	first, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := Hooks{BeforeOutboxSend: func(uint32, []connector.Message) error {
		once.Do(func() { close(first); <-goOn })
		return nil
	}}
	p = newProc(t, fx, db, WithOutboxSinks(map[string]connector.Sink{outTopicA: a, outTopicB: newMemSink()}), WithHooks(hooks),
		WithOutboxGrace(0), WithDeadLetterBackoff(time.Millisecond, time.Millisecond))
	r = startProcessor(p)
	<-first
	fs.Hold()
	fx.pipeDeposit(t, "y", 3)
	waitFor(t, "y's outbox row visible while its commit waits for the WAL sync", func() bool {
		// y's message row (x's message is seq 1, y's seq 2). Counting the
		// family's rows is no such check: the next-seq row is one too, and
		// the store holds it from the first commit that emits.
		return rowVisible(t, db, state.FamilyOutbox, 0, rows.OutboxKey(procSource, 2))
	})
	close(goOn)
	waitFor(t, "x's message published by the retry", func() bool { return outboxKeys(a)["x/a"] == 1 })
	if n := outboxKeys(a)["y/a"]; n != 0 {
		t.Fatalf("y's message published %d times before its commit returned", n)
	}
	fs.Release()
	waitFor(t, "y's message published once its commit returned", func() bool { return outboxKeys(a)["y/a"] == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := outboxKeys(a); len(got) != 2 || got["x/a"] != 1 || got["y/a"] != 1 {
		t.Fatalf("topic A holds %v, want x/a and y/a once", got)
	}
}
