// Package changelog is the replication changelog of strand's scale-out
// (docs/design.md §15): every commit of a partition's store is stamped with
// its sequence number and published to the partition's changelog topic
// after the Pebble commit, a new owner fences the partition with its epoch,
// snapshots bound the replay, and Restore rebuilds a partition's store from
// its changelog when an instance takes the partition over.
//
// It sits above the executor (internal/executor: ErrFenced, FencedError)
// and below the front door (stream/topology): the pipelines
// (internal/pipeline) know the changelog only through the Processor's stamp
// and gate hooks and the error it returns (executor.ErrFenced).
// Decode and History read a changelog's records on their own (the
// strand CLI and the tests check a changelog's history with them).
package changelog
