package state

import "context"

// ReadGate holds back a read's answer until what it read of a partition
// may be shown: in a group, until the partition's changelog has confirmed
// every commit of the partition the read's view may hold (docs/design.md
// §2). It returns an error when that can no longer happen (the partition
// moved to another owner first).
type ReadGate func(ctx context.Context, partition uint32) error

// SetReadGate installs g (nil removes it): Table.Get, GetFresh, GetRecent,
// Scan and ScanPartition call it, after taking their view, for every
// partition whose rows (or absence of a row) they answer with, and fail
// with its error. With a gate, GetRecent and ScanPartitionRecent take a
// view that holds every write that returned, as Get does, instead of the
// newest one taken: a partition's rows change wholesale when it is
// restored (ApplyLogged, DropPartition), and a view from before that would
// show the instance's older rows; the gate's wait dwarfs a view's fsync
// anyway.
func (db *DB) SetReadGate(g ReadGate) {
	if g == nil {
		db.readGate.Store(nil)
		return
	}
	db.readGate.Store(&g)
}

// gated reports whether a read gate is installed.
func (db *DB) gated() bool { return db.readGate.Load() != nil }

func (db *DB) confirmRead(ctx context.Context, partition uint32) error {
	g := db.readGate.Load()
	if g == nil {
		return nil
	}
	return (*g)(ctx, partition)
}
