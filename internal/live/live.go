// Package live is the record an open App keeps in its state directory and
// its live-inspection server, through which stream/state reads a store
// that an App holds open.
//
// Pebble locks an open store's directory against every other opener,
// read-only ones included. While an App has its store open it records its
// pid in File inside the state directory (mode 0600, removed at Close), so
// that a second opener can say who holds the store. With live inspection
// on (topology.WithLiveInspect(true)) it also listens on a loopback port
// and records the address and a random token: a request with the token
// makes a Pebble checkpoint of the open store (hard links: it costs next
// to nothing and holds every commit that returned) in a directory inside
// the store's own, which the asking process reads read-only and removes.
package live

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	// File is the record in a state directory.
	File = "strand-live.json"
	// CopyPrefix names the directories of copies made for readers.
	CopyPrefix = ".inspect-"
	// askTimeout bounds a request for a copy.
	askTimeout = 2 * time.Minute
)

// Record is the content of File.
type Record struct {
	// PID is the App's process id; Since when it opened the store.
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	// Addr and Token are set when the App serves live inspection.
	Addr  string `json:"addr,omitempty"`
	Token string `json:"token,omitempty"`
}

// Server is an open App's record and, when serving, its live-inspection
// server.
type Server struct {
	dir  string
	copy func(dest string) error
	rec  Record
	hs   *http.Server
	done chan struct{}
	mu   sync.Mutex // one copy at a time
}

// Start records the App holding the store in dir and, if serve, starts
// its live-inspection server, which makes copies with copyTo (a new
// directory's path). The App holds the store's lock, so a record or copies
// found in dir were left by an App that died: they are replaced. Failing
// is logged, not fatal: the App works without it.
func Start(dir string, serve bool, copyTo func(dest string) error, log *slog.Logger) *Server {
	RemoveCopies(dir)
	s := &Server{dir: dir, copy: copyTo, rec: Record{PID: os.Getpid(), Since: time.Now().UTC()}}
	var ln net.Listener
	if serve {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			log.Warn("strand: live inspection off: cannot listen on loopback", "dir", dir, "err", err)
		} else {
			tok := make([]byte, 16)
			_, _ = rand.Read(tok)
			s.rec.Addr, s.rec.Token = ln.Addr().String(), hex.EncodeToString(tok)
		}
	}
	if err := writeRecord(dir, s.rec); err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		log.Warn("strand: cannot record the App in the state directory (live inspection off)", "dir", dir, "err", err)
		return nil
	}
	if ln == nil {
		return s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /copy", s.serveCopy)
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.hs.Serve(ln)
	}()
	return s
}

// Stop removes the record, then stops the server, waiting for a copy in
// flight.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	_ = os.Remove(filepath.Join(s.dir, File))
	if s.hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.hs.Shutdown(ctx); err != nil {
		_ = s.hs.Close()
	}
	<-s.done
}

// copyReply is the answer to POST /copy: the directory the copy's store
// is in (Dir/store); the asker removes Dir.
type copyReply struct {
	Dir string `json:"dir"`
}

func (s *Server) serveCopy(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.rec.Token)) != 1 {
		http.Error(w, "strand live inspection: wrong or missing token (it is in the state directory's "+File+")", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp, err := os.MkdirTemp(s.dir, CopyPrefix)
	if err != nil {
		http.Error(w, fmt.Sprintf("copy the store: %v", err), http.StatusInternalServerError)
		return
	}
	if err := s.copy(filepath.Join(tmp, "store")); err != nil {
		_ = os.RemoveAll(tmp)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(copyReply{Dir: filepath.Base(tmp)})
}

// RemoveCopies removes the copy directories in dir (left by a reader that
// died, or by an App that died during a copy).
func RemoveCopies(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), CopyPrefix) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// writeRecord writes the record atomically, readable by its owner only.
func writeRecord(dir string, rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, File+".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, File))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// ReadRecord reads dir's record: nil when there is none.
func ReadRecord(dir string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the record %s of the App holding it: %w", File, err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID == 0 {
		return nil, fmt.Errorf("the record %s of the App holding it is malformed", File)
	}
	return &rec, nil
}

// Copy asks the App of rec, which holds the store in dir, for a copy of
// it: it returns the copy's directory (a store) and the directory to
// remove when done with it. A record without an address is an App that
// does not serve live inspection.
func Copy(ctx context.Context, dir string, rec *Record) (store, remove string, err error) {
	if rec.Addr == "" {
		return "", "", fmt.Errorf("the App holding it (pid %d, open since %s) does not serve live inspection: open it with topology.WithLiveInspect(true), or read the store once it is closed",
			rec.PID, rec.Since.Format(time.RFC3339))
	}
	host, _, err := net.SplitHostPort(rec.Addr)
	if err != nil || (host != "127.0.0.1" && host != "::1") {
		return "", "", fmt.Errorf("%s names %q, not a loopback address", File, rec.Addr)
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rec.Addr+"/copy", nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+rec.Token)
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", "", fmt.Errorf("the App holding it (pid %d, live inspection at %s) did not answer: %w", rec.PID, rec.Addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", "", fmt.Errorf("the App holding it (pid %d, live inspection at %s) answered %s: %s", rec.PID, rec.Addr, resp.Status, strings.TrimSpace(string(msg)))
	}
	var rep copyReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&rep); err != nil {
		return "", "", fmt.Errorf("the App holding it (pid %d) answered an unreadable copy: %w", rec.PID, err)
	}
	if !strings.HasPrefix(rep.Dir, CopyPrefix) || strings.ContainsAny(rep.Dir, `/\`) {
		return "", "", fmt.Errorf("the App holding it (pid %d) answered a copy at %q, not in the state directory", rec.PID, rep.Dir)
	}
	remove = filepath.Join(dir, rep.Dir)
	return filepath.Join(remove, "store"), remove, nil
}
