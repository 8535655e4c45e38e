package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// LookupSpec declares that the functions of one event type of a source
// (its projections, ForEach, To and KeyBy functions) read a table of the
// program with Lookup (docs/design.md §20).
type LookupSpec struct {
	// Tag is the event type whose functions read the table.
	Tag planner.Tag
	// Table is the table read; it must be a table of the program that
	// some projection writes.
	Table state.Attacher
}

// lookupRule is what a reading type may read of one table.
type lookupRule struct {
	// sameKey: the table is written by the reader's own source, so only
	// the run's own key may be read (other keys of the partition run
	// concurrently in the batch).
	sameKey bool
	// global: the table is fed by global sources alone: any key may be
	// read, from its own partition of the table, as last committed.
	global bool
}

// Errors of a Lookup. Each error a Lookup returns for a misuse wraps one
// of them and stream.Permanent: the record is dead-lettered, since trying
// it again cannot help.
var (
	// ErrLookupContext: Lookup was given a context that is not one a
	// handler of the topology got.
	ErrLookupContext = errors.New("strand: lookup outside a handler's context")
	// ErrLookupUndeclared: the event type did not declare the table it
	// reads (topology's Stream.Reads).
	ErrLookupUndeclared = errors.New("strand: lookup of a table the event type does not declare")
	// ErrLookupKey: the key is not one the lookup may read: another key
	// of a table its own source writes, or a key of another partition.
	ErrLookupKey = errors.New("strand: lookup of a key the handler may not read")
)

// lookupScope is what a Lookup needs of the run it is called from. One is
// made per key of a batch (the key's runs are sequential and share it).
type lookupScope struct {
	tx        *state.Txn
	partition uint32
	key       []byte
	src       *programSource
	tag       planner.Tag
}

type lookupCtxKey struct{}

// scopeLookups gives rc a context that carries its key's lookup scope, if
// the source's handlers read tables.
func (t *Task) scopeLookups(rc *runCtx) {
	if len(t.src.lookups) == 0 {
		return
	}
	rc.scope = &lookupScope{tx: rc.tx, partition: rc.partition, key: rc.key, src: t.src}
	rc.ctx = context.WithValue(rc.ctx, lookupCtxKey{}, rc.scope)
}

// Lookup returns the row of key k of table t as the run whose handler got
// ctx sees it (docs/design.md §20): the table as of the batch's writer
// turn, with the writes of the key's earlier runs in the batch. ok is
// false when the key has no row. A misuse (an undeclared table, a key the
// handler may not read, a context no handler got) is an error wrapping
// stream.Permanent and ErrLookupContext, ErrLookupUndeclared or
// ErrLookupKey.
func Lookup[K, V any](ctx context.Context, t *state.Table[K, V], k K) (V, bool, error) {
	var zero V
	if t == nil {
		return zero, false, stream.Permanent(fmt.Errorf("%w: nil table", ErrLookupUndeclared))
	}
	sc, _ := ctx.Value(lookupCtxKey{}).(*lookupScope)
	if sc == nil {
		return zero, false, stream.Permanent(fmt.Errorf("%w: table %q: use the context the fold, ForEach, To or KeyBy function was given, of a stream that declared the table with Reads",
			ErrLookupContext, t.Name()))
	}
	rule, ok := sc.src.lookups[sc.tag][t.Name()]
	if !ok {
		return zero, false, stream.Permanent(fmt.Errorf("%w: source %q, type tag %d reads table %q; declare it with Reads on the stream",
			ErrLookupUndeclared, sc.src.name, sc.tag, t.Name()))
	}
	var buf [64]byte
	kb, err := t.AppendKey(buf[:0], k)
	if err != nil {
		return zero, false, stream.Permanent(fmt.Errorf("%w: %w", ErrLookupKey, err))
	}
	if rule.global {
		// The key's partition first; the others on a miss, for a topic
		// partitioned otherwise (a foreign producer): cheap with Pebble's
		// bloom filters.
		n := max(t.Partitions(), 1)
		home := connector.PartitionOf(kb, n)
		for i := range n {
			v, found, err := t.PeekCommitted((home+i)%n, kb)
			if err != nil {
				return zero, false, fmt.Errorf("lookup in global table %q: %w", t.Name(), err)
			}
			if found {
				return v, true, nil
			}
		}
		return zero, false, nil
	}
	if !bytes.Equal(kb, sc.key) {
		if rule.sameKey {
			return zero, false, stream.Permanent(fmt.Errorf("%w: table %q is written by source %q itself, so its handlers may read only their own key's row (key %q), not %q: other keys of the batch run concurrently; feed the table from another input, or re-key with KeyBy",
				ErrLookupKey, t.Name(), sc.src.name, sc.key, kb))
		}
		if n := t.Partitions(); n == 0 || connector.PartitionOf(kb, n) != sc.partition {
			return zero, false, stream.Permanent(fmt.Errorf("%w: key %q of table %q is in partition %d, the handler runs on partition %d of source %q: a lookup reads the rows of its own partition only; re-key the stream with KeyBy so that the key it reads is its own",
				ErrLookupKey, kb, t.Name(), connector.PartitionOf(kb, max(n, 1)), sc.partition, sc.src.name))
		}
	}
	v, found, err := t.Peek(sc.tx, sc.partition, kb)
	if err != nil {
		return zero, false, fmt.Errorf("lookup in table %q: %w", t.Name(), err)
	}
	return v, found, nil
}

// compileLookups checks the lookups the sources declare and gives each
// programSource its rules. A table may be read:
//   - when another input writes it: any key of the reader's partition, as
//     that input committed it before the batch's writer turn;
//   - when the reader's own source writes it: only the reader's own key,
//     and only when no type that writes it may be reordered with the
//     reader's type (one of the two has a static fence other than
//     Relaxed), and not by the type that writes it;
//
// and it must be written by some projection. Anything else is refused.
func (c *compiler) compileLookups(spec Spec) {
	type writer struct {
		source string
		tag    planner.Tag
		global bool
	}
	writers := map[string][]writer{}
	for _, src := range spec.Sources {
		for _, h := range src.Handlers {
			if h == nil || h.decl() == nil {
				continue
			}
			hi := h.info()
			switch {
			case hi.kind == "project":
				writers[hi.table] = append(writers[hi.table], writer{src.Name, h.decl().Tag(), src.Global})
			case src.Global:
				c.fail("global source %q: %s: a global source is read by every instance, so its events may only be projected into global tables (a side effect or an output would happen once per instance)",
					src.Name, hi.describe())
			}
		}
		if src.Global && len(src.Lookups) > 0 {
			c.fail("global source %q reads tables with lookups; a global table is built from its topic alone", src.Name)
		}
	}
	isGlobal := map[string]bool{}
	for name, ws := range writers {
		global, local := false, false
		for _, w := range ws {
			global, local = global || w.global, local || !w.global
		}
		if global && local {
			c.fail("table %q is fed by global and non-global sources; a global table is fed by global sources alone", name)
		}
		isGlobal[name] = global && !local
	}
	for in, hs := range c.p.hooks {
		if isGlobal[in] {
			c.fail("join table %q: its side %q is a global table; joins of global tables are not built (look the global row up instead)", hs[0].derived, in)
		}
	}
	for in, hs := range c.p.hooks { // a join table is written by the runs that write its inputs
		for _, h := range hs {
			writers[h.derived] = append(writers[h.derived], writers[in]...)
		}
	}
	fenced := func(ps *programSource, tag planner.Tag) bool {
		rt := ps.routes[tag]
		return rt != nil && rt.fence != 0 && rt.fence != planner.Relaxed
	}
	for _, src := range spec.Sources {
		ps := c.p.sources[src.Name]
		if ps == nil || len(src.Lookups) == 0 {
			continue
		}
		for _, l := range src.Lookups {
			if l.Table == nil {
				c.fail("source %q: type tag %d reads a nil table", src.Name, l.Tag)
				continue
			}
			name := tableName(l.Table)
			where := fmt.Sprintf("source %q: type tag %d reads table %q", src.Name, l.Tag, name)
			if _, ok := c.tables[name]; !ok || len(writers[name]) == 0 {
				c.fail("%s, which no projection of the topology writes; lookups read tables the topology folds", where)
				continue
			}
			if ps.routes[l.Tag] == nil {
				c.fail("%s, but has no handler", where)
				continue
			}
			ws := writers[name]
			rule := lookupRule{global: isGlobal[name]}
			if rule.global {
				ws = nil // any key, as committed: no turn, no fence
			}
			for _, w := range ws {
				if w.source != src.Name {
					continue
				}
				rule.sameKey = true
				if w.tag == l.Tag {
					c.fail("%s and projects into it: a fold reads its own table's row through its value, not a lookup", where)
					continue
				}
				if !fenced(ps, l.Tag) && !fenced(ps, w.tag) {
					c.fail("%s, which type tag %d of the same source writes; both may be Relaxed, so their events of one key may be reordered and what the lookup sees would depend on the batching: give one of them a fence (stream.WithFence), or feed the table from another input",
						where, w.tag)
				}
			}
			if ps.lookups == nil {
				ps.lookups = map[planner.Tag]map[string]lookupRule{}
			}
			if ps.lookups[l.Tag] == nil {
				ps.lookups[l.Tag] = map[string]lookupRule{}
			}
			ps.lookups[l.Tag][name] = rule
		}
	}
}

// Lookups returns, for a source, the tables its handlers read, sorted.
func (p *Program) Lookups(source string) []string {
	ps := p.sources[source]
	if ps == nil {
		return nil
	}
	var out []string
	for _, m := range ps.lookups {
		for n := range m {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
