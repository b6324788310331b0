package lab

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// quickSeeds is how many seeds TestQuickSeeds runs each scenario with;
// WATERTIGHT_LAB_SEEDS overrides it.
const quickSeeds = 20

// TestQuickSeeds: what --quick asserts holds for every seed. Each scenario
// runs in its quick mode with seeds 1…20, one parallel subtest per scenario
// and seed, and every one of its checks must pass — the scenario's own
// checks, not looser ones. A real-time scenario whose run says the machine
// did not keep time (hedge: the leaves' timers fired late; storefront: the
// load generator was paused; any: a 1 ms timer the test runs beside it
// fired late) is logged and not counted, as in its own quick test: the
// numbers then measure the machine. Skipped with -short.
//
// Under -race the scenarios that measure real time on 127.0.0.1 (realTime)
// are left out: two of them at once under the race detector on a 2-core
// machine starve each other's timers, so that nearly every run measured the
// machine, and the sweep took 11 minutes. Their quick tests run one seed
// under -race, TestHedgeQuickSeedsFakeClock runs the hedge scenario's 20
// seeds on a fake clock, and this sweep runs them all without -race. The
// adaptive scenario, a simulation on one goroutine per configuration, runs
// its first raceSeeds seeds under -race (9 s a seed there, against 0.7 s
// without: its 20 would add three minutes to CI) and all of them without.
func TestQuickSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("every scenario's quick run, 20 seeds each")
	}
	seeds := quickSeeds
	if s := os.Getenv("WATERTIGHT_LAB_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WATERTIGHT_LAB_SEEDS=%q: want a positive number of seeds", s)
		}
		seeds = n
	}
	only := os.Getenv("WATERTIGHT_LAB_SCENARIOS") // comma-separated; empty: all
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%d seeds of every scenario's quick run in %v", seeds, time.Since(start).Round(time.Second))
	})
	for _, s := range All() {
		if only != "" && !strings.Contains(","+only+",", ","+s.Name+",") {
			continue
		}
		if raceEnabled && realTime[s.Name] {
			t.Logf("%s: left out under -race (go test -run TestQuickSeeds ./lab runs it)", s.Name)
			continue
		}
		n := seeds
		if raceEnabled && s.Name == "adaptive" {
			n = min(n, raceSeeds)
			t.Logf("adaptive: %d of %d seeds under -race (go test -run TestQuickSeeds ./lab runs them all)", n, seeds)
		}
		for seed := uint64(1); seed <= uint64(n); seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", s.Name, seed), func(t *testing.T) {
				t.Parallel()
				probe := startTimerProbe()
				res, err := s.Run(t.Context(), Options{Seed: seed, Quick: true, Progress: io.Discard})
				probe.stop()
				if err != nil {
					t.Fatal(err)
				}
				var failed []string
				for _, c := range res.Checks {
					if !c.OK {
						failed = append(failed, c.Name+checkNumbers(c))
					}
				}
				if len(res.Checks) == 0 {
					t.Error("no checks")
				}
				if len(failed) == 0 {
					return
				}
				why := machineStarved(res)
				if why == "" {
					why = probe.starved()
				}
				if why != "" {
					t.Skipf("machine too loaded for a real-time measurement (%s); would have failed:\n%s", why, strings.Join(failed, "\n"))
				}
				t.Errorf("quick run, seed %d: %d of %d checks failed:\n%s", seed, len(failed), len(res.Checks), strings.Join(failed, "\n"))
			})
		}
	}
}

// timerProbe measures how late a 1 ms timer fires, over and over, while a
// scenario runs: whether the machine kept time for every scenario, those
// that measure their own noise and the others.
type timerProbe struct {
	n, late, late2ms atomic.Int64
	done             chan struct{}
	wg               sync.WaitGroup
}

func startTimerProbe() *timerProbe {
	p := &timerProbe{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		for {
			t0 := time.Now()
			t.Reset(time.Millisecond)
			select {
			case <-t.C:
				late := time.Since(t0) - time.Millisecond
				p.n.Add(1)
				p.late.Add(int64(late))
				if late > 2*time.Millisecond {
					p.late2ms.Add(1)
				}
			case <-p.done:
				return
			}
		}
	}()
	return p
}

func (p *timerProbe) stop() {
	close(p.done)
	p.wg.Wait()
}

// starved says why the machine did not keep time, as hedgeStarved does for
// the hedge scenario's own timers: more than 2% of the probe's timers fired
// over 2 ms late, or they were late by more than 1.5 ms on average. "" if
// it kept time.
func (p *timerProbe) starved() string {
	n := max(p.n.Load(), 1)
	mean := time.Duration(p.late.Load() / n)
	share := 100 * float64(p.late2ms.Load()) / float64(n)
	if share > 2 || mean > 1500*time.Microsecond {
		return fmt.Sprintf("a 1 ms timer fired %.2f ms late on average, %.1f%% of the time over 2 ms", float64(mean)/1e6, share)
	}
	return ""
}

// raceSeeds is how many seeds of the adaptive scenario the sweep runs under
// -race.
const raceSeeds = 4

// realTime are the scenarios whose numbers are real time on 127.0.0.1:
// their checks hold on a machine that keeps time. The others' checks are
// exact for a seed (backoff, adaptive and consumer simulate; storm and
// payments count calls). The consumer scenario's 20 seeds take about 2 s
// under -race, so it needs no reduction like adaptive's.
var realTime = map[string]bool{"hedge": true, "storefront": true, "overload": true, "tenants": true, "deadline": true, "gateway": true}

// machineStarved says why a real-time scenario's run measured the machine
// rather than the pattern, or "".
func machineStarved(res *Result) string {
	switch doc := res.JSON.(type) {
	case hgJSON:
		return hedgeStarved(doc)
	case StorefrontJSON:
		return storefrontStarved(doc)
	}
	return ""
}
