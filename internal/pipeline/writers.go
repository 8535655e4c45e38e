package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
)

// Writers makes one pipeline at a time the writer of a partition's state
// when several sources share it: the sources of a topology whose handlers
// write the same tables (two Sources projecting into one table, a Source
// and a KeyBy's repartition topic, two KeyBy steps into one table) each
// have a pipeline per partition, and table rows are filed under the
// partition, so partition p of every such source writes the same rows
// (docs/design.md §2, "one writer per row").
//
// A pipeline takes its partition's turn before it executes a batch, a
// retry or a release, and keeps it while a commit of its own is in flight
// (the next batch of the same pipeline reads that commit's writes, which
// is safe); it gives the turn up once its commits are done and another
// pipeline waits, or when it goes idle. Turns are handed over in the order
// they were asked for, so no source of a busy group starves. A Txn reads
// committed state, and a pipeline takes the turn only after the previous
// holder's commits finished, so every batch sees every write made before
// it, whichever source made it: no update is lost.
//
// Sources that share nothing get no Writers and pay nothing. Make one
// Writers per group of sharing sources and give it to each of their
// Processors with WithWriters.
type Writers struct {
	mu    sync.Mutex
	parts map[uint32]*writerTurn
}

// NewWriters returns the turns of one group of sources that share state.
func NewWriters() *Writers { return &Writers{parts: map[uint32]*writerTurn{}} }

func (w *Writers) turn(p uint32) *writerTurn {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.parts[p]
	if t == nil {
		t = &writerTurn{ch: make(chan struct{}, 1)}
		w.parts[p] = t
	}
	return t
}

// writerTurn is one partition's turn: a one-slot channel used as a lock
// whose waiters are served in the order they blocked (Go's channel send
// queue is FIFO).
type writerTurn struct {
	ch      chan struct{}
	waiting atomic.Int32
}

func (t *writerTurn) take(ctx context.Context) error {
	select {
	case t.ch <- struct{}{}:
		return nil
	default:
	}
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	select {
	case t.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *writerTurn) give() { <-t.ch }

// wanted reports whether another pipeline waits for the turn.
func (t *writerTurn) wanted() bool { return t.waiting.Load() > 0 }
