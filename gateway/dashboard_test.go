package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The admin listener serves the dashboard, which shows the gateway's
// breakers, bulkheads, budgets and balancers without a line of setup.
func TestAdminServesTheDashboard(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	g, srv := front(t, listener+fmt.Sprintf(`
breakers:
  per-host: {}
bulkheads:
  route-bh: {max_concurrent: 10}
upstreams:
  pool-a: {hosts: [%s], breaker: per-host}
routes:
  r: {upstream: pool-a, bulkhead: route-bh}
`, b.host))
	c := client(t)
	if code, _, _ := get(t, c, "GET", srv.URL+"/", nil, ""); code != 200 {
		t.Fatalf("GET: %d", code) // the host's breaker exists once a call went there
	}
	adm := httptest.NewServer(g.Admin())
	defer adm.Close()
	code, page, h := get(t, c, "GET", adm.URL+"/dashboard/", nil, "")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(page, "watertight proxy") {
		t.Fatalf("/dashboard/: %d %s %.80q", code, h.Get("Content-Type"), page)
	}
	resp, err := c.Get(adm.URL + "/dashboard/state.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var state any
	if err := json.Unmarshal(raw, &state); err != nil {
		t.Fatalf("state.json: %v: %.200s", err, raw)
	}
	for _, name := range []string{"per-host", b.host, "route-bh", "pool-a", `"r"`} {
		if !strings.Contains(string(raw), name) {
			t.Errorf("state.json does not show %s: %.600s", name, raw)
		}
	}
	if code, _, _ := get(t, c, "POST", adm.URL+"/dashboard/", nil, "x"); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST to the read-only dashboard: %d", code)
	}
}

// A route's tenants show on the dashboard and in /metrics, a row per
// tenant.
func TestTenantsAreWatched(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	g, _ := front(t, listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
routes:
  shop: {upstream: a, tenants: {key: header X-Tier, max_concurrent: 8, shares: {premium: 3, gold-tier: 1}}}
`, b.host))
	adm := httptest.NewServer(g.Admin())
	defer adm.Close()
	c := client(t)
	_, state, _ := get(t, c, "GET", adm.URL+"/dashboard/state.json", nil, "")
	_, metrics, _ := get(t, c, "GET", adm.URL+"/metrics", nil, "")
	for _, where := range []struct{ name, body string }{{"the dashboard", state}, {"/metrics", metrics}} {
		if !strings.Contains(where.body, "gold-tier") {
			t.Errorf("%s does not show the tenant gold-tier", where.name)
		}
	}
}
