package state

import (
	"errors"

	"github.com/strand-io/strand/stream"
)

var (
	// ErrClosed is returned by every operation on a DB (and on its tables
	// and transactions) after [DB.Close].
	ErrClosed = errors.New("strand: database closed")

	// ErrIncompatibleTopology (stream's) is wrapped by [DB.EnsureFingerprint] when the
	// database was written by a topology with a different fingerprint.
	ErrIncompatibleTopology = stream.ErrIncompatibleTopology

	// ErrIncompatibleLayout is wrapped by [Open] when the database was
	// written with a key layout version this package does not read.
	ErrIncompatibleLayout = errors.New("strand: incompatible key layout")

	// ErrPartitionsChanged is wrapped by [DB.EnsureSource] when a source's
	// partition count differs from the one its state was written with.
	ErrPartitionsChanged = errors.New("strand: source partition count changed")

	// ErrNotAttached is wrapped when a [Table] is used before [DB.Attach]
	// bound it to a database.
	ErrNotAttached = errors.New("strand: table not attached")

	// ErrInvalidTable is wrapped by [DB.Attach] when a table cannot be
	// attached: a nil table, an empty or duplicate name, a missing codec,
	// or a table still attached to another open database.
	ErrInvalidTable = errors.New("strand: invalid table")

	// ErrReservedFamily is wrapped when a row operation names a [Family]
	// that this package manages itself (metadata, checkpoints, table rows).
	ErrReservedFamily = errors.New("strand: reserved row family")

	// ErrPredecessorFailed is wrapped by [Txn.Commit] of a transaction
	// started with [DB.NewTxnAfter] whose predecessor did not commit (its
	// commit failed or it was discarded): the transaction may have read the
	// predecessor's writes, so it is discarded and commits nothing.
	ErrPredecessorFailed = errors.New("strand: preceding transaction did not commit")

	// ErrEncode is wrapped when a table value cannot be encoded by the
	// table's codec ([Table.Write], [Table.Update], [Table.Stage]); nothing
	// is written then.
	ErrEncode = errors.New("strand: cannot encode value")

	// ErrTxnDone is returned by a [Txn] used after Commit or Discard.
	ErrTxnDone = errors.New("strand: transaction already committed or discarded")
)
