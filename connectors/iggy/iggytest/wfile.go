package iggytest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// fileWriter is what the broker needs of a file it appends to; *os.File
// implements it. Tests put an error-injecting layer in between
// (withFileWrapper) to fail writes as a full disk does.
type fileWriter interface {
	io.Writer
	Truncate(size int64) error
	Seek(offset int64, whence int) (int64, error)
	Sync() error
	Close() error
}

// withFileWrapper makes the broker write its files through wrap.
func withFileWrapper(wrap func(path string, f *os.File) fileWriter) Option {
	return optionFunc(func(c *config) { c.wrapFile = wrap })
}

// writeError is a failed write to a data file. The failure is logged once
// by the file (wfile), so handlers answer status 1 without logging again.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// wfile is an append-only data file. A failed write (ENOSPC, EIO) leaves
// the file as it was before the write: the partial record is cut off
// before the next write, so a full disk loses nothing and corrupts
// nothing, and writes succeed again once space is back. The first failure
// is logged once, with the path, and the recovery again once.
type wfile struct {
	f       fileWriter
	path    string
	size    int64 // end of the last complete write
	dirty   bool  // a write failed: cut back to size before the next
	sync    bool
	failing bool
	log     *slog.Logger
	scratch []byte
}

// openWFile opens path for appending after its first size bytes (bytes
// past them, a torn tail, are cut off at the first write).
func (d *disk) openWFile(path string, size int64, create bool) (*wfile, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	var fw fileWriter = f
	if d.wrap != nil {
		fw = d.wrap(path, f)
	}
	w := &wfile{f: fw, path: path, size: size, sync: d.sync, log: d.log}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() != size {
		w.dirty = true
	} else if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// write appends the concatenation of parts as one record.
func (w *wfile) write(parts ...[]byte) error {
	if err := w.writeErr(parts...); err != nil {
		if !w.failing {
			w.failing = true
			w.log.Error("iggytest: cannot write data file; requests that write to it fail until it can be written again",
				"file", w.path, "err", err)
		}
		return &writeError{fmt.Errorf("write %s: %w", w.path, err)}
	}
	if w.failing {
		w.failing = false
		w.log.Warn("iggytest: data file writable again", "file", w.path)
	}
	return nil
}

func (w *wfile) writeErr(parts ...[]byte) error {
	if w.dirty {
		if err := w.cut(); err != nil {
			return err
		}
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	var err error
	if len(parts) > 1 && total <= 64<<10 {
		b := w.scratch[:0]
		for _, p := range parts {
			b = append(b, p...)
		}
		w.scratch = b
		_, err = w.f.Write(b)
	} else {
		for _, p := range parts {
			if _, err = w.f.Write(p); err != nil {
				break
			}
		}
	}
	if err == nil && w.sync {
		err = w.f.Sync()
	}
	if err != nil {
		w.dirty = true
		_ = w.cut() // at once if it can; before the next write if not
		return err
	}
	w.size += int64(total)
	return nil
}

// cut removes whatever a failed write left after size.
func (w *wfile) cut() error {
	if err := w.f.Truncate(w.size); err != nil {
		return err
	}
	if _, err := w.f.Seek(w.size, io.SeekStart); err != nil {
		return err
	}
	w.dirty = false
	return nil
}

// reset empties the file down to its first keep bytes.
func (w *wfile) reset(keep int64) error {
	w.size, w.dirty = keep, true
	if err := w.cut(); err != nil {
		return &writeError{fmt.Errorf("truncate %s: %w", w.path, err)}
	}
	return nil
}

func (w *wfile) close() error {
	if w == nil || w.f == nil {
		return nil
	}
	var err error
	if w.dirty {
		err = w.cut()
	}
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

// isWriteError reports whether err is a logged data-file write failure.
func isWriteError(err error) bool {
	var we *writeError
	return errors.As(err, &we)
}
