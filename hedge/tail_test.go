package hedge_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/hedge"
)

// TestTailAtScale hedges calls to replicas whose latency is log-normal
// around 10 ms, with rare independent stalls (1% take a second), on the
// virtual clock of testing/synctest: hedging at the tracked p95 sends about
// 5% more requests and cuts the p99.9 by more than ten times. Run it with
// -v to see the figures (docs/hedging.md quotes them).
func TestTailAtScale(t *testing.T) {
	const calls = 5000
	draw := func(rng *rand.Rand) time.Duration {
		if rng.IntN(100) == 0 {
			return time.Second
		}
		return time.Duration(float64(10*time.Millisecond) * math.Exp(0.3*rng.NormFloat64()))
	}
	run := func(cfg hedge.Config) (lat []time.Duration, s hedge.Snapshot) {
		synctest.Test(t, func(t *testing.T) {
			p := newPolicy(t, cfg)
			rng := rand.New(rand.NewPCG(7, 13))
			for range calls {
				// Each attempt goes to another replica, with a latency of
				// its own, drawn before the call so that the draws do not
				// depend on the order of the goroutines.
				d := [3]time.Duration{draw(rng), draw(rng), draw(rng)}
				start := time.Now()
				if _, err := hedge.Do(idem, p, replica(d[:])); err != nil {
					t.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			s = p.Snapshot()
		})
		slices.Sort(lat)
		return lat, s
	}
	q := func(lat []time.Duration, q float64) time.Duration {
		return lat[int(math.Ceil(q*float64(len(lat))))-1]
	}
	newBudget := func() *budget.Budget {
		b, err := budget.New(budget.Config{Ratio: 0.05, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	none, _ := run(hedge.Config{Delay: time.Millisecond, MaxHedges: -1})
	p95, s := run(hedge.Config{Percentile: 0.95, Delay: 15 * time.Millisecond, MinDelay: time.Millisecond})
	fixed, sf := run(hedge.Config{Delay: 10 * time.Millisecond})
	budgeted, sb := run(hedge.Config{Delay: 10 * time.Millisecond, Budget: newBudget()})
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond / 10) }
	t.Logf("%d calls, latency log-normal around 10ms (σ 0.3), 1%% stall for 1s", calls)
	t.Logf("%-22s %8s %8s %8s %8s", "config", "p50", "p99", "p99.9", "extra")
	for _, r := range []struct {
		name  string
		lat   []time.Duration
		extra float64
	}{
		{"none", none, 0},
		{"p95 (tracked)", p95, s.ExtraPercent()},
		{"fixed 10ms", fixed, sf.ExtraPercent()},
		{"fixed 10ms, budget 5%", budgeted, sb.ExtraPercent()},
	} {
		t.Logf("%-22s %8v %8v %8v %7.1f%%", r.name, ms(q(r.lat, 0.5)), ms(q(r.lat, 0.99)), ms(q(r.lat, 0.999)), r.extra)
	}
	t.Logf("p95 policy: delay %v, hedges sent %d, won %d", ms(s.Delay), s.Sent, s.Won)
	if x := sb.ExtraPercent(); x > 5+100*10.0/calls {
		t.Errorf("with a 5%% budget, hedging sent %.1f%% more requests, want at most 5%% and the budget's 10 saved-up tokens", x)
	}
	if x := s.ExtraPercent(); x < 4 || x > 6.5 {
		t.Errorf("hedging at the p95 sent %.1f%% more requests, want about 5%%", x)
	}
	if cut := float64(q(none, 0.999)) / float64(q(p95, 0.999)); cut < 10 {
		t.Errorf("hedging cut the p99.9 by %.1f times, want at least 10", cut)
	}
}

// TestSlowdown makes every replica four times slower halfway through — the
// dependency is overloaded but does not say so — and counts the extra
// requests of the slow half: a fixed delay hedges nearly every call,
// doubling the load on a dependency that is already struggling; a budget
// caps that at its ratio; a tracked percentile adapts within its window.
// Run it with -v to see the figures (docs/hedging.md quotes them).
func TestSlowdown(t *testing.T) {
	const half = 2000
	run := func(cfg hedge.Config) (extra float64) {
		synctest.Test(t, func(t *testing.T) {
			p := newPolicy(t, cfg)
			rng := rand.New(rand.NewPCG(3, 5))
			var before uint64
			for i := range 2 * half {
				if i == half {
					before = p.Snapshot().Sent
				}
				var d [2]time.Duration
				for j := range d {
					d[j] = time.Duration(float64(10*time.Millisecond) * math.Exp(0.3*rng.NormFloat64()))
					if i >= half {
						d[j] *= 4
					}
				}
				if _, err := hedge.Do(idem, p, replica(d[:])); err != nil {
					t.Fatal(err)
				}
			}
			extra = 100 * float64(p.Snapshot().Sent-before) / half
		})
		return extra
	}
	b, err := budget.New(budget.Config{Ratio: 0.05, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	fixed := run(hedge.Config{Delay: 15 * time.Millisecond})
	budgeted := run(hedge.Config{Delay: 15 * time.Millisecond, Budget: b})
	tracked := run(hedge.Config{Percentile: 0.95, Delay: 15 * time.Millisecond, MinDelay: time.Millisecond})
	t.Logf("extra requests while every replica is 4x slower (%d calls):", half)
	t.Logf("  fixed 15ms:             %5.1f%%", fixed)
	t.Logf("  fixed 15ms, budget 5%%:  %5.1f%%", budgeted)
	t.Logf("  p95 (tracked, 10s):     %5.1f%%", tracked)
	if fixed < 80 {
		t.Errorf("a fixed delay below the new latencies hedged only %.1f%% of the calls", fixed)
	}
	if budgeted > 5+100*10.0/half {
		t.Errorf("the budget let %.1f%% through, want at most 5%% and its 10 saved-up tokens", budgeted)
	}
	if tracked > 25 {
		t.Errorf("the tracked delay hedged %.1f%% of the slow calls, want it to adapt", tracked)
	}
}
