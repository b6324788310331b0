// Command stalled shows a bulkhead protecting two healthy routes from a
// stalled one.
//
// A gateway serves three routes — catalog (~10 ms), payment (~20 ms) and
// recommendation (~200 ms) — with one shared pool of workers. After a
// warm-up of a sixth of the run (0.5 s of the default 3 s), every
// recommendation call takes the stall latency (-stall, 3 s) instead of
// 200 ms, until the end of the run. Unprotected,
// the stalled calls take every worker and catalog and payment fail with it.
// Protected, each dependency gets its own bulkhead, an attempt timeout and a
// breaker, and recommendations fall back to an empty list: the stalled
// dependency can only ever hold its own few permits, and the healthy routes
// keep their latency.
//
// The load is open-loop (a fixed arrival rate, whatever the answers), so a
// collapse shows as failures rather than as a politely slower client.
//
//	go run ./examples/stalled
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/timeout"
)

type route struct {
	name    string
	latency time.Duration // healthy latency
}

var routes = []route{
	{"catalog", 10 * time.Millisecond},
	{"payment", 20 * time.Millisecond},
	{"recommendation", 200 * time.Millisecond},
}

func main() {
	rate := flag.Int("rate", 40, "requests per second per route (open loop)")
	duration := flag.Duration("duration", 3*time.Second, "load duration per configuration")
	stall := flag.Duration("stall", 3*time.Second, "latency of every recommendation call once the stall begins (a sixth into each run)")
	workers := flag.Int("workers", 20, "gateway worker pool shared by all routes")
	deadline := flag.Duration("deadline", time.Second, "client deadline per request")
	flag.Parse()

	fmt.Print(describe(*workers, *rate, *duration, *stall, *deadline))
	for _, protected := range []bool{false, true} {
		g, err := newGateway(*workers, *stall, protected)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		res := g.load(*rate, *duration, *deadline)
		name := "unprotected (one shared pool, no timeouts)"
		if protected {
			name = "protected (bulkhead + attempt timeout + breaker per dependency, fallback for recommendations)"
		}
		fmt.Println(name)
		fmt.Printf("  %-15s %9s %9s %9s %9s %9s\n", "route", "requests", "success", "p50", "p99", "fallback")
		for _, r := range routes {
			s := res[r.name]
			fmt.Printf("  %-15s %9d %8.1f%% %9v %9v %9d\n", r.name, s.n, 100*float64(s.ok)/float64(max(s.n, 1)),
				pct(s.lat, 50), pct(s.lat, 99), s.fallback)
		}
		fmt.Println()
	}
}

// stallStart is when, into a run of d, the recommendation service stalls:
// after a warm-up of a sixth of the run.
func stallStart(d time.Duration) time.Duration { return d / 6 }

// describe is the header: what the example runs, in its own words.
func describe(workers, rate int, d, stall, deadline time.Duration) string {
	return fmt.Sprintf("gateway: %d shared workers; load %d req/s per route for %v, twice (unprotected, then protected);\n"+
		"recommendation answers in 200ms, then from %v into each run every call to it takes %v; client deadline %v\n\n",
		workers, rate, d, stallStart(d), stall, deadline)
}

type gateway struct {
	pool      *bulkhead.Bulkhead // the shared workers
	stall     time.Duration
	protected bool
	pipes     map[string]*watertight.Pipeline
	stalledAt time.Time
}

func newGateway(workers int, stall time.Duration, protected bool) (*gateway, error) {
	// The shared workers: a queue without bound (MaxWaiters -1), as a plain
	// server's.
	pool, err := bulkhead.New(bulkhead.Config{Name: "workers", MaxConcurrent: workers, MaxWait: -1, MaxWaiters: -1})
	if err != nil {
		return nil, err
	}
	g := &gateway{pool: pool, stall: stall, protected: protected, pipes: map[string]*watertight.Pipeline{}}
	if !protected {
		return g, nil
	}
	for _, r := range routes {
		// Little's law: concurrency ≈ rate × latency; 40/s × 200 ms = 8 for
		// recommendations, with headroom; the attempt timeout sits above the
		// healthy p99.
		size := 4
		if r.name == "recommendation" {
			size = 10
		}
		bh, err := bulkhead.New(bulkhead.Config{Name: r.name, MaxConcurrent: size})
		if err != nil {
			return nil, err
		}
		br, err := circuit.New(circuit.Config{Name: r.name, WindowSize: 20, MinCalls: 10, OpenDuration: time.Second})
		if err != nil {
			return nil, err
		}
		to, err := timeout.New(timeout.Config{Name: r.name, Timeout: 3 * r.latency})
		if err != nil {
			return nil, err
		}
		if g.pipes[r.name], err = watertight.New(br, bh, to); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// call is the dependency: healthy latency, or the stall once it began.
func (g *gateway) call(ctx context.Context, r route) (string, error) {
	d := r.latency
	if r.name == "recommendation" && time.Now().After(g.stalledAt) {
		d = g.stall
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return r.name + " ok", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

type stats struct {
	n, ok, fallback int
	lat             []time.Duration
}

func (g *gateway) serve(ctx context.Context, r route) (fallback bool, err error) {
	if err := g.pool.Acquire(ctx); err != nil {
		return false, err
	}
	defer g.pool.Release()
	if !g.protected {
		// No timeouts: the outgoing call does not end when the client gives
		// up, so a stalled call keeps its worker for the whole stall.
		_, err := g.call(context.WithoutCancel(ctx), r)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err() // answered after the client had gone
		}
		return false, err
	}
	_, err = watertight.Do(ctx, g.pipes[r.name], func(ctx context.Context) (string, error) { return g.call(ctx, r) })
	if err != nil && r.name == "recommendation" && ctx.Err() == nil {
		return true, nil // degrade: no recommendations this time
	}
	return false, err
}

func (g *gateway) load(rate int, d, deadline time.Duration) map[string]*stats {
	var mu sync.Mutex
	res := map[string]*stats{}
	for _, r := range routes {
		res[r.name] = &stats{}
	}
	var wg sync.WaitGroup
	start := time.Now()
	g.stalledAt = start.Add(stallStart(d)) // a warm-up, then the stall
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for time.Since(start) < d {
		<-tick.C
		for _, r := range routes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				t0 := time.Now()
				fb, err := g.serve(ctx, r)
				lat := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				s := res[r.name]
				s.n++
				s.lat = append(s.lat, lat)
				if err == nil {
					s.ok++
				}
				if fb {
					s.fallback++
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && !watertight.IsRejection(err) {
					fmt.Fprintln(os.Stderr, "unexpected:", err)
				}
			}()
		}
	}
	wg.Wait()
	return res
}

func pct(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}
