package state

import (
	"log/slog"

	"github.com/strand-io/strand/stream"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Durability says when a [Txn.Commit] may return: stream.Durability, the
// one definition users meet (topology.WithDurability).
type Durability = stream.Durability

const (
	// Sync makes Commit return only after the batch is fsynced to the
	// write-ahead log: a returned commit survives a machine crash. It is
	// the default. Concurrent commits share fsyncs (group commit).
	Sync = stream.Sync

	// NoSync makes Commit return once the batch is in the write-ahead log
	// buffer. A process crash loses at most the last few milliseconds of
	// commits and a machine crash may lose more; what survives is always a
	// prefix of the commits, so tables still match their checkpoints.
	// Use [DB.SyncWAL] before acting on a commit outside the database.
	NoSync = stream.NoSync
)

const (
	// DefaultCacheSize is Pebble's block cache budget unless [WithCacheSize]
	// sets another: 64 MiB, which holds 16 MiB memtables with room for blocks.
	DefaultCacheSize int64 = 64 << 20

	// DefaultValueCacheSize is the budget of the decoded-value cache unless
	// [WithValueCacheSize] sets another: 64 MiB.
	DefaultValueCacheSize int64 = 64 << 20
)

// The block cache must stay at least 4x the memtable size: Pebble charges
// the live, the recycled and any queued memtables against the cache, and a
// cache smaller than that silently holds no blocks at all (measured).
const (
	maxMemTableSize int64 = 16 << 20
	minCacheSize    int64 = 4 << 20
)

// Option configures [Open].
type Option func(*options)

type options struct {
	durability     Durability
	cacheSize      int64
	valueCacheSize int64
	keyFilterSize  int64
	logger         *slog.Logger
	diskReserve    int64  // space.go
	fs             vfs.FS // tests only
}

// WithDurability sets the durability of [Txn.Commit]; the default is [Sync].
func WithDurability(d Durability) Option { return func(o *options) { o.durability = d } }

// WithCacheSize sets Pebble's block cache budget in bytes (default 64 MiB,
// minimum 4 MiB). Memtables are charged against this budget, so the memtable
// size is derived from it: a quarter of the cache, at most 16 MiB. For larger
// state, grow the cache. The memory is allocated outside the Go heap when cgo
// is enabled, so GOMEMLIMIT does not see it.
func WithCacheSize(bytes int64) Option { return func(o *options) { o.cacheSize = bytes } }

// WithValueCacheSize bounds the per-database cache of decoded committed table
// values that lets [Table.Read] skip a Pebble read and a decode for hot keys
// (default 64 MiB). An entry counts its slot (the decoded value's fixed part
// and keys of up to 20 bytes are inside it), its share of the cache's
// index, a longer key's bytes, and its encoded value's length (standing for
// what the decoded value holds outside the slot), so the budget is close to
// the Go heap the cache holds. Zero disables the cache.
func WithValueCacheSize(bytes int64) Option { return func(o *options) { o.valueCacheSize = bytes } }

// WithKeyFilterSize bounds the in-memory filter of the table rows that are
// in the store (default [DefaultKeyFilterSize]), which lets a Read of a row
// that does not exist yet skip Pebble. It takes about 1.5 bytes per row and
// grows with the rows up to this budget; past it, more absent rows are read
// from Pebble. Zero disables it.
func WithKeyFilterSize(bytes int64) Option { return func(o *options) { o.keyFilterSize = bytes } }

// WithLogger sets the logger for Pebble's messages. Pebble's informational
// messages (flushes, WAL recovery) are logged at Debug level, its errors at
// Error level. The default is [slog.Default].
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// withFS runs Pebble on another file system (tests use an in-memory one).
func withFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }
