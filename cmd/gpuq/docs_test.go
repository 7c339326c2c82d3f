package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestArchitectureModules: docs/architecture.md's table of modules (between
// "<!-- modules:" and "<!-- end modules -->") names exactly the modules of
// go.work, and for each, exactly the packages `go list ./...` finds (with
// the tests' build tags) and the gpuq packages outside the module that its
// packages import. A module, package or import added without its place in
// the table fails here, naming it.
func TestArchitectureModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list in every module")
	}
	root := "../.."
	doc := docModules(t, filepath.Join(root, "docs/architecture.md"))
	work := workModules(t, filepath.Join(root, "go.work"))
	var docNames []string
	for m := range doc {
		docNames = append(docNames, m)
	}
	sort.Strings(docNames)
	if d := cmp.Diff(work, docNames); d != "" {
		t.Fatalf("docs/architecture.md's modules against go.work's (-go.work +doc):\n%s", d)
	}
	for _, m := range work {
		pkgs, imports := listModule(t, filepath.Join(root, m))
		if d := cmp.Diff(pkgs, doc[m].pkgs); d != "" {
			t.Errorf("docs/architecture.md, module %s: packages (-go list +doc):\n%s", m, d)
		}
		if d := cmp.Diff(imports, doc[m].imports); d != "" {
			t.Errorf("docs/architecture.md, module %s: gpuq imports outside the module (-go list +doc):\n%s", m, d)
		}
	}
}

type docModule struct{ pkgs, imports []string }

var backticked = regexp.MustCompile("`([^`]+)`")

func docModules(t *testing.T, path string) map[string]docModule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "<!-- modules:")
	j := strings.Index(s, "<!-- end modules -->")
	if i < 0 || j < i {
		t.Fatalf("%s: no <!-- modules: … --> … <!-- end modules --> section", path)
	}
	out := map[string]docModule{}
	for _, l := range strings.Split(s[i:j], "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cols) != 3 {
			t.Fatalf("%s: a module row needs 3 columns: %q", path, l)
		}
		var m docModule
		for _, c := range backticked.FindAllStringSubmatch(cols[1], -1) {
			if !strings.HasPrefix(c[1], "faults") && !strings.HasPrefix(c[1], "hostile") && !strings.HasPrefix(c[1], "browser") {
				m.pkgs = append(m.pkgs, c[1])
			}
		}
		for _, c := range backticked.FindAllStringSubmatch(cols[2], -1) {
			m.imports = append(m.imports, c[1])
		}
		sort.Strings(m.pkgs)
		sort.Strings(m.imports)
		name := backticked.FindStringSubmatch(cols[0])[1]
		out[name] = m
	}
	return out
}

// workModules are go.work's use directives, without "./", sorted.
func workModules(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "use ("):
			in = true
		case in && l == ")":
			in = false
		case strings.HasPrefix(l, "use "):
			out = append(out, strings.TrimPrefix(strings.TrimPrefix(l, "use "), "./"))
		case in && l != "" && !strings.HasPrefix(l, "//"):
			out = append(out, strings.TrimPrefix(l, "./"))
		}
	}
	sort.Strings(out)
	return out
}

// listModule: the module's packages relative to it ("." for its own) and
// the gpuq packages outside it that they import (tests aside), relative to
// the repository ("pkg/events").
func listModule(t *testing.T, dir string) (pkgs, imports []string) {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var modPath string
	for _, l := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(l, "module ") {
			modPath = strings.TrimSpace(strings.TrimPrefix(l, "module "))
		}
	}
	cmd := exec.Command(goBin, "list", "-tags", "faults,hostile,browser", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, out)
	}
	const repo = "github.com/gpuq/gpuq/"
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, imps, _ := strings.Cut(l, "|")
		rel := strings.TrimPrefix(strings.TrimPrefix(p, modPath), "/")
		if rel == "" {
			rel = "."
		}
		pkgs = append(pkgs, rel)
		for _, im := range strings.Fields(imps) {
			if strings.HasPrefix(im, repo) && im != modPath && !strings.HasPrefix(im, modPath+"/") && !seen[im] {
				seen[im] = true
				imports = append(imports, strings.TrimPrefix(im, repo))
			}
		}
	}
	sort.Strings(pkgs)
	sort.Strings(imports)
	return pkgs, imports
}
