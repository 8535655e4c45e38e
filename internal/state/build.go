package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// Background builds (docs/design.md §19). A table added to a topology, or
// declared with a new version, is built beside what the store serves: its
// new rows go under a table id of their own (the build id) while reads
// are answered from the table's previous id (a new version) or refused
// with a *BuildingError (a new table). Once every partition has been
// handed over to the main pipelines, FinishBuild makes the build id the
// table's id, in one synced batch, and the previous rows are removed right
// after it in the background (retire.go).
//
// The metadata row "build/<table>" holds the build: the build id (u32 BE),
// then, when the table had rows before, 1 and their id (u32 BE), else 0.

// FamilyBuild holds, per partition and table being built (key: the
// table's name), the offset (u64 BE) at which the partition was handed
// over to the partition's main pipeline: from there on the main pipeline
// applies the table's projections, below it the build did.
const FamilyBuild Family = 0x19

// BuildSourcePrefix starts the source names under which a build's reader
// keeps its own checkpoint and runtime rows; Checkpoints and the
// freshness of reads leave them out.
const BuildSourcePrefix = "\x00build\x00"

const metaBuildPrefix = "build/"

// ErrTableBuilding is wrapped by the reads of a table that is being built
// and has no previous rows to serve (a table added to a topology).
var ErrTableBuilding = errors.New("strand: table is being built")

// BuildingError refuses a read of a table being built: errors.Is matches
// ErrTableBuilding. Retry after a while; the App's stats report progress.
type BuildingError struct{ Table string }

// Error names the table.
func (e *BuildingError) Error() string {
	return fmt.Sprintf("state: table %q is being built from the log (a table new to the topology): try again later", e.Table)
}

// Unwrap returns ErrTableBuilding.
func (e *BuildingError) Unwrap() error { return ErrTableBuilding }

// Build is a table being built in the background.
type Build struct {
	// Table names the table.
	Table string
	// ID is the id its new rows are written under.
	ID uint32
	// HasOld: the table had rows before the build (under OldID), which
	// reads are answered from until FinishBuild.
	HasOld bool
	OldID  uint32
}

func (b Build) value() []byte {
	v := binary.BigEndian.AppendUint32(nil, b.ID)
	if b.HasOld {
		return binary.BigEndian.AppendUint32(append(v, 1), b.OldID)
	}
	return append(v, 0)
}

func parseBuild(name string, v []byte) (Build, error) {
	b := Build{Table: name}
	switch {
	case len(v) == 5 && v[4] == 0:
	case len(v) == 9 && v[4] == 1:
		b.HasOld, b.OldID = true, binary.BigEndian.Uint32(v[5:])
	default:
		return b, fmt.Errorf("malformed build row of table %q: %x", name, v)
	}
	b.ID = binary.BigEndian.Uint32(v)
	return b, nil
}

// Builds lists the builds in progress, by table name.
func (db *DB) Builds() ([]Build, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.exit()
	prefix := metaKey(metaBuildPrefix)
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, strerr.Errorf("strand: %s: list builds: %w", db.dir, err)
	}
	var out []Build
	for valid := it.First(); valid; valid = it.Next() {
		b, err := parseBuild(string(it.Key()[len(prefix):]), it.Value())
		if err != nil {
			_ = it.Close()
			return nil, strerr.Errorf("strand: %s: %w", db.dir, err)
		}
		out = append(out, b)
	}
	if err := it.Close(); err != nil {
		return nil, strerr.Errorf("strand: %s: list builds: %w", db.dir, err)
	}
	return out, nil
}

// BuildPrefixes are rows a build's reader wrote that end with it: per
// family, key prefixes (the reader's source name, encoded) in every
// partition.
type BuildPrefixes map[Family][]byte

// BeginBuild starts building table t (attached to db) beside its rows: it
// allocates a build id, binds t to it for writes, and has reads of t
// answered from its current rows (hasOld: a new version) or refused (a new
// table). A build of t already in progress is dropped first (its rows, its
// hand-overs, its readers' checkpoints under sources and rows under
// prefixes, in the given partitions). Durable on return.
func (db *DB) BeginBuild(ctx context.Context, t Attacher, hasOld bool, partitions uint32, sources []string, prefixes BuildPrefixes) (Build, error) {
	if err := db.begin(ctx); err != nil {
		return Build{}, err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	name := t.Name()
	if db.attached[name] != t {
		return Build{}, fmt.Errorf("%w: build table %q", ErrNotAttached, name)
	}
	oldID, ok := db.registry[name]
	if !ok {
		return Build{}, fmt.Errorf("%w: build table %q: no id", ErrNotAttached, name)
	}
	b := Build{Table: name, ID: db.nextID.Load(), HasOld: hasOld, OldID: oldID}
	var prev *Build
	if v, ok, err := db.getCopy(metaKey(metaBuildPrefix + name)); err != nil {
		return Build{}, strerr.Errorf("strand: build table %q: %w", name, err)
	} else if ok {
		pb, err := parseBuild(name, v)
		if err != nil {
			return Build{}, strerr.Errorf("strand: %s: %w", db.dir, err)
		}
		prev = &pb
		b.HasOld, b.OldID = pb.HasOld, pb.OldID // the rows served stay those
		if !hasOld {
			b.HasOld = false
		}
	}
	err := db.guard(func() error {
		wb := db.pdb.NewBatch()
		defer wb.Close()
		if prev != nil {
			if err := db.dropBuildRows(wb, *prev, partitions, sources, prefixes); err != nil {
				return err
			}
		}
		if err := wb.Set(metaKey(metaBuildPrefix+name), b.value(), nil); err != nil {
			return err
		}
		if err := wb.Commit(pebble.Sync); err != nil {
			return err
		}
		return db.pdb.Flush()
	})
	if err != nil {
		return Build{}, strerr.Errorf("strand: build table %q: %w", name, err)
	}
	db.nextID.Store(b.ID + 1)
	db.views.wrote()
	db.bindBuild(t, b)
	return b, nil
}

// ResumeBuild binds t for a build in progress (Builds lists it): writes go
// to the build id, reads to its previous rows or are refused.
func (db *DB) ResumeBuild(t Attacher, b Build) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.attached[t.Name()] != t {
		return fmt.Errorf("%w: build table %q", ErrNotAttached, t.Name())
	}
	db.bindBuild(t, b)
	return nil
}

func (db *DB) bindBuild(t Attacher, b Build) {
	t.release(db)
	t.bind(db, b.ID)
	if b.HasOld {
		t.serveFrom(&serving{id: b.OldID})
	} else {
		t.serveFrom(&serving{err: &BuildingError{Table: b.Table}})
	}
}

// dropBuildRows deletes, in wb, the rows of build b: its table rows, its
// hand-overs and its readers' checkpoints and rows.
func (db *DB) dropBuildRows(wb *pebble.Batch, b Build, partitions uint32, sources []string, prefixes BuildPrefixes) error {
	if err := deleteRows(wb, b.ID, partitions); err != nil {
		return err
	}
	for p := range partitions {
		if err := wb.Delete(rowKey(FamilyBuild, p, []byte(b.Table)), nil); err != nil {
			return err
		}
		for _, s := range sources {
			if err := wb.Delete(checkpointKey(s, p), nil); err != nil {
				return err
			}
		}
		for f, pre := range prefixes {
			lo := rowKey(f, p, pre)
			if err := wb.DeleteRange(lo, prefixEnd(lo), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// HandOver records, in one synced batch, that partition of the table being
// built is handed over at offset next to the partition's main pipeline:
// it deletes the build reader's checkpoint (source) and rows (prefixes) in
// the partition. The build reader must have stopped and its last commit
// returned; the main pipeline must not commit meanwhile.
func (db *DB) HandOver(ctx context.Context, table string, partition uint32, next uint64, source string, prefixes BuildPrefixes) error {
	if err := db.begin(ctx); err != nil {
		return err
	}
	defer db.exit()
	err := db.guard(func() error {
		wb := db.pdb.NewBatch()
		defer wb.Close()
		if err := wb.Set(rowKey(FamilyBuild, partition, []byte(table)), binary.BigEndian.AppendUint64(nil, next), nil); err != nil {
			return err
		}
		if err := wb.Delete(checkpointKey(source, partition), nil); err != nil {
			return err
		}
		for f, pre := range prefixes {
			lo := rowKey(f, partition, pre)
			if err := wb.DeleteRange(lo, prefixEnd(lo), nil); err != nil {
				return err
			}
		}
		return wb.Commit(pebble.Sync)
	})
	if err != nil {
		return strerr.Errorf("strand: hand table %q partition %d over at offset %d: %w", table, partition, next, err)
	}
	db.views.wrote()
	return nil
}

// HandedOver returns the offset at which partition of the table being
// built was handed over, and false when it was not yet.
func (db *DB) HandedOver(table string, partition uint32) (uint64, bool, error) {
	v, ok, err := db.Row(FamilyBuild, partition, []byte(table))
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("strand: %s: malformed hand-over row of table %q partition %d: %x", db.dir, table, partition, v)
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// FinishBuild switches table t (every partition handed over) to its built
// rows in one synced batch: the build id becomes the table's id and the
// hand-over rows are removed. Reads see the built rows from then on; the
// rows it had before are removed right after, in the background
// (retire.go), or at the next start (DropRetired) if a crash comes first.
func (db *DB) FinishBuild(ctx context.Context, t Attacher, partitions uint32) error {
	if err := db.begin(ctx); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	name := t.Name()
	v, ok, err := db.getCopy(metaKey(metaBuildPrefix + name))
	if err != nil || !ok {
		return fmt.Errorf("strand: finish the build of table %q: no build in progress (%v)", name, err)
	}
	b, err := parseBuild(name, v)
	if err != nil {
		return strerr.Errorf("strand: %s: %w", db.dir, err)
	}
	err = db.guard(func() error {
		wb := db.pdb.NewBatch()
		defer wb.Close()
		for p := range partitions {
			if err := wb.Delete(rowKey(FamilyBuild, p, []byte(name)), nil); err != nil {
				return err
			}
		}
		if b.HasOld {
			// The marker of the old rows: removed in the background
			// right after this batch (retire.go), or at the next start
			// (DropRetired) if a crash or Close comes first.
			if err := wb.Set(metaKey(metaRetiredPrefix+name), retiredValue(b.OldID, partitions), nil); err != nil {
				return err
			}
		}
		if err := wb.Set(metaKey(metaTablePrefix+name), binary.BigEndian.AppendUint32(nil, b.ID), nil); err != nil {
			return err
		}
		if err := wb.Delete(metaKey(metaBuildPrefix+name), nil); err != nil {
			return err
		}
		if err := wb.Commit(pebble.Sync); err != nil {
			return err
		}
		return db.pdb.Flush()
	})
	if err != nil {
		return strerr.Errorf("strand: finish the build of table %q: %w", name, err)
	}
	db.registry[name] = b.ID
	db.views.wrote()
	// Views whose generation counts the switch read the built rows; older
	// ones (taken before it returned) the rows served until now.
	prev := &serving{err: &BuildingError{Table: name}}
	if b.HasOld {
		prev = &serving{id: b.OldID}
	}
	prev.after = db.views.gen.Load()
	t.serveFrom(prev)
	if b.HasOld {
		// After serveFrom: see retire.go for why reads never see the
		// old rows half removed.
		db.retireInBackground(name, b.OldID, partitions, prev.after)
	}
	return nil
}

const metaRetiredPrefix = "retired/"

// DropRetired removes the rows tables served before a build switched them
// to their built rows, where the removal that follows the switch
// (retire.go) did not run (a crash or a Close came first): one synced
// batch per table. Call it at the start, before any read.
func (db *DB) DropRetired(ctx context.Context) error {
	if err := db.begin(ctx); err != nil {
		return err
	}
	defer db.exit()
	prefix := metaKey(metaRetiredPrefix)
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return strerr.Errorf("strand: %s: read retired tables: %w", db.dir, err)
	}
	type retired struct {
		name      string
		id, parts uint32
	}
	var rs []retired
	for valid := it.First(); valid; valid = it.Next() {
		v := it.Value()
		if len(v) != 8 {
			continue
		}
		rs = append(rs, retired{name: string(it.Key()[len(prefix):]), id: binary.BigEndian.Uint32(v), parts: binary.BigEndian.Uint32(v[4:])})
	}
	if err := it.Close(); err != nil {
		return strerr.Errorf("strand: %s: read retired tables: %w", db.dir, err)
	}
	for _, r := range rs {
		if err := db.removeRetired(r.name, r.id, r.parts); err != nil {
			return err
		}
	}
	return nil
}

// DropTable removes every row of a table no topology reads any more (named
// by the registry), and its registry entry, in one synced batch.
func (db *DB) DropTable(ctx context.Context, name string, partitions uint32) error {
	if err := db.begin(ctx); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.attached[name]; ok {
		return fmt.Errorf("%w: drop table %q: it is attached", ErrInvalidTable, name)
	}
	id, ok := db.registry[name]
	if !ok {
		return nil
	}
	if err := db.dropRows(id, partitions, [][]byte{metaKey(metaTablePrefix + name)}, true); err != nil {
		return strerr.Errorf("strand: drop table %q: %w", name, err)
	}
	delete(db.registry, name)
	return nil
}

// RegisteredTables returns the names of the tables the store has ids for,
// sorted.
func (db *DB) RegisteredTables() []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]string, 0, len(db.registry))
	for n := range db.registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// buildSource reports whether a checkpoint's source name is a build
// reader's.
func buildSource(name []byte) bool {
	return bytes.HasPrefix(name, []byte(BuildSourcePrefix))
}

// BuildSourceName is the source name under which the reader building
// table keeps its checkpoint and rows for source.
func BuildSourceName(table, source string) string {
	return BuildSourcePrefix + strings.ReplaceAll(table, "\x00", "") + "\x00" + source
}

// serving is where a table's reads go during a build: rows of another id,
// or a refusal; once the build has switched, only for views taken before
// the switch (gen below after: they may not hold it).
type serving struct {
	id    uint32
	err   error
	after uint64
}

// buildIDs returns the ids builds in progress write under (loadMeta counts
// them as taken).
func (db *DB) buildIDs() ([]uint32, error) {
	prefix := metaKey(metaBuildPrefix)
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("read builds: %w", err)
	}
	defer it.Close()
	var out []uint32
	for valid := it.First(); valid; valid = it.Next() {
		b, err := parseBuild(string(it.Key()[len(prefix):]), it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, b.ID)
	}
	return out, it.Error()
}

// ReplaceTopology stores fp and description as the store's topology, in
// place of another one, in one synced batch: the caller has made the
// store fit for it (builds begun, removed tables dropped).
func (db *DB) ReplaceTopology(fp []byte, description string) error {
	if len(fp) == 0 {
		return fmt.Errorf("strand: %s: empty topology fingerprint", db.dir)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	db.mu.Lock()
	defer db.mu.Unlock()
	err := db.guard(func() error {
		wb := db.pdb.NewBatch()
		defer wb.Close()
		if err := wb.Set(metaKey(metaTopology), []byte(description), nil); err != nil {
			return err
		}
		if err := wb.Set(metaKey(metaFingerprint), fp, nil); err != nil {
			return err
		}
		if err := wb.Commit(pebble.Sync); err != nil {
			return err
		}
		return db.pdb.Flush()
	})
	if err != nil {
		return strerr.Errorf("strand: %s: store the topology: %w", db.dir, err)
	}
	return nil
}

// begin enters db for a call that ctx may already have cancelled: it
// fails with ctx's error or, when db is closing, enter's; the caller
// defers db.exit().
func (db *DB) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return db.enter()
}
