package watertightconfig

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// strip returns f without the source positions, to compare resolved values.
func strip(f *File) *File {
	g := &File{Name: f.Name,
		Breakers: map[string]Breaker{}, Bulkheads: map[string]Bulkhead{}, Retries: map[string]Retry{},
		Budgets: map[string]Budget{}, Timeouts: map[string]Timeout{}, Hedges: map[string]Hedge{}}
	for k, v := range f.Breakers {
		v.src = source{}
		g.Breakers[k] = v
	}
	for k, v := range f.Bulkheads {
		v.src = source{}
		g.Bulkheads[k] = v
	}
	for k, v := range f.Retries {
		v.src = source{}
		g.Retries[k] = v
	}
	for k, v := range f.Budgets {
		v.src = source{}
		g.Budgets[k] = v
	}
	for k, v := range f.Timeouts {
		v.src = source{}
		g.Timeouts[k] = v
	}
	for k, v := range f.Hedges {
		v.src = source{}
		g.Hedges[k] = v
	}
	return g
}

// sameValues reports whether a and b resolve to the same instances.
func sameValues(a, b *File) bool {
	x, y := strip(a), strip(b)
	x.Name, y.Name = "", ""
	return reflect.DeepEqual(x, y)
}

func mustParse(t testing.TB, src string) *File {
	t.Helper()
	f, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return f
}

// parseErrs parses src, which must be invalid, and returns the errors'
// texts.
func parseErrs(t testing.TB, src string) []string {
	t.Helper()
	f, err := Parse("test.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse accepted\n%s\nas %+v", src, f)
	}
	if f != nil {
		t.Errorf("Parse returned a File with an error")
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %T is not Errors: %v", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

// written returns f.Write's output.
func written(t testing.TB, f *File) string {
	t.Helper()
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// yamlLines joins lines into a file.
func yamlLines(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
