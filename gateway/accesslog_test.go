package gateway_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/watertight-go/watertight/gateway"
)

// syncBuffer is a log sink safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

func TestAccessLog(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("12345"))
	})
	var logs syncBuffer
	cfg, err := gateway.Parse("log.yaml", []byte(listener+fmt.Sprintf(`
upstreams:
  a: {hosts: [%s], consecutive_errors: off, slow_factor: off}
routes:
  all: {upstream: a, access_log: 100%%}
  quiet: {upstream: a, path_prefix: /fail, access_log: 0}
`, b.host)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("public"))
	defer func() {
		srv.Close()
		g.Close()
	}()
	c := client(t)
	for range 5 {
		get(t, c, "GET", srv.URL+"/ok", nil, "")
	}
	if n := logs.lines(`msg=access route=all method=GET path=/ok status=200 bytes=5`); n != 5 {
		t.Fatalf("%d access lines for 5 requests at 100%%:\n%s", n, logs.b.String())
	}
	// A route logging none of its successes logs its failures, at most 10
	// a second.
	for range 30 {
		get(t, c, "GET", srv.URL+"/fail", nil, "")
	}
	if n := logs.lines(`route=quiet method=GET path=/fail status=500`); n < 10 || n > 20 {
		t.Fatalf("%d error lines for 30 failures (10 a second, the test spanning at most two seconds)", n)
	}
}
