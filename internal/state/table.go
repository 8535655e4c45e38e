package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// Table is a named, typed key→value table. It is declared on its own (a
// topology declares its tables before the database is open) and bound to a
// database with [DB.Attach]; its rows are identified on disk by its name.
//
// Handlers read and write a table inside a [Txn] with [Table.Read],
// [Table.Write] and [Table.Delete], addressing rows by source partition and
// encoded key bytes; queries read committed state with [Table.Get] and
// [Table.Scan]. All methods are safe for concurrent use.
type Table[K, V any] struct {
	tableCore
	keys   Codec[K]
	values Codec[V]
	shared bool // values of V may share memory with their copies (see aliasFree)
	b      atomic.Pointer[binding[V]]
}

// tableCore is the part of a table that does not depend on its key and
// value types. Code that needs only it (finding rows, scans, freshness,
// errors) is written on it, or as functions taking a decode step, so it is
// compiled once instead of once per value type a program uses (a table's
// generic methods are stenciled and race-instrumented again in every
// package for every GC shape: design §17).
type tableCore struct {
	name  string
	parts atomic.Uint32 // partitions of the sources that write it (SetPartitions)
	// version is the table's declared version (describe.go).
	version uint32
	// serve, during a build (build.go), says where reads go instead of
	// the binding's id; nil: there.
	serve atomic.Pointer[serving]
}

func (t *tableCore) serveFrom(s *serving) { t.serve.Store(s) }

// readID is the id reads of the table (Get, Scan, queries) are answered
// from: the binding's (id), or during a build the previous rows' (build.go).
// Call it with the view the read uses: a view taken before a build's
// switch is read at the previous id (its snapshot keeps those rows while
// they are removed after the switch: retire.go).
func (t *tableCore) readID(id uint32, v *view) (uint32, error) {
	if s := t.serve.Load(); s != nil {
		switch {
		case s.after > 0 && v.gen >= s.after:
		case s.err != nil:
			return 0, s.err
		default:
			return s.id, nil
		}
	}
	return id, nil
}

// SetPartitions says how many partitions the sources writing the table
// have: rows of a key are filed under the partition that processed it,
// which for strand's publishers is XXH32(key) % n. Get looks there first.
func (t *tableCore) SetPartitions(n uint32) { t.parts.Store(n) }

// binding is a table's attachment to one DB.
type binding[V any] struct {
	db    *DB
	id    uint32
	mem   sync.Pool // *shardMem[V] of finished Txns, for the next ones
	cache *valueCache[V]
	keys  atomic.Int64 // keys in the table's part of the last finished Txn: sizes the next
}

// NewTable declares a table. keys encodes the keys that [Table.Get] and
// [Table.Scan] take and give; values encodes the stored values. A missing
// codec or an empty name is reported by [DB.Attach], naming the table.
func NewTable[K, V any](name string, keys Codec[K], values Codec[V]) *Table[K, V] {
	return &Table[K, V]{tableCore: tableCore{name: name}, keys: keys, values: values, shared: !aliasFree(reflect.TypeFor[V]())}
}

// Codecs returns the table's key and value codecs.
func (t *Table[K, V]) Codecs() (Codec[K], Codec[V]) { return t.keys, t.values }

// Name returns the table's name.
func (t *Table[K, V]) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

func (t *Table[K, V]) check() error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: nil table", ErrInvalidTable)
	case t.name == "":
		return fmt.Errorf("%w: table with an empty name", ErrInvalidTable)
	case t.keys == nil:
		return fmt.Errorf("%w: table %q has no key codec", ErrInvalidTable, t.name)
	case t.values == nil:
		return fmt.Errorf("%w: table %q has no value codec", ErrInvalidTable, t.name)
	}
	return nil
}

func (t *Table[K, V]) boundTo() *DB {
	if b := t.b.Load(); b != nil {
		return b.db
	}
	return nil
}

func (t *Table[K, V]) bind(db *DB, id uint32) {
	t.serve.Store(nil) // a build (build.go) sets it again
	t.b.Store(&binding[V]{db: db, id: id, cache: newValueCache[V](&db.budget)})
}

func (t *Table[K, V]) cacheStats() (hits, misses, entries int64) {
	if b := t.b.Load(); b != nil {
		return b.cache.stats()
	}
	return 0, 0, 0
}

// release drops the table's cached values when db closes.
func (t *Table[K, V]) release(db *DB) {
	if b := t.b.Load(); b != nil && b.db == db {
		b.cache.purge()
	}
}

func (t *Table[K, V]) binding() (*binding[V], error) {
	b := t.b.Load()
	if b == nil {
		return nil, fmt.Errorf("%w: table %q", ErrNotAttached, t.name)
	}
	return b, nil
}

// txn checks that tx can be used with t and returns t's part of it.
func (t *Table[K, V]) txn(tx *Txn) (*binding[V], *txnTable[V], error) {
	if tx == nil {
		return nil, nil, fmt.Errorf("strand: table %q: nil transaction", t.name)
	}
	b, err := t.binding()
	if err != nil {
		return nil, nil, err
	}
	if b.db != tx.db {
		return nil, nil, fmt.Errorf("%w: table %q is attached to the database at %s, not to the transaction's database at %s",
			ErrNotAttached, t.name, b.db.dir, tx.db.dir)
	}
	if tx.done.Load() {
		return nil, nil, ErrTxnDone
	}
	if b.db.closed.Load() {
		return nil, nil, ErrClosed
	}
	tt, err := tableOf(tx, b, t.name, t.shared)
	if err != nil {
		return nil, nil, err
	}
	return b, tt, nil
}

// keyBuf is the size of the stack buffer for Pebble keys; longer keys
// allocate.
const keyBuf = 128

// Read returns the value of key (encoded key bytes) in the partition as the
// transaction sees it: its own write if it made one, else the committed
// value. ok is false when the key has no value.
//
// The first Read of a key in a Txn takes the committed value from the table's
// value cache, or, on a miss, reads it from Pebble and decodes it (and caches
// it); later Reads in the same Txn return the Txn's current value without
// decoding again. The returned value may share memory (maps, slices,
// pointers) with the cache and the Txn: a handler may change it in place and
// Write it back; changes that are never written back are undone by dropping
// the key from the cache when the Txn ends. (When V holds no pointers, maps,
// slices or interfaces, Read returns a copy and no key needs dropping.)
func (t *Table[K, V]) Read(tx *Txn, partition uint32, key []byte) (V, bool, error) {
	var buf [keyBuf]byte
	f, err := t.lookup(tx, &buf, partition, key)
	if err != nil {
		var zero V
		return zero, false, err
	}
	if f.from != fromStore && (f.from != fromCache || !t.shared) {
		// The Txn's own entry; a predecessor's write, found again in it
		// until it publishes; a cached value the handler got a copy of,
		// which the cache keeps serving: the Txn need not remember it.
		return f.v, f.present, nil
	}

	// Remember the read: later Reads and the Write of this key find it
	// without decoding again, Commit updates the cache entry it came from
	// without a lookup, and a value that may be changed in place can be
	// dropped from the cache when the Txn ends.
	s := f.s
	s.mu.Lock()
	if e := s.get(f.h, f.k); e != nil { // the same key from another goroutine: keep its entry
		v, present := e.v, e.present
		s.mu.Unlock()
		return v, present, nil
	}
	e := f.tt.newEntry(s, f.h, f.k)
	e.v, e.present, e.ce = f.v, f.present, f.ref
	s.mu.Unlock()
	return f.v, f.present, nil
}

// found is what [Table.lookup] found for a key: the value as the Txn sees
// it, where it came from, and where the Txn keeps the key.
type found[V any] struct {
	v       V
	present bool
	from    source
	dirty   bool     // fromTxn: the Txn wrote the key
	enc     []byte   // fromTxn and dirty: the encoding of v
	ref     cacheRef // fromCache or fromStore: the cache slot of v, or 0
	tt      *txnTable[V]
	s       *txnShard[V] // the shard of the Txn that holds (or would hold) the key
	h       uint64       // hash of k
	k       []byte       // the Pebble key, in the caller's buffer
}

// lookup finds the value of key (encoded key bytes) in the partition as
// the transaction sees it: its own entry, else what [Table.resolve] finds.
// It is the one lookup behind [Table.Read] and [Table.Peek]; it remembers
// nothing in the Txn. The Pebble key is built in buf.
func (t *Table[K, V]) lookup(tx *Txn, buf *[keyBuf]byte, partition uint32, key []byte) (found[V], error) {
	var f found[V]
	b, tt, err := t.txn(tx)
	if err != nil {
		return f, err
	}
	f.tt = tt
	f.k = appendTableKey(buf[:0], b.id, partition, key)
	f.h = b.db.hash(f.k)
	f.s = tt.shard(f.h)
	f.s.mu.Lock()
	if e := f.s.get(f.h, f.k); e != nil {
		f.v, f.present, f.dirty, f.enc, f.from = e.v, e.present, e.dirty, e.enc, fromTxn
		f.s.mu.Unlock()
		return f, nil
	}
	f.s.mu.Unlock()
	f.v, f.present, f.ref, f.from, err = t.resolve(tx, b, f.h, f.k, partition, key)
	return f, err
}

// Update reads the value of key (encoded key bytes) in the partition as
// [Table.Read] does, calls fn with it (ok is false when the key has no
// value; *v is then the zero value), and if fn returns nil writes the result
// as [Table.Write] does. If fn returns an error, Update returns it unchanged
// and writes nothing (the Txn keeps the value it read, as after a Read).
//
// It costs what a Read and a Write of the key cost, minus one key lookup in
// the Txn: the read-fold-write of a projection. fn must not use the same key
// of the Txn; the same concurrency rules as Read and Write apply.
func (t *Table[K, V]) Update(tx *Txn, partition uint32, key []byte, fn func(v *V, ok bool) error) error {
	return t.UpdateKeep(tx, partition, key, func(v *V, ok bool) (bool, error) { return true, fn(v, ok) })
}

// Revert puts key (encoded key bytes) of the partition back as the
// transaction had it before a fold that failed: the value of the Txn's last
// Write of the key (decoded again from the bytes that Write encoded), or else
// the committed value. Call it after changing, in place, a value that Read
// handed out and that will not be written back: maps, slices and pointers in
// it share memory with the Txn's entry and the value cache, so without Revert
// the Txn (and, once it commits, the value cache) would keep the change that
// Pebble never gets.
//
// For a value type with no pointers, maps, slices or interfaces, Read hands
// out copies and Revert does nothing. Otherwise it costs one decode of the
// key's last written value, or one dropped cache entry; it is meant for the
// failure path only. Update reverts by itself when its fn fails.
func (t *Table[K, V]) Revert(tx *Txn, partition uint32, key []byte) error {
	b, tt, err := t.txn(tx)
	if err != nil {
		return err
	}
	var buf [keyBuf]byte
	k := appendTableKey(buf[:0], b.id, partition, key)
	h := b.db.hash(k)
	return t.revert(tt, tt.shard(h), h, k)
}

// revert is Revert for Pebble key k of hash h, whose shard is s.
func (t *Table[K, V]) revert(tt *txnTable[V], s *txnShard[V], h uint64, k []byte) error {
	if !t.shared {
		return nil // handlers got copies: nothing of the Txn's was changed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(h, k)
	if e == nil {
		return nil
	}
	if !e.dirty {
		// Read from the cache or Pebble and maybe changed in place: forget
		// it here and in the cache, so the next Read decodes it afresh.
		tt.cache.invalidate(e.h, string(k))
		s.remove(e)
		return nil
	}
	var zero V
	if !e.present {
		e.v = zero
		return nil
	}
	// The last Write's encoding is the value before the failed fold; decode
	// a copy, so the value cannot share memory with the bytes Pebble gets.
	v, err := t.values.Decode(bytes.Clone(e.enc))
	if err != nil {
		return strerr.Errorf("strand: table %q: revert key %q: decode the last written value: %w", t.name, string(k[rowKeyExtra:]), err) // a copy: k stays on the caller's stack
	}
	e.v = v
	return nil
}

// Stage encodes v as the value of key (encoded key bytes) in the partition
// and returns a function that writes it into the Txn as [Table.Write] does.
// It lets a caller that writes several tables for one event encode every
// value first and write none of them if one fails to encode. The encoding
// error wraps [ErrEncode]. write must be called at most once, and before the
// Txn ends.
func (t *Table[K, V]) Stage(tx *Txn, partition uint32, key []byte, v V) (write func(), err error) {
	b, tt, err := t.txn(tx)
	if err != nil {
		return nil, err
	}
	enc, err := t.values.Append(nil, v)
	if err != nil {
		return nil, fmt.Errorf("%w: table %q: value of key %q partition %d: %w", ErrEncode, t.name, key, partition, err)
	}
	return func() { t.set(b, tt, partition, key, v, enc, true) }, nil
}

// source says where [Table.resolve] found a value.
type source uint8

const (
	// fromTxn: the Txn's own entry of the key (a Read or Write of it).
	fromTxn source = iota + 1
	// fromPrev: the write of a predecessor still committing (NewTxnAfter).
	fromPrev
	// fromCache: the value cache's entry of the committed value.
	fromCache
	// fromStore: Pebble, decoded afresh (and put in the cache if it fits).
	fromStore
)

// resolve returns the value of Pebble key k for a Txn that has no entry for
// it: the predecessor's write, or the committed value (value cache, else
// Pebble, filling the cache). It also returns the cache slot the value is
// in (0 if none) and where it found the value. It is the one lookup behind
// [Table.Read], [Table.Peek] and [Table.UpdateKeep].
func (t *Table[K, V]) resolve(tx *Txn, b *binding[V], h uint64, k []byte, partition uint32, key []byte) (v V, present bool, ref cacheRef, from source, err error) {
	// A predecessor still committing (NewTxnAfter): its writes come first.
	if tx.prev != nil && !tx.prevSettled() {
		if t.shared {
			// Its values may be changed in place by this Txn's handlers
			// while it publishes them: wait until it is done.
			<-tx.prev.finished
		} else if v, present, ok := prevValue[V](tx.prev, b.id, h, k); ok {
			return v, present, 0, fromPrev, nil
		}
	}
	ref, v, present, gen := b.cache.lookup(h, k)
	if ref != 0 {
		return v, present, ref, fromCache, nil
	}
	var encLen int
	v, present, encLen, err = t.load(b.db, k, h, partition, key)
	if err != nil {
		return v, false, 0, fromStore, err
	}
	return v, present, b.cache.fill(h, k, v, present, encLen, gen), fromStore, nil
}

// prevValue returns the value prev wrote for Pebble key k of table id, if
// prev wrote it and has not published it yet. Once prev publishes (or
// rolls back), its entries are gone and the value cache or Pebble has the
// committed state.
func prevValue[V any](prev *Txn, id uint32, h uint64, k []byte) (v V, present, ok bool) {
	if int(id) >= len(prev.tabs) {
		// A table attached after prev started: prev may hold it only in
		// its extra map, which its Commit holds locked. Wait instead.
		<-prev.finished
		return v, false, false
	}
	slot := prev.tabs[id].Load()
	if slot == nil {
		return v, false, false
	}
	tt, typed := slot.tab.(*txnTable[V])
	if !typed {
		return v, false, false
	}
	s := tt.shard(h)
	s.mu.Lock()
	if e := s.get(h, k); e != nil && e.dirty {
		v, present, ok = e.v, e.present, true
	}
	s.mu.Unlock()
	return v, present, ok
}

// load reads and decodes the committed value of Pebble key k, whose hash
// is h. A key the key filter knows is not in Pebble is not read.
func (t *Table[K, V]) load(db *DB, k []byte, h uint64, partition uint32, key []byte) (v V, present bool, encLen int, err error) {
	if err := db.enter(); err != nil {
		return v, false, 0, err
	}
	defer db.exit()
	if db.filter.absent(h) {
		db.stats.skips.Add(1)
		return v, false, 0, nil
	}
	db.stats.reads.Add(1)
	// A copy for Pebble, which keeps its key: k is often on the caller's
	// stack, and passing it would move every caller's buffer to the heap.
	present, err = db.get(bytes.Clone(k), func(val []byte) error {
		encLen = len(val)
		var derr error
		v, derr = t.values.Decode(val)
		if derr != nil {
			return fmt.Errorf("decode value: %w", derr)
		}
		return nil
	})
	if err != nil {
		return v, false, 0, strerr.Errorf("strand: table %q: read key %q partition %d: %w", t.name, key, partition, err)
	}
	if present {
		db.stats.found.Add(1)
	}
	return v, present, encLen, nil
}

// Write sets the value of key (encoded key bytes) in the partition, in the
// transaction: it becomes visible to this Txn's Reads at once and to
// everyone else when the Txn commits. The value is encoded now, so an
// encoding error is returned here (and the Txn is left unchanged). v must not
// be changed after Write except by writing it again: the cache keeps v itself
// once the Txn commits.
func (t *Table[K, V]) Write(tx *Txn, partition uint32, key []byte, v V) error {
	b, tt, err := t.txn(tx)
	if err != nil {
		return err
	}
	enc, err := t.values.Append(nil, v)
	if err != nil {
		return fmt.Errorf("%w: table %q: value of key %q partition %d: %w", ErrEncode, t.name, key, partition, err)
	}
	t.set(b, tt, partition, key, v, enc, true)
	return nil
}

// Delete removes key (encoded key bytes) from the partition, in the
// transaction: later Reads of this Txn see no value, everyone else sees the
// removal when the Txn commits.
func (t *Table[K, V]) Delete(tx *Txn, partition uint32, key []byte) error {
	b, tt, err := t.txn(tx)
	if err != nil {
		return err
	}
	var zero V
	t.set(b, tt, partition, key, zero, nil, false)
	return nil
}

func (t *Table[K, V]) set(b *binding[V], tt *txnTable[V], partition uint32, key []byte, v V, enc []byte, present bool) {
	var buf [keyBuf]byte
	k := appendTableKey(buf[:0], b.id, partition, key)
	h := b.db.hash(k)
	s := tt.shard(h)
	s.mu.Lock()
	e := s.get(h, k)
	if e == nil {
		e = tt.newEntry(s, h, k)
	}
	e.v, e.enc, e.present, e.dirty = v, enc, present, true
	s.mu.Unlock()
}

// Get returns the committed value of k: the state as of the last commit
// that returned before the call, never a pending Txn's writes, and never a
// commit a crash can take back (it reads a durable view of the store,
// view.go: a value a reader saw is still there after a crash and restart).
// It looks in the partition that owns k's encoded bytes (XXH32 % the count
// given to SetPartitions) and, if the row is not there, in every other
// partition, so a row written under another partition (a producer that
// partitions otherwise) is never reported missing. A hit costs one Pebble
// point read and one decode (it does not use the value cache, whose values
// a running handler may be changing), plus, when a commit returned since
// the last durable read, one fsync of the write-ahead log shared by the
// reads waiting for it; a miss costs one point read per partition, cheap
// with Pebble's bloom filters. It is safe to call while transactions
// commit. GetFresh also says which checkpoints the answer reflects.
func (t *Table[K, V]) Get(ctx context.Context, k K) (V, bool, error) {
	v, ok, _, err := t.GetFresh(ctx, k)
	return v, ok, err
}

// Scan calls fn with every committed key and value of the table, partition
// by partition and in key order within a partition, until fn returns false.
// It reads one durable view of the store (see Get), so it sees one
// consistent state: commits made during the scan are not seen, and nothing
// it shows is taken back by a crash. fn may call other methods of the table
// and the DB (but not [DB.Close]); a long scan pins old data in Pebble until
// it ends. A key or value that cannot be decoded stops the scan with an
// error naming it.
func (t *Table[K, V]) Scan(ctx context.Context, fn func(k K, v V) bool) error {
	b, err := t.binding()
	if err != nil {
		return err
	}
	return t.tableCore.scan(ctx, b.db, b.id, t.rowDecoder(func(_ []byte, k K, v V) bool { return fn(k, v) }))
}

// scan is Scan without the types. It skips from partition to partition:
// the table's rows of one partition are contiguous, but other tables' rows
// lie between partitions.
func (t *tableCore) scan(ctx context.Context, db *DB, bid uint32, row rowFunc) error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	v, err := db.readView()
	if err != nil {
		return err
	}
	defer v.release()
	id, err := t.readID(bid, v)
	if err != nil {
		return err
	}
	it, err := v.snap.NewIter(&pebble.IterOptions{
		LowerBound: []byte{byte(FamilyTable)},
		UpperBound: []byte{byte(FamilyTable) + 1},
	})
	if err != nil {
		return strerr.Errorf("strand: scan table %q: %w", t.name, err)
	}
	err = t.scanRows(ctx, db, v, id, it, row)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = strerr.Errorf("strand: scan table %q: %w", t.name, cerr)
	}
	return err
}

func (t *tableCore) scanRows(ctx context.Context, db *DB, v *view, id uint32, it *pebble.Iterator, row rowFunc) error {
	seek := make([]byte, 0, rowKeyExtra)
	confirmed, first := uint32(0), true // the partition confirmRead last passed
	valid := it.SeekGE(appendTableKey(seek[:0], id, 0, nil))
	for valid {
		key := it.Key()
		if len(key) < rowKeyExtra {
			return fmt.Errorf("strand: scan table %q: malformed table row key %x", t.name, key)
		}
		partition := binary.BigEndian.Uint32(key[1:5])
		switch kid := binary.BigEndian.Uint32(key[5:9]); {
		case kid < id:
			valid = it.SeekGE(appendTableKey(seek[:0], id, partition, nil))
		case kid > id:
			if partition == math.MaxUint32 {
				return it.Error()
			}
			valid = it.SeekGE(appendTableKey(seek[:0], id, partition+1, nil))
		default:
			if err := ctx.Err(); err != nil {
				return err
			}
			if first || partition != confirmed {
				if err := db.confirmRead(ctx, partition); err != nil {
					return strerr.Errorf("strand: scan table %q partition %d: %w", t.name, partition, err)
				}
				db.promoteConfirmed(partition, v)
				confirmed, first = partition, false
			}
			kb := key[rowKeyExtra:]
			val, err := it.ValueAndErr()
			if err != nil {
				return strerr.Errorf("strand: scan table %q: read key %q partition %d: %w", t.name, kb, partition, err)
			}
			if more, err := row(partition, kb, val); err != nil || !more {
				return err
			}
			valid = it.Next()
		}
	}
	return it.Error()
}
