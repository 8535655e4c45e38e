package deadletter_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"pgregory.net/rapid"
)

func TestReasonUnclassified(t *testing.T) {
	if s := deadletter.ReasonUnclassified.String(); s != "unclassified" {
		t.Fatalf("String() = %q", s)
	}
	for r := deadletter.ReasonBadHeaders; r <= deadletter.ReasonUnclassified; r++ {
		got, err := deadletter.ParseReason(r.String())
		if err != nil || got != r {
			t.Errorf("ParseReason(%q) = %v, %v", r, got, err)
		}
	}
	if _, err := deadletter.ParseReason("reason-99"); !errors.Is(err, connector.ErrBadHeaders) {
		t.Errorf("ParseReason of an unknown reason: %v", err)
	}
}

func rawField(t *rapid.T, label string) connector.Field {
	name := rapid.OneOf(rapid.Just(connector.HeaderKey), rapid.Just(deadletter.HeaderReason), rapid.Just(deadletter.HeaderRaw),
		rapid.StringN(1, 20, 255)).Draw(t, label+" name")
	return connector.Field{
		Name:      name,
		Value:     rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, label+" value"),
		NameKind:  connector.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" name kind")),
		ValueKind: connector.FieldKind(rapid.IntRange(0, 15).Draw(t, label+" value kind")),
	}
}

func rawMessage(t *rapid.T) *connector.RawMessage {
	m := &connector.RawMessage{Headers: []connector.Field{}}
	for i := range rapid.IntRange(0, 5).Draw(t, "headers") {
		m.Headers = append(m.Headers, rawField(t, fmt.Sprint("header ", i)))
	}
	return m
}

func TestForeignDeadLetterMessageRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw := rawMessage(t)
		d := deadletter.Letter{Source: "s/t", Partition: 3, Offset: 17, Reason: deadletter.ReasonUnclassified,
			Err: errors.New("no idea"), Payload: []byte("{}"), Raw: raw}
		if rapid.Bool().Draw(t, "classified") {
			d.Reason = deadletter.ReasonDecode
			d.Headers = connector.Headers{Key: []byte("acct"), Tag: 4, Ordering: planner.Acquire, Algebra: algebra.Associative}
		}
		m := d.Message()
		if !reflect.DeepEqual(m.Headers[:len(raw.Headers)], raw.Headers) && len(raw.Headers) > 0 {
			t.Fatalf("message headers %v do not start with the raw ones %v", m.Headers, raw.Headers)
		}
		got, err := deadletter.Parse(m)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Raw, raw) {
			t.Fatalf("raw %+v, want %+v", got.Raw, raw)
		}
		if got.Reason != d.Reason || got.Offset != 17 || got.Partition != 3 || got.Source != "s/t" ||
			got.Err.Error() != "no idea" || string(got.Headers.Key) != string(d.Headers.Key) || got.Headers.Tag != d.Headers.Tag {
			t.Fatalf("read back %v (headers %+v), want %v", got, got.Headers, d)
		}
		if len(d.Headers.Key) > 0 && string(m.Key) != "acct" || len(d.Headers.Key) == 0 && string(m.Key) != "s/t/3" {
			t.Fatalf("message key %q", m.Key)
		}
	})
}

func TestStrandDeadLetterHasNoRaw(t *testing.T) {
	d := deadletter.Letter{Source: "s/t", Reason: deadletter.ReasonDecode, Payload: []byte("x"),
		Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed}}
	m := d.Message()
	for _, f := range m.Headers {
		if f.Name == deadletter.HeaderRaw {
			t.Fatal("a strand dead letter has a raw count")
		}
	}
	got, err := deadletter.Parse(m)
	if err != nil || got.Raw != nil {
		t.Fatalf("ParseDeadLetter: raw %+v, %v", got.Raw, err)
	}
}

func TestParseDeadLetterRefusesABadRawCount(t *testing.T) {
	d := deadletter.Letter{Source: "s/t", Reason: deadletter.ReasonUnclassified, Payload: []byte("x"), Raw: &connector.RawMessage{}}
	m := d.Message()
	for _, bad := range []string{"7", "-1", "x", ""} {
		m.Headers[len(m.Headers)-1].Value = []byte(bad)
		if _, err := deadletter.Parse(m); !errors.Is(err, connector.ErrBadHeaders) || !strings.Contains(err.Error(), deadletter.HeaderRaw) {
			t.Errorf("count %q: %v", bad, err)
		}
	}
}

func TestLetterMessage(t *testing.T) {
	dl := deadletter.Letter{
		Source: "bank/accounts", Partition: 3, Offset: 77, Timestamp: 5,
		Reason: deadletter.ReasonDecode, Err: errors.New("bad json"), Attempts: 2,
		Headers: connector.Headers{Key: []byte("k"), Tag: 4, Ordering: planner.Release, Seq: 9, HasSeq: true},
		Payload: []byte("{"),
	}
	m := dl.Message()
	if m.ID != dl.ID() || string(m.Key) != "k" {
		t.Fatalf("message %+v", m)
	}
	got := map[string]string{}
	for _, f := range m.Headers {
		got[f.Name] = string(f.Value)
	}
	if got[deadletter.HeaderReason] != "undecodable" || got[deadletter.HeaderOffset] != "77" || got[deadletter.HeaderPartition] != "3" ||
		got[deadletter.HeaderSource] != "bank/accounts" || got[deadletter.HeaderError] != "bad json" || got[connector.HeaderKey] != "k" {
		t.Fatalf("headers %v", got)
	}
	bare := deadletter.Letter{Source: "s", Partition: 1, Reason: deadletter.ReasonBadHeaders}
	if k := string(bare.Message().Key); k != "s/1" {
		t.Fatalf("key of a dead letter without headers: %q", k)
	}
}
