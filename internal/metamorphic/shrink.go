package metamorphic

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
)

// Without returns a copy of c without the records of the events whose ids
// drop reports, with the sequence numbers of re-sequenced inputs numbered
// again (so that no gap appears) and the plan's chunks cut alike.
func (c *Case) Without(drop func(id int) bool) *Case {
	s := *c
	s.Gen, s.Log, s.Chunks = nil, nil, nil
	s.Fail = map[int]Failure{}
	seq := map[string]uint64{}
	renum := map[int]uint64{}
	for _, r := range c.Gen {
		if drop(r.Ev.ID) {
			continue
		}
		if r.Ev.Seq > 0 {
			k := c.Inputs[r.Input].Name + "/" + r.Ev.K
			seq[k]++
			renum[r.Ev.ID] = seq[k]
			r.Ev.Seq = seq[k]
		}
		s.Gen = append(s.Gen, r)
		if f, ok := c.Fail[r.Ev.ID]; ok {
			s.Fail[r.Ev.ID] = f
		}
	}
	pos := 0
	for _, n := range c.Chunks {
		kept := 0
		for _, r := range c.Log[pos : pos+n] {
			if drop(r.Ev.ID) {
				continue
			}
			if r.Ev.Seq > 0 {
				r.Ev.Seq = renum[r.Ev.ID]
			}
			s.Log = append(s.Log, r)
			kept++
		}
		pos += n
		s.Chunks = append(s.Chunks, kept)
	}
	return &s
}

// Shrink looks for a smaller case than c that still fails the comparison
// with the model, by dropping ever smaller slices of its events (delta
// debugging), within tries runs. It returns the smallest failing case found
// and its error, or c and nil when no smaller case failed.
func Shrink(c *Case, tries int) (*Case, error) {
	var best error
	for size := len(c.Gen) / 2; size >= 1 && tries > 0; size /= 2 {
		for start := 0; start < len(c.Gen) && tries > 0; start += size {
			drop := map[int]bool{}
			for _, r := range c.Gen[start:min(start+size, len(c.Gen))] {
				drop[r.Ev.ID] = true
			}
			cand := c.Without(func(id int) bool { return drop[id] })
			tries--
			if err := Check(cand); errors.Is(err, ErrMismatch) {
				c, best = cand, err
				start -= size // the same place holds other events now
			}
		}
	}
	return c, best
}

// Check runs c and compares it with the model, outside of any test: a
// failure of the driver is returned as an error.
func Check(c *Case) (err error) {
	tb := &soloTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tb.cleanup()
		var o *Observed
		if o, err = Run(tb, c); err == nil {
			err = Compare(c, Expect(c), o)
		}
	}()
	<-done
	if tb.err != nil {
		return tb.err
	}
	return err
}

// soloTB is the topologytest.TB of Check: a fatal failure ends the
// goroutine that runs the case, and is returned by Check.
type soloTB struct {
	mu       sync.Mutex
	err      error
	cleanups []func()
	dirs     []string
}

func (s *soloTB) Helper() {}

func (s *soloTB) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = errors.Join(s.err, fmt.Errorf(format, args...))
}

func (s *soloTB) Fatalf(format string, args ...any) {
	s.Errorf(format, args...)
	runtime.Goexit()
}

func (s *soloTB) Cleanup(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, fn)
}

func (s *soloTB) TempDir() string {
	dir, err := os.MkdirTemp("", "strand-meta-")
	if err != nil {
		s.Fatalf("metamorphic: %v", err)
	}
	s.mu.Lock()
	s.dirs = append(s.dirs, dir)
	s.mu.Unlock()
	return dir
}

func (s *soloTB) cleanup() {
	s.mu.Lock()
	fns, dirs := s.cleanups, s.dirs
	s.cleanups, s.dirs = nil, nil
	s.mu.Unlock()
	for _, fn := range slices.Backward(fns) {
		fn()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
