package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/strand-io/strand/internal/strerr"
)

// DB is one processor's Pebble database: its tables, checkpoints and pending
// rows. Open it once per processor; every partition pipeline commits its own
// [Txn] to the same DB, which is how their fsyncs get shared.
//
// All methods are safe for concurrent use. After [DB.Close] they return
// [ErrClosed].
type DB struct {
	dir    string
	pdb    *pebble.DB
	wopts  *pebble.WriteOptions
	log    *slog.Logger
	seed   maphash.Seed
	budget cacheBudget
	filter *keyFilter     // table rows certainly not in Pebble (keyfilter.go)
	bg     sync.WaitGroup // the key filter's load, background advances of the read view
	stats  *dbStats
	// retireHook, when set (tests), runs in the background removal of a
	// rebuilt table's old rows before its batch (retire.go).
	retireHook func()

	// closed and inflight guard the Pebble handle: an operation that reaches
	// Pebble enters (inflight+1, then checks closed); Close sets closed and
	// waits for inflight to drain before closing Pebble, which panics when
	// used after Close.
	closed    atomic.Bool
	inflight  atomic.Int64
	drainMu   sync.Mutex
	drainCond sync.Cond

	clog     changelog                // which partitions' commits are logged, and to whom (changelog.go)
	views    views                    // the durable read view of Table.Get and Scan (view.go)
	readGate atomic.Pointer[ReadGate] // readgate.go
	cviews   confirmedViews           // confirmedview.go
	fail     failure                  // the fatal error that stopped writes (fatal.go)
	space    *spaceGuard              // refuses commits while the disk is nearly full (space.go)
	// fsCloser stops the disk-health checks of Pebble's file system.
	fsCloser io.Closer

	mu       sync.Mutex        // serializes metadata writes (Attach, EnsureFingerprint)
	registry map[string]uint32 // persisted table name → id
	attached map[string]attacher
	nextID   atomic.Uint32
}

// Open opens (creating if needed) the database in dir.
//
// Pebble is configured as measured for small embeddings: a block cache of
// [DefaultCacheSize] (see [WithCacheSize]) with memtables of at most a quarter
// of it, a stop-writes threshold of 4 memtables, bloom filters for cheap
// misses, and an explicitly pinned on-disk format
// (pebble.FormatValueSeparation), so a library upgrade never ratchets the
// format of an existing store by itself. Only one process can have a
// directory open at a time.
func Open(dir string, opts ...Option) (*DB, error) {
	o := options{cacheSize: DefaultCacheSize, valueCacheSize: DefaultValueCacheSize, keyFilterSize: DefaultKeyFilterSize,
		diskReserve: DefaultDiskReserve}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if dir == "" {
		return nil, errors.New("strand: open: empty directory name")
	}
	if o.durability != Sync && o.durability != NoSync {
		return nil, fmt.Errorf("strand: open %s: unknown durability %d", dir, o.durability)
	}
	if o.cacheSize < minCacheSize {
		return nil, fmt.Errorf("strand: open %s: cache size %d is below the minimum of %d bytes", dir, o.cacheSize, minCacheSize)
	}
	if o.valueCacheSize < 0 {
		return nil, fmt.Errorf("strand: open %s: negative value cache size %d", dir, o.valueCacheSize)
	}
	if o.diskReserve < 0 {
		return nil, fmt.Errorf("strand: open %s: negative disk reserve %d", dir, o.diskReserve)
	}
	if o.keyFilterSize < 0 {
		return nil, fmt.Errorf("strand: open %s: negative key filter size %d", dir, o.keyFilterSize)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	log := o.logger.With(slog.String("component", "strand/state"), slog.String("dir", dir))

	cache := pebble.NewCache(o.cacheSize)
	defer cache.Unref() // the DB holds its own reference
	stats := new(dbStats)
	popts := o.pebbleOptions(cache, log)
	popts.EventListener = stats.listener()
	popts.EventListener.DataCorruption = func(info pebble.DataCorruptionInfo) {
		// The read that met it returns an error naming the file; Pebble's
		// default would stop the process.
		log.Error("strand: the store has a corrupt file", "file", info.Path, "err", info.Details)
	}
	fs := popts.FS
	var fsCloser io.Closer = io.NopCloser(nil)
	if fs == nil {
		// Pebble's default, made here so that a failed Open stops its
		// disk-health goroutine too (Pebble's own leaks it).
		fs = vfs.Default
		popts.FS, fsCloser = vfs.WithDiskHealthChecks(fs, 5*time.Second, nil, func(info vfs.DiskSlowInfo) {
			popts.EventListener.DiskSlow(info)
		})
	}
	idFile, err := readStoreID(fs, dir) // storeid.go
	if err != nil {
		_ = fsCloser.Close()
		return nil, err
	}
	// A store that existed is never created anew over missing files.
	popts.ErrorIfNotExists = idFile != nil
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		_ = fsCloser.Close()
		return nil, openError(fs, dir, idFile, err)
	}
	db := &DB{
		dir:      dir,
		pdb:      pdb,
		wopts:    pebble.Sync,
		log:      log,
		seed:     maphash.MakeSeed(),
		stats:    stats,
		registry: make(map[string]uint32),
		attached: make(map[string]attacher),
	}
	if o.durability == NoSync {
		db.wopts = pebble.NoSync
	}
	db.space = &spaceGuard{fs: fs, dir: dir, reserve: uint64(o.diskReserve)}
	db.budget.limit = o.valueCacheSize
	db.drainCond.L = &db.drainMu
	if err := db.loadMeta(fs, idFile); err != nil {
		_ = pdb.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	db.fsCloser = fsCloser
	if o.keyFilterSize > 0 {
		db.filter = newKeyFilter(expectedTableKeys(pdb), o.keyFilterSize)
		db.bg.Add(1)
		go db.loadKeyFilter()
	}
	return db, nil
}

// pebbleOptions returns the Pebble configuration measured for small
// embeddings (see Open).
func (o *options) pebbleOptions(cache *pebble.Cache, log *slog.Logger) *pebble.Options {
	popts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                uint64(min(maxMemTableSize, o.cacheSize/4)),
		MemTableStopWritesThreshold: 4,
		FormatMajorVersion:          pebble.FormatValueSeparation,
		Logger:                      pebbleLogger{log},
		FS:                          o.fs,
	}
	popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	return popts
}

// loadMeta checks the layout version and the store's identity (writing
// both into a new database, storeid.go) and loads the table registry.
func (db *DB) loadMeta(fs vfs.FS, idFile *storeID) error {
	v, ok, err := db.getCopy(metaKey(metaLayout))
	if err != nil {
		return strerr.Errorf("strand: open %s: read layout version: %w", db.dir, err)
	}
	if ok && (len(v) != 1 || v[0] != layoutVersion) {
		return fmt.Errorf("%w: database at %s has key layout %x, this version reads layout %d", ErrIncompatibleLayout, db.dir, v, layoutVersion)
	}
	if err := db.checkStoreID(fs, idFile, ok); err != nil {
		return err
	}

	prefix := metaKey(metaTablePrefix)
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return strerr.Errorf("strand: open %s: read table registry: %w", db.dir, err)
	}
	var maxID uint32
	for valid := it.First(); valid; valid = it.Next() {
		name := string(it.Key()[len(prefix):])
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return strerr.Errorf("strand: open %s: read table registry entry %q: %w", db.dir, name, err)
		}
		if len(val) != 4 {
			_ = it.Close()
			return fmt.Errorf("strand: open %s: table registry entry %q has %d bytes, want 4", db.dir, name, len(val))
		}
		id := binary.BigEndian.Uint32(val)
		db.registry[name] = id
		maxID = max(maxID, id)
	}
	if err := it.Close(); err != nil {
		return strerr.Errorf("strand: open %s: read table registry: %w", db.dir, err)
	}
	builds, err := db.buildIDs()
	if err != nil {
		return strerr.Errorf("strand: open %s: %w", db.dir, err)
	}
	for _, id := range builds {
		maxID = max(maxID, id)
	}
	db.nextID.Store(maxID + 1)
	return nil
}

// Close waits for operations in progress, then closes the database. Pending
// transactions can no longer commit. A second Close returns [ErrClosed].
// Close must not be called from inside a [Table.Scan] or [DB.Rows] callback.
func (db *DB) Close() error {
	if !db.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	db.drainMu.Lock()
	for db.inflight.Load() != 0 {
		db.drainCond.Wait()
	}
	db.drainMu.Unlock()
	db.bg.Wait()
	db.mu.Lock()
	for _, t := range db.attached {
		t.release(db)
	}
	db.mu.Unlock()
	db.closeConfirmedViews()
	db.closeViews()
	var ferr error
	if db.failed() == nil && db.space.check() == nil {
		// A stopped store keeps nothing in its write-ahead logs: losing
		// one of them loses nothing.
		ferr = db.guard(db.pdb.Flush)
	}
	err := db.pdb.Close()
	_ = db.fsCloser.Close()
	if err != nil {
		return strerr.Errorf("strand: close %s: %w", db.dir, err)
	}
	if ferr != nil {
		return strerr.Errorf("strand: close %s: flush: %w", db.dir, ferr)
	}
	return nil
}

// enter registers an operation that uses the Pebble handle; it fails once
// Close has begun. Every successful enter must be paired with exit.
func (db *DB) enter() error {
	db.inflight.Add(1)
	if db.closed.Load() {
		db.exit()
		return ErrClosed
	}
	return nil
}

func (db *DB) exit() {
	if db.inflight.Add(-1) == 0 && db.closed.Load() {
		db.drainMu.Lock()
		db.drainCond.Broadcast()
		db.drainMu.Unlock()
	}
}

// get calls fn with the committed value of key, if there is one. The value
// is only valid during fn. The caller must have entered.
func (db *DB) get(key []byte, fn func(val []byte) error) (bool, error) {
	val, closer, err := db.pdb.Get(key)
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

// getCopy returns a copy of the committed value of key.
func (db *DB) getCopy(key []byte) ([]byte, bool, error) {
	var out []byte
	ok, err := db.get(key, func(val []byte) error {
		out = append([]byte(nil), val...)
		return nil
	})
	return out, ok, err
}

// EnsureFingerprint compares fp, the fingerprint of the topology about to
// run, with the one stored in the database. A new database stores fp
// (durably) and accepts it; a database written by a topology with another
// fingerprint is refused with an *[IncompatibleError] (wrapping
// [ErrIncompatibleTopology]) that shows both, so an incompatible topology never misreads state.
func (db *DB) EnsureFingerprint(fp []byte) error {
	if len(fp) == 0 {
		return fmt.Errorf("strand: %s: empty topology fingerprint", db.dir)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	stored, ok, err := db.getCopy(metaKey(metaFingerprint))
	if err != nil {
		return strerr.Errorf("strand: %s: read fingerprint: %w", db.dir, err)
	}
	if !ok {
		if err := db.setMeta(metaKey(metaFingerprint), fp); err != nil {
			return strerr.Errorf("strand: %s: store fingerprint: %w", db.dir, err)
		}
		return nil
	}
	if !bytes.Equal(stored, fp) {
		desc, _, _ := db.getCopy(metaKey(metaTopology))
		return &IncompatibleError{Dir: db.dir, Stored: stored, Now: fp, StoredDescription: string(desc)}
	}
	return nil
}

// EnsureSource compares the partition count of the source named name with
// the one stored when the database first ran it. A source new to the
// database has its count stored (durably) and accepted; a source whose
// count changed is refused with an error wrapping [ErrPartitionsChanged]
// that shows both: its table rows are filed under partitions of the old
// count, so reading or writing them with the new one would misplace keys.
func (db *DB) EnsureSource(name string, partitions uint32) error {
	if name == "" || partitions == 0 {
		return fmt.Errorf("strand: %s: source %q with %d partitions", db.dir, name, partitions)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	key := metaKey(metaSourcePrefix + name)
	stored, ok, err := db.getCopy(key)
	if err != nil {
		return strerr.Errorf("strand: %s: read the partition count of source %q: %w", db.dir, name, err)
	}
	if !ok {
		if err := db.setMeta(key, binary.BigEndian.AppendUint32(nil, partitions)); err != nil {
			return strerr.Errorf("strand: %s: store the partition count of source %q: %w", db.dir, name, err)
		}
		return nil
	}
	if len(stored) != 4 {
		return fmt.Errorf("strand: %s: malformed partition count %x of source %q", db.dir, stored, name)
	}
	if was := binary.BigEndian.Uint32(stored); was != partitions {
		return fmt.Errorf("%w: source %q had %d partitions when the state at %s was written and has %d now; "+
			"repartitioning needs a new state directory (the state is rebuilt from the log)",
			ErrPartitionsChanged, name, was, db.dir, partitions)
	}
	return nil
}

// Checkpoint returns the committed next offset of the source's partition:
// where processing resumes. ok is false when nothing was committed for it
// yet. It costs one Pebble point read.
func (db *DB) Checkpoint(source string, partition uint32) (next uint64, ok bool, err error) {
	if err := db.enter(); err != nil {
		return 0, false, err
	}
	defer db.exit()
	ok, err = db.get(checkpointKey(source, partition), func(val []byte) error {
		if len(val) != 8 {
			return fmt.Errorf("value has %d bytes, want 8", len(val))
		}
		next = binary.BigEndian.Uint64(val)
		return nil
	})
	if err != nil {
		return 0, false, strerr.Errorf("strand: read checkpoint of source %q partition %d: %w", source, partition, err)
	}
	return next, ok, nil
}

// Row returns a copy of the committed value of one row of a generic row
// family, and whether it exists.
func (db *DB) Row(f Family, partition uint32, key []byte) ([]byte, bool, error) {
	if f.Reserved() {
		return nil, false, fmt.Errorf("%w: read row of family %s partition %d", ErrReservedFamily, f, partition)
	}
	if err := db.enter(); err != nil {
		return nil, false, err
	}
	defer db.exit()
	v, ok, err := db.getCopy(rowKey(f, partition, key))
	if err != nil {
		return nil, false, strerr.Errorf("strand: read %s row %q partition %d: %w", f, key, partition, err)
	}
	return v, ok, nil
}

// Rows calls fn for every committed row of family f in the partition, in
// key order, from one consistent view (commits that happen meanwhile are not
// seen). key and value are only valid during the call. Rows stops at the
// first error from fn and returns it unchanged. fn may call other methods of
// the DB, but not Close.
func (db *DB) Rows(ctx context.Context, f Family, partition uint32, fn func(key, value []byte) error) error {
	return db.RowsFrom(ctx, f, partition, nil, fn)
}

// RowsFrom is Rows starting at the first row whose key is at or after from:
// a scan that skips what it knows is gone never walks over its tombstones.
func (db *DB) RowsFrom(ctx context.Context, f Family, partition uint32, from []byte, fn func(key, value []byte) error) error {
	if f.Reserved() {
		return fmt.Errorf("%w: scan rows of family %s partition %d", ErrReservedFamily, f, partition)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	prefix := appendPrefix(nil, f, partition)
	lower := append(slices.Clip(prefix), from...)
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return strerr.Errorf("strand: scan %s rows partition %d: %w", f, partition, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return err
		}
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return strerr.Errorf("strand: scan %s rows partition %d: key %q: %w", f, partition, it.Key()[prefixLen:], err)
		}
		if err := fn(it.Key()[prefixLen:], val); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return strerr.Errorf("strand: scan %s rows partition %d: %w", f, partition, err)
	}
	return nil
}

// Synced reports whether every commit is durable when it returns ([Sync]
// durability), so that SyncWAL is never needed.
func (db *DB) Synced() bool { return db.wopts == pebble.Sync }

// SyncWAL makes every commit that has returned so far durable (one fsync of
// the write-ahead log). With [NoSync] durability, call it before acting on a
// commit outside the database; with [Sync] it is never needed.
func (db *DB) SyncWAL() error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	if err := db.guard(func() error { return db.pdb.LogData(nil, pebble.Sync) }); err != nil {
		return strerr.Errorf("strand: %s: sync WAL: %w", db.dir, err)
	}
	return nil
}

// Attacher is a table that [DB.Attach] can bind to a database. [*Table]
// implements it; other implementations are not possible.
type Attacher interface {
	// Name returns the table's name, which identifies its rows on disk.
	Name() string
	attacher
}

type attacher interface {
	check() error
	boundTo() *DB
	bind(db *DB, id uint32)
	release(db *DB)
	cacheStats() (hits, misses, entries int64)
	forget(db *DB, keys []tableKey) // drop applied keys from the value cache (changelog.go)
	dropPartition(db *DB, p uint32) // drop a partition's cached values (changelog.go)
	writes(db *DB) *cacheWrites     // the value cache's write counts, if bound to db (committed.go)
	serveFrom(s *serving)           // where reads go during a build (build.go); nil: the table's id
}

// Attach binds tables to the database, so that they can be read and written.
// A table's rows are identified by its name: the first Attach of a name
// assigns it an id and persists the mapping (durably); later opens find the
// same id. Attaching is all or nothing: if any table is invalid (nil, empty
// or duplicate name, missing codec, or still attached to another open
// database), none is attached and the error, wrapping [ErrInvalidTable],
// names the table. Attaching a table that is already attached to this
// database does nothing.
func (db *DB) Attach(tables ...Attacher) error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()

	seen := make(map[string]bool, len(tables))
	var todo []Attacher
	for i, t := range tables {
		if t == nil {
			return fmt.Errorf("%w: table %d of %d is nil", ErrInvalidTable, i+1, len(tables))
		}
		if err := t.check(); err != nil {
			return strerr.Errorf("strand: attach table %d of %d: %w", i+1, len(tables), err)
		}
		name := t.Name()
		if seen[name] {
			return fmt.Errorf("%w: table %q is given twice", ErrInvalidTable, name)
		}
		seen[name] = true
		if cur, ok := db.attached[name]; ok {
			if cur == attacher(t) {
				continue
			}
			return fmt.Errorf("%w: another table named %q is already attached to the database at %s", ErrInvalidTable, name, db.dir)
		}
		if other := t.boundTo(); other != nil && other != db && !other.closed.Load() {
			return fmt.Errorf("%w: table %q is still attached to the open database at %s", ErrInvalidTable, name, other.dir)
		}
		todo = append(todo, t)
	}
	if len(todo) == 0 {
		return nil
	}

	ids := make([]uint32, len(todo))
	b := db.pdb.NewBatch()
	defer b.Close()
	next := db.nextID.Load()
	for i, t := range todo {
		id, ok := db.registry[t.Name()]
		if !ok {
			id = next
			next++
			if err := b.Set(metaKey(metaTablePrefix+t.Name()), binary.BigEndian.AppendUint32(nil, id), nil); err != nil {
				return strerr.Errorf("strand: attach table %q: %w", t.Name(), err)
			}
		}
		ids[i] = id
	}
	if !b.Empty() {
		if err := db.guard(func() error {
			if err := b.Commit(pebble.Sync); err != nil {
				return err
			}
			return db.pdb.Flush() // metadata outlives the loss of a WAL (identity.go)
		}); err != nil {
			return strerr.Errorf("strand: attach tables: persist table ids: %w", err)
		}
	}
	db.nextID.Store(next)
	for i, t := range todo {
		db.registry[t.Name()] = ids[i]
		db.attached[t.Name()] = t
		t.bind(db, ids[i])
	}
	return nil
}

// NewTxn starts the write set of one batch of one partition pipeline. It is
// cheap; start one per batch and end it with [Txn.Commit] or [Txn.Discard].
func (db *DB) NewTxn() *Txn {
	return newTxn(db)
}

// NewTxnAfter starts the transaction of a partition pipeline's next batch
// while prev, the pipeline's previous one, may still be committing: it is
// how a pipeline overlaps one batch's commit with the next batch's work.
//
// The new Txn reads prev's writes as if they were committed: [Table.Read]
// looks at its own writes, then prev's, then committed state. Its Commit
// first waits for prev to finish, and if prev did not commit (its Commit
// failed, or it was discarded), the new Txn is discarded too and Commit
// returns an error wrapping [ErrPredecessorFailed]; so nothing built on a
// failed commit ever becomes state, and commits stay in pipeline order.
// [Table.Get], [Table.Scan] and other transactions never see either
// transaction's writes before their commits.
//
// prev must be of the same DB and must be committed or discarded by its
// owner, or the new Txn's Commit waits for it until its context ends. A
// table whose values may share memory (see [Table.Read]) does not read
// through: its Reads wait for prev to finish. NewTxnAfter(nil) is NewTxn.
func (db *DB) NewTxnAfter(prev *Txn) *Txn {
	tx := newTxn(db)
	if prev != nil && prev.db == db {
		tx.prev = prev
	}
	return tx
}

func (db *DB) hash(key []byte) uint64 { return maphash.Bytes(db.seed, key) }

var _ io.Closer = (*DB)(nil)
