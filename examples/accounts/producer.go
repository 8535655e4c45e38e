package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream/connector"
)

// producer publishes a workload through an iggy.Publisher, with poison
// records sent as raw messages through an iggy.Sink among the events.
// Its counters may be read while it runs.
type producer struct {
	pub    *iggy.Publisher
	raw    *iggy.Sink
	ev     *bank.Events
	w      bank.Workload
	poison int
	rate   float64
	// poisonSpacing is the spacing in events of poison records in an
	// unbounded workload (default poisonEvery).
	poisonSpacing int
	// disorder is the share of each account's events published late, by
	// up to maxDisplace events; duplicates the share published twice. Both
	// need sequenced declarations (ev.Sequenced), which number each
	// account's events in generation order.
	disorder, duplicates float64
	seed                 uint64

	published atomic.Int64 // events the broker accepted
	poisoned  atomic.Int64 // poison records the broker accepted
	// displaced and duplicated count the late events and the copies
	// queued for publishing.
	displaced, duplicated atomic.Int64

	// tracer, when set (-trace), makes a publish span per spanEvery
	// events; the events published in it carry its traceparent.
	tracer trace.Tracer

	mu  sync.Mutex
	err error // first delivery failure
}

// spanEvery is how many events one producer span covers.
const spanEvery = 10_000

// poisonEvery is the spacing of poison records in an unbounded workload.
const poisonEvery = 10_000

// run publishes until the workload ends or ctx is done, then waits until
// everything queued is accepted. It returns the first failure.
func (p *producer) run(ctx context.Context) error {
	g, err := bank.NewGenerator(p.w)
	if err != nil {
		return err
	}
	done := func(err error) {
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
			return
		}
		p.published.Add(1)
	}
	start := time.Now()
	sentPoison := 0
	pubCtx, span := ctx, trace.Span(nil)
	defer func() {
		if span != nil {
			span.End()
		}
	}()
	var (
		seqs  map[bank.AccountID]uint64
		late  []lateEvent
		shuff *rand.Rand
	)
	if p.ev.Sequenced {
		seqs = map[bank.AccountID]uint64{}
		shuff = rand.New(rand.NewPCG(p.seed, 99))
	}
	publish := func(n int, e bank.Event) error {
		env, err := p.ev.Envelope(e)
		if err != nil {
			return fmt.Errorf("producer: event %d: %w", n, err)
		}
		return p.pub.Enqueue(pubCtx, env, done)
	}
	for ctx.Err() == nil {
		e, ok := g.Next()
		if !ok {
			break
		}
		n := g.Generated()
		if p.tracer != nil && n%spanEvery == 1 {
			if span != nil {
				span.End()
			}
			pubCtx, span = p.tracer.Start(ctx, "publish "+p.pub.Name(), trace.WithSpanKind(trace.SpanKindProducer))
		}
		if seqs != nil {
			seqs[e.Key()]++
			e = bank.WithSeq(e, seqs[e.Key()])
			if shuff.Float64() < p.duplicates {
				late = append(late, lateEvent{at: n + 1 + shuff.IntN(4*maxDisplace), e: e, dup: true})
			}
			if shuff.Float64() < p.disorder {
				late = append(late, lateEvent{at: n + 1 + shuff.IntN(maxDisplace), e: e})
				e = nil
			}
		}
		if p.rate > 0 && n%32 == 0 {
			due := start.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}
		if e != nil {
			if err := publish(n, e); err != nil {
				if ctx.Err() != nil {
					break
				}
				return err
			}
		}
		var err error
		if late, err = p.publishLate(late, n, publish); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		if sentPoison < p.poison && n == p.poisonAfter(sentPoison) {
			if err := p.raw.Send(ctx, []connector.Message{bank.Poison(sentPoison, p.w.Accounts)}); err != nil {
				if ctx.Err() != nil {
					break
				}
				return fmt.Errorf("producer: poison record %d: %w", sentPoison, err)
			}
			sentPoison++
			p.poisoned.Add(1)
		}
	}
	if _, err := p.publishLate(late, math.MaxInt, publish); err != nil && ctx.Err() == nil {
		return err
	}
	// Whatever was queued is delivered even when ctx ended: a stopped
	// producer leaves no event in doubt.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.pub.Flush(fctx); err != nil {
		return fmt.Errorf("producer: flush: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("producer: %w", p.err)
	}
	return nil
}

// maxDisplace is how many events a late event is published after its
// place, at most.
const maxDisplace = 64

// lateEvent is an event published after its place: displaced, or a
// duplicate copy.
type lateEvent struct {
	at  int // publish after the at-th generated event
	e   bank.Event
	dup bool
}

// publishLate publishes, in order, the late events due after the n-th
// generated event and returns the others.
func (p *producer) publishLate(late []lateEvent, n int, publish func(int, bank.Event) error) ([]lateEvent, error) {
	keep := late[:0]
	for _, l := range late {
		if l.at > n {
			keep = append(keep, l)
			continue
		}
		if err := publish(n, l.e); err != nil {
			return late, err
		}
		if l.dup {
			p.duplicated.Add(1)
		} else {
			p.displaced.Add(1)
		}
	}
	return keep, nil
}

// poisonAfter returns after which event (1-based) the i-th poison record is
// published: spread evenly over a bounded workload, every poisonEvery
// events otherwise.
func (p *producer) poisonAfter(i int) int {
	if p.w.Events == 0 {
		every := p.poisonSpacing
		if every <= 0 {
			every = poisonEvery
		}
		return (i + 1) * every
	}
	return max(1, (i+1)*p.w.Events/(p.poison+1))
}

// sent returns how many records (events, copies and poison) the broker
// accepted.
func (p *producer) sent() int64 { return p.published.Load() + p.poisoned.Load() }
