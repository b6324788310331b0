package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/gateway"
)

func TestExampleConfig(t *testing.T) {
	for _, path := range []string{"testdata/example.yaml", "../examples/gateway/gateway.yaml"} {
		cfg, err := gateway.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(cfg.Routes) != 2 || cfg.Routes[0].Name != "catalog" || cfg.Routes[0].PerTryTimeout != 500*time.Millisecond {
			t.Fatalf("%s: routes %+v", path, cfg.Routes)
		}
		if u := cfg.Upstreams["catalog"]; len(u.Hosts) != 2 || u.Breaker != "per-host" || u.Scheme != "http" {
			t.Fatalf("%s: upstream %+v", path, u)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := gateway.Parse("d.yaml", []byte("listeners:\n  public: {address: 127.0.0.1:8080}\nupstreams:\n  a: {hosts: [127.0.0.1:9001], strategy: peak_ewma, consecutive_errors: off, max_ejected: 20%}\nroutes:\n  all: {upstream: a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, r, u := cfg.Listeners["public"], cfg.Routes[0], cfg.Upstreams["a"]
	if l.ReadHeaderTimeout != gateway.DefaultReadHeaderTimeout || l.IdleTimeout != gateway.DefaultIdleTimeout || l.MaxHeaderBytes != gateway.DefaultMaxHeaderBytes {
		t.Errorf("listener defaults %+v", l)
	}
	if cfg.Admin.Address != gateway.DefaultAdminAddress {
		t.Errorf("admin %+v", cfg.Admin)
	}
	if r.PathPrefix != "/" || r.Timeout != gateway.DefaultRouteTimeout || r.MaxBodyBytes != gateway.DefaultMaxBodyBytes || r.RetryBodyBytes != gateway.DefaultRetryBodyBytes || r.Retry != "" {
		t.Errorf("route defaults %+v", r)
	}
	if u.Balance.Strategy != balance.PeakEWMA || u.Balance.ConsecutiveErrors != -1 || u.Balance.MaxEjectedShare != 0.2 || u.ConnectTimeout != gateway.DefaultConnectTimeout {
		t.Errorf("upstream %+v", u)
	}
}

func TestConfigErrors(t *testing.T) {
	const ok = "listeners:\n  public: {address: 127.0.0.1:8080}\nupstreams:\n  a: {hosts: [127.0.0.1:9001]}\n"
	for _, c := range []struct {
		name, file, want string
	}{
		{"no listeners", "upstreams:\n  a: {hosts: [127.0.0.1:1]}\nroutes:\n  r: {upstream: a}\n", "e.yaml: listeners: the file needs at least one listener"},
		{"no routes", ok, "e.yaml: routes: the file needs at least one route"},
		{"admin on a public address", "admin: {address: 127.0.0.1:8080}\n" + ok + "routes:\n  r: {upstream: a}\n", "e.yaml:1: admin.address: is listener public's address too"},
		{"default admin on a public address", "listeners:\n  public: {address: 127.0.0.1:9901}\nupstreams:\n  a: {hosts: [127.0.0.1:1]}\nroutes:\n  r: {upstream: a}\n", "admin.address: the default, 127.0.0.1:9901, is listener public's address"},
		{"two listeners, one address", "listeners:\n  a: {address: ':80'}\n  b: {address: ':80'}\n" + "upstreams:\n  u: {hosts: [127.0.0.1:1]}\nroutes:\n  r: {upstream: u}\n", "e.yaml:3: listeners.b.address: listener a already listens on :80"},
		{"unknown upstream", ok + "routes:\n  r: {upstream: b}\n", `e.yaml:6: routes.r.upstream: no upstream named "b" (upstreams: a)`},
		{"unknown retry", ok + "routes:\n  r: {upstream: a, retry: reads}\n", `e.yaml:6: routes.r.retry: no retry policy named "reads" (retries: none)`},
		{"per try over total", ok + "routes:\n  r: {upstream: a, timeout: 1s, per_try_timeout: 2s}\n", "e.yaml:6: routes.r.per_try_timeout: is 2s, more than the route's timeout 1s"},
		{"host without port", "listeners:\n  public: {address: 127.0.0.1:8080}\nupstreams:\n  a: {hosts: [backend]}\nroutes:\n  r: {upstream: a}\n", `e.yaml:4: upstreams.a.hosts: must list host:port addresses, got "backend"`},
		{"typo", ok + "routes:\n  r: {upstream: a, timout: 1s}\n", "e.yaml:6: routes.r.timout: unknown field (did you mean timeout?)"},
		{"lower-case method", ok + "routes:\n  r: {upstream: a, methods: [get]}\n", `must list methods in capitals (GET, POST), got "get"`},
		{"prefix without slash", ok + "routes:\n  r: {upstream: a, path_prefix: api}\n", `routes.r.path_prefix: must start with /, got "api"`},
		{"fallback status", ok + "routes:\n  r: {upstream: a, fallback: {status: 99}}\n", "routes.r.fallback.status: must be >= 200, got 99"},
		{"slow factor", "listeners:\n  public: {address: 127.0.0.1:8080}\nupstreams:\n  a: {hosts: [127.0.0.1:1], slow_factor: 1.2}\nroutes:\n  r: {upstream: a}\n", "upstreams.a.slow_factor: must be at least 1.5 (or off), got 1.2"},
		{"tls half", "listeners:\n  public: {address: 127.0.0.1:8443, tls_cert: c.pem}\nupstreams:\n  a: {hosts: [127.0.0.1:1]}\nroutes:\n  r: {upstream: a}\n", "e.yaml:2: listeners.public: give both tls_cert and tls_key, or neither"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gateway.Parse("e.yaml", []byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, c.want)
			}
		})
	}
}
