package throttle_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// make test and make fuzz run the fuzz targets listed in the Makefile's
// FUZZ_TARGETS: a target missing from the list is never fuzzed (its seed
// inputs still run as a test), and an entry naming no target fails make.
// The list must name every Fuzz function of this module, and nothing else.
func TestMakefileListsEveryFuzzTarget(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\nFUZZ_TARGETS = \\\n(.*?)\n\n`).FindSubmatch(mk)
	if block == nil {
		t.Fatal("no FUZZ_TARGETS block in the Makefile")
	}
	var listed []string
	for _, line := range strings.Split(string(block[1]), "\n") {
		if entry := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), `\`)); entry != "" {
			listed = append(listed, entry)
		}
	}

	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)
	var found []string
	err = walkTestFiles(func(path, pkg string, src []byte) {
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found = append(found, pkg+":"+m[1])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no fuzz target found in the module")
	}
	for _, target := range found {
		if !slices.Contains(listed, target) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS: make test never fuzzes it", target)
		}
	}
	for _, entry := range listed {
		if !slices.Contains(found, entry) {
			t.Errorf("FUZZ_TARGETS lists %s, which is no fuzz target of this module", entry)
		}
	}
}

// walkTestFiles calls visit with every _test.go file of this module, its
// source and its package as go test names it ("." or "./dir").
func walkTestFiles(visit func(path, pkg string, src []byte)) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Other modules (bench/, integrations/) and test data are not this
			// module's packages.
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(filepath.Dir(path))
		if pkg == "./." {
			pkg = "."
		}
		visit(path, pkg, src)
		return nil
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// make test's alone stage runs the tests that call loadtest.Alone (directly,
// or through helpers and methods of their package), which every other stage
// skips: a test its -run pattern misses, or in a package it does not list,
// runs nowhere. The pattern and the packages must reach every such test.
func TestMakefileRunsEveryAloneTest(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ALONE_TESTS = (.+)$`).FindSubmatch(mk)
	stage := regexp.MustCompile(`(?m)^\t.*THROTTLE_ALONE=1 .* -run '\$\(ALONE_TESTS\)' (.+)$`).FindSubmatch(mk)
	if m == nil || stage == nil {
		t.Fatal("no ALONE_TESTS, or no stage running it, in the Makefile")
	}
	pattern := regexp.MustCompile(string(m[1]))
	stagePkgs := strings.Fields(string(stage[1]))

	// Every function and method of every test file, parsed, by directory
	// (a package and its _test package together): one that calls
	// loadtest.Alone, and every test calling such a helper (a function or
	// a method of the directory, in any of its files), is an alone test.
	type fn struct {
		alone bool     // calls loadtest.Alone
		calls []string // names of what it calls
	}
	funcs := map[string]map[string][]*fn{} // directory → name → functions
	err = walkTestFiles(func(path, pkg string, src []byte) {
		f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		loadtest := ""
		for _, im := range f.Imports {
			if strings.Trim(im.Path.Value, `"`) == "github.com/quotaware/throttle/internal/loadtest" {
				loadtest = "loadtest"
				if im.Name != nil {
					loadtest = im.Name.Name
				}
			}
		}
		if funcs[pkg] == nil {
			funcs[pkg] = map[string][]*fn{}
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			this := &fn{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch f := call.Fun.(type) {
				case *ast.Ident:
					this.calls = append(this.calls, f.Name)
				case *ast.SelectorExpr:
					if x, ok := f.X.(*ast.Ident); ok && loadtest != "" && x.Name == loadtest && f.Sel.Name == "Alone" {
						this.alone = true
					}
					this.calls = append(this.calls, f.Sel.Name)
				case *ast.IndexExpr: // a generic function's call
					if id, ok := f.X.(*ast.Ident); ok {
						this.calls = append(this.calls, id.Name)
					}
				}
				return true
			})
			funcs[pkg][fd.Name.Name] = append(funcs[pkg][fd.Name.Name], this)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for pkg, byName := range funcs {
		alone := map[string]bool{}
		for grew := true; grew; { // helpers of helpers too
			grew = false
			for name, fns := range byName {
				for _, f := range fns {
					calls := f.alone
					for _, c := range f.calls {
						calls = calls || alone[c] && !strings.HasPrefix(c, "Test")
					}
					if calls && !alone[name] {
						alone[name], grew = true, true
					}
				}
			}
		}
		for name := range alone {
			if !strings.HasPrefix(name, "Test") {
				continue
			}
			found++
			if !pattern.MatchString(name) {
				t.Errorf("%s (%s) calls loadtest.Alone, but ALONE_TESTS does not match it: it runs in no stage", name, pkg)
			}
			if !slices.Contains(stagePkgs, pkg) {
				t.Errorf("%s calls loadtest.Alone, but the alone stage does not run its package %s", name, pkg)
			}
		}
	}
	if found == 0 {
		t.Fatal("no test calls loadtest.Alone")
	}
}
