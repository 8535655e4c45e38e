package state

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrStoreFailed is wrapped by a commit that Pebble could not write or
// sync (a full disk, an I/O error), and by every write after it: Pebble's
// commit pipeline cannot go on after such a failure, so the DB refuses
// writes until it is closed and opened again. What was committed before
// the failure is durable (or, with NoSync, a prefix of it is); the failed
// commit and everything after it are not. The process is never stopped:
// the runtime stops its App with the error, and a restart once there is
// space again resumes exactly from the last commit that returned nil.
var ErrStoreFailed = errors.New("strand: store failed")

// fatalPanic is what pebbleLogger.Fatalf panics with: Pebble calls Fatalf
// when it cannot go on (a commit that could not be written to the WAL, a
// MANIFEST that could not be written). A strand goroutine that called into
// Pebble recovers it (DB.guard) and fails the DB instead of the process.
type fatalPanic struct{ msg string }

// failure holds the first fatal error of a DB.
type failure struct {
	mu  sync.Mutex
	err atomic.Pointer[error]
}

// failed returns the error that failed the DB, or nil.
func (db *DB) failed() error {
	if p := db.fail.err.Load(); p != nil {
		return *p
	}
	return nil
}

// failWith records the DB's first fatal error and returns it.
func (db *DB) failWith(cause string) error {
	db.fail.mu.Lock()
	defer db.fail.mu.Unlock()
	if err := db.failed(); err != nil {
		return err
	}
	err := fmt.Errorf("%w: the store at %s could not write its files (%s); it accepts no more writes: "+
		"make room on its disk (or fix the device), then restart: the state resumes exactly from the last commit that succeeded",
		ErrStoreFailed, db.dir, cause)
	db.fail.err.Store(&err)
	db.log.Error("strand: the store failed; it accepts no more writes", "cause", cause)
	return err
}

// guard runs op, a call into Pebble that may write, and turns a fatal
// error of Pebble during it into an error wrapping ErrStoreFailed instead
// of a panic that stops the process. Once the DB failed, or while its disk
// is nearly full (space.go), it returns an error without running op.
func (db *DB) guard(op func() error) (err error) {
	if err := db.failed(); err != nil {
		return err
	}
	if err := db.space.check(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalPanic)
			if !ok {
				panic(r)
			}
			err = db.failWith(f.msg)
		}
	}()
	return op()
}
