package iggy

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// A lingering reader whose partition stops growing delivers what it got
// after one more poll, not after the whole linger time.
func TestPollLingerReturnsWhenThePartitionStopsGrowing(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	_, s, topic := onePartition(t, tg, c, 10)
	src, err := NewSource(c, s, topic, WithPollLinger(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, src, 0, 0)
	start := time.Now()
	recs, err := r.Poll(ctxT(t, 10*time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 || recs[9].Offset != 9 || r.Next() != 10 {
		t.Fatalf("got %d records, next %d; want 10, 10", len(recs), r.Next())
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("Poll took %v: it lingered although nothing was published", el)
	}
}

// While the partition grows, a lingering reader keeps polling until its
// batch is full; records stay contiguous and in order across the polls it
// joins, and the next Poll continues after them. Whether the partition
// grows within every millisecond depends on the scheduler, so a run that
// does not fill the batch is tried again, up to three times; without the
// linger no run fills it (the first poll finds a few dozen records).
func TestPollLingerFillsTheBatchWhileThePartitionGrows(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	var got []int
	for attempt := range 3 {
		s, topic := tg.topic(t, c, 1)
		src, err := NewSource(c, s, topic, WithPollLinger(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n, err := lingerRun(t, c, src, s, topic)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if n == lingerWant {
			return
		}
		got = append(got, n)
	}
	// Whether the publisher keeps the partition growing within every
	// linger step (1 ms) depends on the machine's speed: a slow or busy
	// machine ends the batch early, as designed (the partition looked
	// still). So a batch that was not filled is coverage, asserted only in
	// soak runs; the order and continuity of what came are checked always
	// (lingerRun).
	msg := fmt.Sprintf("polls while the partition grew returned %v records, not a full batch of %d", got, lingerWant)
	if os.Getenv("STRAND_SOAK") != "" {
		t.Fatal(msg)
	}
	t.Log(msg + " (the machine is slow or busy; asserted only with STRAND_SOAK=1)")
}

const lingerWant = 1000

// lingerRun reads 5 records of a fresh partition, then polls lingerWant
// records while a publisher keeps adding records, and returns how many
// that poll returned, after checking their order and the next poll.
func lingerRun(t *testing.T, c *Client, src *Source, s, topic string) (int, error) {
	// Small sends keep the partition growing in small, frequent steps: a
	// send's round trip grows with its messages, and in Iggy 0.10 every
	// message is hashed three times (frame checksum at the producer and the
	// broker, and again when polled), which the race detector slows by
	// orders of magnitude.
	p := newPublisher(t, c, s, topic, WithBatchSize(4))
	first := make([]event, 10)
	for i := range first {
		first[i] = event{Key: "k", Seq: uint64(i)}
	}
	if err := PublishBatch(ctxT(t, 10*time.Second), p, eventEncoder{}, first); err != nil {
		return 0, err
	}
	r := open(t, src, 0, 0)
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if recs, err := r.Poll(ctx, 5); err != nil || len(recs) != 5 {
		return 0, fmt.Errorf("first poll: %d records, %v", len(recs), err)
	}
	wg.Go(func() {
		for seq := uint64(10); ctx.Err() == nil; seq += 20 {
			evs := make([]event, 20)
			for i := range evs {
				evs[i] = event{Key: "k", Seq: seq + uint64(i)}
			}
			if err := PublishBatch(ctx, p, eventEncoder{}, evs); err != nil {
				return
			}
		}
	})
	recs, err := r.Poll(ctx, lingerWant)
	if err != nil {
		return 0, err
	}
	for i := range recs {
		if recs[i].Offset != uint64(5+i) || recs[i].Headers.Seq != uint64(5+i) {
			return 0, fmt.Errorf("record %d: offset %d seq %d", i, recs[i].Offset, recs[i].Headers.Seq)
		}
	}
	next := uint64(5 + len(recs))
	more, err := r.Poll(ctx, 10)
	if err != nil || len(more) == 0 || more[0].Offset != next {
		return 0, fmt.Errorf("next poll: %d records, %v; want them from offset %d", len(more), err, next)
	}
	return len(recs), nil
}

// WithSourceOptions reaches the sources a topology opens (OpenSource).
func TestSourceOptionsApplyToOpenSource(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t, WithSourceOptions(WithPollBatch(3), WithPollLinger(time.Millisecond)))
	_, s, topic := onePartition(t, tg, c, 10)
	src, err := c.OpenSource(ctxT(t, 10*time.Second), s+"/"+topic)
	if err != nil {
		t.Fatal(err)
	}
	is := src.(*Source)
	if is.cfg.pollBatch != 3 || is.cfg.linger != time.Millisecond {
		t.Fatalf("OpenSource's source has poll batch %d, linger %v", is.cfg.pollBatch, is.cfg.linger)
	}
	recs, err := open(t, is, 0, 0).Poll(ctxT(t, 10*time.Second), 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("poll: %d records, %v; want 3", len(recs), err)
	}
}
