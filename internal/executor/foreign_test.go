package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// The foreign fixture: JSON messages of a producer that writes no strand
// headers. The header "type" names the event ("deposit", "reset",
// "status", "noise"); the payload's "a" is the account. A "mode" header
// makes the classifier misbehave, for the bad-input tests.

const foreignSource = "mem/foreign"

type fDeposit struct {
	Acct   string `json:"a"`
	Amount int64  `json:"n"`
}

func (e fDeposit) Key() string { return e.Acct }

type fReset struct {
	Acct string `json:"a"`
}

func (e fReset) Key() string { return e.Acct }

// fStatus is a FenceBy type: its fence is the classifier's.
type fStatus struct {
	Acct  string           `json:"a"`
	Fence planner.Ordering `json:"f"`
}

func (e fStatus) Key() string { return e.Acct }

var (
	fDeposits = stream.Declare[string, fDeposit](1,
		stream.WithReduce(algebra.Sum(func(e fDeposit) int64 { return e.Amount }, func(e fDeposit, n int64) fDeposit { e.Amount = n; return e })))
	fResets   = stream.Declare[string, fReset](2, stream.WithFence(planner.Acquire))
	fStatuses = stream.Declare[string, fStatus](3, stream.WithFenceBy(func(e fStatus) planner.Ordering { return e.Fence }))
)

const fTagNoise = planner.Tag(50) // skipped

func fClassify(m stream.ForeignMessage) (stream.Classified[string], error) {
	var body struct {
		Acct  string           `json:"a"`
		Fence planner.Ordering `json:"f"`
		Seq   uint64           `json:"s"`
	}
	if err := json.Unmarshal(m.Payload, &body); err != nil {
		return stream.Classified[string]{}, fmt.Errorf("not JSON: %w", err)
	}
	c := stream.Classified[string]{Key: body.Acct, Seq: body.Seq, Ordering: body.Fence}
	typ, _ := m.Header("type")
	switch string(typ) {
	case "deposit":
		c.Tag = fDeposits.Tag()
	case "reset":
		c.Tag = fResets.Tag()
	case "status":
		c.Tag = fStatuses.Tag()
	case "noise":
		c.Tag = fTagNoise
	default:
		c.Tag = 77 // undeclared
	}
	mode, _ := m.Header("mode")
	switch string(mode) {
	case "panic":
		panic("classifier bug")
	case "error":
		return c, errors.New("no idea")
	case "longkey":
		c.Key = strings.Repeat("k", 256)
	case "nokey":
		c.Key = ""
	case "badfence":
		c.Ordering = 3
	case "otherkey":
		c.Key = "other"
	}
	return c, nil
}

type foreignFixture struct {
	bal  *state.Table[string, int64]
	prog *Program
	db   *state.DB
	now  time.Time
}

func newForeignFixture(t *testing.T, mod func(*Spec)) *foreignFixture {
	t.Helper()
	fx := &foreignFixture{bal: state.NewTable[string, int64]("balances", stream.StringKey[string](), state.JSON[int64]()),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	spec := Spec{
		Name: "foreign-test",
		Sources: []SourceSpec{{Name: foreignSource, Handlers: []Handler{
			Project(fDeposits, fx.bal, func(v *int64, e fDeposit) error {
				if e.Acct == "refused" {
					return errors.New("refused for now")
				}
				*v += e.Amount
				return nil
			}),
			Project(fResets, fx.bal, func(v *int64, e fReset) error { *v = 0; return nil }),
			Project(fStatuses, fx.bal, func(v *int64, e fStatus) error { *v *= 10; return nil }),
		}, Skip: []planner.Tag{fTagNoise}, Foreign: NewForeign(fClassify, stream.StringKey[string]())}},
		Workers: 4, MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond,
	}
	if mod != nil {
		mod(&spec)
	}
	prog, err := NewProgram(spec)
	if err != nil {
		t.Fatal(err)
	}
	fx.prog = prog
	db, err := state.Open(t.TempDir(), state.WithDurability(state.NoSync))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := prog.Attach(db); err != nil {
		t.Fatal(err)
	}
	fx.db = db
	return fx
}

func (fx *foreignFixture) task(t *testing.T) *Task {
	t.Helper()
	task, err := fx.prog.NewTask(context.Background(), fx.db, foreignSource, 0, WithClock(func() time.Time { return fx.now }),
		WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// fMsg is a foreign record: JSON body, headers as the producer wrote them.
func fMsg(offset uint64, typ, body string, extra ...connector.Field) connector.Record {
	hs := []connector.Field{{Name: "type", Value: []byte(typ), ValueKind: connector.FieldString}}
	hs = append(hs, extra...)
	return connector.Record{Offset: offset, Timestamp: 1000 + offset, Payload: []byte(body),
		Raw: &connector.RawMessage{ID: [16]byte{byte(offset), 0xAA}, Headers: hs}}
}

func mode(m string) connector.Field { return connector.Field{Name: "mode", Value: []byte(m)} }

func (fx *foreignFixture) balance(t *testing.T, acct string) int64 {
	t.Helper()
	v, _, err := fx.bal.Get(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestForeignRecordsAreClassifiedAndApplied(t *testing.T) {
	fx := newForeignFixture(t, nil)
	task := fx.task(t)
	res, err := task.Process(context.Background(), []connector.Record{
		fMsg(0, "deposit", `{"a":"x","n":5}`),
		fMsg(1, "deposit", `{"a":"y","n":7}`),
		fMsg(2, "noise", `{"a":"x"}`),
		fMsg(3, "deposit", `{"a":"x","n":6}`),
		fMsg(4, "status", `{"a":"x","f":2}`), // Acquire: after the deposits
		fMsg(5, "deposit", `{"a":"x","n":1}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeadLetters) != 0 || !slices.Equal(res.Skipped, []uint64{2}) || res.Next != 6 || res.Mismatches != 0 {
		t.Fatalf("result %+v", res)
	}
	if x, y := fx.balance(t, "x"), fx.balance(t, "y"); x != 111 || y != 7 {
		t.Fatalf("balances x=%d y=%d, want 111 and 7", x, y)
	}
}

// The headers a classification gives: the declared fence and algebra for
// static types, the classifier's fence for FenceBy types (Relaxed when 0),
// the sequence number when given, and a traceparent the source found kept.
func TestForeignHeadersFromClassification(t *testing.T) {
	fx := newForeignFixture(t, nil)
	task := fx.task(t)
	recs := []connector.Record{
		fMsg(0, "deposit", `{"a":"x","n":5,"f":4}`), // a static Relaxed type: the fence given is ignored
		fMsg(1, "reset", `{"a":"x"}`),
		fMsg(2, "status", `{"a":"x","f":4,"s":9}`),
		fMsg(3, "status", `{"a":"yy"}`),
		fMsg(4, "other", `{"a":"x"}`),
	}
	recs[1].Headers.TraceParent = []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	task.classifyForeign(recs)
	want := []connector.Headers{
		{Key: []byte("x"), Tag: 1, Ordering: planner.Relaxed, Algebra: algebra.Associative},
		{Key: []byte("x"), Tag: 2, Ordering: planner.Acquire, Algebra: algebra.NonAssociative, TraceParent: recs[1].Headers.TraceParent},
		{Key: []byte("x"), Tag: 3, Ordering: planner.Release, Algebra: algebra.NonAssociative, Seq: 9, HasSeq: true},
		{Key: []byte("yy"), Tag: 3, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative},
		{Key: []byte("x"), Tag: 77, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative},
	}
	for i, r := range recs {
		if r.HeaderErr != nil {
			t.Fatalf("record %d: %v", i, r.HeaderErr)
		}
		if fmt.Sprint(r.Headers) != fmt.Sprint(want[i]) {
			t.Errorf("record %d: headers %+v, want %+v", i, r.Headers, want[i])
		}
		if err := r.Headers.Validate(); err != nil {
			t.Errorf("record %d: %v", i, err)
		}
	}
}

// Bad input: whatever the classifier does wrong, the record is a dead
// letter with its reason, its error, its origin and its raw message, and
// the batch's other records are applied.
func TestForeignUnclassifiableRecordsAreDeadLetters(t *testing.T) {
	cases := []struct {
		name   string
		rec    connector.Record
		reason deadletter.Reason
		text   string
	}{
		{"error", fMsg(1, "deposit", `{"a":"x","n":1}`, mode("error")), deadletter.ReasonUnclassified, "no idea"},
		{"not JSON", fMsg(1, "deposit", `{"a":`), deadletter.ReasonUnclassified, "not JSON"},
		{"panic", fMsg(1, "deposit", `{"a":"x","n":1}`, mode("panic")), deadletter.ReasonUnclassified, "panicked: classifier bug"},
		{"key of 256 bytes", fMsg(1, "deposit", `{"a":"x","n":1}`, mode("longkey")), deadletter.ReasonUnclassified, "encode the key"},
		{"empty key", fMsg(1, "deposit", `{"a":"x","n":1}`, mode("nokey")), deadletter.ReasonUnclassified, "encode the key"},
		{"invalid fence", fMsg(1, "status", `{"a":"x"}`, mode("badfence")), deadletter.ReasonUnclassified, "invalid ordering 3"},
		{"unknown tag", fMsg(1, "withdrawal", `{"a":"x","n":1}`), deadletter.ReasonUnknownType, "type tag 77"},
		{"header error from the source", func() connector.Record {
			r := fMsg(1, "deposit", `{"a":"x","n":1}`)
			r.HeaderErr = fmt.Errorf("%w: user headers truncated", connector.ErrBadHeaders)
			return r
		}(), deadletter.ReasonBadHeaders, "truncated"},
		{"payload the type does not decode", fMsg(1, "deposit", `{"a":"x","n":"many"}`), deadletter.ReasonDecode, "type tag 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newForeignFixture(t, nil)
			task := fx.task(t)
			raw := tc.rec.Raw.Clone()
			res, err := task.Process(context.Background(), []connector.Record{
				fMsg(0, "deposit", `{"a":"x","n":5}`), tc.rec, fMsg(2, "deposit", `{"a":"x","n":6}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.DeadLetters) != 1 {
				t.Fatalf("%d dead letters, want 1: %+v", len(res.DeadLetters), res)
			}
			d := res.DeadLetters[0]
			if d.Reason != tc.reason || d.Err == nil || !strings.Contains(d.Err.Error(), tc.text) || d.Offset != 1 || d.Source != foreignSource {
				t.Fatalf("dead letter %v, want %s with %q at offset 1", d, tc.reason, tc.text)
			}
			if tc.reason == deadletter.ReasonUnclassified && (!errors.Is(d.Err, stream.ErrUnclassified) || len(d.Headers.Key) != 0) {
				t.Fatalf("unclassified dead letter %v: error does not wrap ErrUnclassified, or it has headers %+v", d, d.Headers)
			}
			if d.Raw == nil || fmt.Sprint(d.Raw) != fmt.Sprint(raw) || string(d.Payload) != string(tc.rec.Payload) {
				t.Fatalf("dead letter keeps raw %+v payload %q, want %+v %q", d.Raw, d.Payload, raw, tc.rec.Payload)
			}
			if b := fx.balance(t, "x"); b != 11 {
				t.Fatalf("balance %d, want 11: the other records applied", b)
			}
			// The committed row reads back the same.
			var pend []deadletter.Letter
			err = fx.db.Rows(context.Background(), state.FamilyDeadLetters, 0, func(_, v []byte) error {
				var d deadletter.Letter
				if err := rows.DecodeLetter(v, &d); err != nil {
					return err
				}
				pend = append(pend, d)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(pend) != 1 || fmt.Sprint(pend[0].Raw) != fmt.Sprint(raw) || pend[0].Reason != tc.reason {
				t.Fatalf("pending dead letters %+v", pend)
			}
		})
	}
}

// The classifier's key is the record's key, whatever key the decoded
// event names: no key-mismatch check on foreign records.
func TestForeignKeyIsTheClassifiers(t *testing.T) {
	fx := newForeignFixture(t, nil)
	res, err := fx.task(t).Process(context.Background(), []connector.Record{
		fMsg(0, "deposit", `{"a":"x","n":5}`, mode("otherkey")),
		fMsg(1, "deposit", `{"a":"y","n":2}`, mode("otherkey")),
	})
	if err != nil || len(res.DeadLetters) != 0 {
		t.Fatalf("Process: %v, dead letters %v", err, res.DeadLetters)
	}
	if o, x := fx.balance(t, "other"), fx.balance(t, "x"); o != 7 || x != 0 {
		t.Fatalf("balances other=%d x=%d, want 7 and 0", o, x)
	}
}

// A foreign record parked behind a failure keeps its raw message in its
// row: after a restart (a new Task) its dead letter still has it.
func TestForeignParkedRecordKeepsItsRawMessage(t *testing.T) {
	fx := newForeignFixture(t, nil)
	task := fx.task(t)
	rec := fMsg(0, "deposit", `{"a":"refused","n":5}`, connector.Field{Name: "n", Value: []byte{1, 0, 0, 0}, NameKind: connector.FieldRaw, ValueKind: connector.FieldUint32})
	raw := rec.Raw.Clone()
	res, err := task.Process(context.Background(), []connector.Record{rec})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Held, []uint64{0}) || len(res.Failures) != 1 {
		t.Fatalf("result %+v, want the record parked", res)
	}
	fx.now = fx.now.Add(time.Second)
	task = fx.task(t) // a restart: parked records from their rows
	res, err = task.Retry(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeadLetters) != 1 || res.DeadLetters[0].Reason != deadletter.ReasonExhausted {
		t.Fatalf("result %+v, want the record dead-lettered after its second try", res)
	}
	d := res.DeadLetters[0]
	if fmt.Sprint(d.Raw) != fmt.Sprint(raw) || string(d.Headers.Key) != "refused" || d.Headers.Tag != 1 {
		t.Fatalf("dead letter raw %+v headers %+v, want raw %+v and the classified headers", d.Raw, d.Headers, raw)
	}
}

// Large batches are classified on several goroutines, each with its own key
// arena: every record must get its own key, whatever the chunking.
func TestForeignLargeBatchKeys(t *testing.T) {
	fx := newForeignFixture(t, nil)
	task := fx.task(t)
	const n = 5000
	recs := make([]connector.Record, n)
	for i := range recs {
		key := fmt.Sprintf("acct-%d-%s", i, strings.Repeat("z", i%200))
		recs[i] = fMsg(uint64(i), "deposit", fmt.Sprintf(`{"a":%q,"n":%d}`, key, i))
	}
	task.classifyForeign(recs)
	for i, r := range recs {
		want := fmt.Sprintf("acct-%d-%s", i, strings.Repeat("z", i%200))
		if r.HeaderErr != nil || string(r.Headers.Key) != want {
			t.Fatalf("record %d: key %q (%v), want %q", i, r.Headers.Key, r.HeaderErr, want)
		}
	}
	// Keys do not share bytes: appending to one cannot change another.
	k0 := recs[0].Headers.Key
	_ = append(k0, 'X')
	if string(recs[1].Headers.Key) != "acct-1-z" {
		t.Fatalf("key 1 changed to %q", recs[1].Headers.Key)
	}
	res, err := task.Process(context.Background(), recs)
	if err != nil || len(res.DeadLetters) != 0 || len(res.Applied) != n {
		t.Fatalf("Process: %d applied, %d dead letters, %v", len(res.Applied), len(res.DeadLetters), err)
	}
}

func TestForeignProgramChecks(t *testing.T) {
	plain := newForeignFixture(t, func(s *Spec) { s.Sources[0].Foreign = nil })
	foreign := newForeignFixture(t, nil)
	if bytes.Equal(plain.prog.Fingerprint(), foreign.prog.Fingerprint()) {
		t.Fatal("a foreign source does not change the fingerprint")
	}
	if !foreign.prog.Foreign(foreignSource) || plain.prog.Foreign(foreignSource) || foreign.prog.Foreign("nope") {
		t.Fatal("Program.Foreign")
	}
	bal := state.NewTable[string, int64]("b", stream.StringKey[string](), state.JSON[int64]())
	base := func(f *ForeignSpec, decl *stream.Event[string, fDeposit]) Spec {
		return Spec{Name: "x", Sources: []SourceSpec{{Name: "s", Foreign: f,
			Handlers: []Handler{Project(decl, bal, func(*int64, fDeposit) error { return nil })}}}}
	}
	for name, tc := range map[string]struct {
		spec Spec
		want string
	}{
		"nil classifier": {base(NewForeign[string](nil, stream.StringKey[string]()), fDeposits), "without a classifier"},
		"nil key codec":  {base(NewForeign[string](fClassify, nil), fDeposits), "without a classifier or key codec"},
		"other key type": {base(NewForeign(func(stream.ForeignMessage) (stream.Classified[int64], error) {
			return stream.Classified[int64]{}, nil
		}, stream.Int64Key[int64]()), fDeposits), "keys of type int64"},
		"other key codec": {base(NewForeign(fClassify, stream.CodecFunc(
			func(dst []byte, k string) ([]byte, error) { return append(dst, k...), nil },
			func(b []byte) (string, error) { return string(b), nil })), fDeposits), "use one key codec"},
	} {
		_, err := NewProgram(tc.spec)
		if !errors.Is(err, ErrBadTopology) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewProgram: %v, want an error with %q", name, err, tc.want)
		}
	}
}
