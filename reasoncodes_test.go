package watertight_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/watertight-go/watertight"
)

// modulePath is the root module's path: imports under it are directories of
// this repository.
const modulePath = "github.com/watertight-go/watertight"

// codeShape is the shape of an event code (see Event.Code); the exporters
// count any other Code as "other".
var codeShape = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// srcPackage is a directory's package as far as its constants go.
type srcPackage struct {
	dir, name string
	consts    map[string]*srcConst
}

// srcConst is one package-level constant: its value expression and the
// imports of the file that declares it.
type srcConst struct {
	value   ast.Expr
	imports map[string]string // local name → import path
}

// parseTree parses the package-level constants of every non-test Go file
// under root, by directory (relative, slash-separated). It skips hidden
// directories, testdata and bench (the nested module of comparisons with
// other libraries).
func parseTree(t *testing.T, root string) map[string]*srcPackage {
	t.Helper()
	pkgs := map[string]*srcPackage{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		p := pkgs[rel]
		if p == nil {
			p = &srcPackage{dir: rel, name: f.Name.Name, consts: map[string]*srcConst{}}
			pkgs[rel] = p
		}
		imports := map[string]string{}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			local := ip[strings.LastIndex(ip, "/")+1:]
			if im.Name != nil {
				local = im.Name.Name
			}
			imports[local] = ip
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						p.consts[n.Name] = &srcConst{value: vs.Values[i], imports: imports}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// stringValue resolves the constant name of package p to a string: a
// literal, another constant of p, or a constant of another package of this
// repository. ok is false for a constant that is not a string (an iota, a
// number) or cannot be resolved.
func stringValue(pkgs map[string]*srcPackage, p *srcPackage, name string, depth int) (string, bool) {
	c := p.consts[name]
	if c == nil || depth > 8 {
		return "", false
	}
	switch v := c.value.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.Ident:
		return stringValue(pkgs, p, v.Name, depth+1)
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		if !ok {
			return "", false
		}
		ip := c.imports[x.Name]
		dir, found := strings.CutPrefix(ip, modulePath+"/")
		if !found {
			return "", false
		}
		q := pkgs[dir]
		if q == nil {
			return "", false
		}
		return stringValue(pkgs, q, v.Sel.Name, depth+1)
	}
	return "", false
}

// exportedCodes returns the event codes the packages define: every exported
// string constant named Code followed by an upper-case letter or a digit,
// by "package.Name".
func exportedCodes(t *testing.T, pkgs map[string]*srcPackage) map[string]string {
	t.Helper()
	isCodeName := regexp.MustCompile(`^Code[A-Z0-9]`)
	codes := map[string]string{}
	dirOf := map[string]string{} // package name → directory, among those with codes
	for _, p := range pkgs {
		for name := range p.consts {
			if !isCodeName.MatchString(name) {
				continue
			}
			v, ok := stringValue(pkgs, p, name, 0)
			if !ok {
				continue // not a string constant
			}
			if d, dup := dirOf[p.name]; dup && d != p.dir {
				t.Errorf("packages %s and %s are both named %s and both define codes: the table of codes names constants by package name", d, p.dir, p.name)
			}
			dirOf[p.name] = p.dir
			codes[p.name+"."+name] = v
		}
	}
	return codes
}

// docRow is one row of the table of codes in docs/observability.md.
type docRow struct {
	code, constant, kinds, meaning string
}

func docCodes(t *testing.T) []docRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- codes:begin")
	if !ok {
		t.Fatal("docs/observability.md has no <!-- codes:begin --> marker")
	}
	body, _, ok := strings.Cut(rest, "<!-- codes:end -->")
	if !ok {
		t.Fatal("docs/observability.md has no <!-- codes:end --> marker")
	}
	cell := regexp.MustCompile(`^` + "`" + `([^` + "`" + `]+)` + "`" + `$`)
	var rows []docRow
	for _, line := range strings.Split(body, "\n")[1:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "| `") {
			continue // the header, its rule, blank lines
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Errorf("row %q has %d cells, want 4 (code, constant, kind, meaning)", line, len(cells))
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		code, c1 := cell.FindStringSubmatch(cells[0]), cell.FindStringSubmatch(cells[1])
		if code == nil || c1 == nil {
			t.Errorf("row %q: the code and the constant must each be in backquotes", line)
			continue
		}
		rows = append(rows, docRow{code: code[1], constant: c1[1], kinds: cells[2], meaning: cells[3]})
	}
	if len(rows) == 0 {
		t.Fatal("the table of codes in docs/observability.md is empty")
	}
	return rows
}

// TestReasonCodesMatchDocs keeps the table of codes in docs/observability.md
// true: every exported Code* string constant of every package in the
// repository has its row, with its value, and every row names such a
// constant; every code has the shape the exporters take as a label; every
// kind named is an EventKind.
func TestReasonCodesMatchDocs(t *testing.T) {
	codes := exportedCodes(t, parseTree(t, "."))
	if len(codes) == 0 {
		t.Fatal("found no Code* constants: the walk of the tree is broken")
	}
	kinds := map[string]bool{}
	for k := watertight.EventKind(1); k.String() != "unknown"; k++ {
		kinds[k.String()] = true
	}
	backquoted := regexp.MustCompile("`([^`]+)`")
	seen := map[string]bool{}
	for _, r := range docCodes(t) {
		if seen[r.constant] {
			t.Errorf("the table lists %s twice", r.constant)
		}
		seen[r.constant] = true
		v, ok := codes[r.constant]
		switch {
		case !ok:
			t.Errorf("the table lists %s, which no package defines (or not as a string constant)", r.constant)
		case v != r.code:
			t.Errorf("the table says %s is %q; the code says %q", r.constant, r.code, v)
		}
		for _, m := range backquoted.FindAllStringSubmatch(r.kinds, -1) {
			if !kinds[m[1]] {
				t.Errorf("%s: %q in the kind column is not an EventKind's name", r.constant, m[1])
			}
		}
		if r.kinds == "" || r.meaning == "" {
			t.Errorf("%s: the kind and the meaning must not be empty", r.constant)
		}
	}
	var missing []string
	for c, v := range codes {
		if !codeShape.MatchString(v) {
			t.Errorf("%s = %q is not shaped like a code (%s): the exporters would count it as \"other\"", c, v, codeShape)
		}
		if !seen[c] {
			missing = append(missing, c+" ("+strconv.Quote(v)+")")
		}
	}
	slices.Sort(missing)
	for _, c := range missing {
		t.Errorf("%s is not in the table of codes in docs/observability.md: add a row (code, constant, kind, meaning)", c)
	}
}
