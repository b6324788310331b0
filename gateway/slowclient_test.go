package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/gateway"
)

// A slowloris client (a header that never ends) is cut at the listener's
// read_header_timeout, and a header over max_header_bytes gets 431, while
// other clients are served.
func TestSlowAndOversizedClients(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	pub, adm := deadAddress(t), deadAddress(t)
	cfg, err := gateway.Parse("slow.yaml", []byte(fmt.Sprintf(`
listeners:
  public: {address: %s, read_header_timeout: 200ms, max_header_bytes: 4096}
admin: {address: %s}
upstreams:
  a: {hosts: [%s]}
routes:
  all: {upstream: a}
`, pub, adm, b.host)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	c := client(t)
	for i := 0; ; i++ { // until it listens
		if resp, err := c.Get("http://" + pub + "/"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 500 {
			t.Fatal("the gateway never listened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Ten slowloris connections: a request line and one header, then
	// nothing.
	var slow []net.Conn
	for range 10 {
		conn, err := net.Dial("tcp", pub)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n")
		slow = append(slow, conn)
	}
	start := time.Now()
	for i := range 50 {
		if code, body, _ := get(t, c, "GET", "http://"+pub+"/", nil, ""); code != 200 || body != "ok" {
			t.Fatalf("request %d beside the slow clients: %d %q", i, code, body)
		}
	}
	for i, conn := range slow {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatalf("slow client %d: the gateway did not close it: %v", i, err)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the slow clients were held %v", d)
	}
	code, _, _ := get(t, c, "GET", "http://"+pub+"/", http.Header{"X-Big": {strings.Repeat("x", 20000)}}, "")
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 20000-byte header over a limit of 4096 (net/http allows 4 KiB more): %d", code)
	}
	if n := b.hits.Load(); n != 51 {
		t.Fatalf("the upstream got %d requests, want 51", n)
	}
}
