package workload

import (
	"math"
	"testing"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/xxh32"
)

func TestGeneratorMix(t *testing.T) {
	cfg := Default()
	cfg.Events = 200_000
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range cfg.Events {
		g.Next()
	}
	m := g.Mix()
	n := float64(cfg.Events)
	share := func(k int) float64 { return float64(k) / n }
	if s := share(m.Deposited + m.Withdrawn); math.Abs(s-0.9) > 0.02 {
		t.Errorf("deposits+withdrawals %.3f, want about 0.9 (%v)", s, m)
	}
	if s := share(m.Opened + m.Closed); math.Abs(s-0.1) > 0.02 {
		t.Errorf("opens+closes %.3f, want about 0.1 (%v)", s, m)
	}
	if g.Accounts() > cfg.Accounts {
		t.Errorf("%d accounts, more than %d", g.Accounts(), cfg.Accounts)
	}
}

func TestNewGeneratorRefusesBadConfigs(t *testing.T) {
	for _, c := range []Config{
		{Events: 1, Accounts: 0, Skew: 1.1, Partitions: 1},
		{Events: 1, Accounts: 1, Skew: 1, Partitions: 1},
		{Events: 1, Accounts: 1, Skew: 1.1, Partitions: 0},
		{Events: 1, Accounts: 1, Skew: 1.1, Partitions: 1, Lifecycle: 2},
	} {
		if _, err := NewGenerator(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestLogRoundTrip decodes every record of every partition with the
// declarations, folds them per partition in offset order, and compares
// with the reference the log computed in publish order.
func TestLogRoundTrip(t *testing.T) {
	for _, cd := range []Codec{Binary, JSON} {
		cfg := Default()
		cfg.Events, cfg.Accounts = 20_000, 500
		l, err := Encode(cfg, NewDecls(cd))
		if err != nil {
			t.Fatal(err)
		}
		got := map[AccountID]Account{}
		total := 0
		for p := range l.Partitions() {
			recs := l.Records(nil, p, 0, l.PartitionLen(p))
			total += len(recs)
			for off, r := range recs {
				if r.Offset != uint64(off) || r.Partition != p {
					t.Fatalf("%s: record at %d/%d says %d/%d", cd, p, off, r.Partition, r.Offset)
				}
				if q := xxh32.Partition(r.Headers.Key, l.Partitions()); q != p {
					t.Fatalf("%s: key %x in partition %d, belongs in %d", cd, r.Headers.Key, p, q)
				}
				if err := r.Headers.Validate(); err != nil {
					t.Fatal(err)
				}
				id, err := l.Decls.Events.Opened.KeyCodec().Decode(r.Headers.Key)
				if err != nil {
					t.Fatal(err)
				}
				a := got[id]
				if err := l.Decls.Apply(&a, r.Headers.Tag, r.Payload); err != nil {
					t.Fatalf("%s: %v", cd, err)
				}
				got[id] = a
			}
		}
		if total != cfg.Events || l.Len() != cfg.Events {
			t.Errorf("%s: %d records in partitions, %d in the log, want %d", cd, total, l.Len(), cfg.Events)
		}
		if err := l.Verify(got); err != nil {
			t.Errorf("%s: %v", cd, err)
		}
		env := l.Envelope(0)
		if env.Headers.Tag != bank.TagOpened || env.Headers.Ordering.String() != "Acquire" {
			t.Errorf("%s: first event %+v, want an Acquire Opened", cd, env.Headers)
		}
	}
}

func TestCompare(t *testing.T) {
	want := map[AccountID]Account{1: {ID: 1, Balance: 5, Status: bank.StatusOpen, Openings: 1}}
	if err := Compare(want, map[AccountID]Account{1: {ID: 1, Balance: 5, Status: bank.StatusOpen, Openings: 1}}); err != nil {
		t.Error(err)
	}
	for _, got := range []map[AccountID]Account{
		{},
		{1: {ID: 1, Balance: 4, Status: bank.StatusOpen, Openings: 1}},
		{1: {ID: 1, Balance: 5, Status: bank.StatusOpen, Openings: 1}, 2: {}},
	} {
		if err := Compare(want, got); err == nil {
			t.Errorf("%v accepted", got)
		}
	}
}

func TestBinaryCodecsRefuseShortInput(t *testing.T) {
	d := NewDecls(Binary)
	for tag := bank.TagOpened; tag <= bank.TagClosed; tag++ {
		var a Account
		if err := d.Apply(&a, tag, []byte{1, 2, 3}); err == nil {
			t.Errorf("tag %d: short payload accepted", tag)
		}
	}
	if _, err := d.Values.Decode([]byte{1}); err == nil {
		t.Error("short account accepted")
	}
	if err := d.Apply(new(Account), 9, nil); err == nil {
		t.Error("unknown tag accepted")
	}
}
