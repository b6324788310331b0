package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Cells: a tenant with a pool of its own goes there; every other tenant
// to the route's upstream.
func TestCellsSendTenantsToTheirPools(t *testing.T) {
	shared := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "shared") })
	acme := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "acme") })
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  shared: {hosts: [%s]}
  acme-cell: {hosts: [%s]}
routes:
  api:
    upstream: shared
    cells: {key: header X-Partner, pools: {acme: acme-cell}}
`, shared.host, acme.host))
	c := client(t)
	for partner, want := range map[string]string{"acme": "acme", "globex": "shared", "": "shared"} {
		_, body, _ := get(t, c, "GET", srv.URL+"/", http.Header{"X-Partner": {partner}}, "")
		if body != want {
			t.Errorf("partner %q: served by %q, want %q", partner, body, want)
		}
	}
}

// Hedging: a GET not answered within the hedge's delay is sent again, to
// another host, and the first answer wins; a POST is never hedged.
func TestHedgedReadsGoToAnotherHost(t *testing.T) {
	release := make(chan struct{})
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "slow")
	})
	fast := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fast") })
	_, srv := front(t, listener+fmt.Sprintf(`
hedges:
  reads: {delay: 20ms, percentile: off}
upstreams:
  a: {hosts: [%s, %s], consecutive_errors: off, slow_factor: off}
routes:
  r: {upstream: a, hedge: reads}
`, slow.host, fast.host))
	c := client(t)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	for range 10 {
		start := time.Now()
		code, body, _ := get(t, c, "GET", srv.URL+"/", nil, "")
		if code != 200 || body != "fast" {
			t.Fatalf("GET: %d %q, want the fast host's answer", code, body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("GET took %v: not hedged", d)
		}
	}
	if slow.hits.Load() == 0 {
		t.Fatal("no request reached the slow host: the test did not exercise a hedge")
	}
	before := fast.hits.Load() + slow.hits.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, c, "POST", srv.URL+"/", nil, "x")
	}()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
	if n := fast.hits.Load() + slow.hits.Load() - before; n != 1 {
		t.Fatalf("a POST reached the upstream %d times, want once", n)
	}
	close(release) // let a POST held by the slow host end
	<-done
}

// Idempotency keys: a POST with a key runs upstream once and is replayed;
// the same key with another body is 422; a concurrent duplicate is 409.
func TestIdempotencyKeysAtTheGateway(t *testing.T) {
	var runs atomic.Int64
	hold := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if r.URL.Path == "/slow" {
			<-hold
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "run %d of %s", n, body)
	})
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, idempotency: {store: memory}}
`, b.host))
	c := client(t)
	key := http.Header{"Idempotency-Key": {`"k1"`}}
	_, first, _ := get(t, c, "POST", srv.URL+"/pay", key, "10 EUR")
	code, again, h := get(t, c, "POST", srv.URL+"/pay", key, "10 EUR")
	if code != 200 || again != first || runs.Load() != 1 {
		t.Fatalf("the same request again: %d %q (first %q), %d runs; want a replay of the one run", code, again, first, runs.Load())
	}
	_ = h
	if code, _, _ := get(t, c, "POST", srv.URL+"/pay", key, "99 EUR"); code != http.StatusUnprocessableEntity {
		t.Fatalf("the same key with another body: %d, want 422", code)
	}
	slowKey := http.Header{"Idempotency-Key": {`"k2"`}}
	var wg sync.WaitGroup
	wg.Go(func() { get(t, c, "POST", srv.URL+"/slow", slowKey, "x") })
	for runs.Load() != 2 {
		time.Sleep(time.Millisecond) // until the first is in flight upstream
	}
	if code, _, _ := get(t, c, "POST", srv.URL+"/slow", slowKey, "x"); code != http.StatusConflict {
		t.Fatalf("a duplicate while the first is in flight: %d, want 409", code)
	}
	close(hold)
	wg.Wait()
	if runs.Load() != 2 {
		t.Fatalf("%d runs upstream, want 2", runs.Load())
	}
}

// Redis unavailable: keyed requests fail closed, 503 with a problem body
// that says so, and nothing runs upstream; requests without a key pass.
func TestIdempotencyFailsClosedWithoutRedis(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, idempotency: {store: redis, redis: %s}}
`, b.host, deadAddress(t)))
	c := client(t)
	code, body, h := get(t, c, "POST", srv.URL+"/pay", http.Header{"Idempotency-Key": {`"k"`}}, "x")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") || !strings.Contains(body, "nothing was done") {
		t.Fatalf("a keyed POST with Redis down: %d %s %q", code, h.Get("Content-Type"), body)
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("the upstream ran %d requests", n)
	}
	if code, _, _ := get(t, c, "POST", srv.URL+"/pay", nil, "x"); code != 200 {
		t.Fatalf("a POST without a key: %d", code)
	}
}

// Chaos: a route with abort_rate 1 answers every request with the
// injected status, without sending it.
func TestChaosAbortsARoute(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, chaos: {abort_rate: 100%%, abort_status: 502}}
  calm: {upstream: a, path_prefix: /calm}
`, b.host))
	c := client(t)
	if code, _, h := get(t, c, "GET", srv.URL+"/", nil, ""); code != 502 || h.Get("X-Chaos-Injected") == "" {
		t.Fatalf("an aborted request: %d %v", code, h)
	}
	if code, _, _ := get(t, c, "GET", srv.URL+"/calm", nil, ""); code != 200 {
		t.Fatalf("a route without chaos: %d", code)
	}
	if n := b.hits.Load(); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1 (the calm route's)", n)
	}
}

// An adaptive limiter in place of a route's bulkhead admits requests and
// learns from them.
func TestRouteLimiter(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	g, srv := front(t, listener+fmt.Sprintf(`
limiters:
  adaptive: {initial_limit: 5}
upstreams:
  a: {hosts: [%s], limiter: adaptive}
routes:
  r: {upstream: a, limiter: adaptive}
`, b.host))
	c := client(t)
	for range 20 {
		if code, _, _ := get(t, c, "GET", srv.URL+"/", nil, ""); code != 200 {
			t.Fatalf("GET: %d", code)
		}
	}
	_ = g
}

// Shuffle sharding: a tenant's requests reach only the hosts of its shard,
// always the same ones.
func TestShardKeepsATenantOnItsHosts(t *testing.T) {
	var hosts []string
	var backends []*backend
	for range 6 {
		b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
		backends = append(backends, b)
		hosts = append(hosts, b.host)
	}
	_, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  pool: {hosts: [%s]}
routes:
  r: {upstream: pool, shard: {key: header X-Tenant, size: 2}}
`, strings.Join(hosts, ", ")))
	c := client(t)
	reached := func(tenant string) map[int]bool {
		before := make([]int64, len(backends))
		for i, b := range backends {
			before[i] = b.hits.Load()
		}
		for range 40 {
			if code, _, _ := get(t, c, "GET", srv.URL+"/", http.Header{"X-Tenant": {tenant}}, ""); code != 200 {
				t.Fatalf("tenant %s: %d", tenant, code)
			}
		}
		got := map[int]bool{}
		for i, b := range backends {
			if b.hits.Load() > before[i] {
				got[i] = true
			}
		}
		return got
	}
	a := reached("acme")
	if len(a) != 2 {
		t.Fatalf("tenant acme reached hosts %v, want the 2 of its shard", a)
	}
	again := reached("acme")
	for i := range again {
		if !a[i] {
			t.Fatalf("tenant acme reached hosts %v, then %v: its shard moved", a, again)
		}
	}
	differ := false
	for _, tenant := range []string{"globex", "initech", "umbrella", "hooli"} {
		o := reached(tenant)
		if len(o) != 2 {
			t.Fatalf("tenant %s reached hosts %v, want 2", tenant, o)
		}
		for i := range o {
			if !a[i] {
				differ = true
			}
		}
	}
	if !differ {
		t.Fatal("five tenants all got acme's shard: the key is not used")
	}
}

// Tenants: a flood of the free tier is refused in its own share, while
// the premium tier, under its share, gets through without a refusal; the
// same flood through one plain bulkhead of the same size refuses premium
// too.
func TestTenantsKeepPremiumThroughAFreeFlood(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond) // the upstream's pace, not synchronisation
	})
	run := func(admission string) (premiumRefused, freeRefused int64) {
		_, srv := front(t, listener+fmt.Sprintf(`
bulkheads:
  plain: {max_concurrent: 8, max_wait: 5ms}
upstreams:
  a: {hosts: [%s]}
routes:
  r:
    upstream: a
%s
`, b.host, admission))
		c := client(t)
		c.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
		var pr, fr atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 24 { // the free tier: 24 in flight, 12 times its share of 2
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if code, _, _ := get(t, c, "GET", srv.URL+"/", http.Header{"X-Tier": {"free"}}, ""); code != 200 {
						fr.Add(1)
					}
				}
			})
		}
		time.Sleep(100 * time.Millisecond) // let the flood build up: the load's shape
		var pw sync.WaitGroup
		for range 3 { // premium: 3 in flight, under its share of 6
			pw.Go(func() {
				for range 10 {
					if code, _, _ := get(t, c, "GET", srv.URL+"/", http.Header{"X-Tier": {"premium"}}, ""); code != 200 {
						pr.Add(1)
					}
				}
			})
		}
		pw.Wait()
		close(stop)
		wg.Wait()
		return pr.Load(), fr.Load()
	}
	pr, fr := run("    tenants: {key: header X-Tier, max_concurrent: 8, max_wait: 5ms, shares: {premium: 3, free: 1}}")
	if pr != 0 || fr == 0 {
		t.Fatalf("tenants: %d premium requests refused (want 0), %d free ones (want many)", pr, fr)
	}
	pr, _ = run("    bulkhead: plain")
	if pr == 0 {
		t.Fatal("one plain bulkhead refused no premium request under the flood: the test does not show what tenants change")
	}
}
