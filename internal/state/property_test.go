package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// The property tests run random transactions against the DB and against an
// in-memory model of committed state, and compare everything that can be
// read after every step. Values are slices, and the "handlers" change values
// they read in place, as real handlers may: the value cache must never let
// such a change, or anything of a discarded Txn, leak into later reads.

var (
	propKeys     = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	propFamilies = []Family{FamilyOutbox, FamilyParked, FamilyHolds}
	propSources  = []string{"orders", "payments"}
)

func propLocator(key []byte) uint32 { return uint32(key[1]-'0') % 3 }

type rowID struct {
	f         Family
	partition uint32
	key       string
}

type cpID struct {
	source    string
	partition uint32
}

type stateModel struct {
	tables      [2]map[string][]int64
	checkpoints map[cpID]uint64
	rows        map[rowID]string
}

// vec is an alias-free value (Read returns a copy); []int64 is not.
type vec struct {
	N int
	A [3]int64
}

func toVec(v []int64) vec {
	var x vec
	x.N = copy(x.A[:], v)
	return x
}

// propTable lets the model drive a table of []int64 and a table of vec alike.
type propTable interface {
	Attacher
	read(tx *Txn, p uint32, key string) ([]int64, bool, error)
	write(tx *Txn, p uint32, key string, v []int64) error
	del(tx *Txn, p uint32, key string) error
	get(ctx context.Context, key string) ([]int64, bool, error)
	scan(ctx context.Context) (map[string][]int64, error)
	shares() bool // whether read results share memory with the Txn and cache
}

type sliceTable struct{ *Table[string, []int64] }

func (t sliceTable) read(tx *Txn, p uint32, key string) ([]int64, bool, error) {
	return t.Read(tx, p, []byte(key))
}
func (t sliceTable) write(tx *Txn, p uint32, key string, v []int64) error {
	return t.Write(tx, p, []byte(key), v)
}
func (t sliceTable) del(tx *Txn, p uint32, key string) error { return t.Delete(tx, p, []byte(key)) }
func (t sliceTable) get(ctx context.Context, key string) ([]int64, bool, error) {
	return t.Get(ctx, key)
}
func (t sliceTable) scan(ctx context.Context) (map[string][]int64, error) {
	m := map[string][]int64{}
	err := t.Scan(ctx, func(k string, v []int64) bool { m[k] = v; return true })
	return m, err
}
func (t sliceTable) shares() bool { return true }

type vecTable struct{ *Table[string, vec] }

func (t vecTable) read(tx *Txn, p uint32, key string) ([]int64, bool, error) {
	v, ok, err := t.Read(tx, p, []byte(key))
	return v.A[:v.N], ok, err
}
func (t vecTable) write(tx *Txn, p uint32, key string, v []int64) error {
	return t.Write(tx, p, []byte(key), toVec(v))
}
func (t vecTable) del(tx *Txn, p uint32, key string) error { return t.Delete(tx, p, []byte(key)) }
func (t vecTable) get(ctx context.Context, key string) ([]int64, bool, error) {
	v, ok, err := t.Get(ctx, key)
	return v.A[:v.N], ok, err
}
func (t vecTable) scan(ctx context.Context) (map[string][]int64, error) {
	m := map[string][]int64{}
	err := t.Scan(ctx, func(k string, v vec) bool { m[k] = v.A[:v.N]; return true })
	return m, err
}
func (t vecTable) shares() bool { return false }

type propMachine struct {
	fs     vfs.FS
	opts   []Option
	db     *DB
	tables [2]propTable
	m      stateModel
}

func newPropMachine(t *rapid.T) *propMachine {
	cacheSize := rapid.SampledFrom([]int64{0, 300, DefaultValueCacheSize}).Draw(t, "valueCacheSize")
	// The key filter off, saturated from the start (every read goes to
	// Pebble), or of the default size.
	filterSize := rapid.SampledFrom([]int64{0, 32, DefaultKeyFilterSize}).Draw(t, "keyFilterSize")
	pm := &propMachine{
		fs:   vfs.NewMem(),
		opts: []Option{WithValueCacheSize(cacheSize), WithKeyFilterSize(filterSize)},
		tables: [2]propTable{
			sliceTable{withParts(NewTable("alpha", String(), JSON[[]int64]()), 3)},
			vecTable{withParts(NewTable("beta", String(), JSON[vec]()), 3)},
		},
		m: stateModel{
			tables:      [2]map[string][]int64{{}, {}},
			checkpoints: map[cpID]uint64{},
			rows:        map[rowID]string{},
		},
	}
	pm.open(t)
	return pm
}

func (pm *propMachine) open(t *rapid.T) {
	db, err := Open("db", append([]Option{withFS(pm.fs), WithLogger(quiet), WithDurability(NoSync)}, pm.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Attach(pm.tables[0], pm.tables[1]); err != nil {
		t.Fatal(err)
	}
	pm.db = db
}

func (pm *propMachine) close(t *rapid.T) {
	if err := pm.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// txnModel is the model's view of one Txn.
type txnModel struct {
	view        [2]map[string]*[]int64 // what Read must return: nil pointer = absent
	written     [2]map[string]bool
	checkpoints map[cpID]uint64
	rows        map[rowID]*string
	bad         bool
}

func (pm *propMachine) runTxn(t *rapid.T) {
	ctx := context.Background()
	tx := pm.db.NewTxn()
	tm := txnModel{
		view:        [2]map[string]*[]int64{{}, {}},
		written:     [2]map[string]bool{{}, {}},
		checkpoints: map[cpID]uint64{},
		rows:        map[rowID]*string{},
	}
	expect := func(ti int, key string) ([]int64, bool) {
		if p, ok := tm.view[ti][key]; ok {
			if p == nil {
				return nil, false
			}
			return *p, true
		}
		v, ok := pm.m.tables[ti][key]
		return v, ok
	}

	ops := rapid.IntRange(1, 12).Draw(t, "ops")
	for range ops {
		ti := rapid.IntRange(0, 1).Draw(t, "table")
		tab := pm.tables[ti]
		key := rapid.SampledFrom(propKeys).Draw(t, "key")
		p := propLocator([]byte(key))
		switch op := rapid.SampledFrom([]string{"read", "read", "write", "delete", "checkpoint", "row", "reserved"}).Draw(t, "op"); op {
		case "read":
			got, ok, err := tab.read(tx, p, key)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := expect(ti, key)
			if ok != wantOK || !slices.Equal(got, want) {
				t.Fatalf("Read(%s, %s) = %v %v; want %v %v", tab.Name(), key, got, ok, want, wantOK)
			}
			// A handler changes the value in place, and maybe writes it back.
			if ok && len(got) > 0 && !tm.written[ti][key] && rapid.Bool().Draw(t, "mutate") {
				got[0] = rapid.Int64Range(-100, 100).Draw(t, "mutation")
				writeBack := rapid.Bool().Draw(t, "writeBack")
				if tab.shares() || writeBack {
					mut := slices.Clone(got)
					tm.view[ti][key] = &mut
				} // else: a copy was changed, which nobody else sees
				if writeBack {
					if err := tab.write(tx, p, key, got); err != nil {
						t.Fatal(err)
					}
					tm.written[ti][key] = true
				}
			}
		case "write":
			v := rapid.SliceOfN(rapid.Int64Range(-100, 100), 0, 3).Draw(t, "value")
			if err := tab.write(tx, p, key, v); err != nil {
				t.Fatal(err)
			}
			c := slices.Clone(v)
			tm.view[ti][key], tm.written[ti][key] = &c, true
		case "delete":
			if err := tab.del(tx, p, key); err != nil {
				t.Fatal(err)
			}
			tm.view[ti][key], tm.written[ti][key] = nil, true
		case "checkpoint":
			id := cpID{rapid.SampledFrom(propSources).Draw(t, "source"), p}
			next := rapid.Uint64Range(0, 1000).Draw(t, "next")
			tx.SetCheckpoint(id.source, id.partition, next)
			tm.checkpoints[id] = next
		case "row":
			id := rowID{rapid.SampledFrom(propFamilies).Draw(t, "family"), p, key}
			if rapid.Bool().Draw(t, "deleteRow") {
				tx.DeleteRow(id.f, id.partition, []byte(id.key))
				tm.rows[id] = nil
			} else {
				v := rapid.StringN(0, 4, -1).Draw(t, "rowValue")
				tx.PutRow(id.f, id.partition, []byte(id.key), []byte(v))
				tm.rows[id] = &v
			}
		case "reserved":
			if rapid.IntRange(0, 9).Draw(t, "rarely") == 0 {
				tx.PutRow(FamilyCheckpoint, p, []byte(key), []byte("x"))
				tm.bad = true
			}
		}
	}

	if rapid.IntRange(0, 3).Draw(t, "discard") == 0 {
		tx.Discard()
		return
	}
	err := tx.Commit(ctx)
	if tm.bad {
		if !errors.Is(err, ErrReservedFamily) {
			t.Fatalf("Commit of a Txn with a reserved-family row = %v; want ErrReservedFamily", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for ti := range tm.written {
		for key := range tm.written[ti] {
			if p := tm.view[ti][key]; p == nil {
				delete(pm.m.tables[ti], key)
			} else {
				pm.m.tables[ti][key] = slices.Clone(*p)
			}
		}
	}
	maps.Copy(pm.m.checkpoints, tm.checkpoints)
	for id, v := range tm.rows {
		if v == nil {
			delete(pm.m.rows, id)
		} else {
			pm.m.rows[id] = *v
		}
	}
}

// check compares everything readable with the model.
func (pm *propMachine) check(t *rapid.T) {
	ctx := context.Background()
	for ti, tab := range pm.tables {
		for _, key := range propKeys {
			got, ok, err := tab.get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := pm.m.tables[ti][key]
			if ok != wantOK || !slices.Equal(got, want) {
				t.Fatalf("Get(%s, %s) = %v %v; want %v %v", tab.Name(), key, got, ok, want, wantOK)
			}
		}
		scanned, err := tab.scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(scanned, pm.m.tables[ti], func(a, b []int64) bool { return slices.Equal(a, b) }) {
			t.Fatalf("Scan(%s) = %v; want %v", tab.Name(), scanned, pm.m.tables[ti])
		}
		// A fresh Txn reads committed state (through the value cache).
		tx := pm.db.NewTxn()
		for _, key := range propKeys {
			got, ok, err := tab.read(tx, propLocator([]byte(key)), key)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := pm.m.tables[ti][key]
			if ok != wantOK || !slices.Equal(got, want) {
				t.Fatalf("Read(%s, %s) in a fresh Txn = %v %v; want %v %v", tab.Name(), key, got, ok, want, wantOK)
			}
		}
		tx.Discard()
	}
	for _, src := range propSources {
		for p := uint32(0); p < 3; p++ {
			next, ok, err := pm.db.Checkpoint(src, p)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := pm.m.checkpoints[cpID{src, p}]
			if ok != wantOK || next != want {
				t.Fatalf("Checkpoint(%s, %d) = %d %v; want %d %v", src, p, next, ok, want, wantOK)
			}
		}
	}
	rows := map[rowID]string{}
	for _, f := range propFamilies {
		for p := uint32(0); p < 3; p++ {
			err := pm.db.Rows(ctx, f, p, func(k, v []byte) error {
				rows[rowID{f, p, string(k)}] = string(v)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !maps.Equal(rows, pm.m.rows) {
		t.Fatalf("rows = %v; want %v", rows, pm.m.rows)
	}
}

func TestTxnAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pm := newPropMachine(t)
		defer func() { pm.close(t) }()
		t.Repeat(map[string]func(*rapid.T){
			"txn": pm.runTxn,
			"reopen": func(t *rapid.T) {
				if rapid.IntRange(0, 4).Draw(t, "rarely") != 0 {
					t.Skip("reopen only sometimes")
				}
				pm.close(t)
				pm.open(t)
				if rapid.Bool().Draw(t, "waitKeyFilter") {
					waitKeyFilter(t, pm.db) // else reads may go on while it loads
				}
			},
			"": pm.check,
		})
	})
}

// TestCacheNeverServesUncommittedOrDiscarded drives the value cache directly
// through the scenarios where a stale value could survive.
func TestCacheNeverServesUncommittedOrDiscarded(t *testing.T) {
	ctx := context.Background()
	db := openMem(t, nil)
	defer mustClose(t, db)
	tab := NewTable("t", String(), JSON[[]int64]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	key := []byte("k")
	read := func(t *testing.T) []int64 {
		t.Helper()
		tx := db.NewTxn()
		defer tx.Discard()
		v, _, err := tab.Read(tx, 0, key)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(v)
	}
	commit := func(t *testing.T, v []int64) {
		t.Helper()
		tx := db.NewTxn()
		if err := tab.Write(tx, 0, key, v); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, []int64{1, 2})

	cases := []struct {
		name    string
		handler func(t *testing.T, tx *Txn)
		end     func(tx *Txn) error
	}{
		{"a written value of a discarded Txn", func(t *testing.T, tx *Txn) {
			_ = tab.Write(tx, 0, key, []int64{9})
		}, func(tx *Txn) error { tx.Discard(); return nil }},
		{"an in-place change discarded", func(t *testing.T, tx *Txn) {
			v, _, _ := tab.Read(tx, 0, key)
			v[0] = 99
			_ = tab.Write(tx, 0, key, v)
		}, func(tx *Txn) error { tx.Discard(); return nil }},
		{"an in-place change never written back, committed", func(t *testing.T, tx *Txn) {
			v, _, _ := tab.Read(tx, 0, key)
			v[0] = 77
		}, func(tx *Txn) error { return tx.Commit(ctx) }},
		{"a Txn whose Commit fails", func(t *testing.T, tx *Txn) {
			v, _, _ := tab.Read(tx, 0, key)
			v[0] = 55
			_ = tab.Write(tx, 0, key, v)
			tx.PutRow(FamilyMeta, 0, key, nil) // makes Commit fail
		}, func(tx *Txn) error {
			if err := tx.Commit(ctx); err == nil {
				return fmt.Errorf("commit succeeded")
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_ = read(t) // make sure the key is cached
			tx := db.NewTxn()
			c.handler(t, tx)
			if err := c.end(tx); err != nil {
				t.Fatal(err)
			}
			if got := read(t); !slices.Equal(got, []int64{1, 2}) {
				t.Fatalf("Read after %s = %v; want the committed [1 2]", c.name, got)
			}
		})
	}

	t.Run("a commit writes through", func(t *testing.T) {
		tx := db.NewTxn()
		v, _, _ := tab.Read(tx, 0, key)
		v = append(v, 3)
		_ = tab.Write(tx, 0, key, v)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := tab.b.Load().cache.len(); n != 1 {
			t.Fatalf("cache holds %d entries after the commit, want 1", n)
		}
		if got := read(t); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("Read after commit = %v; want [1 2 3]", got)
		}
	})
}

func TestValueCacheStaysWithinBudget(t *testing.T) {
	ctx := context.Background()
	const budget = 16 << 10
	db := openMem(t, nil, WithValueCacheSize(budget))
	defer mustClose(t, db)
	tab := NewTable("t", String(), JSON[int64]())
	if err := db.Attach(tab); err != nil {
		t.Fatal(err)
	}
	for b := range 20 {
		tx := db.NewTxn()
		for i := range 500 {
			k := []byte(fmt.Sprintf("key-%d", (b*500+i)%3000))
			v, _, err := tab.Read(tx, 0, k)
			if err != nil {
				t.Fatal(err)
			}
			if err := tab.Write(tx, 0, k, v+1); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// Overshoot is bounded by one entry per shard.
		if used := db.budget.used.Load(); used > budget+cacheShards*128 {
			t.Fatalf("batch %d: cache uses %d bytes, budget %d", b, used, budget)
		}
	}
	var total int64
	if err := tab.Scan(ctx, func(_ string, v int64) bool { total += v; return true }); err != nil {
		t.Fatal(err)
	}
	if total != 20*500 {
		t.Fatalf("sum of counters = %d, want %d", total, 20*500)
	}
}

// withParts gives t the partitions of propLocator, so Get finds every row.
func withParts[K, V any](t *Table[K, V], n uint32) *Table[K, V] {
	t.SetPartitions(n)
	return t
}
