package workload

import (
	"maps"
	"testing"

	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/connector"
)

func TestCoverTouchesEveryAccount(t *testing.T) {
	for _, skew := range []float64{1.01, 1.1, 2} {
		cfg := Default()
		cfg.Events, cfg.Accounts, cfg.Skew, cfg.Cover = 30_000, 10_000, skew, true
		g, err := NewGenerator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range cfg.Events {
			g.Next()
		}
		if g.Accounts() != cfg.Accounts {
			t.Errorf("skew %.2f: %d accounts touched, want %d", skew, g.Accounts(), cfg.Accounts)
		}
	}
	cfg := Default()
	cfg.Events, cfg.Accounts, cfg.Cover = 10, 11, true
	if _, err := NewGenerator(cfg); err == nil {
		t.Error("Cover with fewer events than accounts accepted")
	}
}

// TestPackedRoundTrip decodes every record of every partition, batch by
// batch through a reused arena, folds them per partition in offset order,
// and checks the result with Verify; a wrong store fails Verify.
func TestPackedRoundTrip(t *testing.T) {
	for _, cd := range []Codec{Binary, JSON} {
		cfg := Default()
		cfg.Events, cfg.Accounts, cfg.Cover = 20_000, 3_000, true
		p, err := Pack(cfg, NewDecls(cd))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if p.Len() != cfg.Events || p.Touched() != cfg.Accounts {
			t.Fatalf("%s: %d events, %d touched", cd, p.Len(), p.Touched())
		}
		got := map[AccountID]Account{}
		var recs []connector.Record
		var arena []byte
		for part := range p.Partitions() {
			for from := 0; from < p.PartitionLen(part); from += 700 {
				recs, arena, err = p.Records(recs[:0], arena, part, from, 700)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range recs {
					if r.Offset != uint64(from+i) || r.Partition != part {
						t.Fatalf("%s: record at %d/%d says %d/%d", cd, part, from+i, r.Partition, r.Offset)
					}
					if q := xxh32.Partition(r.Headers.Key, p.Partitions()); q != part {
						t.Fatalf("%s: key %x in partition %d, belongs in %d", cd, r.Headers.Key, part, q)
					}
					if err := r.Headers.Validate(); err != nil {
						t.Fatal(err)
					}
					id, err := p.Decls.Events.Opened.KeyCodec().Decode(r.Headers.Key)
					if err != nil {
						t.Fatal(err)
					}
					a := got[id]
					if err := p.Decls.Apply(&a, r.Headers.Tag, r.Payload); err != nil {
						t.Fatalf("%s: offset %d: %v", cd, r.Offset, err)
					}
					got[id] = a
				}
			}
		}
		scan := func(m map[AccountID]Account) func(func(AccountID, Account) bool) error {
			return func(fn func(AccountID, Account) bool) error {
				for id, a := range m {
					if !fn(id, a) {
						break
					}
				}
				return nil
			}
		}
		if err := p.Verify(scan(got)); err != nil {
			t.Fatalf("%s: %v", cd, err)
		}
		bad := maps.Clone(got)
		for id, a := range bad {
			a.Balance++
			bad[id] = a
			break
		}
		if err := p.Verify(scan(bad)); err == nil {
			t.Errorf("%s: a wrong balance passed", cd)
		}
		short := maps.Clone(got)
		for id := range short {
			delete(short, id)
			break
		}
		if err := p.Verify(scan(short)); err == nil {
			t.Errorf("%s: a missing account passed", cd)
		}
	}
}
