package executor

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
)

// A program's description is the text of its fingerprint's lines (one line
// per part of the topology that gives the stored state its meaning: the
// name, each source with its key type, re-sequencing and foreign
// classification, each event type with its fence and algebra, each
// projection, each To and KeyBy step, each table with its Go type, codecs
// and version). The store keeps it beside the fingerprint; when a start is
// refused, the two descriptions are compared and every difference is
// listed with what it means for the stored rows (docs/design.md §19).

// The change types are defined once, in package stream (docs/design.md
// §1, "Types users meet are defined once"); the executor names them here.
type (
	// ChangeKind is stream.ChangeKind.
	ChangeKind = stream.ChangeKind
	// Safety is stream.Safety.
	Safety = stream.Safety
	// Change is stream.Change.
	Change = stream.Change
	// TopologyChangedError is stream.TopologyChangedError.
	TopologyChangedError = stream.TopologyChangedError
)

// The kinds of change and the safeties (stream's).
const (
	ChangeAdded    = stream.ChangeAdded
	ChangeRemoved  = stream.ChangeRemoved
	ChangeModified = stream.ChangeModified
	Safe           = stream.Safe
	NeedsRebuild   = stream.NeedsRebuild
)

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Description returns the program's readable description: one line per
// part of the topology that gives its stored state a meaning (see
// describe.go). Stores keep it; DiffDescriptions compares two.
func (p *Program) Description() string { return p.description }

func (p *Program) changedError(ie *state.IncompatibleError) error {
	e := &TopologyChangedError{Dir: ie.Dir, Topology: p.name, Stored: ie.Stored, Now: ie.Now,
		Described: ie.StoredDescription != ""}
	if e.Described {
		e.Changes = DiffDescriptions(ie.StoredDescription, p.description)
	}
	return e
}

// describeTable adds the description lines of table name that the legacy
// fingerprint lacks: its codecs.
func (c *compiler) describeTable(name string) {
	i := slices.Index(c.p.tableNames, name)
	if i < 0 {
		return
	}
	if cd, ok := c.p.tables[i].(interface{ CodecTypes() (string, string) }); ok {
		k, v := cd.CodecTypes()
		c.fp.addNew("codec", name, k, v)
	}
	if vd, ok := c.p.tables[i].(interface{ Version() uint32 }); ok && vd.Version() > 0 {
		c.fp.addNew("version", name, strconv.FormatUint(uint64(vd.Version()), 10))
	}
}

// desc is a parsed description.
type desc struct {
	name    string
	sources map[string]*descSource
	tables  map[string]*descTable
}

type descSource struct {
	key, reseq, foreign string
	sequenced           []string
	types               map[string]string   // tag -> event type, fence, algebra
	projects            map[string][]string // tag -> tables
	emits               map[string]string   // step -> tag, destination, mode
}

type descTable struct{ typ, codecs, version string }

// parseDescription reads a description's lines; lines it does not know
// are ignored (a newer strand's lines compare as absent).
func parseDescription(text string) *desc {
	d := &desc{sources: map[string]*descSource{}, tables: map[string]*descTable{}}
	var cur *descSource
	for _, line := range strings.Split(text, "\n") {
		parts := splitLine(line)
		if len(parts) == 0 {
			continue
		}
		arg := func(i int) string {
			if i < len(parts) {
				return parts[i]
			}
			return ""
		}
		table := func(n string) *descTable {
			t := d.tables[n]
			if t == nil {
				t = &descTable{}
				d.tables[n] = t
			}
			return t
		}
		switch parts[0] {
		case "strand-topology-v1":
			d.name = arg(1)
		case "source":
			cur = &descSource{key: arg(2), types: map[string]string{}, projects: map[string][]string{}, emits: map[string]string{}}
			d.sources[arg(1)] = cur
		case "resequence":
			if s := d.sources[arg(1)]; s != nil {
				s.reseq = arg(2)
			}
		case "foreign":
			if s := d.sources[arg(1)]; s != nil {
				s.foreign = arg(2)
			}
		case "sequenced":
			if cur != nil {
				cur.sequenced = append(cur.sequenced, arg(1))
			}
		case "type":
			if cur != nil {
				cur.types[arg(1)] = strings.Join(parts[2:], " ")
			}
		case "project":
			if cur != nil {
				cur.projects[arg(1)] = append(cur.projects[arg(1)], arg(2))
			}
		case "emit":
			if cur != nil {
				cur.emits[arg(2)] = fmt.Sprintf("type tag %s to %q (%s)", arg(1), arg(3), arg(4))
			}
		case "table":
			cur = nil
			table(arg(1)).typ = prettyType(arg(2))
		case "codec":
			table(arg(1)).codecs = fmt.Sprintf("keys %s, values %s", prettyType(arg(2)), prettyType(arg(3)))
		case "version":
			table(arg(1)).version = arg(2)
		}
	}
	return d
}

// splitLine splits one fingerprint line ("3:abc;2:de;") into its parts;
// a malformed line gives nil.
func splitLine(line string) []string {
	var parts []string
	for line != "" {
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return nil
		}
		n, err := strconv.Atoi(line[:colon])
		end := colon + 1 + n
		if err != nil || n < 0 || end >= len(line) || line[end] != ';' {
			return nil
		}
		parts = append(parts, line[colon+1:end])
		line = line[end+1:]
	}
	return parts
}

// tablesOf returns the tables source s projects into (tag "" : all types).
func (s *descSource) tablesOf(tag string) []string {
	var out []string
	for t, tabs := range s.projects {
		if tag != "" && t != tag {
			continue
		}
		for _, n := range tabs {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// DiffDescriptions lists the differences between the description a store
// keeps (old) and the one of the topology being started (now), each with
// what it means for the stored rows. Equal descriptions give none.
func DiffDescriptions(old, now string) []Change {
	o, n := parseDescription(old), parseDescription(now)
	var out []Change
	// existing keeps the tables of both topologies: only their rows can
	// need a rebuild (a new table is built anyway, a removed one dropped).
	existing := func(tabs []string) []string {
		var keep []string
		for _, t := range tabs {
			if o.tables[t] != nil && n.tables[t] != nil {
				keep = append(keep, t)
			}
		}
		return keep
	}
	add := func(c Change) {
		if c.Safety == NeedsRebuild {
			c.Rebuild = existing(c.Rebuild)
			if len(c.Rebuild) == 0 {
				c.Safety, c.Rebuild = Safe, nil
				c.Why = "it only concerns tables that are new or removed"
			}
		}
		out = append(out, c)
	}
	if o.name != n.name {
		add(Change{Kind: ChangeModified, Subject: "topology name", Was: strconv.Quote(o.name), Now: strconv.Quote(n.name), Safety: Safe,
			Why: "the name is part of the origin of published messages: readers take later messages as a new origin"})
	}
	for _, name := range unionKeys(o.tables, n.tables) {
		ot, nt := o.tables[name], n.tables[name]
		subj := fmt.Sprintf("table %q", name)
		switch {
		case ot == nil:
			add(Change{Kind: ChangeAdded, Subject: subj, Now: nt.typ, Safety: Safe, Why: "a new table, built from the log"})
		case nt == nil:
			add(Change{Kind: ChangeRemoved, Subject: subj, Was: ot.typ, Safety: Safe, Why: "its rows are no longer read; a reset drops them"})
		default:
			if ot.typ != nt.typ {
				add(Change{Kind: ChangeModified, Subject: subj + " type", Was: ot.typ, Now: nt.typ, Safety: NeedsRebuild,
					Rebuild: []string{name}, Why: "its rows were written as the old type"})
			}
			if ot.codecs != nt.codecs && ot.codecs != "" && nt.codecs != "" {
				add(Change{Kind: ChangeModified, Subject: subj + " codecs", Was: ot.codecs, Now: nt.codecs, Safety: NeedsRebuild,
					Rebuild: []string{name}, Why: "its rows were encoded by the old codecs"})
			}
			if ot.version != nt.version {
				add(Change{Kind: ChangeModified, Subject: subj + " version", Was: orNone(ot.version), Now: orNone(nt.version),
					Safety: NeedsRebuild, Rebuild: []string{name}, Why: "a new version declares that its fold or values changed"})
			}
		}
	}
	for _, name := range unionKeys(o.sources, n.sources) {
		os, ns := o.sources[name], n.sources[name]
		subj := fmt.Sprintf("source %q", name)
		switch {
		case os == nil:
			add(Change{Kind: ChangeAdded, Subject: subj, Now: "key " + ns.key, Safety: Safe,
				Why: "a new input, read from its oldest retained record; the tables it projects into are listed below"})
			diffSource(name, &descSource{types: map[string]string{}, projects: map[string][]string{}, emits: map[string]string{}}, ns, add)
			continue
		case ns == nil:
			add(Change{Kind: ChangeRemoved, Subject: subj, Was: "key " + os.key, Safety: NeedsRebuild, Rebuild: os.tablesOf(""),
				Why: "the tables it projected into hold its events"})
			continue
		}
		all := ns.tablesOf("")
		if os.key != ns.key {
			add(Change{Kind: ChangeModified, Subject: subj + " key type", Was: os.key, Now: ns.key, Safety: NeedsRebuild, Rebuild: all,
				Why: "rows are keyed by the old key type"})
		}
		if os.foreign != ns.foreign {
			add(Change{Kind: ChangeModified, Subject: subj + " foreign classification", Was: orNone(os.foreign), Now: orNone(ns.foreign),
				Safety: NeedsRebuild, Rebuild: all, Why: "its records are read differently"})
		}
		if os.reseq != ns.reseq || !slices.Equal(os.sequenced, ns.sequenced) {
			add(Change{Kind: ChangeModified, Subject: subj + " re-sequencing", Was: reseqDesc(os), Now: reseqDesc(ns),
				Safety: NeedsRebuild, Rebuild: all, Why: "the order its events are applied in changed"})
		}
		diffSource(name, os, ns, add)
	}
	return out
}

// diffSource lists the changes of one source's event types, projections
// and steps.
func diffSource(name string, os, ns *descSource, add func(Change)) {
	for _, tag := range unionKeys(os.types, ns.types) {
		ot, nt := os.types[tag], ns.types[tag]
		if ot != "" && nt != "" && ot != nt {
			add(Change{Kind: ChangeModified, Subject: fmt.Sprintf("event type tag %s on source %q", tag, name), Was: ot, Now: nt,
				Safety: NeedsRebuild, Rebuild: ns.tablesOf(tag), Why: "its events are decoded, ordered or reduced differently"})
		}
	}
	for _, tag := range unionKeys(os.projects, ns.projects) {
		for _, table := range union(os.projects[tag], ns.projects[tag]) {
			was, now := slices.Contains(os.projects[tag], table), slices.Contains(ns.projects[tag], table)
			subj := fmt.Sprintf("projection of type tag %s on source %q into table %q", tag, name, table)
			switch {
			case now && !was:
				add(Change{Kind: ChangeAdded, Subject: subj, Safety: NeedsRebuild, Rebuild: []string{table},
					Why: "the table lacks the events of that type read before"})
			case was && !now:
				add(Change{Kind: ChangeRemoved, Subject: subj, Safety: NeedsRebuild, Rebuild: []string{table},
					Why: "the table holds events this topology no longer folds into it"})
			}
		}
	}
	for _, step := range unionKeys(os.emits, ns.emits) {
		oe, ne := os.emits[step], ns.emits[step]
		subj := fmt.Sprintf("step %q on source %q", step, name)
		switch {
		case oe == "":
			add(Change{Kind: ChangeAdded, Subject: subj, Now: ne, Safety: Safe,
				Why: "it publishes for the events read from now on (a reset does not publish the history again)"})
		case ne == "":
			add(Change{Kind: ChangeRemoved, Subject: subj, Was: oe, Safety: Safe,
				Why: "it publishes nothing more; what it wrote to the outbox before is still published"})
		case oe != ne:
			add(Change{Kind: ChangeModified, Subject: subj, Was: oe, Now: ne, Safety: Safe,
				Why: "it publishes the new way for the events read from now on"})
		}
	}
}

// pkgPath matches the import path before a package name in a Go type's
// name ("github.com/strand-io/strand/stream/").
var pkgPath = regexp.MustCompile(`[\w.\-]+(/[\w.\-]+)*/`)

// prettyType shortens a Go type's name for a person: package paths go, and
// a table's type *state.Table[K,V] reads K→V.
func prettyType(t string) string {
	t = pkgPath.ReplaceAllString(t, "")
	if in, ok := strings.CutPrefix(t, "*state.Table["); ok && strings.HasSuffix(in, "]") {
		in = in[:len(in)-1]
		depth := 0
		for i, r := range in {
			switch r {
			case '[':
				depth++
			case ']':
				depth--
			case ',':
				if depth == 0 {
					return in[:i] + "→" + in[i+1:]
				}
			}
		}
	}
	return t
}

func reseqDesc(s *descSource) string {
	if s.reseq == "" {
		return "off"
	}
	return fmt.Sprintf("start %s, sequenced tags %s", s.reseq, strings.Join(s.sequenced, ","))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func unionKeys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
