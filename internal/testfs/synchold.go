// Package testfs holds file systems for strand's own tests: wrappers of
// Pebble's vfs.FS that stop a store at the moments a crash test needs.
// Only tests import it.
package testfs

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SyncHold is a file system whose write-ahead log fsyncs can be held:
// while held, a commit of a Sync store is visible to Pebble's readers
// (Pebble publishes a batch before its WAL sync returns) but has not
// returned, which is the window a crash takes back (with
// vfs.NewCrashableMem under it, CrashClone shows what a crash leaves).
type SyncHold struct {
	vfs.FS
	mu   sync.Mutex
	held chan struct{} // non-nil: WAL syncs wait for it to close
}

// NewSyncHold returns fs with WAL fsyncs that can be held.
func NewSyncHold(fs vfs.FS) *SyncHold { return &SyncHold{FS: fs} }

// Hold makes WAL syncs wait until Release.
func (h *SyncHold) Hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = make(chan struct{})
	}
}

// Release lets the held WAL syncs go on. Releasing what is not held does
// nothing.
func (h *SyncHold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
}

func (h *SyncHold) wait() {
	h.mu.Lock()
	ch := h.held
	h.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (h *SyncHold) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &holdFile{File: f, fs: h}, nil
}

// Create creates name; a WAL file's syncs can be held.
func (h *SyncHold) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.Create(name, c)
	return h.wrap(name, f, err)
}

// ReuseForWrite reuses oldname as newname; a WAL file's syncs can be held.
func (h *SyncHold) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.ReuseForWrite(oldname, newname, c)
	return h.wrap(newname, f, err)
}

// OpenReadWrite opens name for reading and writing; a WAL file's syncs can
// be held.
func (h *SyncHold) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := h.FS.OpenReadWrite(name, c, opts...)
	return h.wrap(name, f, err)
}

type holdFile struct {
	vfs.File
	fs *SyncHold
}

func (f *holdFile) Sync() error     { f.fs.wait(); return f.File.Sync() }
func (f *holdFile) SyncData() error { f.fs.wait(); return f.File.SyncData() }
func (f *holdFile) SyncTo(n int64) (bool, error) {
	f.fs.wait()
	return f.File.SyncTo(n)
}
