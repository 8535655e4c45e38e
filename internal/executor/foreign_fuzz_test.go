package executor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// fuzzClassify is a classifier that does whatever the message's "ctl"
// header says: classify normally, fail, panic (with a value, an error or
// nil), give keys of any length, any tag, any fence, any sequence number.
func fuzzClassify(m stream.ForeignMessage) (stream.Classified[string], error) {
	ctl, _ := m.Header("ctl")
	b := func(i int) byte {
		if i < len(ctl) {
			return ctl[i]
		}
		return 0
	}
	switch b(0) % 6 {
	case 1:
		return stream.Classified[string]{}, errors.New("refused")
	case 2:
		panic("boom")
	case 3:
		panic(errors.New("boom"))
	case 4:
		panic(nil)
	}
	tags := []planner.Tag{1, 2, 3, 50, 77}
	key := strings.Repeat(string(rune('a'+b(5)%3)), int(b(1))*2)
	return stream.Classified[string]{Key: key, Tag: tags[int(b(2))%len(tags)], Ordering: planner.Ordering(b(3)), Seq: uint64(b(4))}, nil
}

// FuzzForeignClassify feeds a foreign source's Task batches of arbitrary
// messages and a classifier that misbehaves in every way the input asks
// for. Bad input never panics and never loses a record: Process returns no
// error, and every record of the batch is applied, skipped, parked or
// dead-lettered, the ones the classifier refused with ReasonUnclassified
// and their raw message.
func FuzzForeignClassify(f *testing.F) {
	f.Add([]byte(`{"a":"aa","n":1}`), []byte{0, 1, 0, 0, 0, 0}, uint8(1))
	f.Add([]byte(`{"a":"bbbb","n":2}`), []byte{0, 2, 1, 2, 9, 1}, uint8(3))
	f.Add([]byte(`not json`), []byte{2}, uint8(2))
	f.Add([]byte(`{"a":"aa"}`), []byte{0, 200, 2, 7, 0, 0}, uint8(5))
	f.Add([]byte{}, []byte{4}, uint8(1))
	f.Add([]byte(`{"a":"x","n":1}`), []byte{0, 0, 0, 0, 0, 0}, uint8(1))
	bal := state.NewTable[string, int64]("balances", stream.StringKey[string](), state.JSON[int64]())
	prog, err := NewProgram(Spec{Name: "foreign-fuzz", Workers: 2, MaxAttempts: 2, Sources: []SourceSpec{{
		Name: foreignSource, Skip: []planner.Tag{50}, Foreign: NewForeign(fuzzClassify, stream.StringKey[string]()),
		Handlers: []Handler{
			Project(fDeposits, bal, func(v *int64, e fDeposit) error { *v += e.Amount; return nil }),
			Project(fResets, bal, func(v *int64, e fReset) error { *v = 0; return nil }),
			Project(fStatuses, bal, func(v *int64, e fStatus) error { *v *= 2; return nil }),
		}}}})
	if err != nil {
		f.Fatal(err)
	}
	db, err := state.Open(f.TempDir(), state.WithDurability(state.NoSync))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	if err := prog.Attach(db); err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	task, err := prog.NewTask(context.Background(), db, foreignSource, 0, WithClock(func() time.Time { return now }),
		WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		f.Fatal(err)
	}
	next := uint64(0)
	f.Fuzz(func(t *testing.T, payload, ctl []byte, n uint8) {
		count := 1 + int(n)%8
		var recs []connector.Record
		for i := range count {
			hs := []connector.Field{}
			if len(ctl) > 0 {
				c := slices.Clone(ctl[:min(len(ctl), 255)])
				c[0] += byte(i) // vary the behaviour within the batch
				hs = append(hs, connector.Field{Name: "ctl", Value: c})
			}
			recs = append(recs, connector.Record{Offset: next, Payload: slices.Clone(payload), Raw: &connector.RawMessage{Headers: hs}})
			next++
		}
		first := recs[0].Offset
		res, err := task.Process(context.Background(), recs)
		if err != nil {
			t.Fatalf("Process: %v", err)
		}
		seen := map[uint64]bool{}
		mark := func(offs ...uint64) {
			for _, o := range offs {
				if o >= first {
					seen[o] = true
				}
			}
		}
		mark(res.Applied...)
		mark(res.Held...)
		mark(res.Skipped...)
		for _, d := range res.DeadLetters {
			mark(d.Offset)
			if d.Raw == nil {
				t.Fatalf("dead letter %v without its raw message", d)
			}
			if d.Reason == deadletter.ReasonUnclassified && !errors.Is(d.Err, stream.ErrUnclassified) {
				t.Fatalf("dead letter %v: error does not wrap ErrUnclassified", d)
			}
		}
		if len(seen) != count {
			t.Fatalf("%d of %d records accounted for: %+v", len(seen), count, res)
		}
	})
}
