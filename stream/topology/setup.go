package topology

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

// streamCore is a Stream without its types: what the set-up methods
// (ForEach, Reads, Project, the checks) need of it. Their checks, messages
// and bookkeeping live on it, so they are compiled once instead of once
// for every key and event type a program uses (issue 33 item 7); the
// generic methods keep only the steps that need K and E.
type streamCore struct {
	t       *Topology
	idx     int
	hasDecl bool
	tag     planner.Tag // of the declaration, when hasDecl
	name    string
}

func (s *Stream[K, E]) core() streamCore {
	c := streamCore{t: s.src.t, idx: s.src.idx, hasDecl: s.decl != nil}
	if s.decl != nil {
		c.tag, c.name = s.decl.Tag(), s.decl.Name()
	}
	return c
}

func (c streamCore) node() *sourceNode { return &c.t.sources[c.idx] }

// check records an error for what and returns false when the stream has no
// declaration.
func (c streamCore) check(what string) bool {
	if !c.hasDecl {
		c.t.errs = append(c.t.errs, fmt.Errorf("source %q: %s for an undeclared type (nil declaration)", c.node().name, what))
		return false
	}
	return true
}

// forEach is ForEach: handler makes the handler with the options' batch
// size; it is nil when the function is.
func (c streamCore) forEach(name string, opts []ForEachOption, handler func(maxBatch int) executor.Handler) {
	if !c.check("ForEach " + fmt.Sprintf("%q", name)) {
		return
	}
	var o forEachOptions
	n := c.node()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			c.t.errs = append(c.t.errs, fmt.Errorf("source %q: type tag %d (%s): ForEach %q: %w",
				n.name, c.tag, c.name, name, err))
			return
		}
	}
	if handler == nil {
		c.t.errs = append(c.t.errs, fmt.Errorf("source %q: type tag %d (%s): ForEach %q has a nil function",
			n.name, c.tag, c.name, name))
		return
	}
	n.handlers = append(n.handlers, handler(o.maxBatch))
}

// project is Project: table is nil when the caller's table is, h is nil
// when the fold is; declErr and keys are the declaration's error and key
// codec.
func (c streamCore) project(table Readable, h executor.Handler, declErr error, keys any) {
	if !c.check("projection") {
		return
	}
	n := c.node()
	t := c.t
	where := fmt.Sprintf("source %q: type tag %d (%s)", n.name, c.tag, c.name)
	switch {
	case table == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: a projection without a table", where))
		return
	case h == nil:
		t.errs = append(t.errs, fmt.Errorf("%s: projection into table %q has a nil fold function", where, table.Name()))
		return
	}
	srcName := n.name
	n.checks = append(n.checks, func() error {
		tn := t.table(table.attacher())
		if tn == nil {
			return fmt.Errorf("%s: table %q was not made with topology.NewTable on this topology", where, table.Name())
		}
		if !slices.Contains(tn.sources, srcName) {
			tn.sources = append(tn.sources, srcName)
		}
		if tn.hasKeys && declErr == nil && !stream.SameKeyCodec(tn.keyCodec, keys) {
			return fmt.Errorf("%s: table %q encodes keys with %T, the events with %T; use one key codec",
				where, table.Name(), tn.keyCodec, keys)
		}
		return nil
	})
	n.handlers = append(n.handlers, h)
}

// reads is Reads.
func (c streamCore) reads(tables []Readable) {
	if !c.check("Reads") {
		return
	}
	n := c.node()
	t := c.t
	srcName := n.name
	where := fmt.Sprintf("source %q: type tag %d (%s): Reads", n.name, c.tag, c.name)
	for _, tab := range tables {
		if tab == nil || tab.attacher() == nil {
			t.errs = append(t.errs, fmt.Errorf("%s: a nil table", where))
			continue
		}
		a := tab.attacher()
		n.lookups = append(n.lookups, executor.LookupSpec{Tag: c.tag, Table: a})
		n.checks = append(n.checks, func() error {
			tn := t.table(a)
			if tn == nil {
				return fmt.Errorf("%s: table %q was not made with topology.NewTable on this topology", where, tab.Name())
			}
			if !slices.Contains(tn.readers, srcName) {
				tn.readers = append(tn.readers, srcName)
			}
			return nil
		})
	}
}

// tableOptionsOf applies opts (NewTable's).
func tableOptionsOf(opts []TableOption) tableOptions {
	var o tableOptions
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}

func tableKeysErr(name string, keys any, keyType reflect.Type) error {
	return fmt.Errorf("table %q: TableKeys codec %T does not encode key type %s", name, keys, keyType)
}

func tableErr(name string, err error) error { return fmt.Errorf("table %q: %w", name, err) }

// addTable is the untyped rest of NewTable: tn holds the typed parts (the
// codecs, the table, its delete); addTable names it and adds it.
func (t *Topology) addTable(name string, keyType, valueType reflect.Type, o *tableOptions, tn tableNode) {
	tn.name = name
	tn.typ = fmt.Sprintf("%s→%s", keyType, valueType)
	tn.ttl, tn.optErrs = o.ttl, o.errs
	t.tables = append(t.tables, tn)
}

// toCheck is To's checks: it records what is wrong and returns the
// source's node and true when nothing is.
func (c streamCore) toCheck(name, topic string, fnNil, outNil bool, outErr error) (*sourceNode, bool) {
	if !c.check(fmt.Sprintf("To %q", name)) {
		return nil, false
	}
	n := c.node()
	t := c.t
	where := fmt.Sprintf("source %q: type tag %d (%s): To %q", n.name, c.tag, c.name, name)
	switch {
	case fnNil:
		t.errs = append(t.errs, fmt.Errorf("%s has a nil function", where))
		return nil, false
	case outNil:
		t.errs = append(t.errs, fmt.Errorf("%s has a nil output declaration", where))
		return nil, false
	case outErr != nil:
		t.errs = append(t.errs, fmt.Errorf("%s: output declaration: %w", where, outErr))
		return nil, false
	case topic == "":
		t.errs = append(t.errs, fmt.Errorf("%s has no topic", where))
		return nil, false
	}
	return n, true
}
