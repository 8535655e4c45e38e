package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/strand-io/strand/"

// root is the repository's root (this package is internal/archtest).
const root = "../.."

// imports returns the strand packages the Go files under dir (recursively
// when deep) import, by file; tests are included when withTests.
func imports(t *testing.T, dir string, deep, withTests bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != filepath.Join(root, dir) && (!deep || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !withTests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, module) {
				out[path] = append(out[path], strings.TrimPrefix(p, module))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExamplesUseOnlyThePublicAPI: a user copies an example; it must not
// import a package they cannot import.
func TestExamplesUseOnlyThePublicAPI(t *testing.T) {
	n := 0
	for file, ims := range imports(t, "examples", true, true) {
		n++
		for _, p := range ims {
			if strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") {
				t.Errorf("%s imports %s: examples use the public API only", file, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go file found under examples/: is the root right?")
	}
}

// rooms are the stages a record walks down (docs/design.md §3, §4): a room
// may import the rooms before it, never one after it. Test files are
// checked too, except where noted.
var rooms = []string{
	"internal/rows",
	"internal/state",
	"internal/executor",
	"internal/outbox",
	"internal/pipeline",
	"internal/scaleout/changelog",
	"stream/topology",
}

func TestRoomsImportDownwardsOnly(t *testing.T) {
	for i, room := range rooms {
		later := rooms[i+1:]
		for file, ims := range imports(t, room, false, true) {
			for _, p := range ims {
				if slices.Contains(later, p) {
					t.Errorf("%s (room %s) imports %s, a later room: rooms import downwards only", file, room, p)
				}
			}
		}
	}
	// Nothing internal to the runtime imports the front door (test
	// harnesses, which drive it, excepted).
	for _, dir := range []string{"internal/executor", "internal/outbox", "internal/pipeline", "internal/rows", "internal/state", "internal/scaleout", "internal/inspect", "internal/live", "internal/reset", "internal/telemetry"} {
		for file, ims := range imports(t, dir, true, false) {
			for _, p := range ims {
				if p == "stream/topology" || strings.HasPrefix(p, "stream/topology/") {
					t.Errorf("%s imports %s: the runtime never imports the front door", file, p)
				}
			}
		}
	}
}

// publicDirs are the packages a user imports.
var publicDirs = []string{
	"algebra", "planner", "stream", "stream/connector", "stream/connector/memconn",
	"stream/connector/connectortest", "stream/deadletter", "stream/state", "stream/topology",
	"stream/topology/queryserver", "stream/topology/topologytest", "stream/topology/topologytest/crashtest",
	"connectors/iggy", "connectors/iggy/iggytest",
}

// knownInternalInAPI are the exported declarations of public packages whose
// godoc still shows an internal type. Issue 33, item 3 emptied it (the
// change types are stream's now): the test fails when any appears, and
// when one listed is gone (shrink the list).
var knownInternalInAPI = map[string]bool{}

// TestPublicAPIShowsNoInternalType: an exported declaration of a public
// package (its signature, an exported field, a type it is defined as) must
// not name a type of a strand internal/ package: godoc would show a type
// the user cannot name.
func TestPublicAPIShowsNoInternalType(t *testing.T) {
	found := map[string]bool{}
	for _, dir := range publicDirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for _, f := range pkg.Files {
				internal := map[string]bool{} // local names of internal imports
				for _, im := range f.Imports {
					p, _ := strconv.Unquote(im.Path.Value)
					if !strings.HasPrefix(p, module) || !strings.Contains(p, "internal/") {
						continue
					}
					name := p[strings.LastIndex(p, "/")+1:]
					if im.Name != nil {
						name = im.Name.Name
					}
					internal[name] = true
				}
				if len(internal) == 0 {
					continue
				}
				for _, name := range exportedInternalRefs(f, internal) {
					found[dir+"."+name] = true
				}
			}
		}
	}
	for k := range found {
		if !knownInternalInAPI[k] {
			t.Errorf("%s shows an internal type in the public API", k)
		}
	}
	for k := range knownInternalInAPI {
		if !found[k] {
			t.Errorf("%s no longer shows an internal type: remove it from knownInternalInAPI", k)
		}
	}
}

// exportedInternalRefs returns the exported declarations of f whose visible
// part names a package of internal.
func exportedInternalRefs(f *ast.File, internal map[string]bool) []string {
	var out []string
	mentions := func(n ast.Node) bool {
		hit := false
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
					hit = true
				}
			}
			// unexported struct fields and interface methods are not shown
			if st, ok := n.(*ast.StructType); ok {
				for _, fl := range st.Fields.List {
					if exportedField(fl) && mentionsSel(fl.Type, internal) {
						hit = true
					}
				}
				return false
			}
			if it, ok := n.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					if exportedField(m) && mentionsSel(m.Type, internal) {
						hit = true
					}
				}
				return false
			}
			return !hit
		})
		return hit
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil && !exportedRecv(d.Recv) {
				continue
			}
			if mentions(d.Type) {
				name := d.Name.Name
				if d.Recv != nil {
					name = recvName(d.Recv) + "." + name
				}
				out = append(out, name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && mentions(s.Type) {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Type != nil && mentions(s.Type) {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

func mentionsSel(e ast.Expr, internal map[string]bool) bool {
	hit := false
	ast.Inspect(e, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
				hit = true
			}
		}
		return !hit
	})
	return hit
}

func exportedField(fl *ast.Field) bool {
	if len(fl.Names) == 0 { // embedded: shown when its type is exported
		return true
	}
	for _, n := range fl.Names {
		if n.IsExported() {
			return true
		}
	}
	return false
}

func recvName(r *ast.FieldList) string {
	e := r.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch e := e.(type) {
	case *ast.IndexExpr:
		e2, _ := e.X.(*ast.Ident)
		return e2.Name
	case *ast.IndexListExpr:
		e2, _ := e.X.(*ast.Ident)
		return e2.Name
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

func exportedRecv(r *ast.FieldList) bool { return ast.IsExported(recvName(r)) }

// TestOnlyTestsImportTheTestFixtures: internal/proptest holds property
// tests and their fixtures, internal/grouptest the group (scale-out) tests
// and theirs; no package a program links may import either.
func TestOnlyTestsImportTheTestFixtures(t *testing.T) {
	all := imports(t, ".", true, false)
	for _, fixtures := range []string{"internal/proptest", "internal/grouptest"} {
		for file, ims := range all {
			if strings.HasPrefix(filepath.ToSlash(file), root+"/"+fixtures+"/") {
				continue
			}
			for _, p := range ims {
				if p == fixtures {
					t.Errorf("%s imports %s: only tests import it", file, p)
				}
			}
		}
	}
}
