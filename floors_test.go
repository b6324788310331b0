package watertight_test

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The floors of the dependency direction (shared/DESIGN.md §2), for the
// packages of the root module:
//
//  1. ground: the root package, backoff and internal/*. The root imports no
//     package of the module but internal/*; backoff imports none;
//     internal/* imports only the root and internal/*, so that machinery
//     below the patterns never reaches up to a pattern or an adapter.
//  2. patterns: each imports the ground only, and a sibling only where the
//     ideas compose (patternSiblings).
//
// Adapters and tools (watertighthttp, watertightslog, the dashboard, the
// lab, contrib/...) sit above and may import anything below them; that no
// floor below imports them is what these rules check.
var (
	// patterns are the packages of floor 2.
	patterns = []string{
		"balance", "budget", "bulkhead", "chaos", "circuit", "deadline", "fallback",
		"hedge", "idempotency", "limit", "retry", "timeout",
	}
	// patternSiblings are the patterns each pattern may import. DESIGN.md
	// §2 names retry → budget and hedge → budget (and the latency tracker,
	// in internal/). The code adds: hedge → circuit and bulkhead (a hedge is
	// suppressed while its breaker is not closed or its bulkhead is full)
	// and → retry (the idempotency marks of a call's context); limit →
	// bulkhead (an adaptive limiter is a bulkhead whose limit moves).
	patternSiblings = map[string][]string{
		"retry": {"budget"},
		"hedge": {"budget", "bulkhead", "circuit", "retry"},
		"limit": {"bulkhead"},
	}
)

// modulePackages returns the root module's packages, by directory relative
// to the module root ("." for the root package), with the module's packages
// each imports (non-test files), as directories too. Nested modules (a
// directory with a go.mod of its own) are not part of it.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != "." {
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			var noGo *build.NoGoError
			if errors.As(err, &noGo) {
				return nil
			}
			return err
		}
		var imps []string
		for _, ip := range p.Imports {
			if ip == modulePath {
				imps = append(imps, ".")
			} else if dir, ok := strings.CutPrefix(ip, modulePath+"/"); ok {
				imps = append(imps, dir)
			}
		}
		pkgs[filepath.ToSlash(path)] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func isInternal(dir string) bool { return dir == "internal" || strings.HasPrefix(dir, "internal/") }

func TestFloors(t *testing.T) {
	pkgs := modulePackages(t)
	for _, must := range append([]string{".", "backoff", "internal/admission"}, patterns...) {
		if _, ok := pkgs[must]; !ok {
			t.Fatalf("package %s not found: the walk of the module is broken, or the floors here are out of date", must)
		}
	}
	for dir, imps := range pkgs {
		for _, imp := range imps {
			var ok bool
			switch {
			case dir == ".":
				ok = isInternal(imp)
			case dir == "backoff":
				ok = false
			case isInternal(dir):
				ok = imp == "." || isInternal(imp)
			case slices.Contains(patterns, dir):
				ok = imp == "." || imp == "backoff" || isInternal(imp) || slices.Contains(patternSiblings[dir], imp)
			default:
				continue // an adapter or a tool: may import anything below it
			}
			if !ok {
				t.Errorf("%s imports %s, which its floor does not allow (shared/DESIGN.md §2; the rules are in floors_test.go)", dir, imp)
			}
		}
	}
}
