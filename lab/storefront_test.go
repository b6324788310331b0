package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestStorefrontQuick runs the Quick storefront on real servers on 127.0.0.1
// and asserts loosely, so that it holds on a loaded 2-core machine under
// -race: the protected gateway keeps its healthy routes, the unprotected one
// loses them. The full run's bounds (99.9%, p99 within 1.2× of the warm-up)
// are the scenario's checks, not this test's.
func TestStorefrontQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("storefront runs real HTTP servers for about 10 s")
	}
	s, err := Lookup("storefront")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	start := time.Now()
	res, err := s.Run(t.Context(), Options{Seed: 1, Quick: true, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("took %v\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	for _, tb := range res.Tables {
		t.Log(tb.Title)
		for _, r := range tb.Rows {
			t.Log("  ", strings.Join(r, " | "))
		}
	}
	for _, c := range res.Checks {
		t.Logf("check %v: %s: %s", c.OK, c.Name, c.Detail)
	}

	doc, ok := res.JSON.(StorefrontJSON)
	if !ok {
		t.Fatalf("JSON is %T, want StorefrontJSON", res.JSON)
	}
	if doc.Scenario != "storefront" || doc.Slow != "recommendation" {
		t.Errorf("JSON scenario %q slow %q, want storefront, recommendation", doc.Scenario, doc.Slow)
	}
	if len(doc.Results) != 6 {
		t.Fatalf("got %d result rows, want 6 (2 configurations × 3 routes)", len(doc.Results))
	}
	var failed []string
	fail := func(format string, args ...any) { failed = append(failed, fmt.Sprintf(format, args...)) }
	for _, r := range doc.Results {
		if r.Requests == 0 {
			t.Errorf("%s %s: no requests", r.Config, r.Route)
			continue
		}
		switch {
		case r.Route == "recommendation" && r.Config == "protected":
			// The stalled route degrades to the fallback.
			if r.Fallback == 0 {
				t.Errorf("protected recommendation: no fallback served")
			}
		case r.Route == "recommendation":
		case r.Config == "protected":
			if r.SuccessRate < 0.99 {
				fail("protected %s: success %.2f%%, want ≥ 99%%", r.Route, 100*r.SuccessRate)
			}
		case r.Config == "unprotected":
			if r.SuccessRate >= 0.7 {
				fail("unprotected %s: success %.2f%%, want < 70%% (the stall should take the shared pool)", r.Route, 100*r.SuccessRate)
			}
		}
	}
	if len(failed) > 0 {
		// A real network needs a machine that keeps up. When other
		// processes hold its cores, this one is paused: the load generator
		// sends late, every answer is late by as much, and a pause longer
		// than an attempt timeout fails healthy calls. The numbers then
		// measure the machine, not the protections: say so and skip. On a
		// machine that kept up, a miss is a failure.
		if why := storefrontStarved(doc); why != "" {
			t.Skipf("machine too loaded for a real-network measurement (%s); would have failed:\n%s", why, strings.Join(failed, "\n"))
		}
		for _, f := range failed {
			t.Error(f)
		}
	}
	if len(doc.Noise) != 2 {
		t.Errorf("got %d noise rows, want 2", len(doc.Noise))
	}
	if len(doc.Sizing) != 3 {
		t.Errorf("got %d sizing rows, want 3", len(doc.Sizing))
	}
	for _, z := range doc.Sizing {
		if z.Bulkhead < 1 || z.TimeoutMs <= 0 || z.MaxWaitMs <= 0 {
			t.Errorf("sizing %+v: want a bulkhead and a timeout", z)
		}
	}
	if len(res.Charts) != 1 || len(res.Charts[0].Series) != 6 {
		t.Errorf("want one chart with 6 series, got %d charts", len(res.Charts))
	}
	if len(res.Checks) != 6 {
		t.Errorf("got %d checks, want 6 (3 per healthy route)", len(res.Checks))
	}
	goleak.VerifyNone(t)
}

// storefrontStarved says why the machine did not keep up during a run, or ""
// if it did: the load generator sent a request more than 50 ms late during
// the protected stalled phase, or the protected gateway's healthy warm-up
// already missed (before any stall, before the protections were installed).
func storefrontStarved(doc StorefrontJSON) string {
	var why []string
	for _, n := range doc.Noise {
		if n.Config == "protected" && n.LagMaxMs > 50 {
			why = append(why, fmt.Sprintf("the load generator was paused for up to %.0f ms", n.LagMaxMs))
		}
	}
	for _, r := range doc.Results {
		if r.Config == "protected" && r.Route != doc.Slow && (r.WarmupSuccessRate < 0.99 || r.WarmupP99Ms > 100) {
			why = append(why, fmt.Sprintf("healthy warm-up of %s: success %.2f%%, p99 %.0f ms", r.Route, 100*r.WarmupSuccessRate, r.WarmupP99Ms))
		}
	}
	return strings.Join(why, "; ")
}

func TestStorefrontOptions(t *testing.T) {
	if _, err := sfParamsFor(Options{Slow: "inventory"}); err == nil {
		t.Error("Slow: inventory: no error")
	}
	if _, err := sfParamsFor(Options{Stall: -time.Second}); err == nil {
		t.Error("Stall: -1s: no error")
	}
	p, err := sfParamsFor(Options{Slow: "payment", Stall: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if sfRoutes[p.slow].name != "payment" || p.stall != 5*time.Second {
		t.Errorf("got slow %s stall %v, want payment 5s", sfRoutes[p.slow].name, p.stall)
	}
	p, _ = sfParamsFor(Options{})
	if sfRoutes[p.slow].name != "recommendation" || p.stall != 3*time.Second {
		t.Errorf("defaults: got slow %s stall %v, want recommendation 3s", sfRoutes[p.slow].name, p.stall)
	}
	// Open loop needs the stall to take the whole shared pool.
	if need := p.rate * p.stall.Seconds(); need < 3*float64(p.workers) {
		t.Errorf("rate × stall = %.0f stalled calls for %d workers: the collapse would not show", need, p.workers)
	}
}

func TestStorefrontSchedule(t *testing.T) {
	p, _ := sfParamsFor(Options{Seed: 7, Quick: true})
	a, b := sfSchedule(p), sfSchedule(p)
	if len(a) != len(b) {
		t.Fatalf("same seed, %d and %d arrivals", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, arrival %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	var per [3]int
	for i, x := range a {
		per[x.route]++
		if i > 0 && x.at < a[i-1].at {
			t.Fatalf("arrival %d out of order", i)
		}
	}
	want := p.rate * (p.warmup + p.stalled).Seconds()
	for i, n := range per {
		if float64(n) < 0.8*want || float64(n) > 1.2*want {
			t.Errorf("%s: %d arrivals, want about %.0f", sfRoutes[i].name, n, want)
		}
	}
	p.seed = 8
	if c := sfSchedule(p); len(c) == len(a) && c[0] == a[0] {
		t.Error("another seed gave the same schedule")
	}
}

func TestStorefrontCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err := Lookup("storefront")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, Options{Quick: true, Progress: io.Discard}); err == nil {
		t.Error("cancelled run: no error")
	}
	goleak.VerifyNone(t)
}
