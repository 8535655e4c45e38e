package metamorphic

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrMismatch is wrapped by Compare's error: the run differs from the model.
var ErrMismatch = errors.New("metamorphic: the run differs from the reference model")

// Compare returns an error wrapping ErrMismatch that names the first
// difference between what the model expects and what the run left in each
// of tables, dead letters, outputs and side effects, or nil.
func Compare(c *Case, x *Expected, o *Observed) error {
	var diffs []string
	for _, f := range []func(*Case, *Expected, *Observed) error{compareTables, compareJoins, compareCrossReads, compareDLs, compareOutputs, compareTime, compareWindows} {
		if err := f(c, x, o); err != nil {
			diffs = append(diffs, err.Error())
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrMismatch, strings.Join(diffs, "\n  "))
}

func diff(format string, args ...any) error { return fmt.Errorf(format, args...) }

func compareTables(c *Case, x *Expected, o *Observed) error {
	for i, want := range x.Tables {
		got := o.Tables[i]
		for _, k := range sortedKeys(got, want) {
			g, gok := got[k]
			w, wok := want[k]
			switch {
			case !wok:
				return diff("table %s key %q: a row %s, want none", c.Tables[i], k, diffRows(g, Row{}))
			case !gok:
				return diff("table %s key %q: no row, want one (%s)", c.Tables[i], k, diffRows(Row{}, w))
			case !equalRows(g, w):
				return diff("table %s key %q: %s", c.Tables[i], k, diffRows(g, w))
			}
		}
	}
	return nil
}

func compareDLs(_ *Case, x *Expected, o *Observed) error {
	for _, ident := range sortedKeys(o.DLs, x.DLs) {
		got, w := o.DLs[ident], x.DLs[ident]
		switch {
		case w.Reason == 0:
			return diff("record %s: dead letter %s (%v), want none", ident, got[0].Reason, got[0].Err)
		case len(got) == 0:
			return diff("record %s: no dead letter, want one (%s)", ident, w.Reason)
		case len(got) > 1:
			return diff("record %s: %d dead letters, want one (%s)", ident, len(got), w.Reason)
		case got[0].Reason != w.Reason:
			return diff("record %s: dead letter %s (%v), want %s", ident, got[0].Reason, got[0].Err, w.Reason)
		case w.Err != "" && (got[0].Err == nil || !strings.Contains(got[0].Err.Error()+" ", w.Err)):
			return diff("record %s: dead letter %s with error %q, want its own error (%q)", ident, got[0].Reason, got[0].Err, w.Err)
		}
	}
	return nil
}

func compareOutputs(_ *Case, x *Expected, o *Observed) error {
	for _, node := range sortedKeys(o.Outputs, x.Outputs) {
		got, want := o.Outputs[node], x.Outputs[node]
		seen := map[int]int{}
		for _, e := range got {
			seen[e.ID]++
		}
		for _, e := range want {
			if seen[e.ID] != 1 {
				return diff("To of node %d: event #%d published %d times, want once", node, e.ID, seen[e.ID])
			}
			delete(seen, e.ID)
		}
		for _, id := range sortedKeys(seen, seen) {
			return diff("To of node %d: event #%d published %d times, want never", node, id, seen[id])
		}
		// Per origin key (one lane of one new key), publication order is
		// the true order.
		order := func(es []Ev) map[string][]int {
			m := map[string][]int{}
			for _, e := range es {
				m[e.K] = append(m[e.K], e.ID)
			}
			return m
		}
		g, w := order(got), order(want)
		for _, k := range sortedKeys(w, w) {
			if !slices.Equal(g[k], w[k]) {
				return diff("To of node %d: events of origin key %q published in the order %v, want %v", node, k, g[k], w[k])
			}
		}
	}
	for _, node := range sortedKeys(x.ForEach, x.ForEach) {
		for _, id := range x.ForEach[node] {
			if o.ForEach[node][id] == 0 {
				return diff("ForEach of node %d never saw event #%d (at least once)", node, id)
			}
		}
	}
	return nil
}

// Replay is the one line that replays the case of seed.
func Replay(seed uint64, knobs string) string {
	cmd := fmt.Sprintf("go test ./internal/metamorphic -run 'TestMeta$' -seed=%d", seed)
	if knobs != "" {
		cmd += " " + knobs
	}
	return cmd
}

// Report describes a failing case for a test's output: the seed, the first
// differences, the command that replays it and the case.
func Report(c *Case, err error, replay string) string {
	return fmt.Sprintf("seed %d: %v\nreplay: %s\n%s", c.Seed, err, replay, c)
}
