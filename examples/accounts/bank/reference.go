package bank

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"

	"github.com/strand-io/strand/stream"
)

// Origin is where a record sits in the events topic.
type Origin struct {
	Partition uint32
	Offset    uint64
}

// String returns "partition@offset".
func (o Origin) String() string { return fmt.Sprintf("%d@%d", o.Partition, o.Offset) }

// Reference is the sequential reference fold: it applies events one at a
// time, in log order, with no concurrency, reordering or reduction — the
// meaning every balance must have after the processor ran. Feed it each
// partition in offset order (partitions in any order: a key lives in one
// partition). It is not safe for concurrent use.
type Reference struct {
	ev       *Events
	accounts map[AccountID]*Account
	applied  int
	poison   []Origin
	// with Sequenced events: per account the next number and the events
	// waiting for their predecessors; duplicates counted.
	next       map[AccountID]uint64
	held       map[AccountID]map[uint64]Event
	duplicates int
}

// NewReference returns an empty reference for the events of ev.
func NewReference(ev *Events) *Reference {
	return &Reference{ev: ev, accounts: map[AccountID]*Account{},
		next: map[AccountID]uint64{}, held: map[AccountID]map[uint64]Event{}}
}

// Duplicates returns how many events of Sequenced declarations were
// duplicates (their number already applied or waiting), never applied.
func (r *Reference) Duplicates() int { return r.duplicates }

// Held returns how many events of Sequenced declarations wait for a
// missing predecessor.
func (r *Reference) Held() int {
	n := 0
	for _, h := range r.held {
		n += len(h)
	}
	return n
}

// Apply folds one event into the account it names.
func (r *Reference) Apply(e Event) {
	a := r.accounts[e.Key()]
	if a == nil {
		a = &Account{}
		r.accounts[e.Key()] = a
	}
	_ = Apply(a, e) // the bank folds never fail on a valid event type
	r.applied++
}

var keyCodec = stream.Uint64Key[AccountID]()

// ApplyRecord folds one record read from the events topic, as a processor
// must: the account is the record's key header, the event its decoded
// payload. A record the processor must dead-letter instead (bad or missing
// strand headers, a key that is not an account id, an unknown type tag, an
// undecodable payload) is not applied: it is remembered as poison and the
// reason is returned.
func (r *Reference) ApplyRecord(rec connector.Record) error {
	err := r.applyRecord(rec)
	if err != nil {
		r.poison = append(r.poison, Origin{rec.Partition, rec.Offset})
	}
	return err
}

func (r *Reference) applyRecord(rec connector.Record) error {
	if rec.HeaderErr != nil {
		return rec.HeaderErr
	}
	if err := rec.Headers.Validate(); err != nil {
		return err
	}
	id, err := keyCodec.Decode(rec.Headers.Key)
	if err != nil {
		return err
	}
	e, err := r.ev.Decode(rec.Headers.Tag, rec.Payload)
	if err != nil {
		return err
	}
	if r.ev.Sequenced {
		if !rec.Headers.HasSeq || rec.Headers.Seq == 0 {
			return fmt.Errorf("%w: no sequence number", stream.ErrBadSequence)
		}
		r.resequence(id, rec.Headers.Seq, e)
		return nil
	}
	a := r.accounts[id]
	if a == nil {
		a = &Account{}
		r.accounts[id] = a
	}
	_ = Apply(a, e)
	r.applied++
	return nil
}

// resequence applies e in its account's sequence order: the sequential
// meaning of a log published out of order.
func (r *Reference) resequence(id AccountID, seq uint64, e Event) {
	next := max(r.next[id], 1)
	h := r.held[id]
	if _, dup := h[seq]; seq < next || dup {
		r.duplicates++
		return
	}
	if seq > next {
		if h == nil {
			h = map[uint64]Event{}
			r.held[id] = h
		}
		h[seq] = e
		return
	}
	r.Apply(e)
	next++
	for he, ok := h[next]; ok; he, ok = h[next] {
		r.Apply(he)
		delete(h, next)
		next++
	}
	r.next[id] = next
}

// Applied returns how many events were applied.
func (r *Reference) Applied() int { return r.applied }

// Poison returns the origins of the records ApplyRecord refused, in the
// order they were fed.
func (r *Reference) Poison() []Origin { return slices.Clone(r.poison) }

// Len returns how many accounts the reference holds.
func (r *Reference) Len() int { return len(r.accounts) }

// Get returns the reference value of an account.
func (r *Reference) Get(id AccountID) (Account, bool) {
	a, ok := r.accounts[id]
	if !ok {
		return Account{}, false
	}
	return *a, true
}

// Mismatch is one account whose table value differs from the reference.
type Mismatch struct {
	ID             AccountID
	Want, Got      Account
	Missing, Extra bool // absent from the table / absent from the reference
}

// String describes the mismatch with both values.
func (m Mismatch) String() string {
	switch {
	case m.Missing:
		return fmt.Sprintf("account %d: missing from the table, want %+v", m.ID, m.Want)
	case m.Extra:
		return fmt.Sprintf("account %d: in the table but never in the log: %+v", m.ID, m.Got)
	}
	return fmt.Sprintf("account %d: got %+v, want %+v", m.ID, m.Got, m.Want)
}

// Check is the result of comparing a balances table with a reference.
type Check struct {
	// Accounts is how many accounts the reference holds; Events how many
	// events it applied.
	Accounts, Events int
	// Mismatches lists every account that differs (see Mismatch).
	Mismatches []Mismatch
}

// OK reports whether the table equals the reference exactly.
func (c Check) OK() bool { return len(c.Mismatches) == 0 }

// Err returns nil when OK, or an error wrapping ErrMismatch that names up
// to five mismatched accounts.
func (c Check) Err() error {
	if c.OK() {
		return nil
	}
	var b strings.Builder
	for i, m := range c.Mismatches {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(c.Mismatches)-5)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(m.String())
	}
	return fmt.Errorf("%w: %d of %d accounts differ: %s", ErrMismatch, len(c.Mismatches), c.Accounts, b.String())
}

// ErrMismatch is wrapped by Check.Err.
var ErrMismatch = errors.New("bank: balances differ from the sequential reference")

// Compare reads every account of the balances table (one consistent
// snapshot of committed state) and compares it with the reference.
func (r *Reference) Compare(ctx context.Context, balances *topology.Table[AccountID, Account]) (Check, error) {
	got := make(map[AccountID]Account, len(r.accounts))
	err := balances.Scan(ctx, func(id AccountID, a Account) bool {
		got[id] = a
		return true
	})
	if err != nil {
		return Check{Accounts: len(r.accounts), Events: r.applied}, fmt.Errorf("bank: scan balances: %w", err)
	}
	return r.CompareAccounts(got), nil
}

// CompareAccounts compares the reference with accounts read some other
// way (through a query server, say): every account of the reference must
// be in got with its value, and got must hold no other account.
func (r *Reference) CompareAccounts(got map[AccountID]Account) Check {
	c := Check{Accounts: len(r.accounts), Events: r.applied}
	for id, a := range got {
		want, ok := r.accounts[id]
		switch {
		case !ok:
			c.Mismatches = append(c.Mismatches, Mismatch{ID: id, Got: a, Extra: true})
		case a != *want:
			c.Mismatches = append(c.Mismatches, Mismatch{ID: id, Want: *want, Got: a})
		}
	}
	for id, want := range r.accounts {
		if _, ok := got[id]; !ok {
			c.Mismatches = append(c.Mismatches, Mismatch{ID: id, Want: *want, Missing: true})
		}
	}
	slices.SortFunc(c.Mismatches, func(a, b Mismatch) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return c
}

// IDs returns the ids of the reference's accounts, in increasing order.
func (r *Reference) IDs() []AccountID {
	ids := slices.Collect(maps.Keys(r.accounts))
	slices.Sort(ids)
	return ids
}

// ReadLog reads partition of src from offset 0 up to (not including) end
// and calls fn with every record in offset order. It is how a check reads
// the log back from the broker, independently of what the producer
// remembers.
func ReadLog(ctx context.Context, src connector.Source, partition uint32, end uint64, fn func(connector.Record) error) error {
	if end == 0 {
		return nil
	}
	rd, err := src.Open(ctx, partition, 0)
	if err != nil {
		return err
	}
	defer rd.Close()
	for next := uint64(0); next < end; {
		recs, err := rd.Poll(ctx, int(min(end-next, 4096)))
		if err != nil {
			return fmt.Errorf("bank: read %s partition %d at offset %d: %w", src.Name(), partition, next, err)
		}
		for _, rec := range recs {
			if rec.Offset >= end {
				return nil
			}
			if err := fn(rec); err != nil {
				return err
			}
			next = rec.Offset + 1
		}
	}
	return nil
}

// CheckDeadLetters compares the origins of the dead letters found in a
// dead-letter topic with the poison records of the log: every poison record
// must be there exactly once, and nothing else. It returns nil or an error
// wrapping ErrDeadLetters naming what is missing, repeated or unexpected.
func CheckDeadLetters(poison, got []Origin) error {
	want := map[Origin]int{}
	for _, o := range poison {
		want[o]++
	}
	have := map[Origin]int{}
	for _, o := range got {
		have[o]++
	}
	var missing, dup, extra []Origin
	for o := range want {
		switch n := have[o]; {
		case n == 0:
			missing = append(missing, o)
		case n > 1:
			dup = append(dup, o)
		}
	}
	for o := range have {
		if want[o] == 0 {
			extra = append(extra, o)
		}
	}
	if len(missing)+len(dup)+len(extra) == 0 {
		return nil
	}
	cmp := func(a, b Origin) int {
		if a.Partition != b.Partition {
			return int(a.Partition) - int(b.Partition)
		}
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	}
	slices.SortFunc(missing, cmp)
	slices.SortFunc(dup, cmp)
	slices.SortFunc(extra, cmp)
	return fmt.Errorf("%w: %d poison records, %d dead letters: missing %v, more than once %v, not poison %v",
		ErrDeadLetters, len(poison), len(got), missing, dup, extra)
}

// ErrDeadLetters is wrapped by CheckDeadLetters' error.
var ErrDeadLetters = errors.New("bank: dead letters differ from the poison records")
