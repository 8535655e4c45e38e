// Command restyle brings strand's public surface to one style (issue 33,
// item 3). It is idempotent and re-runnable on any tree, also one that does
// not build because a merged branch still uses the old style:
//
//	go run ./.ci/restyle            # rewrite the tree in place
//	go run ./.ci/restyle -n         # list what would change, write nothing
//	go run ./.ci/restyle -steps=options   # one step: options or errors
//
// It lives under .ci, which `go test ./...` and `go vet ./...` do not enter.
// Run it from the repository root; it needs only the Go toolchain.
//
// What it does, in every package of the module (test files included):
//
//  1. Option types. An exported type of a public package (no "internal"
//     path element) named Option or …Option whose definition is a function
//     of one pointer (`type OpenOption func(*openOptions) error`) becomes an
//     opaque interface with one unexported method, apply, and an unexported
//     adapter type (openOptionFunc) implements it:
//
//     type OpenOption interface{ apply(*openOptions) error }
//     type openOptionFunc func(*openOptions) error
//     func (f openOptionFunc) apply(o *openOptions) error { return f(o) }
//
//     A function literal given where such an option is expected (returned
//     from a function whose result is the option, passed as an argument
//     of option type, put in a []Option literal, appended, assigned) is
//     wrapped in the adapter; a call of an option value (`o(&cfg)`) becomes
//     `o.apply(&cfg)`; a conversion `OpenOption(func…)` uses the adapter.
//
//  2. Renames. Option constructors get With… names (the table renames
//     below, and "With" in front of any other exported function of a
//     public package whose one result is an option type): every use
//     across the module, resolved or not (a merged
//     branch calling topology.MaxBatch is rewritten too), qualified
//     mentions in comments, string literals and Markdown files
//     (topology.MaxBatch → topology.WithMaxBatch), and unqualified mentions
//     in the comments of the defining package for names flagged distinctive.
//
//  3. Error prefixes. A string literal that is the format of fmt.Errorf or
//     the text of errors.New and starts with a component prefix ("state: ",
//     "iggy: ", "topology.WithRetry: ", …; see errorPrefix) is rewritten to
//     start with "strand: " once: docs/design.md §1 ("Errors").
//
// What it cannot do is listed in the report of the style branch: edits
// that need judgement (aliases of mirrored types, the glossary's renames)
// are made by hand once.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// rename is one constructor renamed to its With… name.
type rename struct {
	pkg      string // package path relative to the module ("stream/topology")
	old, new string
	// bare: the old name is distinctive enough to be rewritten where the
	// defining package's comments mention it unqualified.
	bare bool
}

var renames = []rename{
	{"stream", "Fence", "WithFence", false},
	{"stream", "FenceBy", "WithFenceBy", false},
	{"stream", "Reduce", "WithReduce", false},
	{"stream", "Payload", "WithPayload", false},
	{"stream", "KeyCodec", "WithKeyCodec", false},
	{"stream", "Sequence", "WithSequence", false},
	{"stream/connector/memconn", "WithManualRelease", "WithManualDelivery", true},
	{"stream/topology", "MaxBatch", "WithMaxBatch", true},
	{"stream/topology", "TableKeys", "WithTableKeys", true},
	{"stream/topology", "ForeignKeys", "WithForeignKeys", true},
	{"stream/topology", "KeyByTopic", "WithKeyByTopic", true},
	{"stream/topology", "KeyByKeys", "WithKeyByKeys", true},
	{"stream/topology", "SeqStart", "WithSeqStart", false},
	{"stream/topology", "GapPolicy", "WithGapPolicy", false},
	{"stream/topology", "HoldLimits", "WithHoldLimits", true},
	{"stream/topology", "OnDuplicate", "WithDuplicatePolicy", true},
	{"stream/topology", "OnGapNotice", "WithGapNotice", true},
	{"connectors/iggy", "TLSServerName", "WithTLSServerName", true},
	{"connectors/iggy", "TLSCAFile", "WithTLSCAFile", true},
	{"connectors/iggy", "TLSInsecureSkipVerify", "WithTLSInsecureSkipVerify", true},
	{"stream/topology/queryserver", "AllowNonLoopback", "WithNonLoopback", true},
	{"stream/topology/queryserver", "KeyParser", "WithKeyParser", true},
	{"stream/topology/queryserver", "KeyFormatter", "WithKeyFormatter", true},
	{"stream/topology/queryserver", "Table", "WithTable", false},
	{"stream/topology/topologytest", "Dir", "WithDir", false},
	{"stream/topology/topologytest", "Partitions", "WithPartitions", false},
	{"stream/topology/topologytest", "BatchSize", "WithBatchSize", false},
	{"stream/topology/topologytest", "BatchSizes", "WithBatchSizes", false},
	{"stream/topology/topologytest", "Logger", "WithLogger", false},
	{"stream/topology/topologytest", "OpenOptions", "WithOpenOptions", true},
	// The glossary's renames (docs/design.md §1): package-level names
	// other than option constructors.
	{"stream", "HoldPoisonedKey", "BlockPoisonedKey", true},
	{"stream/connector", "Released", "HandedBack", false},
	{"connectors/iggy", "Released", "HandedBack", false},
	{"internal/scaleout/membership", "KindRelease", "KindHandBack", true},
}

// methodRename is one method renamed by the glossary (docs/design.md §1):
// calls on a value of the type (resolved by go/types, also when the old
// name no longer resolves), the method's declaration (and its doc
// comment's first word), an interface's method, and mentions "Type.Old"
// in comments, string literals and Markdown.
type methodRename struct {
	pkg, typ, old, new string
}

var methodRenames = []methodRename{
	{"stream/topology", "App", "Release", "Unblock"},
	{"stream/connector", "Membership", "Release", "HandBack"},
	{"connectors/iggy", "Membership", "Release", "HandBack"},
	{"internal/pipeline", "Processor", "Release", "Unblock"},
	{"internal/executor", "Task", "Release", "Unblock"},
}

// methodRenameOf returns the rename of method name called on a value of
// type t, if any.
func (e *editor) methodRenameOf(t types.Type, name string) (methodRename, bool) {
	if t == nil {
		return methodRename{}, false
	}
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	n, ok := t.(*types.Named)
	if !ok || n.Origin().Obj().Pkg() == nil {
		return methodRename{}, false
	}
	o := n.Origin().Obj()
	for _, m := range methodRenames {
		if e.w.module+"/"+m.pkg == o.Pkg().Path() && m.typ == o.Name() && m.old == name {
			return m, true
		}
	}
	return methodRename{}, false
}

// errorPrefix matches the component prefix of an error text: a lower-case
// word ("state: ", "iggy: ") or a qualified option or function name
// ("topology.WithRetry: ", "queryserver.Table: ", "topology.GapPolicy(…): ").
var errorPrefix = regexp.MustCompile(`^(?:(state|stream|topology|iggy|iggytest|queryserver|topologytest|memconn|connector|connectortest|crashtest|deadletter|scaleout|resequence|telemetry|router|rebalance|membership|changelog|engine|inspect|reset|live|rows)|strand): `)

// errorPrefixPackages are the packages whose errors reach users and so get
// the one prefix; benchmarks, examples and commands keep their own.
var errorPrefixPackages = regexp.MustCompile(`^(stream|connectors|internal|planner|algebra)(/|$)`)

var steps string

func step(s string) bool { return strings.Contains(","+steps+",", ","+s+",") }

func main() {
	dry := flag.Bool("n", false, "list the files that would change and write nothing")
	flag.StringVar(&steps, "steps", "options,errors", "the steps to run, comma-separated: options (types and renames), errors (prefixes)")
	flag.Parse()
	if err := run(*dry, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "restyle:", err)
		os.Exit(1)
	}
}

type listPkg struct {
	ImportPath   string
	Name         string
	Dir          string
	Standard     bool
	ForTest      string
	Export       string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
	Module       *struct {
		Path string
		Main bool
	}
}

func goList(args ...string) ([]listPkg, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []listPkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// world is the module's packages, type-checked from source with errors
// tolerated, over the export data of everything else.
type world struct {
	module string
	root   string
	fset   *token.FileSet
	own    map[string]*listPkg // by import path
	files  map[string]*ast.File
	export map[string]string
	gc     types.ImporterFrom
	base   map[string]*types.Package
	busy   map[string]bool
	// variants: every checked variant of every package, for the rewrite.
	variants []*variant
	// options: the option types, by "path.Name".
	options map[string]*optionType
}

type variant struct {
	pkg   *listPkg
	files []*ast.File
	info  *types.Info
	tpkg  *types.Package
}

// optionType is one option type of a public package.
type optionType struct {
	pkg, name, adapter string
}

func run(dry bool, out io.Writer) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	modOut, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return fmt.Errorf("go list -m (run restyle from the module root): %w", err)
	}
	w := &world{
		module: strings.TrimSpace(string(modOut)), root: root, fset: token.NewFileSet(),
		own: map[string]*listPkg{}, files: map[string]*ast.File{}, export: map[string]string{},
		base: map[string]*types.Package{}, busy: map[string]bool{}, options: map[string]*optionType{},
	}
	all, err := goList("-deps", "-test", "./...")
	if err != nil {
		return err
	}
	var ext []string
	for i := range all {
		p := &all[i]
		if p.ForTest != "" || strings.Contains(p.ImportPath, " ") || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		if p.Module != nil && p.Module.Main {
			w.own[p.ImportPath] = p
			continue
		}
		ext = append(ext, p.ImportPath)
	}
	if len(ext) > 0 {
		exp, err := goList(append([]string{"-export"}, ext...)...)
		if err != nil {
			return err
		}
		for _, p := range exp {
			w.export[p.ImportPath] = p.Export
		}
	}
	w.gc = importer.ForCompiler(w.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := w.export[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}).(types.ImporterFrom)

	// Parse every file once; find the option types syntactically.
	paths := make([]string, 0, len(w.own))
	for p := range w.own {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		lp := w.own[p]
		for _, names := range [][]string{lp.GoFiles, lp.TestGoFiles, lp.XTestGoFiles} {
			for _, n := range names {
				fn := filepath.Join(lp.Dir, n)
				f, err := parser.ParseFile(w.fset, fn, nil, parser.ParseComments|parser.SkipObjectResolution)
				if err != nil {
					return err
				}
				w.files[fn] = f
			}
		}
		w.findOptions(lp)
	}
	for _, p := range paths {
		w.checkBase(p)
	}
	for _, p := range paths {
		w.checkTests(p)
	}

	ed := &editor{w: w, edits: map[string][]edit{}}
	for _, v := range w.variants {
		if step("options") {
			ed.options(v)
			ed.renames(v)
		}
		if step("errors") {
			ed.errorPrefixes(v)
		}
	}
	changed, err := ed.apply(dry)
	if err != nil {
		return err
	}
	if step("options") {
		md, err := w.markdown(dry)
		if err != nil {
			return err
		}
		changed = append(changed, md...)
	}
	sort.Strings(changed)
	for _, f := range changed {
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintln(out, rel)
	}
	return nil
}

func (w *world) rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, w.module), "/")
}

func public(rel string) bool {
	for _, el := range strings.Split(rel, "/") {
		if el == "internal" {
			return false
		}
	}
	return !strings.HasPrefix(rel, "benchmarks") && !strings.HasPrefix(rel, "examples") && !strings.HasPrefix(rel, "cmd")
}

// findOptions records the option types of lp, converted or not.
func (w *world) findOptions(lp *listPkg) {
	if !public(w.rel(lp.ImportPath)) {
		return
	}
	for _, n := range lp.GoFiles {
		f := w.files[filepath.Join(lp.Dir, n)]
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !isOptionName(ts.Name.Name) {
					continue
				}
				if optionFunc(ts.Type) != nil || optionIface(ts.Type) {
					w.options[lp.ImportPath+"."+ts.Name.Name] = &optionType{
						pkg: lp.ImportPath, name: ts.Name.Name, adapter: adapterName(ts.Name.Name),
					}
				}
			}
		}
	}
	// A constructor of one of them (an exported function whose one result
	// is the option) not named With… yet gets "With" in front, unless the
	// table names it already.
	rel := w.rel(lp.ImportPath)
	known := map[string]bool{}
	for _, r := range renames {
		if r.pkg == rel {
			known[r.old], known[r.new] = true, true
		}
	}
	for _, n := range lp.GoFiles {
		for _, d := range w.files[filepath.Join(lp.Dir, n)].Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || strings.HasPrefix(fd.Name.Name, "With") || known[fd.Name.Name] {
				continue
			}
			res := fd.Type.Results
			if res == nil || len(res.List) != 1 || len(res.List[0].Names) > 1 {
				continue
			}
			t := res.List[0].Type
			switch x := t.(type) {
			case *ast.IndexExpr:
				t = x.X
			case *ast.IndexListExpr:
				t = x.X
			}
			if id, ok := t.(*ast.Ident); ok && w.options[lp.ImportPath+"."+id.Name] != nil {
				renames = append(renames, rename{rel, fd.Name.Name, "With" + fd.Name.Name, false})
			}
		}
	}
}

func isOptionName(n string) bool {
	return ast.IsExported(n) && strings.HasSuffix(n, "Option")
}

func adapterName(n string) string { return strings.ToLower(n[:1]) + n[1:] + "Func" }

// optionFunc returns the function type of an unconverted option type.
func optionFunc(e ast.Expr) *ast.FuncType {
	ft, ok := e.(*ast.FuncType)
	if !ok || ft.Params == nil || len(ft.Params.List) != 1 || len(ft.Params.List[0].Names) > 1 {
		return nil
	}
	if _, ok := ft.Params.List[0].Type.(*ast.StarExpr); !ok {
		return nil
	}
	if ft.Results != nil && len(ft.Results.List) > 0 {
		if len(ft.Results.List) != 1 || len(ft.Results.List[0].Names) > 0 {
			return nil
		}
		if id, ok := ft.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "error" {
			return nil
		}
	}
	return ft
}

func optionIface(e ast.Expr) bool {
	it, ok := e.(*ast.InterfaceType)
	return ok && len(it.Methods.List) == 1 && len(it.Methods.List[0].Names) == 1 && it.Methods.List[0].Names[0].Name == "apply"
}

func (w *world) conf() *types.Config {
	return &types.Config{Importer: w, Error: func(error) {}}
}

// Import implements types.Importer.
func (w *world) Import(path string) (*types.Package, error) { return w.ImportFrom(path, "", 0) }

// ImportFrom implements types.ImporterFrom: the module's packages from
// source, everything else from export data.
func (w *world) ImportFrom(path, dir string, mode types.ImportMode) (*types.Package, error) {
	if _, ok := w.own[path]; ok {
		return w.checkBase(path), nil
	}
	return w.gc.ImportFrom(path, dir, mode)
}

func (w *world) filesOf(lp *listPkg, names ...[]string) []*ast.File {
	var fs []*ast.File
	for _, ns := range names {
		for _, n := range ns {
			fs = append(fs, w.files[filepath.Join(lp.Dir, n)])
		}
	}
	return fs
}

func newInfo() *types.Info {
	return &types.Info{
		Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
		Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
}

func (w *world) checkBase(path string) *types.Package {
	if p, ok := w.base[path]; ok {
		return p
	}
	if w.busy[path] {
		return types.NewPackage(path, "cycle")
	}
	w.busy[path] = true
	lp := w.own[path]
	files := w.filesOf(lp, lp.GoFiles)
	info := newInfo()
	p, _ := w.conf().Check(path, w.fset, files, info)
	w.base[path] = p
	if len(lp.TestGoFiles) == 0 {
		// Without in-package tests the base variant is the one rewritten.
		w.variants = append(w.variants, &variant{pkg: lp, files: files, info: info, tpkg: p})
	}
	return p
}

func (w *world) checkTests(path string) {
	lp := w.own[path]
	tp := w.base[path]
	if len(lp.TestGoFiles) > 0 {
		files := w.filesOf(lp, lp.GoFiles, lp.TestGoFiles)
		info := newInfo()
		tp, _ = w.conf().Check(path, w.fset, files, info)
		w.variants = append(w.variants, &variant{pkg: lp, files: files, info: info, tpkg: tp})
	}
	if len(lp.XTestGoFiles) > 0 {
		files := w.filesOf(lp, lp.XTestGoFiles)
		info := newInfo()
		conf := w.conf()
		conf.Importer = importerFunc(func(p string) (*types.Package, error) {
			if p == path {
				return tp, nil
			}
			return w.Import(p)
		})
		xp, _ := conf.Check(path+"_test", w.fset, files, info)
		w.variants = append(w.variants, &variant{pkg: lp, files: files, info: info, tpkg: xp})
	}
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(p string) (*types.Package, error) { return f(p) }

// edit replaces [start, end) of a file with text.
type edit struct {
	start, end int
	text       string
}

type editor struct {
	w     *world
	edits map[string][]edit
}

func (e *editor) add(pos, end token.Pos, text string) {
	f := e.w.fset.File(pos)
	e.edits[f.Name()] = append(e.edits[f.Name()], edit{f.Offset(pos), f.Offset(end), text})
}

func (e *editor) src(n ast.Node) string {
	f := e.w.fset.File(n.Pos())
	b, err := os.ReadFile(f.Name())
	if err != nil {
		panic(err)
	}
	return string(b[f.Offset(n.Pos()):f.Offset(n.End())])
}

// optionOf returns the option type t is, or nil.
func (e *editor) optionOf(t types.Type) *optionType {
	if t == nil {
		return nil
	}
	if a, ok := t.(*types.Alias); ok {
		t = types.Unalias(a)
	}
	n, ok := t.(*types.Named)
	if !ok {
		return nil
	}
	o := n.Origin().Obj()
	if o.Pkg() == nil {
		return nil
	}
	return e.w.options[o.Pkg().Path()+"."+o.Name()]
}

// typeOf is the type of x as far as the (possibly failed) check knows it.
func typeOf(info *types.Info, x ast.Expr) types.Type {
	if tv, ok := info.Types[x]; ok && tv.Type != nil && tv.Type != types.Typ[types.Invalid] {
		return tv.Type
	}
	switch x := x.(type) {
	case *ast.Ident:
		if o := info.Uses[x]; o != nil {
			return o.Type()
		}
		if o := info.Defs[x]; o != nil {
			return o.Type()
		}
	case *ast.SelectorExpr:
		if s := info.Selections[x]; s != nil {
			return s.Type()
		}
		if o := info.Uses[x.Sel]; o != nil {
			return o.Type()
		}
	case *ast.ParenExpr:
		return typeOf(info, x.X)
	}
	return nil
}

func isType(info *types.Info, x ast.Expr) bool {
	if tv, ok := info.Types[x]; ok {
		return tv.IsType()
	}
	switch x := x.(type) {
	case *ast.Ident:
		_, ok := info.Uses[x].(*types.TypeName)
		return ok
	case *ast.SelectorExpr:
		_, ok := info.Uses[x.Sel].(*types.TypeName)
		return ok
	case *ast.IndexExpr:
		return isType(info, x.X)
	case *ast.IndexListExpr:
		return isType(info, x.X)
	}
	return false
}

// adapterExpr is the adapter of option type expression x ("TableOption[K]"
// → "tableOptionFunc[K]"), or "" when x is not an option of this package.
func (e *editor) adapterExpr(v *variant, x ast.Expr) string {
	o := e.optionOf(typeOf(v.info, x))
	if o == nil || v.tpkg == nil || o.pkg != strings.TrimSuffix(v.tpkg.Path(), "_test") || strings.HasSuffix(v.tpkg.Path(), "_test") {
		return ""
	}
	switch x := x.(type) {
	case *ast.Ident:
		return o.adapter
	case *ast.IndexExpr:
		return o.adapter + "[" + e.src(x.Index) + "]"
	case *ast.IndexListExpr:
		var idx []string
		for _, i := range x.Indices {
			idx = append(idx, e.src(i))
		}
		return o.adapter + "[" + strings.Join(idx, ", ") + "]"
	}
	return ""
}

// adapterFor is the adapter expression of option type t in v's package.
func (e *editor) adapterFor(v *variant, t types.Type) string {
	o := e.optionOf(t)
	if o == nil || v.tpkg == nil || o.pkg != v.tpkg.Path() {
		return ""
	}
	n := types.Unalias(t).(*types.Named)
	if ta := n.TypeArgs(); ta != nil && ta.Len() > 0 {
		var idx []string
		for i := 0; i < ta.Len(); i++ {
			idx = append(idx, types.TypeString(ta.At(i), types.RelativeTo(v.tpkg)))
		}
		return o.adapter + "[" + strings.Join(idx, ", ") + "]"
	}
	return o.adapter
}

func (e *editor) wrap(x ast.Expr, adapter string) {
	if adapter == "" {
		return
	}
	if _, ok := x.(*ast.FuncLit); !ok {
		return
	}
	e.add(x.Pos(), x.Pos(), adapter+"(")
	e.add(x.End(), x.End(), ")")
}

func (e *editor) options(v *variant) {
	for _, f := range v.files {
		// Type declarations.
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				o := e.w.options[v.pkg.ImportPath+"."+ts.Name.Name]
				ft := optionFunc(ts.Type)
				if o == nil || ft == nil || strings.HasSuffix(v.tpkg.Path(), "_test") {
					continue
				}
				param := e.src(ft.Params.List[0].Type)
				res, ret := "", "f(c)"
				if ft.Results != nil && len(ft.Results.List) == 1 {
					res, ret = " error", "return f(c)"
				}
				tparams, targs := "", ""
				if ts.TypeParams != nil {
					tparams = e.src(ts.TypeParams)
					var names []string
					for _, fl := range ts.TypeParams.List {
						for _, n := range fl.Names {
							names = append(names, n.Name)
						}
					}
					targs = "[" + strings.Join(names, ", ") + "]"
				}
				e.add(ts.Type.Pos(), ts.Type.End(), fmt.Sprintf("interface {\n\tapply(%s)%s\n}", param, res))
				e.add(g.End(), g.End(), fmt.Sprintf("\n\n// %s adapts a function to %s.\ntype %s%s func(%s)%s\n\nfunc (f %s%s) apply(c %s)%s { %s }",
					o.adapter, ts.Name.Name, o.adapter, tparams, param, res, o.adapter, targs, param, res, ret))
			}
		}
		// Uses.
		var funcs []*ast.FuncType // enclosing functions, innermost last
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				funcs = append(funcs, n.Type)
				if n.Body != nil {
					ast.Inspect(n.Body, visit)
				}
				funcs = funcs[:len(funcs)-1]
				return false
			case *ast.FuncLit:
				funcs = append(funcs, n.Type)
				ast.Inspect(n.Body, visit)
				funcs = funcs[:len(funcs)-1]
				return false
			case *ast.ReturnStmt:
				if len(funcs) == 0 {
					break
				}
				ft := funcs[len(funcs)-1]
				if ft.Results == nil {
					break
				}
				var rts []ast.Expr
				for _, r := range ft.Results.List {
					k := max(len(r.Names), 1)
					for range k {
						rts = append(rts, r.Type)
					}
				}
				if len(rts) != len(n.Results) {
					break
				}
				for i, r := range n.Results {
					e.wrap(r, e.adapterExpr(v, rts[i]))
				}
			case *ast.CallExpr:
				e.call(v, n)
			case *ast.CompositeLit:
				if t, ok := typeOf(v.info, n).(*types.Slice); ok || n.Type != nil {
					var elem types.Type
					if ok {
						elem = t.Elem()
					} else if st, ok := types.Unalias(typeOf(v.info, n.Type)).(*types.Slice); ok {
						elem = st.Elem()
					}
					for _, el := range n.Elts {
						e.wrap(el, e.adapterFor(v, elem))
					}
				}
			case *ast.ValueSpec:
				if n.Type != nil {
					a := e.adapterExpr(v, n.Type)
					for _, x := range n.Values {
						e.wrap(x, a)
					}
				}
			case *ast.AssignStmt:
				if len(n.Lhs) == len(n.Rhs) && n.Tok == token.ASSIGN {
					for i, l := range n.Lhs {
						e.wrap(n.Rhs[i], e.adapterFor(v, typeOf(v.info, l)))
					}
				}
			}
			return true
		}
		ast.Inspect(f, visit)
	}
}

func (e *editor) call(v *variant, c *ast.CallExpr) {
	info := v.info
	ft := typeOf(info, c.Fun)
	// A conversion to an option type.
	if isType(info, c.Fun) {
		if len(c.Args) == 1 {
			if a := e.adapterExpr(v, c.Fun); a != "" {
				if _, ok := c.Args[0].(*ast.FuncLit); ok {
					e.add(c.Fun.Pos(), c.Fun.End(), a)
				}
			}
		}
		return
	}
	// A call of an option value.
	if e.optionOf(ft) != nil {
		e.add(c.Fun.End(), c.Fun.End(), ".apply")
		return
	}
	// append(opts, func…).
	if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "append" && len(c.Args) > 1 {
		if _, isB := info.Uses[id].(*types.Builtin); isB {
			if s, ok := types.Unalias(typeOf(info, c.Args[0])).(*types.Slice); ok {
				for _, a := range c.Args[1:] {
					e.wrap(a, e.adapterFor(v, s.Elem()))
				}
			}
		}
		return
	}
	// Arguments of option type.
	sig, ok := types.Unalias(ft).(*types.Signature)
	if !ok {
		return
	}
	for i, a := range c.Args {
		var pt types.Type
		switch {
		case sig.Variadic() && i >= sig.Params().Len()-1:
			if c.Ellipsis.IsValid() {
				continue
			}
			pt = sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice).Elem()
		case i < sig.Params().Len():
			pt = sig.Params().At(i).Type()
		default:
			continue
		}
		e.wrap(a, e.adapterFor(v, pt))
	}
}

func (e *editor) renameTable() map[string]map[string]rename {
	t := map[string]map[string]rename{}
	for _, r := range renames {
		p := e.w.module + "/" + r.pkg
		if t[p] == nil {
			t[p] = map[string]rename{}
		}
		t[p][r.old] = r
	}
	return t
}

func (e *editor) renames(v *variant) {
	table := e.renameTable()
	pkgPath := strings.TrimSuffix(v.pkg.ImportPath, "_test")
	own := table[pkgPath]
	inOwn := v.tpkg != nil && v.tpkg.Path() == pkgPath
	for _, f := range v.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if _, isPkg := pkgNameOf(v.info, n.X); !isPkg {
					if m, ok := e.methodRenameOf(typeOf(v.info, n.X), n.Sel.Name); ok {
						e.add(n.Sel.Pos(), n.Sel.End(), m.new)
					}
				}
				x, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				pn, ok := v.info.Uses[x].(*types.PkgName)
				if !ok {
					return true
				}
				if r, ok := table[pn.Imported().Path()][n.Sel.Name]; ok {
					if o := v.info.Uses[n.Sel]; o == nil || isPkgLevel(o) {
						e.add(n.Sel.Pos(), n.Sel.End(), r.new)
					}
				}
				return false
			case *ast.Ident:
				r, ok := own[n.Name]
				if !ok || !inOwn {
					return true
				}
				o := v.info.Uses[n]
				if o == nil {
					o = v.info.Defs[n]
				}
				if (o != nil && isPkgLevel(o) && o.Pkg() != nil && o.Pkg().Path() == pkgPath) || (o == nil && v.tpkg.Scope().Lookup(n.Name) == nil) {
					e.add(n.Pos(), n.End(), r.new)
				}
			}
			return true
		})
		// Renamed methods: declarations, doc comments, interface methods.
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) != 1 {
					continue
				}
				rt := d.Recv.List[0].Type
				if st, ok := rt.(*ast.StarExpr); ok {
					rt = st.X
				}
				id, ok := rt.(*ast.Ident)
				if !ok {
					continue
				}
				if d.Name.Name == "Release" && implementsMembership(v.info, d) {
					// A test's own connector.Membership (a fake).
					e.add(d.Name.Pos(), d.Name.End(), "HandBack")
					continue
				}
				for _, m := range methodRenames {
					if e.w.module+"/"+m.pkg != pkgPath || m.typ != id.Name || m.old != d.Name.Name {
						continue
					}
					e.add(d.Name.Pos(), d.Name.End(), m.new)
					if d.Doc != nil && strings.HasPrefix(d.Doc.List[0].Text, "// "+m.old+" ") {
						c := d.Doc.List[0]
						e.add(c.Pos()+3, c.Pos()+3+token.Pos(len(m.old)), m.new)
					}
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok {
						continue
					}
					it, ok := ts.Type.(*ast.InterfaceType)
					if !ok {
						continue
					}
					for _, m := range methodRenames {
						if e.w.module+"/"+m.pkg != pkgPath || m.typ != ts.Name.Name {
							continue
						}
						for _, fl := range it.Methods.List {
							for _, nm := range fl.Names {
								if nm.Name == m.old {
									e.add(nm.Pos(), nm.End(), m.new)
								}
							}
						}
					}
				}
			}
		}
		// The doc comment of a renamed function starts with its new name.
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Doc == nil || !inOwn {
				continue
			}
			for _, r := range own {
				c := fd.Doc.List[0]
				if (fd.Name.Name == r.old || fd.Name.Name == r.new) && strings.HasPrefix(c.Text, "// "+r.old+" ") {
					e.add(c.Pos()+3, c.Pos()+3+token.Pos(len(r.old)), r.new)
				}
			}
		}
		// Comments and string literals.
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				e.textRenames(c.Pos(), c.Text, table, own, inOwn)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
				e.textRenames(b.Pos(), b.Value, table, nil, false)
			}
			return true
		})
	}
}

func isPkgFunc(o types.Object) bool {
	f, ok := o.(*types.Func)
	return ok && f.Type().(*types.Signature).Recv() == nil && f.Parent() == f.Pkg().Scope()
}

// isPkgLevel reports whether o is declared at package level (a function,
// constant, variable or type; not a method or a field).
func isPkgLevel(o types.Object) bool {
	if f, ok := o.(*types.Func); ok {
		return isPkgFunc(f)
	}
	return o.Pkg() != nil && o.Parent() == o.Pkg().Scope()
}

// implementsMembership reports whether method d is the Release of a type
// that otherwise has connector.Membership's methods (Owns, Assignments,
// Members): a fake membership, renamed with the interface.
func implementsMembership(info *types.Info, d *ast.FuncDecl) bool {
	f, ok := info.Defs[d.Name].(*types.Func)
	if !ok {
		return false
	}
	recv := f.Type().(*types.Signature).Recv()
	if recv == nil {
		return false
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	ms := types.NewMethodSet(types.NewPointer(t))
	for _, n := range []string{"Owns", "Assignments", "Members"} {
		if ms.Lookup(f.Pkg(), n) == nil && ms.Lookup(nil, n) == nil {
			return false
		}
	}
	return true
}

// pkgNameOf returns the package x names, when x is an imported package's
// name.
func pkgNameOf(info *types.Info, x ast.Expr) (*types.PkgName, bool) {
	id, ok := x.(*ast.Ident)
	if !ok {
		return nil, false
	}
	pn, ok := info.Uses[id].(*types.PkgName)
	return pn, ok
}

var wordRe = map[string]*regexp.Regexp{}

func re(s string) *regexp.Regexp {
	if r, ok := wordRe[s]; ok {
		return r
	}
	r := regexp.MustCompile(s)
	wordRe[s] = r
	return r
}

// textRenames rewrites qualified mentions ("topology.MaxBatch") in text,
// and in the defining package's comments (own) unqualified mentions of
// distinctive names.
func (e *editor) textRenames(pos token.Pos, text string, table map[string]map[string]rename, own map[string]rename, inOwn bool) {
	type hit struct {
		s, t int
		new  string
	}
	var hits []hit
	for p, rs := range table {
		q := p[strings.LastIndex(p, "/")+1:]
		for _, r := range rs {
			for _, m := range re(`\b`+q+`\.`+r.old+`\b`).FindAllStringIndex(text, -1) {
				hits = append(hits, hit{m[0] + len(q) + 1, m[1], r.new})
			}
		}
	}
	for _, m := range methodRenames {
		for _, mm := range re(`\b`+m.typ+`\.`+m.old+`\b`).FindAllStringIndex(text, -1) {
			hits = append(hits, hit{mm[0] + len(m.typ) + 1, mm[1], m.new})
		}
	}
	if inOwn {
		for _, r := range own {
			if !r.bare {
				continue
			}
			for _, m := range re(`(^|[^.\w])`+r.old+`\b`).FindAllStringSubmatchIndex(text, -1) {
				hits = append(hits, hit{m[3], m[1], r.new})
			}
		}
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].s < hits[j].s })
	last := -1
	for _, h := range hits {
		if h.s < last {
			continue
		}
		e.add(pos+token.Pos(h.s), pos+token.Pos(h.t), h.new)
		last = h.t
	}
}

// errorPrefixes rewrites the component prefix of error texts to "strand: "
// and makes the wrappers among them strerr.Errorf.
func (e *editor) errorPrefixes(v *variant) {
	rel := e.w.rel(v.pkg.ImportPath)
	if !errorPrefixPackages.MatchString(rel) || rel == "internal/strerr" {
		return
	}
	strerrPath := e.w.module + "/internal/strerr"
	for _, f := range v.files {
		if strings.HasSuffix(e.w.fset.File(f.Pos()).Name(), "_test.go") {
			continue
		}
		fmtUses, fmtConverted := 0, 0
		var fmtSpec *ast.ImportSpec
		hasStrerr := false
		for _, is := range f.Imports {
			switch is.Path.Value {
			case `"fmt"`:
				if is.Name == nil {
					fmtSpec = is
				}
			case `"` + strerrPath + `"`:
				hasStrerr = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok {
					if pn, ok := v.info.Uses[x].(*types.PkgName); ok && pn.Imported().Path() == "fmt" {
						fmtUses++
					}
				}
			}
			c, ok := n.(*ast.CallExpr)
			if !ok || len(c.Args) == 0 {
				return true
			}
			sel, ok := c.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			pn, ok := v.info.Uses[x].(*types.PkgName)
			if !ok {
				return true
			}
			p, name := pn.Imported().Path(), sel.Sel.Name
			if !(p == "fmt" && name == "Errorf") && !(p == "errors" && name == "New") && !(p == strerrPath && name == "Errorf") {
				return true
			}
			lit, ok := c.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || len(lit.Value) < 2 {
				return true
			}
			body := lit.Value[1:]
			prefixed := strings.HasPrefix(body, "strand: ")
			if m := errorPrefix.FindStringSubmatchIndex(body); m != nil && m[2] >= 0 {
				comp := body[m[2]:m[3]]
				repl := "strand: "
				if componentPrefix[comp] {
					repl = "strand: " + comp + ": "
				}
				e.add(lit.Pos()+1, lit.Pos()+1+token.Pos(m[1]), repl)
				prefixed = true
			} else if qualified.MatchString(body) {
				e.add(lit.Pos()+1, lit.Pos()+1, "strand: ")
				prefixed = true
			}
			if prefixed && p == "fmt" && strings.Contains(body, "%w") {
				e.add(x.Pos(), x.End(), "strerr")
				fmtConverted++
				if !hasStrerr {
					hasStrerr = true
					e.addImport(f, strerrPath)
				}
			}
			return true
		})
		if fmtSpec != nil && fmtConverted > 0 && fmtConverted == fmtUses {
			e.add(fmtSpec.Pos(), fmtSpec.End(), "")
		}
	}
}

// componentPrefix: prefixes that name a part users configure by name (a
// connector, a test tool); they stay as the "where" after "strand: ".
var componentPrefix = map[string]bool{
	"iggy": true, "iggytest": true, "queryserver": true, "topologytest": true,
	"memconn": true, "connectortest": true, "crashtest": true,
}

// addImport adds an import of path to f.
func (e *editor) addImport(f *ast.File, path string) {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		if g.Rparen.IsValid() {
			e.add(g.Rparen, g.Rparen, "\t\""+path+"\"\n")
		} else {
			e.add(g.End(), g.End(), "\nimport \""+path+"\"")
		}
		return
	}
	e.add(f.Name.End(), f.Name.End(), "\n\nimport \""+path+"\"")
}

// qualified matches an error text that starts with the qualified name of
// an exported function ("topology.WithRetry: ", "queryserver.Table: ",
// "topology.GapPolicy(").
var qualified = regexp.MustCompile(`^[a-z]+\.[A-Z]\w*[:(\[ ]`)

func (e *editor) apply(dry bool) ([]string, error) {
	var changed []string
	for name, es := range e.edits {
		sort.SliceStable(es, func(i, j int) bool {
			if es[i].start != es[j].start {
				return es[i].start > es[j].start
			}
			return es[i].end > es[j].end
		})
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out := append([]byte(nil), src...)
		seen := map[edit]bool{}
		for _, ed := range es {
			if seen[ed] {
				continue
			}
			seen[ed] = true
			out = append(out[:ed.start:ed.start], append([]byte(ed.text), out[ed.end:]...)...)
		}
		formatted, err := format.Source(out)
		if err != nil {
			return nil, fmt.Errorf("%s: rewritten source does not parse: %w", name, err)
		}
		if bytes.Equal(formatted, src) {
			continue
		}
		changed = append(changed, name)
		if !dry {
			if err := os.WriteFile(name, formatted, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return changed, nil
}

// markdown rewrites qualified mentions of renamed names in Markdown files.
func (w *world) markdown(dry bool) ([]string, error) {
	var changed []string
	err := filepath.WalkDir(w.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != w.root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out := string(src)
		for _, r := range renames {
			q := r.pkg[strings.LastIndex(r.pkg, "/")+1:]
			out = re(`\b`+q+`\.`+r.old+`\b`).ReplaceAllString(out, q+"."+r.new)
		}
		for _, m := range methodRenames {
			out = re(`\b`+m.typ+`\.`+m.old+`\b`).ReplaceAllString(out, m.typ+"."+m.new)
		}
		if out == string(src) {
			return nil
		}
		changed = append(changed, path)
		if dry {
			return nil
		}
		return os.WriteFile(path, []byte(out), 0o644)
	})
	return changed, err
}
