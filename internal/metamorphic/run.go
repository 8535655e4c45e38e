package metamorphic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// Observed is what a run of a case left behind, read back through the
// public API.
type Observed struct {
	// Tables: per table, key → row (Table.Scan).
	Tables []map[string]Row
	// DLs: per record (the identities of Expected.DLs), its dead letters.
	DLs map[string][]deadletter.Letter
	// Outputs: per node with To, what it published (topologytest.Outputs).
	Outputs map[int][]Ev
	// ForEach: per node with ForEach, how often it saw each id.
	ForEach map[int]map[int]int
	// Time: the time table once its timers fired; TimeFired the timers
	// fired then, TimeLeft the rows left after the TTL and TimeExpired the
	// rows expired (time.go).
	Time                             map[string]TRow
	TimeFired, TimeLeft, TimeExpired int
	// Windows: the window table (Expected.Windows' shape); WindowsFinal
	// how many of its windows are final (windows.go).
	Windows      map[string]map[int64][]int
	WindowsFinal int
	// Joins: per join of the case, key → row of its join table.
	Joins []map[string]JoinRow
	// Group: what a group case's run did (grouprun.go), for the log.
	Group string
}

// maxRounds bounds the rounds of retries at the end of a run.
const maxRounds = 400

// Run builds c's topology, runs it through the broker-free driver as c's
// plan says (pipes, steps, clock advances, restarts, batch sizes) until
// everything is committed and nothing waits, and reads back what it left.
// A driver failure fails tb.
func Run(tb topologytest.TB, c *Case) (*Observed, error) {
	tb.Helper()
	if c.Group != nil {
		return runGroup(tb, c) // grouprun.go
	}
	b := Build(c)
	first := b
	if c.EvolveAt > 0 {
		first = build(c, nil, true)
		b = build(c, first, false)
	}
	next := 0
	d := topologytest.NewDriver(tb, first.Topo, topologytest.WithPartitions(c.Parts),
		topologytest.WithBatchSizes(func() int { s := c.Batches[next%len(c.Batches)]; next++; return s }))
	defer d.Close()
	where := map[string]int{} // source/partition/offset → log index
	pos := 0
	for i, n := range c.Chunks {
		for range n {
			src, p, off, err := pipe(d, b, c, c.Log[pos])
			if err != nil {
				return nil, err
			}
			where[fmt.Sprintf("%s/%d/%d", src, p, off)] = pos
			pos++
		}
		for range c.Steps[i] {
			d.Step()
		}
		if c.Clock[i] {
			d.AdvanceClock(c.backoff())
		}
		if c.Restart[i] {
			pk, _ := d.Parked()
			hk, _ := d.Held()
			if i == c.EvolveAt-1 {
				d.Evolve(b.Topo) // evolve.go
			} else if i < len(c.Reset) && c.Reset[i] && pk == 0 && hk == 0 {
				d.Reset()
			} else {
				d.Restart()
			}
		}
	}
	unblocked := map[string]bool{}
	for round := 0; ; round++ {
		d.Advance()
		if c.Poison == stream.BlockPoisonedKey {
			// An operator unblocks each key blocked behind a poison record
			// once its dead letter is dealt with.
			for _, dl := range d.DeadLetters() {
				id := fmt.Sprintf("%s/%d/%d", dl.Source, dl.Partition, dl.Offset)
				if len(dl.Headers.Key) == 0 || unblocked[id] {
					continue
				}
				unblocked[id] = true
				if err := unblock(d, dl); err != nil {
					return nil, fmt.Errorf("unblocking %s: %w", id, err)
				}
			}
			d.Advance()
		}
		keys, _ := d.Parked()
		held, _ := d.Held()
		if d.Lag() == 0 && keys == 0 && held == 0 {
			break
		}
		if round == maxRounds {
			return nil, fmt.Errorf("no end after %d rounds of retries: lag %d, %d keys parked, %d keys held", round, d.Lag(), keys, held)
		}
		d.AdvanceClock(c.maxBackoff())
	}
	o := &Observed{Tables: make([]map[string]Row, len(c.Tables)), DLs: map[string][]deadletter.Letter{},
		Outputs: map[int][]Ev{}, ForEach: map[int]map[int]int{}}
	ctx := context.Background()
	for i, t := range b.Tables {
		o.Tables[i] = map[string]Row{}
		if err := t.Scan(ctx, func(k string, v Row) bool { o.Tables[i][k] = v; return true }); err != nil {
			return nil, fmt.Errorf("scanning table %s: %w", t.Name(), err)
		}
		for k, v := range o.Tables[i] {
			g, ok, err := t.Get(ctx, k)
			if err != nil || !ok || !equalRows(g, v) {
				return nil, fmt.Errorf("%w: table %s key %q: Get gives %v (found %v, error %v), Scan %v", ErrMismatch, t.Name(), k, g, ok, err, v)
			}
		}
	}
	if err := observeJoins(b, o); err != nil {
		return nil, err
	}
	for _, dl := range d.DeadLetters() {
		ident := fmt.Sprintf("%s?%d/%d", dl.Source, dl.Partition, dl.Offset)
		var e Ev
		if idx, ok := where[fmt.Sprintf("%s/%d/%d", dl.Source, dl.Partition, dl.Offset)]; ok {
			ident = logIdentity(dl.Source, idx)
		} else if json.Unmarshal(dl.Payload, &e) == nil && e.ID > 0 {
			ident = idIdentity(dl.Source, e.ID)
		}
		o.DLs[ident] = append(o.DLs[ident], dl)
	}
	for _, n := range c.Nodes {
		if n.To {
			o.Outputs[n.ID] = topologytest.Outputs(d, n.OutTopic, b.Out[n.ID])
		}
		if n.ForEach {
			o.ForEach[n.ID] = b.ForEachSeen(n.ID)
		}
	}
	if err := observeWindows(b, o); err != nil {
		return nil, err
	}
	if err := runTime(d, b, o); err != nil {
		return nil, err
	}
	return o, nil
}

// unblock unblocks the key of dl. Right after a restart of the driver the
// App may not take an unblock yet, though Run runs (its pipelines are in
// Stats before they take unblocks): that is retried for up to a second.
func unblock(d *topologytest.Driver, dl deadletter.Letter) error {
	var err error
	for range 200 {
		if err = d.App().Unblock(context.Background(), dl.Source, dl.Partition, dl.Headers.Key); err == nil ||
			!strings.Contains(err.Error(), "not running") {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// pipe appends rec to its input and returns where it went.
func pipe(d *topologytest.Driver, b *Built, c *Case, rec Rec) (string, uint32, uint64, error) {
	in := c.Inputs[rec.Input]
	p := d.PartitionOf([]byte(rec.Ev.K))
	if in.Foreign {
		e := rec.Ev
		e.Tag = in.tagOf(rec)
		payload, err := json.Marshal(e)
		if err != nil {
			return "", 0, 0, fmt.Errorf("encoding event #%d: %w", e.ID, err)
		}
		if rec.Kind == RecUnclassified {
			payload = []byte("garbage, not an event")
		}
		return in.Name, p, d.PipeForeign(in.Name, stream.ForeignMessage{Partition: p, Payload: payload}), nil
	}
	decl := b.Decls[rec.Input][min(rec.Type, len(b.Decls[rec.Input])-1)]
	switch rec.Kind {
	case RecUnknownType, RecBadHeaders: // bad headers: only the key is used
		decl = b.Unknown[rec.Input]
	case RecSkipped:
		decl = b.Skipped[rec.Input]
	}
	env, err := decl.Envelope(rec.Ev)
	if err != nil {
		return "", 0, 0, fmt.Errorf("encoding event #%d: %w", rec.Ev.ID, err)
	}
	r := connector.Record{Partition: p, Headers: env.Headers, Payload: env.Payload}
	switch rec.Kind {
	case RecBadPayload:
		r.Payload = []byte("{not json")
	case RecBadHeaders:
		r.Headers = connector.Headers{}
		r.HeaderErr = errors.New("meta: the record has no strand headers")
	}
	return in.Name, p, d.PipeRecord(in.Name, r), nil
}
