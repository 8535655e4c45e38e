package executor

import (
	"fmt"
	"slices"

	"github.com/strand-io/strand/internal/state"
)

// WriteHook keeps a derived table (a table-table join, docs/design.md §20)
// up to date with one of its input tables. It is called inside the run
// whose projection folded input's new value v (a value of the input's
// value type) for key, after the fold and before anything is written, and
// returns the write of the derived row, which the projection makes only
// once its own write is made (so a failed fold or hook leaves no trace).
// It runs on the key's goroutine and may read the key's rows of other
// tables of the Txn (state.Table.Peek).
type WriteHook func(tx *state.Txn, partition uint32, key []byte, v any) (write func(), err error)

// HookSpec attaches a WriteHook to the projections into one input table.
type HookSpec struct {
	// Input is the table whose projected writes call Hook.
	Input state.Attacher
	// Derived is the table Hook writes; nothing else may write it.
	Derived state.Attacher
	// Hook computes the derived row.
	Hook WriteHook
}

// hook is a compiled HookSpec.
type hook struct {
	derived string
	fn      WriteHook
}

// compileHooks checks the program's hooks and files them by input table:
// a derived table is written by its hooks only (no projection, no other
// join's hooks), is not itself an input of a hook (joins of joins are not
// kept), and no event type projects into two inputs of one derived table
// (one run would see the other input before its fold).
func (c *compiler) compileHooks(spec Spec) {
	if len(spec.Hooks) == 0 {
		return
	}
	projected := map[string][]string{} // table → "source/tag" of its projections
	for _, src := range spec.Sources {
		for _, h := range src.Handlers {
			if h == nil || h.decl() == nil {
				continue
			}
			if hi := h.info(); hi.kind == "project" {
				projected[hi.table] = append(projected[hi.table], fmt.Sprintf("%s/%d", src.Name, h.decl().Tag()))
			}
		}
	}
	c.p.hooks = map[string][]hook{}
	inputsOf := map[string][]string{}
	for _, hs := range spec.Hooks {
		if hs.Input == nil || hs.Derived == nil || hs.Hook == nil {
			c.fail("a join with a nil table or function")
			continue
		}
		in, der := tableName(hs.Input), tableName(hs.Derived)
		if _, ok := c.tables[in]; !ok {
			c.fail("join table %q: its input %q is not a table of the topology", der, in)
			continue
		}
		c.addTable(der, fmt.Sprintf("%T", hs.Derived), hs.Derived)
		c.p.hooks[in] = append(c.p.hooks[in], hook{derived: der, fn: hs.Hook})
		inputsOf[der] = append(inputsOf[der], in)
	}
	for der, ins := range inputsOf {
		if len(projected[der]) > 0 {
			c.fail("join table %q is also projected into (by %v); a join table is written by its join alone", der, projected[der])
		}
		if _, ok := c.p.hooks[der]; ok {
			c.fail("join table %q is an input of another join; joins of joins are not kept, join the tables it is made of", der)
		}
		if len(ins) == 2 {
			for _, w := range projected[ins[0]] {
				if slices.Contains(projected[ins[1]], w) {
					c.fail("join table %q: type %s projects into both %q and %q; a run would fold one before it sees the other: feed them from different event types",
						der, w, ins[0], ins[1])
				}
			}
		}
		if len(projected[ins[0]]) == 0 && (len(ins) < 2 || len(projected[ins[1]]) == 0) {
			c.fail("join table %q: nothing projects into its inputs %q", der, ins)
		}
		c.fp.add("join", der, fmt.Sprint(ins))
	}
}

// runHooks calls the hooks of the table a projection just folded v into
// and returns their writes, to make once the projection's own write is
// made.
func runHooks(rc *runCtx, table string, v any) ([]func(), error) {
	hs := rc.b.t.prog.hooks[table]
	if len(hs) == 0 {
		return nil, nil
	}
	writes := make([]func(), 0, len(hs))
	for _, h := range hs {
		w, err := callHook(h, rc, v)
		if err != nil {
			return nil, fmt.Errorf("join table %q: %w", h.derived, err)
		}
		writes = append(writes, w)
	}
	return writes, nil
}

// callHook calls a hook and turns a panic of the join function into an
// error of the run.
func callHook(h hook, rc *runCtx, v any) (w func(), err error) {
	defer func() {
		if p := recover(); p != nil {
			w, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return h.fn(rc.tx, rc.partition, rc.key, v)
}
