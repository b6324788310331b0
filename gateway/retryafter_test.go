package gateway_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The 503 of a route whose hosts' breakers are all open says to come back
// when the first of them goes half-open: 30 s here, spread up to 10 s more.
func TestRetryAfterFromOpenBreakers(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	_, srv := front(t, listener+fmt.Sprintf(`
breakers:
  per-host: {consecutive_failures: 2, open_duration: 30s, open_jitter: 0}
upstreams:
  a: {hosts: [%s], breaker: per-host, consecutive_errors: off}
routes:
  r: {upstream: a}
`, b.host))
	c := client(t)
	for range 2 {
		get(t, c, "POST", srv.URL+"/", nil, "") // POSTs: not retried
	}
	seen := map[int]bool{}
	for range 40 {
		code, _, h := get(t, c, "GET", srv.URL+"/", nil, "")
		if code != http.StatusServiceUnavailable {
			t.Fatalf("with the breaker open: %d", code)
		}
		ra, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || ra < 29 || ra > 40 {
			t.Fatalf("Retry-After %q, want 29 to 40 (open for 30s, spread up to 10s)", h.Get("Retry-After"))
		}
		seen[ra] = true
	}
	if len(seen) < 3 {
		t.Fatalf("Retry-After took %d values in 40 answers: it is not spread", len(seen))
	}
}

// A full route's 503 says when its queue will have drained at the route's
// pace: a second or two for a route whose calls take 200 ms.
func TestRetryAfterFromAFullRoute(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(arrived)
			<-release
			return
		}
		time.Sleep(200 * time.Millisecond) // the route's pace: not synchronisation
	})
	_, srv := front(t, listener+fmt.Sprintf(`
bulkheads:
  one: {max_concurrent: 1, max_wait: 10ms}
upstreams:
  a: {hosts: [%s]}
routes:
  r: {upstream: a, bulkhead: one}
`, b.host))
	c := client(t)
	for range 3 {
		get(t, c, "GET", srv.URL+"/", nil, "")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, c, "GET", srv.URL+"/hold", nil, "")
	}()
	<-arrived // it holds the route's one permit
	code, _, h := get(t, c, "GET", srv.URL+"/", nil, "")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("with the route full: %d", code)
	}
	if ra := h.Get("Retry-After"); ra != "1" && ra != "2" {
		t.Fatalf("Retry-After %q, want 1 or 2", ra)
	}
	close(release)
	<-done
}
