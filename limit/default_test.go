package limit_test

import (
	"testing"
	"time"

	"github.com/watertight-go/watertight/limit"
)

// queueing is a dependency with capacity cstar concurrent calls and a
// service time of base: with lim calls in flight, its mean latency is base
// while lim ≤ cstar, and base × lim / cstar beyond (Little's law: the
// throughput is capped at cstar / base, so the rest queue).
func queueing(base time.Duration, cstar int) func(lim int) time.Duration {
	return func(lim int) time.Duration {
		if lim <= cstar {
			return base
		}
		return time.Duration(float64(base) * float64(lim) / float64(cstar))
	}
}

// pressed is a window in which the traffic fills the limit and is refused
// beyond it, with the given mean latency.
func pressed(lim int, mean time.Duration) limit.Window {
	return limit.Window{Limit: lim, InFlight: lim, Refused: 100, Samples: 100,
		MinLatency: mean / 2, MeanLatency: mean, MaxLatency: 3 * mean}
}

// drive feeds n pressed windows of dep to alg from lim, as a Limiter with
// bounds [1, 1000] would, and returns the limits it answered.
func drive(alg limit.Algorithm, lim, n int, dep func(int) time.Duration) []int {
	out := make([]int, n)
	for i := range out {
		next := int(alg.Update(pressed(lim, dep(lim))))
		lim = min(max(next, 1), 1000)
		out[i] = lim
	}
	return out
}

func TestDefaultClimbsByAlphaAndSettles(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	// Far below a capacity of 400: it grows by one call a window at 40 and
	// by 2.5% of the limit beyond, so from 20 it gets there in about two
	// minutes of one-second windows, not six.
	got := drive(alg, 20, 160, queueing(100*time.Millisecond, 400))
	if got[0] != 21 {
		t.Errorf("first step from 20: %d, want 21", got[0])
	}
	reached := -1
	for i, l := range got {
		if l >= 0.8*400 {
			reached = i + 1
			break
		}
	}
	if reached < 0 || reached > 140 {
		t.Fatalf("from 20 towards C* = 400: within 20%% after %d windows (want ≤ 140); limits %v", reached, got)
	}
	last := got[len(got)-1]
	if last < 400 || last > 400+40 {
		t.Errorf("after 160 windows the limit is %d, want in [400, 440]: a short queue at most", last)
	}
}

func TestDefaultHoldsAShortQueue(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	dep := queueing(100*time.Millisecond, 40)
	got := drive(alg, 20, 300, dep)
	for i, l := range got[60:] {
		if l < 40 || l > 44 {
			t.Fatalf("window %d: limit %d, want within [40, 44] (C* 40 and a queue of at most Beta's 4 calls); limits %v", 61+i, l, got)
		}
	}
}

func TestDefaultFollowsCapacityWithoutRatchet(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	full := queueing(100*time.Millisecond, 40)
	half := queueing(100*time.Millisecond, 20)
	before := drive(alg, 20, 120, full)
	during := drive(alg, before[len(before)-1], 600, half)
	for i, l := range during {
		if i >= 30 && (l < 16 || l > 24) {
			t.Fatalf("half capacity, window %d: limit %d, want within ±20%% of 20 from window 30 on (no ratchet through 10 minutes); limits %v", i+1, l, during)
		}
	}
	after := drive(alg, during[len(during)-1], 120, full)
	back := -1
	for i, l := range after {
		if l >= 32 {
			back = i + 1
			break
		}
	}
	if back < 0 || back > 60 {
		t.Fatalf("capacity back: within 20%% of 40 after %d windows (want ≤ 60); limits %v", back, after)
	}
}

// TestDefaultFirstWindowLuck: a first window faster than the dependency's
// usual (the noise of a mean) must not become a baseline that pins the
// limit below capacity (the warm-up averages instead of taking the least).
func TestDefaultFirstWindowLuck(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	lim := int(alg.Update(pressed(20, 94*time.Millisecond)))
	means := []time.Duration{103, 98, 101, 97, 104, 99, 102, 100} // ms, around 100
	dep := queueing(100*time.Millisecond, 40)
	for i := 0; i < 60; i++ {
		m := dep(lim)
		if lim <= 40 {
			m = means[i%len(means)] * time.Millisecond
		}
		lim = min(max(int(alg.Update(pressed(lim, m))), 1), 1000)
	}
	if lim < 32 {
		t.Fatalf("after a lucky first window of 94 ms and 60 windows of about 100 ms below capacity, the limit is %d: want ≥ 32 (C* 40)", lim)
	}
}

func TestDefaultDoesNotGrowAnUnusedLimit(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	w := limit.Window{Limit: 50, InFlight: 20, Refused: 1, Samples: 100,
		MinLatency: 50 * time.Millisecond, MeanLatency: 100 * time.Millisecond, MaxLatency: 300 * time.Millisecond}
	for i := 0; i < 20; i++ {
		if got := alg.Update(w); got != 50 {
			t.Fatalf("window %d: %v, want 50: 20 in flight of 50 and one refusal in a hundred calls do not press on the limit", i+1, got)
		}
	}
}

func TestDefaultBacksOffOnDropsAndDeadlines(t *testing.T) {
	alg := limit.NewDefault(limit.DefaultOptions{})
	w := pressed(40, 100*time.Millisecond)
	alg.Update(w)
	w.Drops = 5 // 5 of 105: more than 1%
	if got := alg.Update(w); got != 36 {
		t.Errorf("drops: %v, want 40 × 0.9 = 36", got)
	}
	w.Drops, w.MinDeadline = 0, 150*time.Millisecond // the latency eats more than half
	if got := alg.Update(w); got != 36 {
		t.Errorf("deadline: %v, want 36", got)
	}
}
