package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/gateway"
)

// served is a gateway built from a file, served on 127.0.0.1.
func served(t *testing.T, path string) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	cfg, err := gateway.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("public"))
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return g, srv
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A reload that changes a route keeps the upstream's Balancer (a host
// ejected before stays ejected) and the breakers; one that changes the
// hosts builds a new Balancer.
func TestReloadKeepsState(t *testing.T) {
	bad := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	good := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	path := filepath.Join(t.TempDir(), "gw.yaml")
	file := func(timeout, hosts string) string {
		return listener + fmt.Sprintf("upstreams:\n  pool: {hosts: [%s], consecutive_errors: 3, slow_factor: off}\nroutes:\n  all: {upstream: pool, timeout: %s}\n", hosts, timeout)
	}
	write(t, path, file("2s", bad.host+", "+good.host))
	g, srv := served(t, path)
	c := client(t)
	for range 30 {
		get(t, c, "GET", srv.URL+"/", nil, "")
	}
	if !g.State().Upstreams[0].Balance.Hosts[0].Ejected {
		t.Fatal("the failing host was not ejected")
	}
	write(t, path, file("3s", bad.host+", "+good.host))
	if err := g.Reload(path); err != nil {
		t.Fatal(err)
	}
	st := g.State()
	if h := st.Upstreams[0].Balance.Hosts[0]; !h.Ejected || h.Ejections != 1 {
		t.Fatalf("after a reload that changed a route: %+v", h)
	}
	hits := bad.hits.Load()
	for range 30 {
		if code, _, _ := get(t, c, "GET", srv.URL+"/", nil, ""); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if bad.hits.Load() != hits {
		t.Fatal("the ejected host got requests after the reload")
	}
	if st.Reloads != 1 || st.Refused != 0 {
		t.Fatalf("counts %+v", st)
	}
	write(t, path, file("3s", good.host))
	if err := g.Reload(path); err != nil {
		t.Fatal(err)
	}
	if hs := g.State().Upstreams[0].Balance.Hosts; len(hs) != 1 || hs[0].Addr != good.host {
		t.Fatalf("after the hosts changed: %+v", hs)
	}
}

// An invalid file, or one that moves a listener, is refused whole: the
// old configuration keeps serving, and the refusal is counted with why.
func TestReloadRefusesBadFile(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	path := filepath.Join(t.TempDir(), "gw.yaml")
	good := listener + fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a}\n", b.host)
	write(t, path, good)
	g, srv := served(t, path)
	write(t, path, good+"  extra: {upstream: nowhere}\n")
	err := g.Reload(path)
	if err == nil || !strings.Contains(err.Error(), `gw.yaml:8: routes.extra.upstream: no upstream named "nowhere"`) {
		t.Fatalf("Reload = %v", err)
	}
	moved := strings.Replace(good, "127.0.0.1:1", "127.0.0.1:3", 1)
	write(t, path, moved)
	if err := g.Reload(path); err == nil || !strings.Contains(err.Error(), "restart the gateway") {
		t.Fatalf("a moved listener: %v", err)
	}
	st := g.State()
	if st.Refused != 2 || st.Reloads != 0 || !strings.Contains(st.LastRefusal, "restart") {
		t.Fatalf("state %+v", st)
	}
	if code, body, _ := get(t, client(t), "GET", srv.URL+"/", nil, ""); code != 200 || body != "ok" {
		t.Fatalf("after refused reloads: %d %q", code, body)
	}
}

// Reloads under load fail no request.
func TestReloadUnderLoad(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	path := filepath.Join(t.TempDir(), "gw.yaml")
	file := func(i int) string {
		return listener + fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a, timeout: %ds}\n", b.host, 1+i%3)
	}
	write(t, path, file(0))
	g, srv := served(t, path)
	c := client(t)
	var stop atomic.Bool
	var failed, sent atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				resp, err := c.Get(srv.URL + "/")
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "ok" {
					failed.Add(1)
				}
			}
		})
	}
	for i := range 20 {
		for n := sent.Load(); sent.Load() < n+20; { // requests between reloads
			time.Sleep(time.Millisecond)
		}
		write(t, path, file(i+1))
		if err := g.Reload(path); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || sent.Load() == 0 {
		t.Fatalf("%d of %d requests failed across 20 reloads", failed.Load(), sent.Load())
	}
	t.Logf("%d requests across 20 reloads, none failed", sent.Load())
}

// Run reloads the file when it changes.
func TestRunReloadsOnFileChange(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) })
	pub, adm := deadAddress(t), deadAddress(t)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	file := func(prefix string) string {
		return fmt.Sprintf("listeners:\n  public: {address: %s}\nadmin: {address: %s}\nupstreams:\n  a: {hosts: [%s]}\nroutes:\n  r: {upstream: a, path_prefix: %s}\n", pub, adm, b.host, prefix)
	}
	write(t, path, file("/one"))
	cfg, err := gateway.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet, ConfigPath: path, WatchInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	c := client(t)
	status := func(p string) int {
		resp, err := c.Get("http://" + pub + p)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; status("/one") != 200; i++ { // until it listens
		if i > 500 {
			t.Fatal("the gateway never served /one")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status("/two") != http.StatusNotFound {
		t.Fatal("/two before the change")
	}
	// A later modification time than the first file's, whatever the
	// file system's clock resolution.
	write(t, path, file("/two"))
	os.Chtimes(path, time.Now().Add(time.Second), time.Now().Add(time.Second))
	for i := 0; status("/two") != 200; i++ { // bounded: 5 s
		if i > 500 {
			t.Fatalf("the change was not picked up: %+v", g.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status("/one") != http.StatusNotFound {
		t.Fatal("/one after the change")
	}
}

// A reload that drops a route drops its metrics.
func TestReloadDropsMetricsOfRemovedRoutes(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	path := filepath.Join(t.TempDir(), "gw.yaml")
	two := listener + fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  keep: {upstream: a, path_prefix: /keep}\n  drop: {upstream: a, path_prefix: /drop}\n", b.host)
	write(t, path, two)
	g, _ := served(t, path)
	adm := httptest.NewServer(g.Admin())
	defer adm.Close()
	c := client(t)
	metrics := func() string {
		_, body, _ := get(t, c, "GET", adm.URL+"/metrics", nil, "")
		return body
	}
	if m := metrics(); !strings.Contains(m, `name="drop"`) || !strings.Contains(m, `name="keep"`) {
		t.Fatalf("before: no budget metrics for the routes:\n%.2000s", m)
	}
	write(t, path, listener+fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  keep: {upstream: a, path_prefix: /keep}\n", b.host))
	if err := g.Reload(path); err != nil {
		t.Fatal(err)
	}
	if m := metrics(); strings.Contains(m, `name="drop"`) || !strings.Contains(m, `name="keep"`) {
		t.Fatalf("after dropping route drop:\n%.2000s", m)
	}
}

// /state says why a host's breaker opened.
func TestStateShowsTheTripReason(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	g, srv := front(t, listener+fmt.Sprintf(`
breakers:
  per-host: {consecutive_failures: 3}
upstreams:
  a: {hosts: [%s], breaker: per-host, consecutive_errors: off}
routes:
  r: {upstream: a, retry: once}
retries:
  once: {max_attempts: 1}
`, b.host))
	c := client(t)
	for range 3 {
		get(t, c, "GET", srv.URL+"/", nil, "")
	}
	br := g.State().Upstreams[0].Breakers[0]
	if br.State != "open" || !strings.Contains(br.Reason, "consecutive failures: 3 in a row") {
		t.Fatalf("breaker in /state: %+v", br)
	}
}
