package deadline_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

// Conflicting values never lengthen a deadline: the shortest well-formed
// value wins, of several lines of one header, of the elements of a list, and
// across every header read; a malformed value beside a good one is skipped
// and warned about.
func TestIncomingShortestWins(t *testing.T) {
	for _, tc := range []struct {
		name      string
		h         http.Header
		want      time.Duration
		ok        bool
		malformed uint64
	}{
		{"two lines", header("X-Request-Timeout-Ms", "5000", "X-Request-Timeout-Ms", "50"), 50 * time.Millisecond, true, 0},
		{"two lines, short first", header("X-Request-Timeout-Ms", "50", "X-Request-Timeout-Ms", "5000"), 50 * time.Millisecond, true, 0},
		{"a list", header("X-Request-Timeout-Ms", "5000, 50"), 50 * time.Millisecond, true, 0},
		{"a list without spaces", header("X-Request-Timeout-Ms", "5000,50,700"), 50 * time.Millisecond, true, 0},
		{"empty elements skipped", header("X-Request-Timeout-Ms", ", 5000 ,, 50 ,"), 50 * time.Millisecond, true, 0},
		{"a list of nothing", header("X-Request-Timeout-Ms", " , "), 0, false, 1},
		{"malformed beside good", header("X-Request-Timeout-Ms", "soon, 5000"), 5 * time.Second, true, 1},
		{"malformed line beside good", header("X-Request-Timeout-Ms", "-1", "X-Request-Timeout-Ms", "250"), 250 * time.Millisecond, true, 1},
		{"grpc shorter than ours", header("X-Request-Timeout-Ms", "5000", "Grpc-Timeout", "50m"), 50 * time.Millisecond, true, 0},
		{"grpc lines", header("Grpc-Timeout", "5S", "Grpc-Timeout", "50m, 1H"), 50 * time.Millisecond, true, 0},
		{"envoy shorter than ours", header("X-Request-Timeout-Ms", "5000", "X-Envoy-Expected-Rq-Timeout-Ms", "50"), 50 * time.Millisecond, true, 0},
		{"envoy upstream shortest", header("X-Request-Timeout-Ms", "5000", "Grpc-Timeout", "2S", "X-Envoy-Expected-Rq-Timeout-Ms", "3000", "X-Envoy-Upstream-Rq-Timeout-Ms", "40"), 40 * time.Millisecond, true, 0},
		{"zero wins", header("X-Request-Timeout-Ms", "5000", "Grpc-Timeout", "0n"), 0, true, 0},
		{"absurd and short", header("X-Request-Timeout-Ms", strings.Repeat("9", 30)+", 50"), 50 * time.Millisecond, true, 0},
		{"two above Max", header("X-Request-Timeout-Ms", "3600000", "Grpc-Timeout", "2H"), time.Minute, true, 0},
		{"all malformed", header("X-Request-Timeout-Ms", "a, b", "Grpc-Timeout", "5"), 0, false, 3},
	} {
		cfg, _ := quiet()
		cfg.Max = time.Minute
		p := mustNew(t, cfg)
		d, ok := p.Incoming(tc.h)
		if d != tc.want || ok != tc.ok {
			t.Errorf("%s: Incoming(%v) = %v, %v; want %v, %v", tc.name, tc.h, d, ok, tc.want, tc.ok)
		}
		if n := p.Warned(deadline.Malformed); n != tc.malformed {
			t.Errorf("%s: Warned(Malformed) = %d, want %d", tc.name, n, tc.malformed)
		}
	}
}

// The server's deadline comes from the shortest value, and its cause names
// that value's header.
func TestWithIncomingShortestHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		start := time.Now()
		ctx, cancel := p.WithIncoming(context.Background(), header("X-Request-Timeout-Ms", "5000", "X-Request-Timeout-Ms", "soon", "Grpc-Timeout", "50m"))
		defer cancel()
		<-ctx.Done()
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("done after %v, want 50ms", d)
		}
		var ee *deadline.ExpiredError
		if !errors.As(context.Cause(ctx), &ee) || ee.Header != deadline.HeaderGRPCTimeout || ee.Timeout != 50*time.Millisecond {
			t.Fatalf("cause %v, want grpc-timeout's 50ms", context.Cause(ctx))
		}
	})
}

func TestIncomingAllocs(t *testing.T) {
	cfg, _ := quiet()
	p := mustNew(t, cfg)
	for _, h := range []http.Header{
		header("X-Request-Timeout-Ms", "250"),
		header("X-Request-Timeout-Ms", "5000, 250", "Grpc-Timeout", "1S"),
		header("Accept", "*/*"),
	} {
		if n := testing.AllocsPerRun(100, func() { p.Incoming(h) }); n != 0 {
			t.Errorf("Incoming(%v): %v allocations, want none", h, n)
		}
	}
}
