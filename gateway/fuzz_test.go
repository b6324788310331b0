package gateway_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/contrib/watertightconfig"
	"github.com/watertight-go/watertight/gateway"
)

// FuzzParse feeds the gateway's parser arbitrary files: it never panics,
// and either accepts the file (and New builds it) or says, for every
// problem, FILE:LINE: path: rule.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	for _, s := range []string{
		"",
		"listeners: {public: {address: 127.0.0.1:8080}}\nupstreams: {a: {hosts: [127.0.0.1:1]}}\nroutes: {all: {upstream: a}}\n",
		"listeners: {public: {address: ':8080', trusted_proxies: [10.0.0.0/8, 192.168.1.1], tls_cert: a}}\n",
		"upstreams: {a: {hosts: [h:1, h:1], strategy: peak_ewma, consecutive_errors: off, slow_factor: 1.2, max_ejected: 0}}\n",
		"routes: {r: {upstream: a, timeout: off, per_try_timeout: 1s, methods: [get], path_prefix: api, fallback: {status: 99}}}\n",
		"routes: [1, 2]\nadmin: {address: nope}\n",
		"x-a: &a {hosts: [127.0.0.1:1]}\nupstreams: {a: *a, b: {<<: *a, scheme: ftp}}\n",
		"listeners: {public: {address: 127.0.0.1:8080}}\nupstreams: {a: {hosts: [127.0.0.1:1, 127.0.0.1:2], protocol: h2c}, b: {hosts: [127.0.0.1:3]}}\n" +
			"routes: {r: {upstream: a, tenants: {key: header X-Tier, max_concurrent: 4, shares: {premium: 3, free: 1}}, cells: {key: api_key, pools: {acme: b}}, shard: {key: client_address, size: 2}, grpc: {retryable: [/p.S/M]}}}\n",
		"hedges: {h: {delay: 5ms, percentile: off}}\nlimiters: {l: {}}\nlisteners: {public: {address: 127.0.0.1:8080}}\nupstreams: {a: {hosts: [127.0.0.1:1], limiter: l}}\n" +
			"routes: {r: {upstream: a, hedge: h, limiter: l, idempotency: {store: redis, redis: 127.0.0.1:1, scope: shared}, chaos: {latency: 5ms, latency_rate: 10%, abort_rate: 1%}}}\n",
		"routes: {r: {upstream: a, tenants: {key: header x, max_concurrent: 1, shares: {a: 1, b: 2}}, shard: {key: header, size: 99}, chaos: {}, grpc: {retryable: [nope]}}}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		cfg, err := gateway.Parse("fuzz.yaml", []byte(data))
		if err != nil {
			var es watertightconfig.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("not an Errors list: %v", err)
			}
			for _, e := range es {
				if e.File != "fuzz.yaml" || e.Msg == "" || !strings.HasPrefix(e.Error(), "fuzz.yaml") {
					t.Fatalf("error without its place or rule: %q", e.Error())
				}
			}
			return
		}
		g, err := gateway.New(cfg, gateway.Options{})
		if err != nil {
			t.Fatalf("Parse accepted a file New refuses: %v\n%s", err, data)
		}
		g.Close()
	})
}
