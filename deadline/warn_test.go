package deadline_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/watertighthttp"
)

// lines returns the log's lines.
func lines(lb *logBuffer) []string {
	s := strings.TrimSpace(lb.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// A hostile client cannot flood the log: 2,000 malformed values give one
// line per reason and header each WarnInterval, every one is counted, and
// the next line says how many were left out.
func TestWarningsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, lb := quiet()
		p := mustNew(t, cfg)
		bad := header("X-Request-Timeout-Ms", "soon")
		for range 2000 {
			if _, ok := p.Incoming(bad); ok {
				t.Fatal("a malformed value was accepted")
			}
		}
		if n := p.Warned(deadline.Malformed); n != 2000 {
			t.Fatalf("Warned(Malformed) = %d, want 2000", n)
		}
		if ls := lines(lb); len(ls) != 1 || strings.Contains(ls[0], "suppressed") {
			t.Fatalf("logged %d lines, want 1 with no count:\n%s", len(ls), lb)
		}
		// Another reason, and another header, have limits of their own.
		p.Incoming(header("X-Request-Timeout-Ms", strings.Repeat("9", 30)))
		p.Incoming(header("Grpc-Timeout", "1.5S"))
		if ls := lines(lb); len(ls) != 3 || !strings.Contains(ls[1], "absurd") || !strings.Contains(ls[2], "header=Grpc-Timeout") {
			t.Fatalf("logged %d lines, want 3:\n%s", len(ls), lb)
		}
		if a, m := p.Warned(deadline.Absurd), p.Warned(deadline.Malformed); a != 1 || m != 2001 {
			t.Fatalf("Warned = %d absurd, %d malformed; want 1, 2001", a, m)
		}
		time.Sleep(deadline.DefaultWarnInterval - time.Nanosecond)
		p.Incoming(bad)
		if ls := lines(lb); len(ls) != 3 {
			t.Fatalf("logged %d lines within the interval, want 3:\n%s", len(ls), lb)
		}
		time.Sleep(time.Nanosecond)
		p.Incoming(bad)
		ls := lines(lb)
		if len(ls) != 4 || !strings.Contains(ls[3], "suppressed=2000") || !strings.Contains(ls[3], "value=soon") {
			t.Fatalf("after the interval: %d lines, want a 4th saying suppressed=2000:\n%s", len(ls), lb)
		}
		p.Incoming(bad)
		if n, ls := p.Warned(deadline.Malformed), lines(lb); n != 2004 || len(ls) != 4 {
			t.Fatalf("Warned = %d, %d lines; want 2004, 4", n, len(ls))
		}
	})
}

func TestWarnIntervalConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, lb := quiet()
		cfg.WarnInterval = -1 // every warning
		p := mustNew(t, cfg)
		for range 5 {
			p.Incoming(header("X-Request-Timeout-Ms", "x"))
		}
		if ls := lines(lb); len(ls) != 5 {
			t.Fatalf("negative WarnInterval: %d lines, want 5", len(ls))
		}
		cfg, lb = quiet()
		cfg.WarnInterval = time.Second
		p = mustNew(t, cfg)
		for range 5 {
			p.Incoming(header("X-Request-Timeout-Ms", "x"))
			time.Sleep(500 * time.Millisecond)
		}
		if ls := lines(lb); len(ls) != 3 || !strings.Contains(ls[1], "suppressed=1") {
			t.Fatalf("1s WarnInterval over 2.5s: %d lines, want 3:\n%s", len(ls), lb)
		}
		if p.Warned(deadline.Malformed) != 5 || p.Warned(deadline.Absurd) != 0 || p.Warned(99) != 0 {
			t.Fatalf("Warned = %d, %d, %d", p.Warned(deadline.Malformed), p.Warned(deadline.Absurd), p.Warned(99))
		}
	})
	if deadline.Malformed.String() != "malformed" || deadline.Absurd.String() != "absurd" || deadline.Reason(9).String() != "unknown" {
		t.Error("Reason.String")
	}
}

// End to end: 2,000 requests with a malformed header to a server behind
// watertighthttp's Handler on 127.0.0.1 give one log line and a count of
// 2,000.
func TestHandlerMalformedFlood(t *testing.T) {
	cfg, lb := quiet()
	p := mustNew(t, cfg)
	h, err := watertighthttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), watertighthttp.HandlerConfig{Deadline: p})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // on 127.0.0.1
	defer srv.Close()
	client := srv.Client()
	for i := range 2000 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set(deadline.DefaultHeader, "-"+strings.Repeat("1", i%7))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	if n := p.Warned(deadline.Malformed); n != 2000 {
		t.Fatalf("Warned(Malformed) = %d, want 2000", n)
	}
	// One line; a second only if the test ran longer than the interval.
	if ls := lines(lb); len(ls) < 1 || len(ls) > 2 {
		t.Fatalf("logged %d lines for 2000 malformed requests, want 1:\n%.2000s", len(ls), lb)
	}
}
