package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/internal/xxh32"
)

// The durable read view (docs/design.md §2, "what a reader sees").
//
// Pebble makes a committed batch visible to its readers before the batch's
// write-ahead log record is synced: its commit pipeline publishes the
// batch's sequence number, then a synced commit waits for the fsync. A
// reader of the live database can therefore see a commit that a crash
// takes back (and, with NoSync durability, any commit of the last few
// milliseconds). Table.Get, Table.Scan and Table.ScanPartition read from a
// view instead: a Pebble snapshot taken, then made durable by one fsync of
// the write-ahead log (which covers every batch the snapshot holds, as
// those were queued to the log before they became visible). A view is
// taken when a read finds that a commit returned after the current view
// was taken, so a reader always sees every commit that returned before it
// started, and never anything that is not on disk. Concurrent readers
// share one advance; a store without commits since the last view reads
// the view as it is; on a Sync store a view taken while no commit is in
// flight (and no unsynced write is uncovered) needs no fsync at all.

// view is a snapshot of the store whose contents are durable.
type view struct {
	snap *pebble.Snapshot
	gen  uint64       // commits that had returned when it was taken: all in it
	refs atomic.Int64 // the DB's (while current) and its readers'
}

func (v *view) release() {
	if v.refs.Add(-1) == 0 {
		_ = v.snap.Close()
	}
}

// views is a DB's durable read view and what it must cover.
type views struct {
	gen atomic.Uint64 // commits that have returned
	mu  sync.Mutex    // guards cur
	cur *view
	adv sync.Mutex // one advance at a time
	// syncs counts the fsyncs views took, for tests and measurements.
	syncs atomic.Uint64

	// What lets a view skip its fsync: started and ended count the
	// commits of Txns (ended after they returned); uStarted and uDone
	// count the writes that return before their log record is synced
	// (NoSync stores, lazy commits, applied changelog writes), uSynced how
	// many of those a view's fsync covered. On a Sync store with no commit
	// in flight and every unsynced write covered, a snapshot holds only
	// returned, hence durable, commits.
	started, ended         atomic.Uint64
	uStarted, uDone, uSync atomic.Uint64

	advancing atomic.Bool // an advance of recentView runs
}

// beginWrite is called before a write is committed to Pebble; synced says
// whether it returns only after its log record is synced. endWrite after.
func (vs *views) beginWrite(synced bool) {
	vs.started.Add(1)
	if !synced {
		vs.uStarted.Add(1)
	}
}

func (vs *views) endWrite(synced bool) {
	if !synced {
		vs.uDone.Add(1)
	}
	vs.ended.Add(1)
}

// wrote records that a commit returned: the next read takes a new view.
func (vs *views) wrote() { vs.gen.Add(1) }

// current returns the current view with a reference for the caller if it
// covers need.
func (vs *views) current(need uint64) *view {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if v := vs.cur; v != nil && v.gen >= need {
		v.refs.Add(1)
		return v
	}
	return nil
}

// readView returns a durable view that holds every commit that returned
// before the call, with a reference the caller must release. The caller
// must have entered the DB.
func (db *DB) readView() (*view, error) {
	vs := &db.views
	need := vs.gen.Load()
	if v := vs.current(need); v != nil {
		return v, nil
	}
	vs.adv.Lock()
	defer vs.adv.Unlock()
	if v := vs.current(need); v != nil {
		return v, nil // another reader advanced it meanwhile
	}
	gen := vs.gen.Load()
	// Loaded in this order: ended == started means no write was in flight
	// when ended was read and none started until started was read.
	u1, covered := vs.uStarted.Load(), vs.uSync.Load()
	e1 := vs.ended.Load()
	s1 := vs.started.Load()
	snap := db.pdb.NewSnapshot()
	s2, u2 := vs.started.Load(), vs.uStarted.Load()
	if !(db.wopts == pebble.Sync && e1 == s1 && s2 == s1 && u1 == covered && u2 == u1) {
		// Everything the snapshot shows was queued to the log before it
		// became visible: one synced write after it makes all of it
		// durable, and every unsynced write that had returned by then.
		done := vs.uDone.Load()
		if err := db.pdb.LogData(nil, pebble.Sync); err != nil {
			_ = snap.Close()
			return nil, strerr.Errorf("strand: %s: sync the write-ahead log for a durable read: %w", db.dir, err)
		}
		vs.syncs.Add(1)
		vs.uSync.Store(max(vs.uSync.Load(), done))
	}
	v := &view{snap: snap, gen: gen}
	v.refs.Store(2)
	vs.mu.Lock()
	old := vs.cur
	vs.cur = v
	vs.mu.Unlock()
	if old != nil {
		old.release()
	}
	return v, nil
}

// recentView returns the current durable view without waiting for an
// fsync, with a reference the caller must release: it may miss the
// commits that returned since it was taken, and starts an advance in the
// background so that the next reads see them. The first read of a DB
// waits for its view. The caller must have entered the DB.
func (db *DB) recentView() (*view, error) {
	vs := &db.views
	need := vs.gen.Load()
	vs.mu.Lock()
	v := vs.cur
	if v != nil {
		v.refs.Add(1)
	}
	vs.mu.Unlock()
	if v == nil {
		return db.readView()
	}
	if v.gen < need && vs.advancing.CompareAndSwap(false, true) {
		// The caller has entered, so Close has not passed its drain yet
		// and waits for bg after it.
		db.bg.Go(func() {
			defer vs.advancing.Store(false)
			if db.enter() != nil {
				return
			}
			defer db.exit()
			nv, err := db.readView()
			if err != nil {
				db.log.Warn("strand: advancing the durable read view failed; reads stay on the older view", "dir", db.dir, "err", err)
				return
			}
			nv.release()
		})
	}
	return v, nil
}

// closeViews drops the current view; Close calls it once no reader is left.
func (db *DB) closeViews() {
	vs := &db.views
	vs.mu.Lock()
	old := vs.cur
	vs.cur = nil
	vs.mu.Unlock()
	if old != nil {
		old.release()
	}
}

// ViewSyncs returns how many write-ahead log fsyncs the durable reads of
// db took (one per read that found a commit newer than the current view,
// shared by concurrent readers): the cost of never showing what a crash
// can take back.
func (db *DB) ViewSyncs() uint64 { return db.views.syncs.Load() }

// getIn calls fn with the value of key in v, if there is one.
func getIn(v *view, key []byte, fn func(val []byte) error) (bool, error) {
	val, closer, err := v.snap.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = fn(val)
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	return true, err
}

// Freshness says what state a read saw: the committed checkpoints of the
// partition it read (every source's that feeds the store), from the same
// durable view as the value. A later read never sees an older state, and
// neither does a read after a crash and restart of the same store.
type Freshness struct {
	Partition   uint32
	Checkpoints []Checkpoint
}

// checkpointsIn returns the checkpoints of partition p in v, by source
// name.
func checkpointsIn(v *view, p uint32) ([]Checkpoint, error) {
	prefix := appendPrefix(nil, FamilyCheckpoint, p)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, strerr.Errorf("strand: read checkpoints of partition %d: %w", p, err)
	}
	defer it.Close()
	var out []Checkpoint
	for valid := it.First(); valid; valid = it.Next() {
		if !bytes.HasPrefix(it.Key(), prefix) {
			break
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, strerr.Errorf("strand: read checkpoints of partition %d: %w", p, err)
		}
		if len(val) != 8 {
			return nil, fmt.Errorf("strand: checkpoint of source %q partition %d has %d bytes, want 8", it.Key()[len(prefix):], p, len(val))
		}
		if buildSource(it.Key()[len(prefix):]) {
			continue // a build reader's (build.go)
		}
		out = append(out, Checkpoint{Source: string(it.Key()[len(prefix):]), Next: binary.BigEndian.Uint64(val)})
	}
	if err := it.Error(); err != nil {
		return nil, strerr.Errorf("strand: read checkpoints of partition %d: %w", p, err)
	}
	return out, nil
}

// GetFresh is Get that also says how fresh the answer is: the committed
// checkpoints of the partition the row was found in (of k's own partition
// when there is none), read from the same durable view as the value.
func (t *Table[K, V]) GetFresh(ctx context.Context, k K) (V, bool, Freshness, error) {
	return t.getFresh(ctx, k, true)
}

// GetRecent is GetFresh that never waits for an fsync: it answers from
// the newest durable view, which may miss the commits that returned since
// the last read took one (about one fsync of the write-ahead log ago), and
// has the next reads see them. What it answers is never taken back, later
// answers are never older, and its Freshness says which state it saw. The
// query server answers with it.
func (t *Table[K, V]) GetRecent(ctx context.Context, k K) (V, bool, Freshness, error) {
	return t.getFresh(ctx, k, false)
}

func (t *Table[K, V]) getFresh(ctx context.Context, k K, wait bool) (V, bool, Freshness, error) {
	var val, zero V
	b, err := t.binding()
	if err != nil {
		return zero, false, Freshness{}, err
	}
	if err := ctx.Err(); err != nil {
		return zero, false, Freshness{}, err
	}
	key, err := t.keys.Append(nil, k)
	if err != nil {
		return zero, false, Freshness{}, strerr.Errorf("strand: table %q: encode key %v: %w", t.name, k, err)
	}
	present, fr, err := t.tableCore.getFresh(ctx, b.db, b.id, key, wait, func(enc []byte) error {
		var derr error
		val, derr = t.values.Decode(enc)
		return derr
	})
	if err != nil || !present {
		return zero, false, fr, err
	}
	return val, true, fr, nil
}

// getFresh is Table.getFresh without the types: it finds key's row in a
// durable view and hands its encoded value to decode (valid during the
// call). On an error the Freshness is empty.
func (t *tableCore) getFresh(ctx context.Context, db *DB, bid uint32, key []byte, wait bool, decode func([]byte) error) (bool, Freshness, error) {
	if err := db.enter(); err != nil {
		return false, Freshness{}, err
	}
	defer db.exit()
	if !wait && db.cviews.installed() != nil {
		return t.getConfirmed(ctx, db, bid, key, decode) // confirmedview_read.go
	}
	var v *view
	var err error
	if wait || db.gated() {
		v, err = db.readView()
	} else {
		v, err = db.recentView()
	}
	if err != nil {
		return false, Freshness{}, err
	}
	defer v.release()
	id, err := t.readID(bid, v)
	if err != nil {
		return false, Freshness{}, err
	}
	present, p, err := t.getIn(db, v, id, key, decode)
	if err != nil {
		return false, Freshness{}, err
	}
	if err := db.confirmRead(ctx, p); err != nil {
		return false, Freshness{}, strerr.Errorf("strand: table %q: read key %q partition %d: %w", t.name, key, p, err)
	}
	db.promoteConfirmed(p, v)
	cps, err := checkpointsIn(v, p)
	if err != nil {
		return false, Freshness{}, err
	}
	return present, Freshness{Partition: p, Checkpoints: cps}, nil
}

// getIn reads key bytes key from view v: in its home partition, then in
// the others, handing the value found to decode. It returns the partition
// the row is in (home if none).
func (t *tableCore) getIn(db *DB, v *view, id uint32, key []byte, decode func([]byte) error) (bool, uint32, error) {
	n := t.parts.Load()
	home := uint32(0)
	if n > 0 {
		home = xxh32.Partition(key, n)
	}
	buf := appendTableKey(make([]byte, 0, rowKeyExtra+len(key)), id, home, key)
	present, err := t.loadIn(db, v, buf, home, key, decode)
	if err != nil || present {
		return present, home, err
	}
	for p := uint32(0); p < n; p++ {
		if p == home {
			continue
		}
		buf = appendTableKey(buf[:0], id, p, key)
		if present, err = t.loadIn(db, v, buf, p, key, decode); err != nil || present {
			return present, p, err
		}
	}
	return false, home, nil
}

// loadIn reads the value of Pebble key k in view v and hands it to decode.
// A key the key filter knows is not in Pebble is not read (the view is
// older than the store, so it is not there either).
func (t *tableCore) loadIn(db *DB, v *view, k []byte, partition uint32, key []byte, decode func([]byte) error) (present bool, err error) {
	if db.filter.absent(db.hash(k)) {
		db.stats.skips.Add(1)
		return false, nil
	}
	db.stats.reads.Add(1)
	present, err = getIn(v, k, func(b []byte) error {
		if derr := decode(b); derr != nil {
			return fmt.Errorf("decode value: %w", derr)
		}
		return nil
	})
	if err != nil {
		return false, strerr.Errorf("strand: table %q: read key %q partition %d: %w", t.name, key, partition, err)
	}
	if present {
		db.stats.found.Add(1)
	}
	return present, nil
}
