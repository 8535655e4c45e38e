package state

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strand-io/strand/internal/inspect"
	"github.com/strand-io/strand/internal/live"
	istate "github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology"
)

var (
	// ErrNoStore is wrapped by Open when the directory holds no store.
	ErrNoStore = errors.New("strand: no strand store in the directory")
	// ErrNoTable is wrapped by the table reads when the store has no
	// table of the name.
	ErrNoTable = errors.New("strand: no such table in the store")
	// ErrClosed is wrapped by the methods of a Store after Close.
	ErrClosed = errors.New("strand: store closed")
)

// Holder names the App that holds (or held) a store open.
type Holder struct {
	// PID is the App's process id; Since when it opened the store; Addr
	// the loopback address it serves live inspection on ("" without).
	PID   int
	Since time.Time
	Addr  string
}

// Store is a read-only view of a store (see the package documentation).
// Its methods are safe for concurrent use until Close.
type Store struct {
	dir    string
	r      *istate.ReadOnly
	live   *Holder
	stale  *Holder
	remove string // the copy to remove at Close, or ""

	mu     sync.RWMutex
	closed bool
}

// Open opens the store in dir, the state directory of an App: directly
// when no App has it open, else through the App that holds it (which must
// serve live inspection; see the package documentation). ctx bounds the
// request to that App.
func Open(ctx context.Context, dir string) (*Store, error) {
	r, err := istate.OpenReadOnly(dir)
	rec, recErr := live.ReadRecord(dir)
	if err == nil {
		s := &Store{dir: dir, r: r}
		if rec != nil {
			s.stale = holder(rec)
		}
		return s, nil
	}
	if errors.Is(err, istate.ErrNoStore) {
		return nil, strerr.Errorf("strand: open %s: %w (%w)", dir, ErrNoStore, err)
	}
	if !locked(err) {
		return nil, strerr.Errorf("strand: open %s: %w", dir, err)
	}
	if rec == nil {
		if recErr != nil {
			return nil, strerr.Errorf("strand: open %s: it is open in another process (%w), and %w", dir, err, recErr)
		}
		return nil, strerr.Errorf("strand: open %s: it is open in another process, which left no %s naming it: %w", dir, live.File, err)
	}
	store, remove, lerr := live.Copy(ctx, dir, rec)
	if lerr != nil {
		return nil, strerr.Errorf("strand: open %s: it is open in an App: %w", dir, lerr)
	}
	s, err := openCopy(dir, store, remove)
	if err != nil {
		return nil, err
	}
	s.live = holder(rec)
	return s, nil
}

// OpenApp opens a consistent copy of the store of app, an App open in this
// process, made as by app.CopyStore inside its state directory; Close
// removes the copy. It holds every commit that returned before the call.
func OpenApp(app *topology.App) (*Store, error) {
	tmp, err := os.MkdirTemp(app.Dir(), live.CopyPrefix)
	if err != nil {
		return nil, strerr.Errorf("strand: copy the store of the App at %s: %w", app.Dir(), err)
	}
	store := filepath.Join(tmp, "store")
	if err := app.CopyStore(store); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, strerr.Errorf("strand: %w", err)
	}
	return openCopy(app.Dir(), store, tmp)
}

func openCopy(dir, store, remove string) (*Store, error) {
	r, err := istate.OpenReadOnly(store)
	if err != nil {
		_ = os.RemoveAll(remove)
		return nil, strerr.Errorf("strand: open the copy of %s: %w", dir, err)
	}
	return &Store{dir: dir, r: r, remove: remove}, nil
}

// locked reports whether err is Pebble's refusal of a directory another
// opener holds.
func locked(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")
}

func holder(r *live.Record) *Holder { return &Holder{PID: r.PID, Since: r.Since, Addr: r.Addr} }

// Close closes the store and removes the copy it read, if any. It is
// idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.r.Close()
	if s.remove != "" {
		if rerr := os.RemoveAll(s.remove); rerr != nil && err == nil {
			err = strerr.Errorf("strand: remove the copy %s: %w", s.remove, rerr)
		}
	}
	return err
}

// enter holds off Close while a read runs.
func (s *Store) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return strerr.Errorf("strand: %s: %w", s.dir, ErrClosed)
	}
	return nil
}

func (s *Store) exit() { s.mu.RUnlock() }

// Dir returns the state directory the store was opened for.
func (s *Store) Dir() string { return s.dir }

// Live names the running App the store was read through, or is nil when
// the directory was read directly (or through OpenApp).
func (s *Store) Live() *Holder { return s.live }

// Stale names the App that held the directory last and is gone without
// closing it (it crashed or was killed), when its record was left behind;
// nil otherwise.
func (s *Store) Stale() *Holder { return s.stale }

// Layout returns the store's key layout version.
func (s *Store) Layout() int { return s.r.Layout }

// Fingerprint returns, in hex, the fingerprint of the topology that wrote
// the store (an App of another topology refuses it).
func (s *Store) Fingerprint() string { return hex.EncodeToString(s.r.Fingerprint) }

// Tables returns the names of the store's tables, sorted.
func (s *Store) Tables() []string {
	out := make([]string, 0, len(s.r.Tables))
	for name := range s.r.Tables {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Source is a source of the store with its checkpoints.
type Source struct {
	Name string
	// Partitions is the partition count the store was written with.
	Partitions uint32
	// Checkpoints holds the committed next offset of every partition that
	// committed anything, by partition.
	Checkpoints map[uint32]uint64
	// Rebuilding holds, for every partition being rebuilt after a reset
	// (topology.Reset), the offset it had reached before: its checkpoint
	// climbs towards it, and records below it publish nothing again. Nil
	// when none is. Filled by Summary.
	Rebuilding map[uint32]uint64 `json:",omitempty"`
}

// Sources returns the store's sources with their checkpoints, by name.
func (s *Store) Sources(ctx context.Context) ([]Source, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	byName := map[string]*Source{}
	for name, n := range s.r.Sources {
		byName[name] = &Source{Name: name, Partitions: n, Checkpoints: map[uint32]uint64{}}
	}
	err := s.r.Scan(ctx, istate.FamilyCheckpoint, nil, func(p uint32, rest, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("strand: %s: checkpoint %q partition %d has %d bytes, want 8", s.dir, rest, p, len(v))
		}
		src, ok := byName[string(rest)]
		if !ok {
			src = &Source{Name: string(rest), Checkpoints: map[uint32]uint64{}}
			byName[src.Name] = src
		}
		src.Checkpoints[p] = binary.BigEndian.Uint64(v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortedSources(byName), nil
}

func sortedSources(byName map[string]*Source) []Source {
	out := make([]Source, 0, len(byName))
	for _, src := range byName {
		out = append(out, *src)
	}
	slices.SortFunc(out, func(a, b Source) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Checkpoint returns the committed next offset of a source partition, and
// false when it committed nothing.
func (s *Store) Checkpoint(source string, partition uint32) (uint64, bool, error) {
	if err := s.enter(); err != nil {
		return 0, false, err
	}
	defer s.exit()
	v, ok, err := s.r.Row(istate.FamilyCheckpoint, partition, []byte(source))
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("strand: %s: checkpoint %q partition %d has %d bytes, want 8", s.dir, source, partition, len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

func (s *Store) tableID(name string) (uint32, error) {
	id, ok := s.r.Tables[name]
	if !ok {
		return 0, strerr.Errorf("strand: %s: table %q: %w (it has %s)", s.dir, name, ErrNoTable, strings.Join(s.Tables(), ", "))
	}
	return id, nil
}

// GetRaw returns the stored value of key (the key's bytes as the table's
// key codec encodes them) in the table named table, the partition whose
// commit wrote it, and false when the key has no row.
func (s *Store) GetRaw(ctx context.Context, table string, key []byte) (value []byte, partition uint32, ok bool, err error) {
	if err := s.enter(); err != nil {
		return nil, 0, false, err
	}
	defer s.exit()
	id, err := s.tableID(table)
	if err != nil {
		return nil, 0, false, err
	}
	// A row lives under the partition that processed its key: one point
	// read per partition of the store's sources.
	var parts uint32
	for _, n := range s.r.Sources {
		parts = max(parts, n)
	}
	for p := range parts {
		if err := ctx.Err(); err != nil {
			return nil, 0, false, err
		}
		if value, ok, err = s.r.TableRow(id, p, key); err != nil || ok {
			partition = p
			break
		}
	}
	if err != nil {
		return nil, 0, false, strerr.Errorf("strand: %s: table %q: %w", s.dir, table, err)
	}
	return value, partition, ok, nil
}

// ScanRaw calls fn with every row of the table named table, partition by
// partition and in key order within a partition, until fn returns false:
// the partition whose commits wrote it, the encoded key and the stored
// value (both valid only during the call).
func (s *Store) ScanRaw(ctx context.Context, table string, fn func(partition uint32, key, value []byte) bool) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	id, err := s.tableID(table)
	if err != nil {
		return err
	}
	err = s.r.ScanTable(ctx, id, func(p uint32, k, v []byte) error {
		if !fn(p, k, v) {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return strerr.Errorf("strand: %s: table %q: %w", s.dir, table, err)
	}
	return nil
}

var errStop = errors.New("stop")

// Get returns the stored value of k in the store's rows of table t,
// decoded with t's codecs, and false when k has no row.
func Get[K, V any](ctx context.Context, s *Store, t *topology.Table[K, V], k K) (V, bool, error) {
	var zero V
	kc, vc := t.Codecs()
	if kc == nil || vc == nil {
		return zero, false, fmt.Errorf("strand: table %q has no codecs (its topology was not built)", t.Name())
	}
	kb, err := kc.Append(nil, k)
	if err != nil {
		return zero, false, strerr.Errorf("strand: table %q: encode key %v: %w", t.Name(), k, err)
	}
	b, _, ok, err := s.GetRaw(ctx, t.Name(), kb)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := vc.Decode(b)
	if err != nil {
		return zero, false, strerr.Errorf("strand: table %q: decode the value of key %q: %w", t.Name(), kb, err)
	}
	return v, true, nil
}

// Scan calls fn with every key and value of the store's rows of table t,
// decoded with t's codecs, partition by partition and in key order within
// a partition, until fn returns false.
func Scan[K, V any](ctx context.Context, s *Store, t *topology.Table[K, V], fn func(k K, v V) bool) error {
	kc, vc := t.Codecs()
	if kc == nil || vc == nil {
		return fmt.Errorf("strand: table %q has no codecs (its topology was not built)", t.Name())
	}
	var derr error
	err := s.ScanRaw(ctx, t.Name(), func(_ uint32, kb, vb []byte) bool {
		k, err := kc.Decode(kb)
		if err != nil {
			derr = strerr.Errorf("strand: table %q: decode key %q: %w", t.Name(), kb, err)
			return false
		}
		v, err := vc.Decode(vb)
		if err != nil {
			derr = strerr.Errorf("strand: table %q: decode the value of key %q: %w", t.Name(), kb, err)
			return false
		}
		return fn(k, v)
	})
	if err != nil {
		return err
	}
	return derr
}

// ParkedKey is a key parked after a failure, with the records it holds.
type ParkedKey struct {
	Source    string
	Partition uint32
	Key       []byte
	// Manual is set when the key waits for an Unblock, not a retry; Next is
	// when its next try is due; Attempts how many tries failed; LastError
	// the last failure; FailedAt the offset of the record that failed.
	Manual    bool
	Attempts  int
	Next      time.Time
	LastError string
	FailedAt  uint64
	// Records are the key's parked records in offset order: past the
	// checkpoint, not applied.
	Records []connector.Record
}

// Parked returns the parked keys, by source partition and key.
func (s *Store) Parked(ctx context.Context) ([]ParkedKey, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	in, err := inspect.ReadParked(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: parked keys: %w", s.dir, err)
	}
	out := make([]ParkedKey, len(in))
	for i, p := range in {
		out[i] = ParkedKey{Source: p.Source, Partition: p.Partition, Key: p.Key, Manual: p.Meta.Manual, Attempts: p.Meta.Attempts,
			Next: p.Meta.Next, LastError: p.Meta.LastErr, FailedAt: p.Meta.FailedAt, Records: p.Records}
	}
	return out, nil
}

// HeldKey is a key of a re-sequenced source whose records wait behind an
// open gap: Next is the sequence number it waits for (0 when the store has
// recorded none for the key), Records the held records in sequence order.
type HeldKey struct {
	Source    string
	Partition uint32
	Key       []byte
	Next      uint64
	Records   []stream.HeldRecord
}

// Held returns the keys with held records (each one an open gap), by
// source partition and key.
func (s *Store) Held(ctx context.Context) ([]HeldKey, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	in, err := inspect.ReadHeld(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: held records: %w", s.dir, err)
	}
	out := make([]HeldKey, len(in))
	for i, h := range in {
		out[i] = HeldKey{Source: h.Source, Partition: h.Partition, Key: h.Key, Next: h.Next, Records: h.Records}
	}
	return out, nil
}

// Gaps returns the gaps the re-sequencer gave up (a deadline or a limit
// passed: skipped or dead-lettered), by source partition, key and number.
// Open gaps are the keys Held returns.
func (s *Store) Gaps(ctx context.Context) ([]stream.GapNotice, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	out, err := inspect.ReadGaps(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: gaps: %w", s.dir, err)
	}
	return out, nil
}

// OutboxMessage is a committed To or KeyBy message not yet published: the
// source partition whose commit wrote it, its place in that partition's
// outbox, the topic it goes to and the message.
type OutboxMessage struct {
	Source    string
	Partition uint32
	Seq       uint64
	Topic     string
	Message   connector.Message
}

// Outbox returns the committed To/KeyBy messages not yet published, by
// source partition and outbox order.
func (s *Store) Outbox(ctx context.Context) ([]OutboxMessage, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	in, err := inspect.ReadOutbox(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: outbox: %w", s.dir, err)
	}
	out := make([]OutboxMessage, len(in))
	for i, m := range in {
		out[i] = OutboxMessage{Source: m.Source, Partition: m.Partition, Seq: m.Seq, Topic: m.Dest, Message: m.Message}
	}
	return out, nil
}

// DeadLetters returns the committed dead letters not yet published to the
// dead-letter topic.
func (s *Store) DeadLetters(ctx context.Context) ([]deadletter.Letter, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	out, err := inspect.ReadDeadLetters(ctx, s.r)
	if err != nil {
		return nil, strerr.Errorf("strand: %s: dead letters: %w", s.dir, err)
	}
	return out, nil
}

// Processed reports whether the source partition has taken in the record
// that carried the strand-origin header origin (connector.HeaderOrigin):
// applied it, or dead-lettered, parked or held it, in a commit of the
// store. A record whose origin a partition has taken in is dropped when it
// comes again. Origins are those of dead-letter replays (`strand dlq
// replay` gives each its own; the App keeps every one) and of the messages
// of To and KeyBy steps (taken in when the message's sequence number is
// not above the highest its origin stream had).
func (s *Store) Processed(source string, partition uint32, origin []byte) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.exit()
	ok, err := inspect.ReadProcessed(s.r, source, partition, origin)
	if err != nil {
		return false, strerr.Errorf("strand: %s: source %q partition %d: origin %x: %w", s.dir, source, partition, origin, err)
	}
	return ok, nil
}
