package lab

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestHedgeQuickSeedsFakeClock: the hedge scenario's quick run on
// testing/synctest's clock, seeds 1…20. No network is involved, so the
// bubble's clock drives every timer of the scenario and of the shipped hedge
// and budget packages: a run measures the seed's draw and the policies,
// without the machine's noise (timers fire on time; only the order of
// goroutines woken at one instant varies), and waits no real time. Every
// check must pass for every seed: the quick p95 runs land at 4.9–5.8%.
// TestQuickSeeds runs the same in real time, without -race. The progress
// lines come once a second of the run's clock.
func TestHedgeQuickSeedsFakeClock(t *testing.T) {
	s, err := Lookup("hedge")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for seed := uint64(1); seed <= quickSeeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var progress strings.Builder
				res, err := s.Run(t.Context(), Options{Seed: seed, Quick: true, Progress: &progress})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range res.Checks {
					if !c.OK {
						t.Errorf("%s%s", c.Name, checkNumbers(c))
					} else {
						t.Logf("%s%s", c.Name, checkNumbers(c))
					}
				}
				if !strings.Contains(progress.String(), "hedge: none: ") || !strings.Contains(progress.String(), " requests done after 1.0s") {
					t.Errorf("no progress line a second:\n%s", progress.String())
				}
			})
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds in %v", quickSeeds, time.Since(start).Round(time.Millisecond)) })
}
