package proptest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

func TestKeyByAndToEqualSequentialFold(t *testing.T) {
	events := ShopWorkload(3000, 200, 30, 1)
	s := newShop(nil)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(4), topologytest.WithBatchSize(97))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
	if dls := d.DeadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls)
	}
	var st stream.Counters
	for _, s := range d.App().Stats() {
		st.OutboxCommitted += s.Total.OutboxCommitted
		st.OutboxPublished += s.Total.OutboxPublished
	}
	if st.OutboxCommitted == 0 || st.OutboxCommitted != st.OutboxPublished {
		t.Fatalf("outbox: %d committed, %d published", st.OutboxCommitted, st.OutboxPublished)
	}
}

// A property test: random logs, batchings, partition counts, restarts.
func TestPropertyKeyByAndTo(t *testing.T) {
	t.Parallel() // see parallel_test.go
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 9))
			events := ShopWorkload(300+r.IntN(1500), 1+r.IntN(80), 1+r.IntN(20), seed)
			s := newShop(nil)
			d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(uint32(1+r.IntN(5))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(300) }))
			for i := 0; i < len(events); {
				n := min(1+r.IntN(400), len(events)-i)
				topologytest.Pipe(d, s.placed, events[i:i+n]...)
				i += n
				for range r.IntN(3) {
					d.Step()
				}
				if r.IntN(4) == 0 {
					d.Restart()
				}
			}
			d.Advance()
			checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
		})
	}
}

// Transient failures of the To function and of the re-keyed projection
// (after it changed the row in place) are retried: nothing is lost,
// doubled, or half-applied, with restarts in between.
func TestPropertyKeyByAndToWithFailures(t *testing.T) {
	t.Parallel() // see parallel_test.go
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			events := ShopWorkload(300+r.IntN(1000), 1+r.IntN(60), 1+r.IntN(15), seed+100)
			fl := &failOnce{pick: func(seq int) bool { return seq%5 < 2 }, failed: map[int]bool{}}
			s := newFlakyShop(nil, fl, topology.WithRetry(3, time.Millisecond, time.Millisecond))
			d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(uint32(1+r.IntN(4))),
				topologytest.WithBatchSizes(func() int { return 1 + r.IntN(200) }))
			for i := 0; i < len(events); {
				n := min(1+r.IntN(300), len(events)-i)
				topologytest.Pipe(d, s.placed, events[i:i+n]...)
				i += n
				d.Step()
				d.AdvanceClock(time.Second)
				if r.IntN(4) == 0 {
					d.Restart()
				}
			}
			for range 50 {
				d.Advance()
				if k, _ := d.Parked(); k == 0 {
					break
				}
				d.AdvanceClock(time.Second)
			}
			checkShop(t, s, events, nil, topologytest.Outputs(d, receiptsTopic, s.receipts))
			if dls := d.DeadLetters(); len(dls) != 0 {
				t.Fatalf("%d dead letters: %v", len(dls), dls[0])
			}
		})
	}
}

// A KeyBy key function that errors, panics or gives an unusable key
// dead-letters its record with ReasonKeyBy; the others are exact.
func TestKeyByBadKeysAreDeadLetters(t *testing.T) {
	long := string(make([]byte, 300))
	bad := func(e OrderPlaced) bool { return e.Seq%17 == 3 || e.Seq%29 == 5 || e.Seq%31 == 7 }
	s := newShop(func(e OrderPlaced) (string, error) {
		switch {
		case e.Seq%17 == 3:
			return "", errors.New("no customer")
		case e.Seq%29 == 5:
			panic("key function panicked")
		case e.Seq%31 == 7:
			return long, nil
		}
		return e.Customer, nil
	})
	events := ShopWorkload(1000, 50, 10, 3)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithPartitions(3), topologytest.WithBatchSize(64))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	checkShop(t, s, events, bad, topologytest.Outputs(d, receiptsTopic, s.receipts))
	dls := d.DeadLetters()
	want := 0
	for _, e := range events {
		if bad(e) {
			want++
		}
	}
	if len(dls) != want {
		t.Fatalf("%d dead letters, want %d", len(dls), want)
	}
	for _, dl := range dls {
		if dl.Reason != deadletter.ReasonKeyBy {
			t.Fatalf("dead letter %v, want reason %s", dl, deadletter.ReasonKeyBy)
		}
	}
}

func TestKeyByBuildErrors(t *testing.T) {
	topo := topology.New("t")
	decl := stream.DeclareFunc[uint64](1, func(e OrderPlaced) uint64 { return e.Order })
	src := topology.Source[uint64](topo, "s/orders")
	st := topology.On(src, decl)
	topology.KeyBy[uint64, OrderPlaced, string](st, "k", nil)
	topology.To[uint64, OrderPlaced, uint64, receipt](st, "r", "", nil, nil)
	_, err := topo.Build()
	if err == nil || !errors.Is(err, topology.ErrBuild) {
		t.Fatalf("Build = %v, want ErrBuild", err)
	}
	for _, want := range []string{`KeyBy "k" has a nil key function`, `To "r" has a nil function`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A record carrying the strand-origin of an outbox message applied before
// (a message published twice) is dropped, counted as redelivered; one of
// another origin stream, or a later one, is applied.
func TestOriginDuplicatesAreDroppedOnce(t *testing.T) {
	topo := topology.New("dedupe")
	decl := stream.DeclareFunc[uint64](tagOrderPlaced, func(e OrderPlaced) uint64 { return e.Order })
	src := topology.Source[uint64](topo, "in")
	tab := topology.NewTable[uint64, orderRow](topo, "orders", stream.JSON[orderRow]())
	topology.Project(topology.On(src, decl), tab, func(v *orderRow, e OrderPlaced) error {
		v.Total += e.Amount
		v.Lines++
		return nil
	})
	d := topologytest.NewDriver(t, topo, topologytest.WithBatchSize(2))
	origin := func(stream byte, seq uint64) []byte {
		o := make([]byte, 16)
		o[0] = stream
		for i := range 8 {
			o[15-i] = byte(seq >> (8 * i))
		}
		return o
	}
	pipe := func(o []byte, amount int64) {
		rec, err := decl.Record(0, 0, OrderPlaced{Order: 1, Amount: amount})
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers.Origin = o
		d.PipeRecord("in", rec)
	}
	pipe(origin(1, 1), 1)
	pipe(origin(1, 2), 10)
	pipe(origin(1, 2), 100)  // a repeat of seq 2
	pipe(origin(1, 1), 1000) // a late repeat of seq 1
	pipe(origin(2, 1), 10000)
	pipe(nil, 100000) // no origin: always applied
	d.Advance()
	d.Restart() // the origins survive a restart
	pipe(origin(1, 2), 1_000_000)
	pipe(origin(1, 3), 10_000_000)
	d.Advance()
	v, _, err := tab.Get(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Total != 10_110_011 || v.Lines != 5 {
		t.Fatalf("row %+v, want total 10110011 over 5 lines", v)
	}
	if got := d.App().Stats()[0].Total.Redelivered; got != 1 {
		t.Fatalf("Redelivered = %d after the restart, want 1", got)
	}
}

// Under BlockPoisonedKey, an event KeyBy cannot key holds its source key's
// later events (all its handlers' too) until the key is released; the
// other keys go on.
func TestKeyByPoisonHoldsItsKey(t *testing.T) {
	s := newShop(func(e OrderPlaced) (string, error) {
		if e.Seq == 5 {
			return "", errors.New("no customer")
		}
		return e.Customer, nil
	}, topology.WithPoisonPolicy(stream.BlockPoisonedKey))
	events := ShopWorkload(200, 10, 4, 8)
	d := topologytest.NewDriver(t, s.topo, topologytest.WithBatchSize(30))
	topologytest.Pipe(d, s.placed, events...)
	d.Advance()
	poisoned := events[5].Order
	held := func(e OrderPlaced) bool { return e.Order == poisoned && e.Seq >= 5 }
	checkShop(t, s, events, held, topologytest.Outputs(d, receiptsTopic, s.receipts))
	if dls := d.DeadLetters(); len(dls) != 1 || dls[0].Reason != deadletter.ReasonKeyBy {
		t.Fatalf("dead letters %v, want the one KeyBy could not key", dls)
	}
	if k, _ := d.Parked(); k != 1 {
		t.Fatalf("%d keys parked, want the poisoned order's", k)
	}
}
