package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// Txn is the write set of one batch of one partition pipeline: the table
// values its handlers wrote, the checkpoints it advanced, and the generic rows
// (outbox, dead letters, holds, parked) it added or removed. Nothing of it is
// visible to [Table.Get], [Table.Scan], [DB.Rows] or other transactions until
// [Txn.Commit] writes all of it as one atomic Pebble batch.
//
// A Txn is safe for concurrent use by goroutines that work on DIFFERENT keys:
// its table entries are sharded by key hash, so concurrent keys rarely share
// a lock. Two goroutines must not use the same key of the same table at the
// same time, and Commit and Discard must not run concurrently with other
// methods.
//
// A Txn reads committed state as of each Read's first access to a key; it
// does not isolate itself from other transactions' commits. The processor
// keeps each key in one partition pipeline, whose batches commit in order,
// so no two transactions touch the same key at once. A pipeline that
// overlaps a batch's commit with the next batch starts the next Txn with
// [DB.NewTxnAfter], which reads the committing one's writes first and
// never commits if it does not.
type Txn struct {
	db   *DB
	done atomic.Bool
	tabs []atomic.Pointer[txnSlot] // by table id

	// prev is the transaction this one follows (NewTxnAfter), until this
	// one ends; finished is closed when this one has committed (ok set) or
	// been discarded or failed.
	prev     *Txn
	finished chan struct{}
	ok       atomic.Bool

	mu          sync.Mutex
	extra       map[uint32]txnTab // tables attached after the Txn started
	order       []txnTab
	checkpoints map[string]uint64 // checkpoint key → next offset
	rows        map[string]rowOp  // row key → operation
	err         error             // first misuse, returned by Commit
	stats       CommitStats       // set by a successful Commit (see CommitStats)
	lazy        bool              // commit without waiting for the WAL's fsync (Lazy)
	appended    []appendedRow     // AppendRow, in the order given
}

type appendedRow struct{ key, value []byte }

// AppendRow is PutRow for a writer of many fresh rows in key order (an
// outbox): value is not copied (the Txn owns it from now on), and the row
// is kept in a list rather than a map, so it costs one key allocation.
// The rows of one Txn's AppendRow calls must come in increasing key order
// and must not be touched by PutRow or DeleteRow of the same Txn.
func (tx *Txn) AppendRow(f Family, partition uint32, key, value []byte) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if !tx.usable("append row") {
		return
	}
	if f.Reserved() {
		tx.fail(fmt.Errorf("%w: append row %q of family %s partition %d", ErrReservedFamily, key, f, partition))
		return
	}
	tx.appended = append(tx.appended, appendedRow{rowKey(f, partition, key), value})
}

// Lazy makes Commit return without waiting for the write-ahead log's fsync,
// whatever the database's durability: for changes whose loss in a crash
// costs nothing but repeated work (deleting rows already acted on). A later
// synced commit, or SyncWAL, makes it durable with everything before it.
func (tx *Txn) Lazy() { tx.lazy = true }

type txnSlot struct{ tab txnTab }

type rowOp struct {
	value []byte
	del   bool
}

// txnTab is the part of a Txn that belongs to one table.
type txnTab interface {
	appendTo(b *pebble.Batch, cp *commitParts) error // cp: nil unless some partition is logged
	published()
	rollback()
}

func newTxn(db *DB) *Txn {
	return &Txn{db: db, tabs: make([]atomic.Pointer[txnSlot], db.nextID.Load()), finished: make(chan struct{})}
}

// finish records the outcome of the Txn and wakes its successor.
func (tx *Txn) finish(ok bool) {
	tx.ok.Store(ok)
	close(tx.finished)
}

// settled reports whether the Txn this one follows, if any, has finished
// (committed, failed or discarded); its values are then in the value cache
// or Pebble, or it did not commit and this Txn cannot commit either.
func (tx *Txn) prevSettled() bool {
	p := tx.prev
	if p == nil {
		return true
	}
	select {
	case <-p.finished:
		return true
	default:
		return false
	}
}

// awaitPrev waits until the preceding Txn, if any, has finished, and
// returns an error wrapping ErrPredecessorFailed if it did not commit.
func (tx *Txn) awaitPrev(ctx context.Context) error {
	p := tx.prev
	if p == nil {
		return nil
	}
	select {
	case <-p.finished:
	case <-ctx.Done():
		return strerr.Errorf("strand: commit: waiting for the preceding transaction: %w", ctx.Err())
	}
	if !p.ok.Load() {
		return strerr.Errorf("strand: commit: %w", ErrPredecessorFailed)
	}
	return nil
}

// SetCheckpoint records that, once this Txn commits, processing of the
// source's partition resumes at offset next. Setting it again replaces the
// value. An empty source name is refused: the error is returned by Commit.
func (tx *Txn) SetCheckpoint(source string, partition uint32, next uint64) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.usable("set checkpoint") {
		if source == "" {
			tx.fail(fmt.Errorf("strand: set checkpoint of partition %d: empty source name", partition))
			return
		}
		if tx.checkpoints == nil {
			tx.checkpoints = make(map[string]uint64)
		}
		tx.checkpoints[string(checkpointKey(source, partition))] = next
	}
}

// PutRow records that, once this Txn commits, the row key of family f in the
// partition holds value. key and value are copied. A reserved family is
// refused: the error, wrapping [ErrReservedFamily], is returned by Commit.
func (tx *Txn) PutRow(f Family, partition uint32, key, value []byte) {
	tx.rowOp(f, partition, key, rowOp{value: append([]byte{}, value...)})
}

// DeleteRow records that, once this Txn commits, the row key of family f in
// the partition no longer exists. A reserved family is refused like PutRow.
func (tx *Txn) DeleteRow(f Family, partition uint32, key []byte) {
	tx.rowOp(f, partition, key, rowOp{del: true})
}

func (tx *Txn) rowOp(f Family, partition uint32, key []byte, op rowOp) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	what := "put"
	if op.del {
		what = "delete"
	}
	if !tx.usable(what + " row") {
		return
	}
	if f.Reserved() {
		tx.fail(fmt.Errorf("%w: %s row %q of family %s partition %d", ErrReservedFamily, what, key, f, partition))
		return
	}
	if tx.rows == nil {
		tx.rows = make(map[string]rowOp)
	}
	tx.rows[string(rowKey(f, partition, key))] = op
}

// usable reports whether the Txn still accepts changes; tx.mu is held. A
// change to a finished Txn cannot be returned to anyone, so it is logged.
func (tx *Txn) usable(what string) bool {
	if tx.done.Load() {
		tx.db.log.Error("state: "+what+" on a finished transaction ignored", slog.Any("err", ErrTxnDone))
		return false
	}
	return true
}

func (tx *Txn) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// Commit writes every change of the Txn — table values, checkpoints, rows —
// as ONE atomic Pebble batch, with the DB's [Durability], then makes the new
// table values visible to later Reads through the value cache. Either all of
// it becomes visible (and, with [Sync], durable) or none of it.
//
// Commit costs one Pebble commit: with Sync, a write-ahead-log fsync that
// concurrent Commits of other transactions share. A Txn without changes
// commits nothing. If ctx is already done, or the Txn recorded a misuse (see
// SetCheckpoint, PutRow), Commit discards the Txn and returns the error. After
// Commit, the Txn cannot be used again.
//
// A Txn started with [DB.NewTxnAfter] first waits for its predecessor to
// finish; if the predecessor did not commit, Commit discards this Txn too
// and returns an error wrapping [ErrPredecessorFailed], since this Txn may
// have read writes that never became state.
func (tx *Txn) Commit(ctx context.Context) error {
	if !tx.done.CompareAndSwap(false, true) {
		return ErrTxnDone
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	ok := false
	defer func() { tx.finish(ok) }()
	if err := tx.awaitPrev(ctx); err != nil {
		tx.rollback()
		return err
	}
	if err := ctx.Err(); err != nil {
		tx.rollback()
		return strerr.Errorf("strand: commit: %w", err)
	}
	if tx.err != nil {
		tx.rollback()
		return tx.err
	}
	if err := tx.db.enter(); err != nil {
		tx.rollback()
		return err
	}
	tx.stats.Start = commitNow()
	err := tx.write()
	tx.stats.End = commitNow()
	tx.db.exit()
	if err != nil {
		tx.rollback()
		return err
	}
	tx.db.views.wrote()
	for _, t := range tx.order {
		t.published()
	}
	tx.prev = nil
	ok = true
	return nil
}

func (tx *Txn) write() error {
	b := tx.db.pdb.NewBatch()
	defer b.Close()
	// While some partition is logged, track the partitions the commit
	// writes (changelog.go); otherwise cp is nil and costs nothing.
	var cp *commitParts
	if st := tx.db.clog.state.Load(); st != nil {
		cp = &commitParts{st: st}
	}
	for _, t := range tx.order {
		if err := t.appendTo(b, cp); err != nil {
			return err
		}
	}
	var val [8]byte
	for k, next := range tx.checkpoints {
		binary.BigEndian.PutUint64(val[:], next)
		if err := b.Set(bytesOf(k), val[:], nil); err != nil {
			return strerr.Errorf("strand: commit: checkpoint: %w", err)
		}
		if cp != nil {
			cp.addKey(bytesOf(k))
		}
	}
	// Rows go in key order, as table rows do: a sorted batch applies to
	// the memtable much faster than one in map order.
	keys := make([]string, 0, len(tx.rows))
	for k := range tx.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if cp != nil {
		return tx.writeTracked(b, cp, keys)
	}
	for _, k := range keys {
		if err := tx.putRowOp(b, k, tx.rows[k]); err != nil {
			return err
		}
	}
	for _, r := range tx.appended {
		if err := b.Set(r.key, r.value, nil); err != nil {
			return strerr.Errorf("strand: commit: %s row: %w", Family(r.key[0]), err)
		}
	}
	return tx.apply(b)
}

// writeTracked is the end of write while some partition is logged: rows
// count towards the commit's partitions except FamilyChangelog rows, which
// are written after the logged writes are taken (they are the engine
// deleting published rows, never part of a partition's logged state).
func (tx *Txn) writeTracked(b *pebble.Batch, cp *commitParts, keys []string) error {
	var later laterOps
	for _, k := range keys {
		if Family(k[0]) == FamilyChangelog {
			later.rows = append(later.rows, k)
			continue
		}
		cp.addKey(bytesOf(k))
		if err := tx.putRowOp(b, k, tx.rows[k]); err != nil {
			return err
		}
	}
	for _, r := range tx.appended {
		if Family(r.key[0]) == FamilyChangelog {
			later.appended = append(later.appended, r)
			continue
		}
		cp.addKey(r.key)
		if err := b.Set(r.key, r.value, nil); err != nil {
			return strerr.Errorf("strand: commit: %s row: %w", Family(r.key[0]), err)
		}
	}
	if cp.logged != nil {
		if cp.n > 1 {
			return fmt.Errorf("%w: logged partition %d and partition %d", ErrMixedPartitions, cp.loggedP, cp.other())
		}
		return tx.commitLogged(b, cp.loggedP, cp.logged, &later)
	}
	if err := tx.writeLater(b, &later); err != nil {
		return err
	}
	return tx.apply(b)
}

// apply commits the batch b, if it holds anything.
func (tx *Txn) apply(b *pebble.Batch) error {
	if b.Empty() {
		return nil
	}
	wopts := tx.db.wopts
	if tx.lazy {
		wopts = pebble.NoSync
	}
	synced := wopts == pebble.Sync
	tx.db.views.beginWrite(synced)
	err := tx.db.guard(func() error { return b.Commit(wopts) })
	tx.db.views.endWrite(synced)
	if err != nil {
		return strerr.Errorf("strand: commit %d changes to %s: %w", b.Count(), tx.db.dir, err)
	}
	tx.stats.Bytes, tx.stats.Changes = len(b.Repr()), int(b.Count())
	return nil
}

// Discard drops every change of the Txn. If the table's values can share
// memory (maps, slices, pointers), it also drops from the value cache every
// key the Txn touched, since a handler may have changed a value it read in
// place. Discard after Commit or Discard does nothing, so `defer tx.Discard()`
// is safe.
//
// Discard of a Txn started with [DB.NewTxnAfter] waits for its predecessor
// to finish first (so that the predecessor's cache updates never land after
// this Txn's invalidations).
func (tx *Txn) Discard() {
	if !tx.done.CompareAndSwap(false, true) {
		return
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	_ = tx.awaitPrev(context.Background())
	tx.rollback()
	tx.finish(false)
}

func (tx *Txn) rollback() {
	for _, t := range tx.order {
		t.rollback()
	}
	tx.checkpoints, tx.rows = nil, nil
	tx.prev = nil
}

// tableOf returns the Txn's part for table b, creating it on first use.
func tableOf[V any](tx *Txn, b *binding[V], name string, shared bool) (*txnTable[V], error) {
	if int(b.id) < len(tx.tabs) {
		if s := tx.tabs[b.id].Load(); s != nil {
			return castTxnTable[V](s.tab, name)
		}
	}
	t := tx.tableSlot(b.id, func() txnTab {
		tt := &txnTable[V]{name: name, cache: b.cache, filter: b.db.filter, shared: shared, last: &b.keys, mem: &b.mem}
		// Size each shard for the keys the table's last Txn had (plus a
		// quarter), so that one slab and one map allocation usually suffice.
		tt.hint = int(min(max(b.keys.Load()*5/4/txnShards, 4), 4096))
		return tt
	})
	return castTxnTable[V](t, name)
}

// tableSlot is tableOf's slow path, without the value type: the table of
// id in tx, made by create if tx has none yet.
func (tx *Txn) tableSlot(id uint32, create func() txnTab) txnTab {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	var existing txnTab
	if int(id) < len(tx.tabs) {
		if s := tx.tabs[id].Load(); s != nil {
			existing = s.tab
		}
	} else {
		existing = tx.extra[id]
	}
	if existing != nil {
		return existing
	}
	tt := create()
	if int(id) < len(tx.tabs) {
		tx.tabs[id].Store(&txnSlot{tab: tt})
	} else {
		if tx.extra == nil {
			tx.extra = make(map[uint32]txnTab)
		}
		tx.extra[id] = tt
	}
	tx.order = append(tx.order, tt)
	return tt
}

func castTxnTable[V any](t txnTab, name string) (*txnTable[V], error) {
	tt, ok := t.(*txnTable[V])
	if !ok {
		return nil, fmt.Errorf("%w: table %q: its id is used by a table of another value type in this transaction", ErrInvalidTable, name)
	}
	return tt, nil
}

const (
	txnShards    = 16
	txnShardMask = txnShards - 1
)

// txnTable holds one table's entries of a Txn, sharded by key hash.
type txnTable[V any] struct {
	name   string
	cache  *valueCache[V]
	filter *keyFilter    // nil when disabled
	shared bool          // values may share memory with the cache's (see aliasFree)
	began  bool          // appendTo began a write in cache.writes; published or rollback ends it
	hint   int           // expected keys per shard
	last   *atomic.Int64 // where to leave this Txn's key count for the next
	mem    *sync.Pool    // the table's spare *shardMem[V]
	shards [txnShards]txnShard[V]
}

type txnShard[V any] struct {
	mu   sync.Mutex
	ix   *entryIndex[V] // Pebble key → entry; nil until the first entry
	slab []txnEntry[V]  // entries are carved from here; a full slab is replaced, never grown
	mem  *shardMem[V]   // where ix, the slabs and the encodings live
	_    [16]byte
}

// get returns the entry of Pebble key k (hash h), or nil; s's lock is
// held.
func (s *txnShard[V]) get(h uint64, k []byte) *txnEntry[V] {
	if s.ix == nil {
		return nil
	}
	return s.ix.get(h, unsafe.String(unsafe.SliceData(k), len(k)))
}

// remove drops entry e (the failure path); s's lock is held.
func (s *txnShard[V]) remove(e *txnEntry[V]) {
	s.ix.remove(e)
	e.gone = true
}

// each calls fn with every entry of s; s's lock is held.
func (s *txnShard[V]) each(fn func(e *txnEntry[V])) {
	if s.mem == nil {
		return
	}
	for _, sl := range s.mem.slabs[:s.mem.spare] {
		for i := range sl {
			if e := &sl[i]; !e.gone {
				fn(e)
			}
		}
	}
}

// entryIndex finds a shard's entries by key: open addressing over entry
// pointers, probed from the key's hash, which every caller already has (a
// Go map of string keys hashes the key again).
type entryIndex[V any] struct {
	slots []*txnEntry[V] // length a power of two, at most half full
	n     int
}

func (x *entryIndex[V]) get(h uint64, k string) *txnEntry[V] {
	if len(x.slots) == 0 {
		return nil
	}
	mask := uint64(len(x.slots) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		e := x.slots[p]
		if e == nil {
			return nil
		}
		if e.h == h && e.key == k {
			return e
		}
	}
}

// add indexes e, whose key it does not hold.
func (x *entryIndex[V]) add(e *txnEntry[V]) {
	if (x.n+1)*2 > len(x.slots) {
		old := x.slots
		x.slots = make([]*txnEntry[V], max(16, 2*len(old)))
		mask := uint64(len(x.slots) - 1)
		for _, o := range old {
			if o != nil {
				p := o.h & mask
				for x.slots[p] != nil {
					p = (p + 1) & mask
				}
				x.slots[p] = o
			}
		}
	}
	mask := uint64(len(x.slots) - 1)
	p := e.h & mask
	for x.slots[p] != nil {
		p = (p + 1) & mask
	}
	x.slots[p] = e
	x.n++
}

// remove drops e from the index (backward-shift deletion).
func (x *entryIndex[V]) remove(e *txnEntry[V]) {
	mask := uint64(len(x.slots) - 1)
	p := e.h & mask
	for x.slots[p] != e {
		p = (p + 1) & mask
	}
	for j := (p + 1) & mask; x.slots[j] != nil; j = (j + 1) & mask {
		if home := x.slots[j].h & mask; (j-home)&mask >= (j-p)&mask {
			x.slots[p] = x.slots[j]
			p = j
		}
	}
	x.slots[p] = nil
	x.n--
}

// reset empties the index, keeping its memory.
func (x *entryIndex[V]) reset() {
	clear(x.slots)
	x.n = 0
}

func (x *entryIndex[V]) len() int {
	if x == nil {
		return 0
	}
	return x.n
}

// shardMem is the memory of one txnShard: its map, its entry slabs and the
// arena its values are encoded into. When the Txn ends (after its entries
// were published or rolled back, and no one can reach them any more) it is
// cleared and reused by a later Txn of the table, so that a batch does not
// allocate what the one before it threw away.
type shardMem[V any] struct {
	ix     entryIndex[V]
	slabs  [][]txnEntry[V] // every slab, the one in use last
	spare  int             // slabs[spare:] are cleared and unused
	chunks [][]byte        // encoding arena: chunks[chunk] is being filled
	chunk  int
	last   int      // length of the last encoding
	keys   [][]byte // key arena: the map's keys; keys[kchunk] is being filled
	kchunk int
}

// arenaChunk is the size of an encoding arena chunk; a value whose encoding
// does not fit in the rest of a chunk is allocated on its own.
const arenaChunk = 16 << 10

// memOf returns s's memory, taking it from the pool on first use; s's lock
// is held.
func (tt *txnTable[V]) memOf(s *txnShard[V]) *shardMem[V] {
	if s.mem == nil {
		if m, ok := tt.mem.Get().(*shardMem[V]); ok {
			s.mem = m
		} else {
			s.mem = &shardMem[V]{}
		}
		if s.mem.ix.slots == nil {
			n := 16
			for n < 2*tt.hint {
				n *= 2
			}
			s.mem.ix.slots = make([]*txnEntry[V], n)
		}
		s.ix = &s.mem.ix
	}
	return s.mem
}

// encode appends the encoding of e's value to the arena of s and makes e a
// write of it. It takes s's lock (the codec may panic: the lock is
// released).
func (tt *txnTable[V]) encode(s *txnShard[V], c Codec[V], e *txnEntry[V]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := tt.memOf(s)
	// A new chunk when the rest of this one may not hold a value as large
	// as the last (values larger than a quarter chunk are allocated alone).
	if need := max(256, min(m.last, arenaChunk/4)); len(m.chunks) == 0 || cap(m.chunks[m.chunk])-len(m.chunks[m.chunk]) < need {
		if len(m.chunks) > 0 {
			m.chunk++
		}
		if m.chunk == len(m.chunks) {
			m.chunks = append(m.chunks, make([]byte, 0, arenaChunk))
		}
	}
	a := m.chunks[m.chunk]
	n := len(a)
	enc, err := c.Append(a[n:n:cap(a)], e.v)
	if err != nil {
		return err
	}
	if len(enc) > 0 && len(enc) <= cap(a)-n && &enc[0] == &a[:n+1][n] {
		m.chunks[m.chunk] = a[:n+len(enc)] // written in place: keep it
	}
	m.last = len(enc)
	e.enc, e.present, e.dirty = enc, true, true
	return nil
}

// keyOf returns a copy of k in the key arena of s, to be a key of s's map
// (it lives as long as the Txn's entries: until release); s's lock is
// held.
func (tt *txnTable[V]) keyOf(s *txnShard[V], k []byte) string {
	if len(k) == 0 || len(k) > keyChunk/4 {
		return string(k)
	}
	m := tt.memOf(s)
	if len(m.keys) == 0 || cap(m.keys[m.kchunk])-len(m.keys[m.kchunk]) < len(k) {
		if len(m.keys) > 0 {
			m.kchunk++
		}
		if m.kchunk == len(m.keys) {
			m.keys = append(m.keys, make([]byte, 0, keyChunk))
		}
	}
	a := m.keys[m.kchunk]
	n := len(a)
	a = append(a, k...)
	m.keys[m.kchunk] = a
	return unsafe.String(&a[n], len(k))
}

// keyChunk is the size of a key arena chunk; keys longer than a quarter
// chunk are allocated on their own.
const keyChunk = 4 << 10

// release clears s's memory and returns it to the pool; s's lock is held
// and its entries are no longer reachable.
func (tt *txnTable[V]) release(s *txnShard[V]) {
	m := s.mem
	s.ix, s.slab, s.mem = nil, nil, nil
	if m == nil {
		return
	}
	m.ix.reset()
	for i, sl := range m.slabs[:m.spare] {
		clear(sl[:cap(sl)])
		m.slabs[i] = sl[:0]
	}
	m.spare = 0
	for i := range m.chunks {
		m.chunks[i] = m.chunks[i][:0]
	}
	m.chunk = 0
	for i := range m.keys {
		m.keys[i] = m.keys[i][:0]
	}
	m.kchunk = 0
	tt.mem.Put(m)
}

// txnEntry is one key's value in a Txn: written (dirty) or read (clean).
type txnEntry[V any] struct {
	key     string // the Pebble key, in the shard's key arena
	v       V
	enc     []byte   // encoded v, for dirty entries that are present
	h       uint64   // hash of the Pebble key
	ce      cacheRef // the cache slot the value was read from, if any
	present bool
	dirty   bool
	gone    bool // removed from the index (a revert): skipped by each
}

// newEntry returns a new entry of shard s, whose lock is held, for Pebble
// key k of hash h, which s does not hold; only its key and hash are set.
func (tt *txnTable[V]) newEntry(s *txnShard[V], h uint64, k []byte) *txnEntry[V] {
	e := tt.carve(s)
	e.key, e.h = tt.keyOf(s, k), h
	s.ix.add(e)
	return e
}

// carve returns a zeroed entry from the slabs of s, whose lock is held.
func (tt *txnTable[V]) carve(s *txnShard[V]) *txnEntry[V] {
	m := tt.memOf(s)
	if len(s.slab) == cap(s.slab) {
		if m.spare < len(m.slabs) {
			s.slab = m.slabs[m.spare]
		} else {
			s.slab = make([]txnEntry[V], 0, max(tt.hint, 2*cap(s.slab)))
			m.slabs = append(m.slabs, s.slab)
		}
		m.spare++
	}
	s.slab = s.slab[:len(s.slab)+1]
	m.slabs[m.spare-1] = s.slab
	return &s.slab[len(s.slab)-1]
}

func (tt *txnTable[V]) shard(h uint64) *txnShard[V] {
	return &tt.shards[(h>>32)&txnShardMask]
}

// dirtyKey is one written key of a txnTable, for sorting before commit.
type dirtyKey struct {
	part    uint32 // partition
	p       uint64 // the 8 key bytes after the table prefix, big-endian: sorts most keys without a string compare
	k       string
	enc     []byte
	present bool
}

// sortPrefix returns the partition and the 8 bytes of k after the table
// row prefix (family, partition, table id), big-endian and zero-padded, so
// that comparing prefixes orders keys of one table as comparing the keys
// does, up to ties.
func sortPrefix(k string) (uint32, uint64) {
	var b [8]byte
	if len(k) > rowKeyExtra {
		copy(b[:], k[rowKeyExtra:])
	}
	return binary.BigEndian.Uint32([]byte(k[1:5])), binary.BigEndian.Uint64(b[:])
}

// radixSortDirty sorts keys by (part, p) with a least-significant-digit
// radix sort that skips the byte positions all keys share (for small
// integer keys of one partition, all but one or two), then orders runs of
// equal (part, p) by the whole key. It returns the sorted slice and the
// other buffer, for reuse; tmp may be of any length.
func radixSortDirty(keys, tmp []dirtyKey) (sorted, other []dirtyKey) {
	n := len(keys)
	if n < 2 {
		return keys, tmp
	}
	if cap(tmp) < n {
		tmp = make([]dirtyKey, n)
	}
	tmp = tmp[:n]
	digit := func(d *dirtyKey, pass int) byte {
		if pass < 8 {
			return byte(d.p >> (8 * pass))
		}
		return byte(d.part >> (8 * (pass - 8)))
	}
	for pass := range 12 {
		var count [256]int
		for i := range keys {
			count[digit(&keys[i], pass)]++
		}
		if count[digit(&keys[0], pass)] == n {
			continue // every key has this byte
		}
		pos := 0
		for b := range count {
			c := count[b]
			count[b] = pos
			pos += c
		}
		for i := range keys {
			d := digit(&keys[i], pass)
			tmp[count[d]] = keys[i]
			count[d]++
		}
		keys, tmp = tmp, keys
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && keys[j].part == keys[i].part && keys[j].p == keys[i].p {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(keys[i:j], compareDirty)
		}
		i = j
	}
	return keys, tmp
}

func compareDirty(a, b dirtyKey) int {
	if a.part != b.part {
		if a.part < b.part {
			return -1
		}
		return 1
	}
	if a.p != b.p {
		if a.p < b.p {
			return -1
		}
		return 1
	}
	return strings.Compare(a.k, b.k)
}

// dirtyKeys pools the sort buffers of appendTo.
var dirtyKeys = sync.Pool{New: func() any { return new([]dirtyKey) }}

// appendTo adds the table's written keys to b in key order. Pebble inserts
// a batch into its memtable skiplist entry by entry; in key order,
// consecutive inserts walk nearly the same skiplist path, which stays in
// the CPU's caches (measured: the memtable insert of a 2,200-key commit
// took about half the time sorted as in hash order).
func (tt *txnTable[V]) appendTo(b *pebble.Batch, cp *commitParts) error {
	bufp := dirtyKeys.Get().(*[]dirtyKey)
	keys := (*bufp)[:0]
	defer func() {
		clear(keys)
		*bufp = keys[:0]
		dirtyKeys.Put(bufp)
	}()
	for i := range tt.shards {
		s := &tt.shards[i]
		s.mu.Lock()
		s.each(func(e *txnEntry[V]) {
			if e.dirty {
				part, p := sortPrefix(e.key)
				keys = append(keys, dirtyKey{part: part, p: p, k: e.key, enc: e.enc, present: e.present})
				if e.present && tt.filter != nil {
					// Before Pebble has it: the filter never says "absent"
					// of a row that may be committed.
					tt.filter.add(e.h)
				}
			}
		})
		s.mu.Unlock()
	}
	if len(keys) > 0 && !tt.began {
		// Before Pebble has them: committed reads keep off the value
		// cache until published or rollback is done with it (committed.go).
		tt.cache.writes.begin()
		tt.began = true
	}
	tmpp := dirtyKeys.Get().(*[]dirtyKey)
	keys, tmp := radixSortDirty(keys, (*tmpp)[:0])
	clear(tmp)
	*tmpp = tmp[:0]
	dirtyKeys.Put(tmpp)
	for _, d := range keys {
		if cp != nil {
			cp.add(d.part)
		}
		var err error
		if d.present {
			err = b.Set(bytesOf(d.k), d.enc, nil)
		} else {
			err = b.Delete(bytesOf(d.k), nil)
		}
		if err != nil {
			return strerr.Errorf("strand: commit: table %q key %q partition %d: %w", tt.name, d.k[rowKeyExtra:], binary.BigEndian.Uint32([]byte(d.k[1:5])), err)
		}
	}
	return nil
}

// endWrite ends the write appendTo began, if it did.
func (tt *txnTable[V]) endWrite() {
	if tt.began {
		tt.began = false
		tt.cache.writes.end()
	}
}

func (tt *txnTable[V]) published() {
	n := 0
	for i := range tt.shards {
		s := &tt.shards[i]
		s.mu.Lock()
		n += s.ix.len()
		s.each(func(e *txnEntry[V]) {
			if e.dirty {
				tt.cache.put(e.h, e.key, e.ce, e.v, e.present, len(e.enc))
			} else if tt.shared {
				// A read value may have been mutated in place without
				// being written back: it no longer matches Pebble.
				tt.cache.invalidate(e.h, e.key)
			}
		})
		tt.release(s)
		s.mu.Unlock()
	}
	tt.last.Store(int64(n))
	tt.endWrite()
}

func (tt *txnTable[V]) rollback() {
	n := 0
	for i := range tt.shards {
		s := &tt.shards[i]
		s.mu.Lock()
		n += s.ix.len()
		// Written values never reached the cache; read values reached the
		// handler as copies unless they may share memory.
		if tt.shared {
			s.each(func(e *txnEntry[V]) { tt.cache.invalidate(e.h, e.key) })
		}
		tt.release(s)
		s.mu.Unlock()
	}
	tt.last.Store(int64(n))
	tt.endWrite()
}

// bytesOf returns the bytes of s without copying. The result must not be
// modified; Pebble's Batch.Set and Delete copy their arguments.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
