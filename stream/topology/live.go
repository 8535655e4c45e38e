package topology

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

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/deadletter"
)

// Live inspection: Pebble locks an open store's directory against every
// other opener, read-only ones included, so `strand inspect DIR` cannot
// read a running App's store. The App serves the report itself instead:
// while it is open it listens on a loopback port and records the port, its
// pid and a random token in liveFile inside the state directory (mode
// 0600, so whoever may read the store may ask), removed at Close. A
// request makes a Pebble checkpoint of the open store in a directory
// inside the store's own (hard links: it costs next to nothing and sees
// one consistent state with every returned commit), reads it with the same
// code as an offline Inspect, and removes it.

const (
	// liveFile is the live-inspection record in a state directory.
	liveFile = "strand-live.json"
	// liveCopyPrefix names the checkpoint directories of live reports.
	liveCopyPrefix = ".inspect-"
	// liveTimeout bounds a live report (a copy and a read of every key).
	liveTimeout = 5 * time.Minute
)

// WithLiveInspect turns live inspection on or off (default on): while the
// App is open it answers Inspect (and `strand inspect DIR`) for its state
// directory from a loopback port recorded in the directory, since Pebble's
// lock keeps anyone else from reading the store. Off, Inspect fails while
// the App has the store open.
func WithLiveInspect(on bool) OpenOption {
	return func(o *openOptions) error {
		o.liveOff = !on
		return nil
	}
}

// LiveApp names the App a live-inspection record belongs to.
type LiveApp struct {
	// PID is the App's process id; Addr the loopback address it answered
	// inspections on; Since when it opened the store.
	PID   int
	Addr  string
	Since time.Time
}

// liveRecord is the content of liveFile.
type liveRecord struct {
	PID   int       `json:"pid"`
	Addr  string    `json:"addr"`
	Token string    `json:"token"`
	Since time.Time `json:"since"`
}

func (r *liveRecord) app() *LiveApp { return &LiveApp{PID: r.PID, Addr: r.Addr, Since: r.Since} }

// liveReport is an Inspection on the wire; dead letters travel in their
// row encoding.
type liveReport struct {
	Layout      int
	Fingerprint string
	Sources     []InspectedSource
	Tables      []InspectedTable
	Parked      []InspectedParked
	Held        []InspectedHeld
	Outbox      []InspectedOutbox
	DeadLetters [][]byte
}

// liveInspect is an open App's live-inspection server.
type liveInspect struct {
	dir  string
	db   *state.DB
	rec  liveRecord
	hs   *http.Server
	done chan struct{}
	mu   sync.Mutex // one report at a time
}

// startLive starts the live-inspection server of the store db in dir. The
// App holds the store's lock, so a record or copies found in dir were left
// by an App that died: they are replaced. Failing to start is logged, not
// fatal: the App works without it.
func startLive(dir string, db *state.DB, log *slog.Logger) *liveInspect {
	removeStaleCopies(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Warn("strand: live inspection off: cannot listen on loopback", "dir", dir, "err", err)
		return nil
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	l := &liveInspect{dir: dir, db: db, done: make(chan struct{}),
		rec: liveRecord{PID: os.Getpid(), Addr: ln.Addr().String(), Token: hex.EncodeToString(tok), Since: time.Now().UTC()}}
	if err := writeLiveRecord(dir, l.rec); err != nil {
		_ = ln.Close()
		log.Warn("strand: live inspection off: cannot record it in the state directory", "dir", dir, "err", err)
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /inspect", l.serveInspect)
	l.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		defer close(l.done)
		_ = l.hs.Serve(ln)
	}()
	return l
}

// stop removes the record, then stops the server, waiting for a report in
// flight.
func (l *liveInspect) stop() {
	if l == nil {
		return
	}
	_ = os.Remove(filepath.Join(l.dir, liveFile))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.hs.Shutdown(ctx); err != nil {
		_ = l.hs.Close()
	}
	<-l.done
}

func (l *liveInspect) serveInspect(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+l.rec.Token)) != 1 {
		http.Error(w, "strand live inspection: wrong or missing token (it is in the state directory's "+liveFile+")", http.StatusUnauthorized)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rep, err := l.report()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// report inspects a checkpoint of the open store.
func (l *liveInspect) report() (*liveReport, error) {
	tmp, err := os.MkdirTemp(l.dir, liveCopyPrefix)
	if err != nil {
		return nil, fmt.Errorf("copy the store: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "store")
	if err := l.db.CopyTo(cp); err != nil {
		return nil, err
	}
	in, err := inspectStore(cp)
	if err != nil {
		return nil, err
	}
	rep := &liveReport{Layout: in.Layout, Fingerprint: in.Fingerprint, Sources: in.Sources, Tables: in.Tables, Parked: in.Parked,
		Held: in.Held, Outbox: in.Outbox}
	for _, d := range in.PendingDeadLetters {
		rep.DeadLetters = append(rep.DeadLetters, rows.AppendLetter(nil, d))
	}
	return rep, nil
}

// removeStaleCopies removes checkpoint directories a report left behind
// (the App died during it).
func removeStaleCopies(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), liveCopyPrefix) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// writeLiveRecord writes the record atomically, readable by its owner only.
func writeLiveRecord(dir string, rec liveRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, liveFile+".tmp-")
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
		err = os.Rename(f.Name(), filepath.Join(dir, liveFile))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// readLiveRecord reads dir's live-inspection record: nil when there is
// none.
func readLiveRecord(dir string) (*liveRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, liveFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topology: inspect %s: live-inspection record: %w", dir, err)
	}
	var rec liveRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Addr == "" {
		return nil, fmt.Errorf("topology: inspect %s: live-inspection record %s is malformed", dir, liveFile)
	}
	return &rec, nil
}

// askLive asks the App of rec for its report.
func askLive(dir string, rec *liveRecord) (*Inspection, error) {
	host, _, err := net.SplitHostPort(rec.Addr)
	if err != nil || (host != "127.0.0.1" && host != "::1") {
		return nil, fmt.Errorf("live-inspection record names %q, not a loopback address", rec.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rec.Addr+"/inspect", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+rec.Token)
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var rep liveReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return nil, fmt.Errorf("read the report: %w", err)
	}
	in := &Inspection{Dir: dir, Layout: rep.Layout, Fingerprint: rep.Fingerprint, Sources: rep.Sources,
		Tables: rep.Tables, Parked: rep.Parked, Held: rep.Held, Outbox: rep.Outbox, Live: rec.app()}
	for _, b := range rep.DeadLetters {
		var d deadletter.Letter
		if err := rows.DecodeLetter(b, &d); err != nil {
			return nil, fmt.Errorf("read the report: dead letter: %w", err)
		}
		in.PendingDeadLetters = append(in.PendingDeadLetters, d)
	}
	return in, nil
}
