package state

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	"github.com/strand-io/strand/internal/strerr"
)

// Removing a rebuilt table's old rows (docs/design.md §19, "The old rows").
//
// FinishBuild's switch batch writes the marker "retired/<table>" (the old
// id, u32 BE, then the partition count, u32 BE) with the switch; right
// after it returns, a background goroutine removes the old rows (range
// deletes of the old id's span in every partition) and the marker in one
// synced batch. A crash, or a Close, before that batch leaves the marker,
// and DropRetired finishes the removal at the next start.
//
// Why no read sees the old rows half removed, or removed while it reads
// them: a read takes a durable view (a Pebble snapshot), then picks the id
// it reads by the view's generation (Table.readID): views counting the
// switch (gen >= serving.after) read the new id, older ones the old id. A
// Pebble snapshot never sees a batch committed after it was taken, range
// deletes included, and compactions keep what open snapshots can see; and
// the removal's batch is one batch, so a snapshot holds all or none of it.
// What is left is a view whose generation was loaded before the switch
// counted (so it reads the old id) but whose snapshot is taken after the
// removal: readView loads the generation, then takes the snapshot. The
// removal commits holding views.adv, the lock readView holds across both
// steps, and begins after serving.after was loaded: a view whose snapshot
// follows the removal loaded its generation after the removal too, so it
// counts the switch and reads the new id. Reads that picked the old id
// before serveFrom published the switch hold a view taken before it, so
// before the removal, which starts after serveFrom. The value cache holds
// only values of the binding's id (the built rows, bound at BeginBuild):
// an old-version value is never in it, so it can be served neither after
// the removal nor as the new version.

// deleteRows range-deletes, in wb, the rows of table id in partitions 0 to
// parts-1.
func deleteRows(wb *pebble.Batch, id, parts uint32) error {
	for p := range parts {
		lo := appendTableKey(nil, id, p, nil)
		if err := wb.DeleteRange(lo, prefixEnd(lo), nil); err != nil {
			return err
		}
	}
	return nil
}

// dropRows removes, in one synced batch (flushed to the tables when
// flush), the rows of table id in partitions 0 to parts-1 and the metadata
// rows keys, holding views.adv (see above), and records the commit for the
// views. It serves DropTable and the removal of a rebuilt table's old
// rows.
func (db *DB) dropRows(id, parts uint32, keys [][]byte, flush bool) error {
	vs := &db.views
	vs.adv.Lock()
	defer vs.adv.Unlock()
	err := db.guard(func() error {
		wb := db.pdb.NewBatch()
		defer wb.Close()
		if err := deleteRows(wb, id, parts); err != nil {
			return err
		}
		for _, k := range keys {
			if err := wb.Delete(k, nil); err != nil {
				return err
			}
		}
		if err := wb.Commit(pebble.Sync); err != nil {
			return err
		}
		if flush {
			return db.pdb.Flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	vs.wrote()
	return nil
}

func retiredValue(id, parts uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, id), parts)
}

// removeRetired removes the old rows of table name (id, in parts
// partitions) and their marker, if the marker still names them (a later
// switch of the same table may have replaced it: then only the rows go).
func (db *DB) removeRetired(name string, id, parts uint32) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	key := metaKey(metaRetiredPrefix + name)
	v, ok, err := db.getCopy(key)
	if err != nil {
		return strerr.Errorf("strand: %s: remove the old rows of rebuilt table %q: %w", db.dir, name, err)
	}
	var keys [][]byte
	if ok && bytes.Equal(v, retiredValue(id, parts)) {
		keys = [][]byte{key}
	}
	if err := db.dropRows(id, parts, keys, false); err != nil {
		return strerr.Errorf("strand: %s: remove the old rows of rebuilt table %q: %w", db.dir, name, err)
	}
	return nil
}

// retireInBackground removes the old rows of table name after its switch
// (FinishBuild, which has entered db: Close waits for the goroutine). If
// the DB is closing, or the removal fails, the marker stays and the next
// start's DropRetired removes them.
func (db *DB) retireInBackground(name string, id, parts uint32, after uint64) {
	db.bg.Go(func() {
		if db.enter() != nil {
			return
		}
		defer db.exit()
		if h := db.retireHook; h != nil {
			h()
		}
		if err := db.removeRetired(name, id, parts); err != nil {
			db.log.Warn("strand: removing the old rows of a rebuilt table failed; the next start removes them",
				"dir", db.dir, "table", name, "generation", after, "err", err)
		}
	})
}
