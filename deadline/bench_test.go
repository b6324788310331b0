package deadline_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
)

func benchPropagator(b *testing.B) *deadline.Propagator {
	p, err := deadline.New(deadline.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkIncoming reads the timeout from a request's header map, in the
// three cases of precedence.
func BenchmarkIncoming(b *testing.B) {
	p := benchPropagator(b)
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"ours", http.Header{"Accept": {"*/*"}, "X-Request-Timeout-Ms": {"250"}}},
		{"grpc", http.Header{"Accept": {"*/*"}, "Grpc-Timeout": {"250m"}}},
		{"envoy", http.Header{"Accept": {"*/*"}, "X-Envoy-Expected-Rq-Timeout-Ms": {"250"}}},
		{"none", http.Header{"Accept": {"*/*"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := p.Incoming(bc.h); ok == (bc.name == "none") {
						b.Fatal("wrong ok")
					}
				}
			})
		})
	}
}

// BenchmarkWithIncoming derives the request's context from its headers.
func BenchmarkWithIncoming(b *testing.B) {
	p := benchPropagator(b)
	h := http.Header{"X-Request-Timeout-Ms": {"250"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, cancel := p.WithIncoming(context.Background(), h)
			cancel()
		}
	})
}

// BenchmarkInject writes the remaining time on an outgoing request's header
// map (reused, as a retry does) and on a fresh one.
func BenchmarkInject(b *testing.B) {
	p := benchPropagator(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			h := http.Header{}
			for pb.Next() {
				if err := p.Inject(ctx, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Inject(ctx, http.Header{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkCheck is the fail-fast test on a context with a deadline.
func BenchmarkCheck(b *testing.B) {
	p := benchPropagator(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.Check(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkOutgoingMillis is the Transport's per-request call: the time to
// send on, in whole milliseconds, for a context with plenty of time left.
func BenchmarkOutgoingMillis(b *testing.B) {
	p := benchPropagator(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, err := p.OutgoingMillis(ctx); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkIncomingConflicts reads several values, the shortest winning:
// two lines, a list, and values on every header.
func BenchmarkIncomingConflicts(b *testing.B) {
	p := benchPropagator(b)
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"lines", http.Header{"X-Request-Timeout-Ms": {"5000", "250"}}},
		{"list", http.Header{"X-Request-Timeout-Ms": {"5000, 250"}}},
		{"all", http.Header{"X-Request-Timeout-Ms": {"5000"}, "Grpc-Timeout": {"1S"}, "X-Envoy-Expected-Rq-Timeout-Ms": {"250"}, "X-Envoy-Upstream-Rq-Timeout-Ms": {"700"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, ok := p.Incoming(bc.h); !ok || d != 250*time.Millisecond {
						b.Fatal(d, ok)
					}
				}
			})
		})
	}
}

// BenchmarkIncomingMalformed is a flood of malformed values: counted, sent
// to the Listener as events (none, or one that counts them), and logged at
// most once per WarnInterval.
func BenchmarkIncomingMalformed(b *testing.B) {
	var n atomic.Int64
	for _, bc := range []struct {
		name string
		l    watertight.Listener
	}{
		{"nolistener", nil},
		{"listener", watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := deadline.New(deadline.Config{Logger: slog.New(slog.DiscardHandler), Listener: bc.l})
			if err != nil {
				b.Fatal(err)
			}
			h := http.Header{"X-Request-Timeout-Ms": {"soon"}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := p.Incoming(h); ok {
						b.Fatal("accepted")
					}
				}
			})
		})
	}
}
