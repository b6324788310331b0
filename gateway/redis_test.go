package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight/gateway"
)

// redisAddr returns the Redis of WATERTIGHT_REDIS_ADDR (scripts/test.sh
// starts one). Without it the test is skipped, or fails under
// WATERTIGHT_REQUIRE_REDIS=1 (as in CI).
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("WATERTIGHT_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal("WATERTIGHT_REQUIRE_REDIS=1 but WATERTIGHT_REDIS_ADDR is unset: run the tests with bash scripts/test.sh, which starts a redis-server")
		}
		t.Skip("no Redis: set WATERTIGHT_REDIS_ADDR (bash scripts/test.sh starts a redis-server)")
	}
	return addr
}

// Two gateway instances sharing a Redis store run a keyed POST upstream
// once: the second instance replays the first's answer.
func TestIdempotencyAcrossInstancesOnRedis(t *testing.T) {
	addr := redisAddr(t)
	var runs atomic.Int64
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "run %d", runs.Add(1))
	})
	yaml := listener + fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, idempotency: {store: redis, redis: %q, ttl: 1m}}
`, b.host, addr)
	instance := func() *httptest.Server {
		cfg, err := gateway.Parse("redis.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		g, err := gateway.New(cfg, gateway.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler("public"))
		t.Cleanup(func() { srv.Close(); g.Close() })
		return srv
	}
	one, two := instance(), instance()
	c := client(t)
	key := http.Header{"Idempotency-Key": {fmt.Sprintf(`"gw-across-%d-%s"`, os.Getpid(), t.Name())}}
	_, first, _ := get(t, c, "POST", one.URL+"/pay", key, "10 EUR")
	code, second, _ := get(t, c, "POST", two.URL+"/pay", key, "10 EUR")
	if code != 200 || second != first || runs.Load() != 1 {
		t.Fatalf("the same keyed POST through a second instance: %d %q (first %q), %d runs upstream; want the first's answer replayed, 1 run", code, second, first, runs.Load())
	}
}
