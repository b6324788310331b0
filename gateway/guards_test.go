package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPathsMustBeNormalised(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	_, srv := front(t, listener+fmt.Sprintf("upstreams:\n  a: {hosts: [%s]}\nroutes:\n  pub: {upstream: a, path_prefix: /public/}\n", b.host))
	c := client(t)
	for _, p := range []string{"/public/../private/x", "/public/%2e%2e/private", "/public/./x", "/public//x"} {
		if code, _, _ := get(t, c, "GET", srv.URL+p, nil, ""); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", p, code)
		}
	}
	if code, _, _ := get(t, c, "GET", srv.URL+"/public/x/", nil, ""); code != 200 {
		t.Errorf("a clean path with a trailing slash: %d", code)
	}
	if n := b.hits.Load(); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1", n)
	}
}

// A request whose deadline passes while it waits for the route's bulkhead
// gets 504, not an empty answer.
func TestBulkheadWaitPastDeadline(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	defer close(release)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	_, srv := front(t, listener+fmt.Sprintf(`
bulkheads:
  one: {max_concurrent: 1, max_wait: 1s}
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, bulkhead: one, timeout: 300ms}
`, b.host))
	c := client(t)
	held := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", srv.URL+"/hold", nil, "")
		held <- code
	}()
	<-arrived // the first request holds the permit
	code, body, _ := get(t, c, "GET", srv.URL+"/wait", http.Header{"X-Request-Timeout-Ms": {"50"}}, "")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "deadline passed while it waited") {
		t.Fatalf("waited past its deadline: %d %q", code, body)
	}
	<-held
}

// Upstreams sharing a breakers: entry show only their own hosts' breakers.
func TestSharedBreakerRegistryPerUpstream(t *testing.T) {
	a := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	g, srv := front(t, listener+fmt.Sprintf(`
breakers:
  per-host: {}
upstreams:
  a: {hosts: [%s], breaker: per-host}
  b: {hosts: [%s], breaker: per-host}
routes:
  ra: {upstream: a, path_prefix: /a}
  rb: {upstream: b, path_prefix: /b}
`, a.host, b.host))
	c := client(t)
	get(t, c, "GET", srv.URL+"/a", nil, "")
	get(t, c, "GET", srv.URL+"/b", nil, "")
	for _, u := range g.State().Upstreams {
		if len(u.Breakers) != 1 {
			t.Fatalf("upstream %s shows %d breakers: %+v", u.Name, len(u.Breakers), u.Breakers)
		}
		want := map[string]string{"a": a.host, "b": b.host}[u.Name]
		if u.Breakers[0].Host != want {
			t.Fatalf("upstream %s shows %s's breaker", u.Name, u.Breakers[0].Host)
		}
	}
}

// The route's timeout is the host's to meet: a host that misses it has its
// breaker opened. A client's own short deadline is not: it opens nothing.
func TestRouteTimeoutCountsClientDeadlineDoesNot(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	cfg := func(timeout string) string {
		return listener + fmt.Sprintf(`
breakers:
  per-host: {consecutive_failures: 3}
upstreams:
  a: {hosts: [%s], breaker: per-host, consecutive_errors: off, slow_factor: off}
routes:
  r: {upstream: a, timeout: %s}
`, b.host, timeout)
	}
	c := client(t)
	g, srv := front(t, cfg("2s"))
	for range 5 {
		if code, _, _ := get(t, c, "GET", srv.URL+"/", http.Header{"X-Request-Timeout-Ms": {"30"}}, ""); code != http.StatusGatewayTimeout {
			t.Fatalf("a client's 30 ms deadline: %d", code)
		}
	}
	if st := g.State().Upstreams[0].Breakers[0].State; st != "closed" {
		t.Fatalf("clients' short deadlines moved the host's breaker to %s", st)
	}
	g2, srv2 := front(t, cfg("30ms"))
	for range 3 {
		get(t, c, "GET", srv2.URL+"/", nil, "")
	}
	if st := g2.State().Upstreams[0].Breakers[0].State; st != "open" {
		t.Fatalf("three route timeouts: breaker %s, want open", st)
	}
}

// A body that streams past the route's limit is the client's doing: the
// client gets 413, and the host's breaker and the Balancer count nothing
// against the host (the upstream saw a body cut short, through no fault
// of its own).
func TestStreamedBodyOverLimitIsNotTheHosts(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	g, srv := front(t, listener+fmt.Sprintf(`
breakers:
  per-host: {consecutive_failures: 2}
upstreams:
  a: {hosts: [%s], breaker: per-host, consecutive_errors: 2}
routes:
  r: {upstream: a, max_body_bytes: 1000, retry_body_bytes: 100}
`, b.host))
	c := client(t)
	for range 4 {
		// No Content-Length: the limit is found while the body streams,
		// after the first 100 bytes went upstream.
		req, _ := http.NewRequest("POST", srv.URL+"/upload", struct{ io.Reader }{strings.NewReader(strings.Repeat("x", 5000))})
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("5000 streamed bytes over a limit of 1000: %d", resp.StatusCode)
		}
	}
	st := g.State().Upstreams[0]
	if br := st.Breakers[0]; br.State != "closed" {
		t.Fatalf("bodies over the limit moved the host's breaker to %s (%s)", br.State, br.Reason)
	}
	for _, h := range st.Balance.Hosts {
		if h.Ejected {
			t.Fatalf("bodies over the limit ejected host %s", h.Addr)
		}
	}
	if code, _, _ := get(t, c, "GET", srv.URL+"/", nil, ""); code != 200 {
		t.Fatalf("a GET after them: %d", code)
	}
}
