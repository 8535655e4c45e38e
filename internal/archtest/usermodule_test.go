package archtest

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// userModule is the module path the examples are copied into: a path
// outside strand's, so Go's internal rule applies to it as to any user.
const userModule = "example.com/myservice"

// TestExamplesLoadInAUsersModule does what a user does with an example:
// copy it into a module of their own and build it against strand. Go
// refuses, at load time, an import of a strand internal/ package from
// outside strand's module ("use of internal package ... not allowed"), so
// the copy must load without an error, with its tests. Strand's internal
// packages still appear among the copy's dependencies — the engine runs in
// them, imported by strand's public packages, exactly as in every program
// that runs strand — and the test checks that only strand packages import
// them. A planted import of an internal package shows the check can fail.
func TestExamplesLoadInAUsersModule(t *testing.T) {
	goBin := goTool(t)
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyExamples(t, filepath.Join(abs, "examples"), filepath.Join(dir, "examples"))
	writeUserGoMod(t, abs, dir)

	pkgs := goListDeps(t, goBin, dir)
	var own, internalDeps int
	for _, p := range pkgs {
		if p.Error != nil {
			t.Errorf("a user's copy of the examples does not load: %s: %s", p.ImportPath, p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			t.Errorf("a user's copy of the examples does not load: %s: %s", p.ImportPath, e.Err)
		}
		if strings.HasPrefix(p.ImportPath, userModule+"/") {
			own++
		}
		if isStrandInternal(p.ImportPath) {
			internalDeps++
		}
		for _, im := range p.Imports {
			if isStrandInternal(im) && !strings.HasPrefix(p.ImportPath, strings.TrimSuffix(module, "/")) {
				t.Errorf("%s imports %s: only strand's own packages may", p.ImportPath, im)
			}
		}
	}
	if own < 3 {
		t.Fatalf("the copy loaded %d example packages; expected the examples and their subpackages", own)
	}
	t.Logf("the copy of the examples loads as module %s: %d packages of its own, %d strand internal packages linked through strand's public packages", userModule, own, internalDeps)

	// The check can fail: a file importing an engine package is refused.
	bad := filepath.Join(dir, "examples", "accounts", "zz_planted.go")
	if err := os.WriteFile(bad, []byte("package main\n\nimport _ \""+module+"internal/xxh32\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := false
	for _, p := range goListDeps(t, goBin, dir) {
		for _, e := range append([]*listErr{p.Error}, p.DepsErrors...) {
			if e != nil && strings.Contains(e.Err, "use of internal package") {
				refused = true
			}
		}
	}
	if !refused {
		t.Fatal("a planted import of strand's internal/xxh32 loaded in the user's module: the check above proves nothing")
	}
}

func isStrandInternal(p string) bool {
	return strings.HasPrefix(p, module) && (strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal"))
}

// goTool finds the go command that runs this test.
func goTool(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to load the examples as a user's module: %v", err)
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// copyExamples copies the examples' Go files (tests included), rewriting
// their imports of each other to the user's module.
func copyExamples(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b = bytes.ReplaceAll(b, []byte(`"`+module+`examples/`), []byte(`"`+userModule+`/examples/`))
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeUserGoMod writes the user's go.mod: strand required, replaced by
// this checkout, and strand's go.sum (the modules are those strand's own
// build downloaded).
func writeUserGoMod(t *testing.T, strandDir, dir string) {
	t.Helper()
	mod := "module " + userModule + "\n\ngo 1.26.0\n\n" +
		"require " + strings.TrimSuffix(module, "/") + " v0.0.0-00010101000000-000000000000\n\n" +
		"replace " + strings.TrimSuffix(module, "/") + " => " + strandDir + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.Open(filepath.Join(strandDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	defer sum.Close()
	out, err := os.Create(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, sum); err != nil {
		t.Fatal(err)
	}
}

type listErr struct{ Err string }

type listedPackage struct {
	ImportPath string
	Imports    []string
	Error      *listErr
	DepsErrors []*listErr
}

// goListDeps loads the user's examples with their tests and dependencies,
// `go list -e -deps -test -json ./...`. Loading does not compile.
func goListDeps(t *testing.T, goBin, dir string) []listedPackage {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-e", "-deps", "-test", "-json=ImportPath,Imports,Error,DepsErrors", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in the user's module: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}
