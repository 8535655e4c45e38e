package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// The changelog lets a partition's state move from one store to another
// (scale-out: one owner per partition across instances). While a partition
// is logged ([DB.LogPartition]), every commit that writes its rows also
// writes, in the same atomic Pebble batch, a FamilyChangelog row holding
// that commit's writes as a Pebble batch representation, and the partition's
// FamilyLogHead row; the engine publishes the changelog rows and deletes
// them once published. Another store rebuilds the partition by applying a
// snapshot ([DB.SnapshotPartition]) and the changelog rows after it
// ([DB.ApplyLogged]).
//
// A logged commit's batch is laid out as:
//
//	the commit's writes (table rows, checkpoints, rows) | Set(FamilyLogHead|p, head)
//	  | Set(FamilyChangelog|p|seq, EncodeLogged(head, <repr of everything before>))
//	  | the commit's own FamilyChangelog row operations (deleting published rows)
//
// so the logged writes carry the head row (a store that applies them knows
// which commit it is at) but never a changelog row.

// ErrMixedPartitions is wrapped by [Txn.Commit] when a commit writes rows of
// a logged partition (see [DB.LogPartition]) and of another partition: a
// logged commit must belong to one partition, whose changelog holds it.
// Nothing is written then.
var ErrMixedPartitions = errors.New("strand: commit writes rows of a logged partition and of another partition")

// ErrBadLoggedWrites is wrapped by [DB.ApplyLogged] and [DecodeLogged] when
// their input is malformed or writes keys they must not: nothing is applied.
var ErrBadLoggedWrites = errors.New("strand: malformed or foreign logged writes")

// Checkpoint is one checkpoint a commit sets: processing of the source's
// partition resumes at offset Next.
type Checkpoint struct {
	Source string
	Next   uint64
}

// CommitLogger is told about every commit that writes rows of a logged
// partition (see [DB.SetCommitLogger] and [DB.LogPartition]).
type CommitLogger interface {
	// Stamp is called by Txn.Commit once per commit that writes rows of
	// logged partition p, after the batch is built and before it is
	// applied, under a per-partition lock held until the batch was applied
	// or failed (so Stamps of one partition follow the commit order
	// exactly, also across Txns of different sources / goroutines).
	// checkpoints are the checkpoints the commit sets, sorted by source. It
	// returns the commit's seq and the head value to store; an error fails
	// the commit (nothing is written; Commit returns an error wrapping it).
	// Stamp and Done may read the DB, but must not commit to partition p or
	// call LogPartition or SetCommitLogger (the lock is held).
	Stamp(p uint32, checkpoints []Checkpoint) (seq uint64, head []byte, err error)
	// Done follows every successful Stamp once the batch was applied (ok)
	// or failed (!ok), still under the partition's lock.
	Done(p uint32, seq uint64, ok bool)
}

// changelog is a DB's logging configuration.
type changelog struct {
	mu     sync.Mutex // serializes SetCommitLogger and LogPartition
	logger CommitLogger
	locks  map[uint32]*partLog // every partition ever logged: its lock
	on     map[uint32]*partLog // the partitions logged now
	// state is what commits read: nil when no commit is logged (no logger,
	// or no logged partition), so that they pay one atomic load.
	state atomic.Pointer[logState]
}

// logState is an immutable view of the logging configuration.
type logState struct {
	logger CommitLogger
	parts  map[uint32]*partLog
}

// partLog serializes the logged commits of one partition.
type partLog struct{ mu sync.Mutex }

func (c *changelog) publish() {
	if c.logger == nil || len(c.on) == 0 {
		c.state.Store(nil)
		return
	}
	c.state.Store(&logState{logger: c.logger, parts: maps.Clone(c.on)})
}

// SetCommitLogger sets the logger told about every logged commit; call it
// before any logged commit. nil turns logging off (the partitions stay
// marked by LogPartition, and are logged again once a logger is set).
func (db *DB) SetCommitLogger(l CommitLogger) {
	c := &db.clog
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logger = l
	c.publish()
}

// LogPartition turns logging of partition p's commits on or off. It is
// safe while commits run: it waits for a logged commit of p in progress to
// finish, and every commit of p that is stamped after it returns follows the
// new setting. (A commit already under way when logging is turned on may
// still commit unlogged: turn it on before committing anything of p.)
func (db *DB) LogPartition(p uint32, on bool) {
	c := &db.clog
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locks == nil {
		c.locks, c.on = make(map[uint32]*partLog), make(map[uint32]*partLog)
	}
	pl := c.locks[p]
	if pl == nil {
		pl = new(partLog)
		c.locks[p] = pl
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if on {
		c.on[p] = pl
	} else {
		delete(c.on, p)
	}
	c.publish()
}

// EncodeLogged returns the value of a FamilyChangelog row: uvarint(len(head))
// | head | writes.
func EncodeLogged(head, writes []byte) []byte {
	out := make([]byte, 0, binary.MaxVarintLen64+len(head)+len(writes))
	out = binary.AppendUvarint(out, uint64(len(head)))
	out = append(out, head...)
	return append(out, writes...)
}

// DecodeLogged splits the value of a FamilyChangelog row into the head and
// the writes (a Pebble batch representation for [DB.ApplyLogged]). Both
// alias row. A malformed row gives an error wrapping [ErrBadLoggedWrites].
func DecodeLogged(row []byte) (head, writes []byte, err error) {
	n, w := binary.Uvarint(row)
	if w <= 0 {
		return nil, nil, fmt.Errorf("%w: changelog row of %d bytes: malformed head length", ErrBadLoggedWrites, len(row))
	}
	rest := row[w:]
	if n > uint64(len(rest)) {
		return nil, nil, fmt.Errorf("%w: changelog row of %d bytes: head of %d bytes", ErrBadLoggedWrites, len(row), n)
	}
	return rest[:n:n], rest[n:], nil
}

func changelogKey(p uint32, seq uint64) []byte {
	k := appendPrefix(make([]byte, 0, prefixLen+8), FamilyChangelog, p)
	return binary.BigEndian.AppendUint64(k, seq)
}

func logHeadKey(p uint32) []byte { return appendPrefix(make([]byte, 0, prefixLen), FamilyLogHead, p) }

// commitParts tracks the partitions a commit writes while some partition
// is logged. Runs of one partition are looked up once.
type commitParts struct {
	st            *logState
	n             int // distinct partitions seen, counted up to 2
	first, second uint32
	last          uint32
	logged        *partLog // the logged partition seen first, if any
	loggedP       uint32
}

func (c *commitParts) add(p uint32) {
	if c.n > 0 && p == c.last {
		return
	}
	c.last = p
	switch {
	case c.n == 0:
		c.first, c.n = p, 1
	case c.n == 1 && p != c.first:
		c.second, c.n = p, 2
	}
	if c.logged == nil {
		if pl := c.st.parts[p]; pl != nil {
			c.logged, c.loggedP = pl, p
		}
	}
}

func (c *commitParts) addKey(k []byte) { c.add(binary.BigEndian.Uint32(k[1:prefixLen])) }

// other returns a partition seen other than the logged one.
func (c *commitParts) other() uint32 {
	if c.first != c.loggedP {
		return c.first
	}
	return c.second
}

// laterOps are the FamilyChangelog row operations of a commit, written
// after the logged writes were taken.
type laterOps struct {
	rows     []string // keys of tx.rows
	appended []appendedRow
}

func (tx *Txn) writeLater(b *pebble.Batch, later *laterOps) error {
	for _, k := range later.rows {
		if err := tx.putRowOp(b, k, tx.rows[k]); err != nil {
			return err
		}
	}
	for _, r := range later.appended {
		if err := b.Set(r.key, r.value, nil); err != nil {
			return strerr.Errorf("strand: commit: %s row: %w", Family(r.key[0]), err)
		}
	}
	return nil
}

func (tx *Txn) putRowOp(b *pebble.Batch, k string, op rowOp) error {
	var err error
	if op.del {
		err = b.Delete(bytesOf(k), nil)
	} else {
		err = b.Set(bytesOf(k), op.value, nil)
	}
	if err != nil {
		return strerr.Errorf("strand: commit: %s row: %w", Family(k[0]), err)
	}
	return nil
}

// commitLogged stamps, completes and commits the batch of a logged commit
// of partition p; the batch holds the commit's writes.
func (tx *Txn) commitLogged(b *pebble.Batch, p uint32, pl *partLog, later *laterOps) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	st := tx.db.clog.state.Load()
	if st == nil || st.parts[p] != pl {
		// Logging of p was turned off since the commit began.
		if err := tx.writeLater(b, later); err != nil {
			return err
		}
		return tx.apply(b)
	}
	seq, head, err := st.logger.Stamp(p, tx.checkpointsOf(p))
	if err != nil {
		return strerr.Errorf("strand: commit: logged commit of partition %d: stamp: %w", p, err)
	}
	ok := false
	defer func() { st.logger.Done(p, seq, ok) }()
	if err := b.Set(logHeadKey(p), head, nil); err != nil {
		return strerr.Errorf("strand: commit: log head of partition %d: %w", p, err)
	}
	if err := b.Set(changelogKey(p, seq), EncodeLogged(head, b.Repr()), nil); err != nil {
		return strerr.Errorf("strand: commit: changelog row %d of partition %d: %w", seq, p, err)
	}
	if err := tx.writeLater(b, later); err != nil {
		return err
	}
	if err := tx.apply(b); err != nil {
		return err
	}
	ok = true
	return nil
}

// checkpointsOf returns the checkpoints of partition p the Txn sets,
// sorted by source.
func (tx *Txn) checkpointsOf(p uint32) []Checkpoint {
	if len(tx.checkpoints) == 0 {
		return nil
	}
	out := make([]Checkpoint, 0, len(tx.checkpoints))
	for k, next := range tx.checkpoints {
		if binary.BigEndian.Uint32(bytesOf(k)[1:prefixLen]) == p {
			out = append(out, Checkpoint{Source: k[prefixLen:], Next: next})
		}
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return cmpString(a.Source, b.Source) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Batch representation (Pebble's, also its write-ahead log's): a 12-byte
// header (sequence number u64 LE, count u32 LE), then count entries of a
// kind byte, a uvarint-prefixed key and, for a Set, a uvarint-prefixed
// value. Only Sets and Deletes are ever logged or snapshotted.
const (
	reprHeaderLen = 12
	kindDelete    = 0
	kindSet       = 1
)

// reprEntry is one decoded entry of a batch representation.
type reprEntry struct {
	set        bool
	key, value []byte
}

// nextEntry decodes the entry at the start of r, returning the rest.
func nextEntry(r []byte) (e reprEntry, rest []byte, err error) {
	kind := r[0]
	if kind != kindSet && kind != kindDelete {
		return e, nil, fmt.Errorf("entry of kind %d (only sets and deletes are logged)", kind)
	}
	e.set = kind == kindSet
	e.key, r, err = decodeStr(r[1:])
	if err != nil {
		return e, nil, fmt.Errorf("key: %w", err)
	}
	if e.set {
		e.value, r, err = decodeStr(r)
		if err != nil {
			return e, nil, fmt.Errorf("value of key %x: %w", e.key, err)
		}
	}
	return e, r, nil
}

func decodeStr(r []byte) (s, rest []byte, err error) {
	n, w := binary.Uvarint(r)
	if w <= 0 || n > uint64(len(r)-w) {
		return nil, nil, errors.New("truncated or malformed length")
	}
	return r[w : w+int(n) : w+int(n)], r[w+int(n):], nil
}

// checkLoggedKey reports why an entry must not be applied to partition p,
// or nil.
func checkLoggedKey(p uint32, e reprEntry) error {
	k := e.key
	if len(k) < prefixLen {
		return fmt.Errorf("key %x is shorter than a family and partition", k)
	}
	f, kp := Family(k[0]), binary.BigEndian.Uint32(k[1:prefixLen])
	switch {
	case f == FamilyMeta || f == FamilyChangelog:
		return fmt.Errorf("key %x is of family %s", k, f)
	case kp != p:
		return fmt.Errorf("key %x is of partition %d", k, kp)
	case f == FamilyTable && len(k) < rowKeyExtra:
		return fmt.Errorf("table row key %x has no table id", k)
	case f == FamilyCheckpoint && (len(k) == prefixLen || e.set && len(e.value) != 8):
		return fmt.Errorf("checkpoint %x with a value of %d bytes", k, len(e.value))
	case f == FamilyLogHead && len(k) != prefixLen:
		return fmt.Errorf("log head key %x", k)
	}
	return nil
}

// tableKey is a table row key of applied writes and its hash.
type tableKey struct {
	h uint64
	k []byte
}

// ApplyLogged applies writes, the writes of a logged commit of partition p
// (from [DecodeLogged]) or a chunk of [DB.SnapshotPartition], to this
// store as one atomic batch without waiting for the write-ahead log's
// fsync (a restore applies many; call [DB.SyncWAL] once after the last, or
// commit a Txn, to make them durable); it is never logged itself. Writes that are malformed, or that write a key outside partition p
// or of FamilyMeta or FamilyChangelog, are refused with an error wrapping
// [ErrBadLoggedWrites], and nothing is applied.
//
// Afterwards every read sees the new values: the table rows it touches are
// dropped from the value cache and the rows it sets are added to the key
// filter. Reads and commits of partition p should not run meanwhile (the
// engine applies a partition before processing it).
func (db *DB) ApplyLogged(ctx context.Context, p uint32, writes []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(writes) < reprHeaderLen {
		return fmt.Errorf("%w: partition %d: writes of %d bytes have no batch header", ErrBadLoggedWrites, p, len(writes))
	}
	count := binary.LittleEndian.Uint32(writes[8:reprHeaderLen])
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	b := db.pdb.NewBatch()
	defer b.Close()
	var tkeys []tableKey
	n := uint32(0)
	for r := writes[reprHeaderLen:]; len(r) > 0; n++ {
		e, rest, err := nextEntry(r)
		if err == nil {
			err = checkLoggedKey(p, e)
		}
		if err != nil {
			return fmt.Errorf("%w: partition %d: entry %d: %w", ErrBadLoggedWrites, p, n, err)
		}
		r = rest
		if e.set {
			err = b.Set(e.key, e.value, nil)
		} else {
			err = b.Delete(e.key, nil)
		}
		if err != nil {
			return strerr.Errorf("strand: apply logged writes of partition %d: %w", p, err)
		}
		if Family(e.key[0]) == FamilyTable {
			tkeys = append(tkeys, tableKey{db.hash(e.key), e.key})
		}
	}
	if n != count {
		return fmt.Errorf("%w: partition %d: header counts %d entries, %d found", ErrBadLoggedWrites, p, count, n)
	}
	if n == 0 {
		return nil
	}
	if db.filter != nil {
		// Before Pebble has them, as a commit does: the filter never says
		// "absent" of a row that may be in Pebble.
		for _, t := range tkeys {
			db.filter.add(t.h)
		}
	}
	if len(tkeys) > 0 {
		// Committed reads keep off the value cache until it dropped
		// these keys (committed.go).
		defer db.writingTables()()
	}
	db.views.beginWrite(false)
	err := db.guard(func() error { return b.Commit(pebble.NoSync) })
	db.views.endWrite(false)
	if err != nil {
		return strerr.Errorf("strand: apply %d logged writes of partition %d to %s: %w", n, p, db.dir, err)
	}
	db.views.wrote()
	// After Pebble has them: a Read that filled an old value meanwhile is
	// dropped here, one that fills later reads the new one.
	if len(tkeys) > 0 {
		db.mu.Lock()
		for _, t := range db.attached {
			t.forget(db, tkeys)
		}
		db.mu.Unlock()
	}
	return nil
}

// forget drops the given keys of this table from its value cache.
func (t *Table[K, V]) forget(db *DB, keys []tableKey) {
	b := t.b.Load()
	if b == nil || b.db != db {
		return
	}
	for _, tk := range keys {
		if binary.BigEndian.Uint32(tk.k[prefixLen:rowKeyExtra]) == b.id {
			b.cache.invalidate(tk.h, unsafe.String(unsafe.SliceData(tk.k), len(tk.k)))
		}
	}
}

// dropPartition drops every cached value of partition p of this table.
func (t *Table[K, V]) dropPartition(db *DB, p uint32) {
	if b := t.b.Load(); b != nil && b.db == db {
		b.cache.dropPartition(p)
	}
}

// partitionFamilies calls fn with the key prefix of partition p in every
// family but FamilyMeta and skip, in key order.
func partitionFamilies(p uint32, skip Family, fn func(prefix []byte) error) error {
	for f := range 256 {
		if Family(f) == FamilyMeta || Family(f) == skip {
			continue
		}
		if err := fn(appendPrefix(make([]byte, 0, prefixLen), Family(f), p)); err != nil {
			return err
		}
	}
	return nil
}

// DropPartition deletes every row of partition p in every family but
// FamilyMeta (table rows, checkpoints, other rows, changelog rows and the
// log head) in one atomic batch, and drops p's cached values; other
// partitions are untouched. Commits of p should not run meanwhile.
func (db *DB) DropPartition(ctx context.Context, p uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	it, err := db.pdb.NewIter(nil)
	if err != nil {
		return strerr.Errorf("strand: drop partition %d: %w", p, err)
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	err = partitionFamilies(p, FamilyMeta, func(prefix []byte) error {
		if !it.SeekGE(prefix) || !bytes.HasPrefix(it.Key(), prefix) {
			return nil // no rows: no range tombstone
		}
		if end := prefixEnd(prefix); end != nil {
			return b.DeleteRange(prefix, end, nil)
		}
		// The last family's last partition has no end key: delete its rows
		// one by one.
		for valid := true; valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
			if err := b.Delete(it.Key(), nil); err != nil {
				return err
			}
		}
		return it.Error()
	})
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return strerr.Errorf("strand: drop partition %d: %w", p, err)
	}
	// Committed reads keep off the value cache until it dropped the
	// partition (committed.go).
	defer db.writingTables()()
	if !b.Empty() {
		synced := db.wopts == pebble.Sync
		db.views.beginWrite(synced)
		err := db.guard(func() error { return b.Commit(db.wopts) })
		db.views.endWrite(synced)
		if err != nil {
			return strerr.Errorf("strand: drop partition %d of %s: %w", p, db.dir, err)
		}
		db.views.wrote()
	}
	db.mu.Lock()
	for _, t := range db.attached {
		t.dropPartition(db, p)
	}
	db.mu.Unlock()
	return nil
}

// SnapshotPartition reads one consistent Pebble snapshot and calls fn with
// every row of partition p (every family but FamilyMeta and FamilyChangelog;
// the log head included) in key order, in chunks of about chunkBytes each
// (a row larger than that is a chunk of its own). Each chunk is a batch
// representation of Sets that [DB.ApplyLogged] accepts; it is only valid
// during the call (fn copies it to keep it), so memory stays bounded by about
// one chunk. For a partition without rows fn is not called. SnapshotPartition
// stops at the first error from fn and returns it unchanged. fn may call
// other methods of the DB, but not Close.
func (db *DB) SnapshotPartition(ctx context.Context, p uint32, chunkBytes int, fn func(writes []byte) error) error {
	if chunkBytes <= 0 {
		return fmt.Errorf("strand: snapshot partition %d: chunk size %d is not positive", p, chunkBytes)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	snap := db.pdb.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return strerr.Errorf("strand: snapshot partition %d: %w", p, err)
	}
	defer it.Close()
	b := db.pdb.NewBatch()
	defer b.Close()
	flush := func() error {
		if b.Empty() {
			return nil
		}
		if err := fn(b.Repr()); err != nil {
			return err
		}
		b.Reset()
		return nil
	}
	var fnErr error
	n := 0
	err = partitionFamilies(p, FamilyChangelog, func(prefix []byte) error {
		for valid := it.SeekGE(prefix); valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
			if n++; n%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			val, err := it.ValueAndErr()
			if err != nil {
				return fmt.Errorf("key %x: %w", it.Key(), err)
			}
			if err := b.Set(it.Key(), val, nil); err != nil {
				return err
			}
			if b.Len() >= chunkBytes {
				if fnErr = flush(); fnErr != nil {
					return fnErr
				}
			}
		}
		return it.Error()
	})
	if err == nil {
		fnErr = flush()
	}
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return strerr.Errorf("strand: snapshot partition %d: %w", p, err)
	}
	return nil
}

// LogHead returns the committed head row of partition p: the head value of
// its last logged or applied commit. ok is false when there is none.
func (db *DB) LogHead(p uint32) (head []byte, ok bool, err error) {
	if err := db.enter(); err != nil {
		return nil, false, err
	}
	defer db.exit()
	head, ok, err = db.getCopy(logHeadKey(p))
	if err != nil {
		return nil, false, strerr.Errorf("strand: read the log head of partition %d: %w", p, err)
	}
	return head, ok, nil
}
