package topology

import (
	"context"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/state"
)

// EngineProgram gives the executor tests of this directory the compiled
// program, to drive its Tasks directly.
func EngineProgram(p *Program) *executor.Program { return p.p }

// SetTablePartitions gives every table of p the partition count n, as Open
// does from the sources.
func SetTablePartitions(p *Program, n uint32) {
	for _, tn := range p.tables {
		tn.partitioner.SetPartitions(n)
	}
}

// Attach binds p's tables to db (executor tests).
func (p *Program) Attach(db *state.DB) error { return p.p.Attach(db) }

// NewTask makes the Task of one source partition (executor tests).
func (p *Program) NewTask(ctx context.Context, db *state.DB, source string, partition uint32, opts ...executor.TaskOption) (*executor.Task, error) {
	return p.p.NewTask(ctx, db, source, partition, opts...)
}
