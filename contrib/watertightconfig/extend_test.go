package watertightconfig_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/contrib/watertightconfig"
)

// route is a section of the test's own, as a program would define it.
type route struct {
	prefix  string
	timeout time.Duration
	breaker string
	methods []string
}

func routeSection(out map[string]route) watertightconfig.Section {
	return func(d *watertightconfig.Decoder, n *yaml.Node) {
		es, _ := d.Mapping(n, "routes")
		for _, e := range es {
			path := "routes." + e.Key
			var r route
			d.Fields(e.Value, path, []string{"prefix", "timeout", "breaker", "methods"}, func(f watertightconfig.Entry, p string) {
				switch f.Key {
				case "prefix":
					r.prefix, _ = d.String(f.Value, p)
				case "timeout":
					r.timeout, _ = d.Duration(f.Value, p, time.Millisecond, nil)
				case "breaker":
					if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "breakers", name) {
						r.breaker = name
					}
				case "methods":
					r.methods, _ = d.Strings(f.Value, p)
				}
			})
			out[e.Key] = r
		}
	}
}

func TestParseWith(t *testing.T) {
	got := map[string]route{}
	f, err := watertightconfig.ParseWith("gw.yaml", []byte(`
breakers:
  per-host: {min_calls: 5}
routes:
  catalog:
    prefix: /catalog
    timeout: 2s
    breaker: per-host
    methods: [GET, HEAD]
`), map[string]watertightconfig.Section{"routes": routeSection(got)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Breakers["per-host"]; !ok {
		t.Fatalf("the library's sections were not read: %+v", f)
	}
	want := route{prefix: "/catalog", timeout: 2 * time.Second, breaker: "per-host", methods: []string{"GET", "HEAD"}}
	if r := got["catalog"]; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Fatalf("route %+v, want %+v", r, want)
	}
	// A section that is absent is called with nil.
	called := false
	if _, err := watertightconfig.ParseWith("gw.yaml", []byte("breakers: {}\n"), map[string]watertightconfig.Section{
		"routes": func(d *watertightconfig.Decoder, n *yaml.Node) { called = n == nil },
	}); err != nil || !called {
		t.Fatalf("absent section: called with nil %v, err %v", called, err)
	}
	if _, err := watertightconfig.ParseWith("gw.yaml", nil, map[string]watertightconfig.Section{"breakers": nil}); err == nil {
		t.Fatal("a section named like the library's was accepted")
	}
}

// The section's problems and the library's come in one list, in the
// file's order, each FILE:LINE: path: rule.
func TestParseWithErrors(t *testing.T) {
	_, err := watertightconfig.ParseWith("gw.yaml", []byte(`breakers:
  per-host: {min_calls: -1}
routes:
  catalog:
    prefix: 7
    timeout: 2
    breaker: per-hots
    method: [GET]
rutes: {}
`), map[string]watertightconfig.Section{"routes": routeSection(map[string]route{})})
	var es watertightconfig.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err %v", err)
	}
	want := []string{
		"gw.yaml:2: breakers.per-host.min_calls:",
		"gw.yaml:6: routes.catalog.timeout: must be a duration",
		`gw.yaml:7: routes.catalog.breaker: no breaker named "per-hots" (breakers: per-host); did you mean "per-host"?`,
		`gw.yaml:8: routes.catalog.method: unknown field (did you mean methods?)`,
		`gw.yaml:9: rutes: unknown`,
	}
	text := err.Error()
	lines := strings.Split(text, "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(lines), len(want), text)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d: %q, want it to start %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[4], "did you mean routes?") {
		t.Errorf("the unknown top-level key does not suggest routes: %q", lines[4])
	}
}

func ExampleParseWith() {
	var prefixes []string
	_, err := watertightconfig.ParseWith("gw.yaml", []byte(`
routes:
  catalog: {prefix: /catalog}
  orders: {prefix: /orders, timeout: 2}
`), map[string]watertightconfig.Section{
		"routes": func(d *watertightconfig.Decoder, n *yaml.Node) {
			routes, _ := d.Mapping(n, "routes")
			for _, r := range routes {
				d.Fields(r.Value, "routes."+r.Key, []string{"prefix", "timeout"}, func(e watertightconfig.Entry, path string) {
					switch e.Key {
					case "prefix":
						p, _ := d.String(e.Value, path)
						prefixes = append(prefixes, p)
					case "timeout":
						d.Duration(e.Value, path, 0, nil)
					}
				})
			}
		},
	})
	fmt.Println(prefixes)
	fmt.Println(err)
	// Output:
	// [/catalog /orders]
	// gw.yaml:4: routes.orders.timeout: must be a duration such as "250ms" or "1m30s", got 2
}
