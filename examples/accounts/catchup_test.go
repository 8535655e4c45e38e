package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
)

// The scale-out tests wait for the group to catch up with everything the
// producer published before they check. That wait had a fixed deadline of
// 90 s, and TestScaleOut once failed on a loaded machine with "the group did
// not catch up: partition 4 at ... of ...": the deadline could not tell a
// group that stalls (a strand bug) from one that is slow (2 cores, -race, a
// load of 20-30, instances restarted at the end restoring and working off
// their backlog). A slow machine must never fail the test, and a group that
// stopped making progress must: so the wait goes on as long as the group
// moves, fails once nothing moved for stallAfter, saying so, and gives up
// after waitCap in all (a bound below go test's default timeout).

const (
	// stallAfter is how long the group may show no progress at all (no
	// partition's checkpoint advanced, nothing published, no partition
	// changed its owner or phase) before the wait fails.
	stallAfter = 90 * time.Second
	// waitCap bounds the whole wait.
	waitCap = 4 * time.Minute
	// stopGrace is how long a test lets an instance stop cleanly (SIGTERM:
	// drain, commit, leave the group) before it kills it, which fails a
	// test that asks for a clean stop: a hang guard, not a figure, so that
	// a slow machine does not fail a clean stop (it was 15 s).
	stopGrace = time.Minute
	// progressRound is how often the wait looks for progress.
	progressRound = 10 * time.Second
)

// waitCaughtUpWhileProgressing waits until the group serves every partition
// up to ends (waitGroupCaughtUp), for as long as it makes progress.
func (c *cluster) waitCaughtUpWhileProgressing(ends []uint64) error {
	c.t.Helper()
	start := time.Now()
	lastMove := start
	last := c.progress()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), progressRound)
		err := waitGroupCaughtUp(ctx, c.pa.httpClient(), func() []string { return c.addrs() }, ends)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		now := c.progress()
		if now != last {
			last, lastMove = now, time.Now()
		}
		// Why, from statuses fetched outside the round's ending context
		// (the round's last fetch may have been cut short by it). A
		// partition two instances report as serving is named apart: that
		// is a revoked or fenced owner still reporting it, never a slow
		// machine (it keeps the group from catching up until the stall).
		sts := c.statuses()
		_, why := groupCaughtUp(sts, ends)
		if double := doubleServed(sts); double != "" {
			why += "; two owners (a stale report, not slowness): " + double
		}
		switch {
		case time.Since(lastMove) >= stallAfter:
			return fmt.Errorf("the group did not catch up and made no progress for %v (after %v in all): %s; statuses %s",
				stallAfter, time.Since(start).Round(time.Second), why, now)
		case time.Since(start) >= waitCap:
			return fmt.Errorf("the group did not catch up after %v, though it progressed: %s", waitCap, why)
		}
		c.t.Logf("not caught up after %v (%v since the group last moved): %s; statuses %s",
			time.Since(start).Round(time.Second), time.Since(lastMove).Round(time.Second), why, now)
	}
}

// progress is a fingerprint of what the group has done: every served
// partition's checkpoint and pending count, and who owns which partition
// in which phase. Any change is progress.
func (c *cluster) progress() string {
	var parts []string
	for _, gs := range c.statuses() {
		for _, p := range gs.Partitions {
			parts = append(parts, fmt.Sprintf("p%d@%d:%s:%d:%d", p.Partition, gs.Instance, p.Phase, p.Next, p.Pending))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// setupCallTimeout bounds each request with which a test creates its
// topics: a hang guard. The client's default (10 s) is a figure for a
// service; on a loaded machine the embedded broker, which lives in the test
// process with a data directory, took longer than that to create a topic of
// 8 partitions ("create topic bank/accounts with 8 partitions: iggy: call
// timed out: no reply ... within 10s", a stress run of issue 33).
const setupCallTimeout = 2 * time.Minute

// ensureTopics creates the topics of a's configuration on the broker at
// addr with a patient client, so that a's own connect finds them.
func ensureTopics(t *testing.T, a *app, addr string) {
	t.Helper()
	ctx := context.Background()
	cl, err := iggy.Connect(ctx, addr, iggy.WithCredentials(a.cfg.user, a.cfg.password),
		iggy.WithCallTimeout(setupCallTimeout), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.EnsureTopic(ctx, a.cfg.stream, a.cfg.topic, a.cfg.partitions); err != nil {
		t.Fatal(err)
	}
	if err := cl.EnsureTopic(ctx, a.cfg.stream, a.cfg.dlq, a.cfg.dlqPartitions); err != nil {
		t.Fatal(err)
	}
}
