package state

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/strand-io/strand/internal/strerr"
)

// ErrStoreDamaged is wrapped by [Open] when the store's files are missing
// or damaged: a store that existed lost the files holding its metadata (a
// write-ahead log or a table file was deleted), its files belong to another
// store, or Pebble found a file corrupt. The error names the file where it
// can; nothing is written to such a store.
var ErrStoreDamaged = errors.New("strand: store damaged")

// StoreIDFile is the file in a state directory that says a store was
// created there, and which: written on the first start (synced, then
// renamed into place) beside Pebble's files, so that a store whose
// metadata is lost with a write-ahead log is refused instead of being taken
// for a new, empty one.
const StoreIDFile = "strand-store.id"

// metaStoreID names the store's id in the metadata; the identity file
// holds the same id.
const metaStoreID = "store-id"

// storeID is what the identity file says.
type storeID struct {
	id      [16]byte
	created time.Time
}

const storeIDHeader = "strand store\n"

func (s storeID) encode() []byte {
	return fmt.Appendf(nil, "%sid %s\ncreated %s\n", storeIDHeader, hex.EncodeToString(s.id[:]), s.created.UTC().Format(time.RFC3339Nano))
}

func newStoreID() (storeID, error) {
	s := storeID{created: time.Now()}
	if _, err := rand.Read(s.id[:]); err != nil {
		return s, strerr.Errorf("strand: make a store id: %w", err)
	}
	return s, nil
}

// readStoreID reads the identity file of dir; nil when there is none.
func readStoreID(fs vfs.FS, dir string) (*storeID, error) {
	name := fs.PathJoin(dir, StoreIDFile)
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, strerr.Errorf("strand: open %s: read %s: %w", dir, StoreIDFile, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	_ = f.Close()
	if err != nil {
		return nil, strerr.Errorf("strand: open %s: read %s: %w", dir, StoreIDFile, err)
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: the store's identity file %s is damaged (%s): restore the directory from a backup, or move it "+
			"away and start again to rebuild the state from the log", ErrStoreDamaged, name, why)
	}
	rest, ok := bytes.CutPrefix(data, []byte(storeIDHeader))
	if !ok {
		return nil, bad("no header")
	}
	var s storeID
	var sawID, sawCreated bool
	for line := range strings.Lines(string(rest)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		switch k {
		case "id":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != len(s.id) {
				return nil, bad("malformed id")
			}
			copy(s.id[:], b)
			sawID = true
		case "created":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, bad("malformed creation time")
			}
			s.created, sawCreated = t, true
		}
	}
	if !sawID || !sawCreated {
		return nil, bad("incomplete")
	}
	return &s, nil
}

// writeStoreID writes the identity file of dir durably: to a temporary
// file, synced, renamed into place, and the directory synced.
func writeStoreID(fs vfs.FS, dir string, s storeID) error {
	tmp := fs.PathJoin(dir, StoreIDFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return strerr.Errorf("strand: %s: write %s: %w", dir, StoreIDFile, err)
	}
	_, err = f.Write(s.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, StoreIDFile))
	}
	if err == nil {
		var d vfs.File
		if d, err = fs.OpenDir(dir); err == nil {
			err = d.Sync()
			_ = d.Close()
		}
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return strerr.Errorf("strand: %s: write %s: %w", dir, StoreIDFile, err)
	}
	return nil
}

// checkStoreID runs after Pebble opened the store: it creates the metadata
// and the identity file of a new store, adopts a store written before
// identity files existed, and refuses a store whose metadata is gone while
// its identity file says it existed, or whose files belong to another
// store. file is what the identity file said (nil: none); hasLayout
// whether the store has metadata.
func (db *DB) checkStoreID(fs vfs.FS, file *storeID, hasLayout bool) error {
	if !hasLayout {
		if file != nil {
			return fmt.Errorf("%w: the store at %s was created at %s (its %s says so), but its metadata is gone: a file holding "+
				"it was lost or damaged (a write-ahead log *.log, a table file *.sst or the MANIFEST; the files left are %s); strand wrote nothing to it: "+
				"restore the directory from a backup, or move it away and start again to rebuild the state from the log",
				ErrStoreDamaged, db.dir, file.created.Format(time.RFC3339), StoreIDFile, storeFiles(fs, db.dir))
		}
		s, err := newStoreID()
		if err != nil {
			return err
		}
		if err := db.guard(func() error {
			b := db.pdb.NewBatch()
			defer b.Close()
			_ = b.Set(metaKey(metaLayout), []byte{layoutVersion}, nil)
			_ = b.Set(metaKey(metaStoreID), s.id[:], nil)
			if err := b.Commit(pebble.Sync); err != nil {
				return err
			}
			return db.pdb.Flush() // in a table file, not only in a WAL that may be lost
		}); err != nil {
			return strerr.Errorf("strand: open %s: write the store's metadata: %w", db.dir, err)
		}
		return writeStoreID(fs, db.dir, s)
	}
	v, ok, err := db.getCopy(metaKey(metaStoreID))
	if err != nil {
		return strerr.Errorf("strand: open %s: read the store id: %w", db.dir, err)
	}
	var id [16]byte
	switch {
	case ok && len(v) == len(id):
		copy(id[:], v)
	case ok:
		return fmt.Errorf("%w: the store at %s has a malformed store id %x", ErrStoreDamaged, db.dir, v)
	default: // written before store ids existed: adopt it
		s, err := newStoreID()
		if err != nil {
			return err
		}
		if err := db.setMeta(metaKey(metaStoreID), s.id[:]); err != nil {
			return strerr.Errorf("strand: open %s: write the store id: %w", db.dir, err)
		}
		id = s.id
	}
	if file == nil {
		return writeStoreID(fs, db.dir, storeID{id: id, created: time.Now()})
	}
	if file.id != id {
		return fmt.Errorf("%w: the files of the store at %s belong to store %x, but its %s says store %x: files of two stores "+
			"were mixed (copied in or restored over each other); restore the directory from a backup, or move it away and "+
			"start again to rebuild the state from the log", ErrStoreDamaged, db.dir, id, StoreIDFile, file.id)
	}
	return nil
}

// pebbleFile matches the names of Pebble's files in an error message, and
// the numbers it calls table files by ("file 000009").
var pebbleFile = regexp.MustCompile(`\b(\d{6}\.(log|sst|blob)|MANIFEST-\d+|OPTIONS-\d+|marker\.[a-z-]+\.\d+\.[A-Za-z0-9-]+)\b|\bfile (\d{6})\b`)

// pebbleWAL matches how Pebble names the write-ahead log it could not
// replay ("replaying wal 9").
var pebbleWAL = regexp.MustCompile(`replaying wal (\d+)\b`)

// openError explains why Pebble could not open the store in dir: the file
// it names, if any, and what to do. file is what the identity file said.
func openError(fs vfs.FS, dir string, file *storeID, err error) error {
	if file != nil && errors.Is(err, pebble.ErrDBDoesNotExist) {
		return fmt.Errorf("%w: the store at %s was created at %s (its %s says so), but Pebble's files are gone (the files "+
			"left are %s): restore the directory from a backup, or move it away and start again to rebuild the state from the log",
			ErrStoreDamaged, dir, file.created.Format(time.RFC3339), StoreIDFile, storeFiles(fs, dir))
	}
	what := ""
	switch m := pebbleFile.FindStringSubmatch(err.Error()); {
	case m != nil && m[1] != "":
		what = "the file " + fs.PathJoin(dir, m[1])
	case m != nil:
		what = "the table file " + fs.PathJoin(dir, m[3]+".sst")
	case pebbleWAL.MatchString(err.Error()):
		var n uint64
		_, _ = fmt.Sscan(pebbleWAL.FindStringSubmatch(err.Error())[1], &n)
		what = "the write-ahead log " + fs.PathJoin(dir, fmt.Sprintf("%06d.log", n))
	case strings.Contains(err.Error(), "key=value"):
		what = "its OPTIONS file"
		if names, lerr := fs.List(dir); lerr == nil {
			slices.Sort(names)
			for _, n := range slices.Backward(names) {
				if strings.HasPrefix(n, "OPTIONS-") {
					what = "the file " + fs.PathJoin(dir, n)
					break
				}
			}
		}
	case pebble.IsCorruptionError(err):
		what = "one of its files"
	default:
		return strerr.Errorf("strand: open %s: %w", dir, err)
	}
	return fmt.Errorf("%w: the store at %s cannot be opened: %s is damaged or missing (%w); strand wrote nothing to it: "+
		"restore the directory from a backup, or move it away and start again to rebuild the state from the log",
		ErrStoreDamaged, dir, what, err)
}

// storeFiles lists the files in dir, for an error message.
func storeFiles(fs vfs.FS, dir string) string {
	names, err := fs.List(dir)
	if err != nil {
		return "unknown: " + err.Error()
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == "LOCK" }) // Pebble's, made by the failed open
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
