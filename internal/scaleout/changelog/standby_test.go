package changelog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strand-io/strand/internal/scaleout/changelog"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/connector/memconn"
)

// A standby copy of an idle partition is current as soon as it read to
// the end of the changelog; it ends when its context does; and a standby
// whose changelog read fails returns the failure (with its context still
// live) instead of waiting for ever.
func TestStandbyCurrentAndEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	db, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := memconn.New()
	if err != nil {
		t.Fatal(err)
	}
	topic, err := b.CreateTopic("s/strand-changelog-x", 2)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := b.OpenSink(ctx, "s/strand-changelog-x", 2)
	if err != nil {
		t.Fatal(err)
	}
	src, err := b.OpenForeignSource(ctx, "s/strand-changelog-x")
	if err != nil {
		t.Fatal(err)
	}
	c := changelog.New(db, sink, src, "s/strand-changelog-x", nil, nil, changelog.Options{})

	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Standby(sctx, 0) }()
	testrun.WaitFor(t, 20*time.Second, func() error {
		st, ok := c.StandbyOf(0)
		if ok && !st.CurrentAt.IsZero() {
			if age, known := st.Staleness(time.Now()); !known || age < 0 || st.Lag != 0 || st.Mode != "full" {
				t.Fatalf("status %+v (staleness %v, %v)", st, age, known)
			}
			return nil
		}
		return fmt.Errorf("the standby copy of an empty changelog is not current: %+v %v", st, ok)
	})
	if err := c.Standby(ctx, 0); err == nil {
		t.Fatal("a second standby copy of partition 0 started")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Standby after its context ended = %v, want nil", err)
	}
	if sbs := c.Standbys(); len(sbs) != 0 {
		t.Fatalf("standbys after the end: %+v", sbs)
	}

	// The changelog cannot be read: the standby returns why, at once.
	broken := errors.New("the broker is gone")
	topic.FailPolls(func(uint32, uint64) error { return broken })
	go func() { done <- c.Standby(ctx, 1) }()
	select {
	case err := <-done:
		if !errors.Is(err, broken) {
			t.Fatalf("Standby = %v, want the read's failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a standby whose read failed did not return")
	}
}
