package balance_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

func hosts(n int) []string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return h
}

func newBalancer(t testing.TB, cfg balance.Config) *balance.Balancer {
	t.Helper()
	b, err := balance.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// events records the events a balancer emits.
type events struct {
	mu sync.Mutex
	ev []watertight.Event
}

func (e *events) OnEvent(ev watertight.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) list() []watertight.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]watertight.Event(nil), e.ev...)
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  balance.Config
		want string
	}{
		{"no hosts", balance.Config{}, "Hosts is empty: give at least one host"},
		{"empty host", balance.Config{Hosts: []string{"a", ""}}, "a host may not be empty"},
		{"repeated", balance.Config{Name: "cart", Hosts: []string{"a", "b", "a"}}, `"cart": Hosts is ["a" "b" "a"]: each host may appear once; a is repeated`},
		{"strategy", balance.Config{Hosts: hosts(2), Strategy: 7}, "Strategy is strategy(7)"},
		{"slow factor low", balance.Config{Hosts: hosts(2), SlowFactor: 1.2}, "SlowFactor is 1.2: use at least 1.5"},
		{"slow factor nan", balance.Config{Hosts: hosts(2), SlowFactor: math.NaN()}, "SlowFactor is NaN"},
		{"min samples", balance.Config{Hosts: hosts(2), MinSamples: -1}, "MinSamples is -1"},
		{"share", balance.Config{Hosts: hosts(2), MaxEjectedShare: 1.5}, "MaxEjectedShare is 1.5: use a share in (0, 1]"},
		{"base", balance.Config{Hosts: hosts(2), BaseEjection: -time.Second}, "BaseEjection is -1s"},
		{"max below base", balance.Config{Hosts: hosts(2), BaseEjection: time.Minute, MaxEjection: time.Second}, "MaxEjection is 1s: use at least BaseEjection (1m0s)"},
		{"max below default base", balance.Config{Hosts: hosts(2), MaxEjection: time.Second}, "use at least BaseEjection (30s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := balance.New(c.cfg)
			if !errors.Is(err, balance.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %q, want it to say %q", err, c.want)
			}
		})
	}
	if _, err := balance.New(balance.Config{Hosts: hosts(1), ConsecutiveErrors: -1, SlowFactor: -1}); err != nil {
		t.Fatalf("negative turns off: %v", err)
	}
}

// With two hosts the two choices are always both hosts: every pick is the
// less loaded, on a tie the first drawn.
func TestTwoHostsTakeTheLessLoaded(t *testing.T) {
	b := newBalancer(t, balance.Config{Hosts: hosts(2)})
	hs := b.Hosts()
	var held []*balance.Host
	for range 100 {
		h := b.Pick(nil)
		held = append(held, h)
		if d := hs[0].InFlight() - hs[1].InFlight(); d < -1 || d > 1 {
			t.Fatalf("in flight %d and %d after %d picks", hs[0].InFlight(), hs[1].InFlight(), len(held))
		}
	}
	// End the calls on host 0 only: every new pick goes there until even.
	for _, h := range held {
		if h == hs[0] {
			h.Done(watertight.Success, time.Millisecond)
		}
	}
	for hs[0].InFlight() < hs[1].InFlight() {
		if h := b.Pick(nil); h != hs[0] {
			t.Fatalf("picked %s with %d in flight over %s with %d", h.Addr(), h.InFlight()-1, hs[0].Addr(), hs[0].InFlight())
		}
	}
}

// The power of two choices keeps the load within a few calls of even,
// where one random choice leaves a gap that grows with the square root of
// the calls.
func TestSpreadsEvenly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, ejected := range []int{0, 1, 5} {
			b := newBalancer(t, balance.Config{Hosts: hosts(10), SlowFactor: -1})
			for _, h := range b.Hosts()[:ejected] {
				for range 5 {
					h.Done(watertight.Failure, time.Millisecond) // no Pick: -1 in flight
				}
			}
			for range 5000 {
				b.Pick(nil)
			}
			lo, hi := math.MaxInt, 0
			for _, h := range b.Hosts() {
				if h.Ejected() {
					if h.InFlight() != -5 {
						t.Fatalf("an ejected host took %d calls", h.InFlight()+5)
					}
					continue
				}
				lo, hi = min(lo, h.InFlight()), max(hi, h.InFlight())
			}
			// Over 20,000 runs of this test's 0-ejected case the gap was
			// 2–4 on 97% of them and at most 8, its tail falling about
			// fourfold per call (so above 12 about once in 10^6 runs); one
			// random choice would leave about 70 (four standard deviations
			// of 500 ± 21).
			if hi-lo > 12 {
				t.Fatalf("%d ejected: in flight from %d to %d over the other hosts after 5000 picks", ejected, lo, hi)
			}
		}
	})
}

func TestAvoid(t *testing.T) {
	b := newBalancer(t, balance.Config{Hosts: hosts(3)})
	for _, avoid := range b.Hosts() {
		for range 200 {
			if h := b.Pick(avoid); h == avoid {
				t.Fatalf("Pick(%s) returned it with two other hosts", avoid.Addr())
			}
		}
	}
	one := newBalancer(t, balance.Config{Hosts: hosts(1)})
	h := one.Hosts()[0]
	if got := one.Pick(h); got != h {
		t.Fatalf("a pool of one: Pick(avoid) = %v, want the only host", got.Addr())
	}
}

func TestConsecutiveErrorsEjectAndBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		b := newBalancer(t, balance.Config{Name: "cart", Hosts: hosts(3), SlowFactor: -1, Listener: &ev})
		bad := b.Hosts()[1]
		fail := func(n int, o watertight.Outcome) {
			for range n {
				bad.Done(o, time.Millisecond)
			}
		}
		// (The calls are ended without Pick: the counts in flight are not
		// under test here.)
		// Four failures, a success, four failures: no run of five.
		fail(4, watertight.Failure)
		fail(1, watertight.Success)
		fail(4, watertight.Failure)
		// An ignored end (the caller cancelled) neither ends nor extends it.
		fail(3, watertight.Ignored)
		if bad.Ejected() {
			t.Fatal("ejected without five failures in a row")
		}
		start := time.Now()
		fail(1, watertight.Failure)
		if !bad.Ejected() {
			t.Fatal("not ejected after five failures in a row")
		}
		for range 300 {
			if h := b.Pick(nil); h == bad {
				t.Fatal("Pick returned an ejected host")
			} else {
				h.Done(watertight.Success, time.Millisecond)
			}
		}
		s := b.Snapshot().Hosts[1]
		if !s.Ejected || s.Reason != balance.ReasonConsecutiveErrors || !s.Until.Equal(start.Add(30*time.Second)) || s.Ejections != 1 {
			t.Fatalf("snapshot %+v", s)
		}
		// Each ejection soon after a return lasts twice the last.
		for i, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute} {
			if i > 0 {
				fail(5, watertight.Failure)
			}
			if !bad.Ejected() {
				t.Fatalf("ejection %d: not ejected", i+1)
			}
			time.Sleep(want - time.Nanosecond)
			synctest.Wait()
			if !bad.Ejected() {
				t.Fatalf("ejection %d: back before %v", i+1, want)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if bad.Ejected() {
				t.Fatalf("ejection %d: not back after %v", i+1, want)
			}
		}
		// Five minutes without an ejection: the next lasts 30s again.
		time.Sleep(5 * time.Minute)
		fail(5, watertight.Failure)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if bad.Ejected() {
			t.Fatal("after 5 quiet minutes, an ejection lasted more than 30s")
		}
		got := ev.list()
		if len(got) != 14 {
			t.Fatalf("%d events, want 7 ejections and 7 returns: %+v", len(got), got)
		}
		for i, e := range got {
			from, to, reason := balance.StateActive, balance.StateEjected, balance.ReasonConsecutiveErrors
			if i%2 == 1 {
				from, to, reason = to, from, balance.ReasonEjectionEnded
			}
			if e.Kind != watertight.EventStateChange || e.Source != "balance" || e.Name != "cart" || e.Key != bad.Addr() ||
				e.From != from || e.To != to || e.Reason != reason || e.Code != reason {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		if got[0].Delay != 30*time.Second || got[2].Delay != time.Minute {
			t.Fatalf("ejection delays %v, %v", got[0].Delay, got[2].Delay)
		}
	})
}

func TestEjectionCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			hosts int
			share float64
			max   int
		}{
			{1, 0, 0}, {2, 0, 1}, {3, 0, 1}, {4, 0, 2}, {10, 0, 5},
			{10, 0.1, 1}, {10, 0.05, 1}, {3, 1, 2}, {10, 1, 9},
			{100, 0.29, 29}, {100, 0.57, 57}, {90, 0.7, 63}, // not 28, 56, 62: float error
		} {
			b := newBalancer(t, balance.Config{Hosts: hosts(c.hosts), MaxEjectedShare: c.share, SlowFactor: -1})
			for _, h := range b.Hosts() {
				for range 5 {
					h.Done(watertight.Failure, time.Millisecond)
				}
			}
			s := b.Snapshot()
			n := 0
			for _, h := range s.Hosts {
				if h.Ejected {
					n++
				}
			}
			if n != c.max || s.Ejected != c.max || s.MaxEjected != c.max {
				t.Errorf("%d hosts, share %v: %d ejected (snapshot %d of %d), want %d", c.hosts, c.share, n, s.Ejected, s.MaxEjected, c.max)
			}
			for range 100 {
				if h := b.Pick(nil); h.Ejected() {
					t.Fatal("Pick returned an ejected host")
				}
			}
		}
	})
}

// A host is slow relative to the pool: ten times its peers' latency ejects
// it, a pool slow as a whole ejects nothing, and twice its peers' is
// within the default factor of 3.
func TestSlowHostIsEjectedRelativeToThePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := func(lat func(i, round int) time.Duration) *balance.Balancer {
			b := newBalancer(t, balance.Config{Hosts: hosts(4), ConsecutiveErrors: -1})
			for round := range 60 {
				for i, h := range b.Hosts() {
					if !h.Ejected() {
						h.Done(watertight.Success, lat(i, round))
					}
				}
			}
			return b
		}
		const ms = time.Millisecond
		for _, c := range []struct {
			name string
			slow int // the host that must be ejected, -1 for none
			lat  func(i, round int) time.Duration
		}{
			{"10× slower", 2, func(i, _ int) time.Duration { return map[bool]time.Duration{true: 100 * ms, false: 10 * ms}[i == 2] }},
			{"most calls slow", 1, func(i, round int) time.Duration {
				return map[bool]time.Duration{true: time.Second, false: 10 * ms}[i == 1 && round%4 != 0]
			}},
			{"all slow", -1, func(int, int) time.Duration { return 2 * time.Second }},
			// The whole pool becomes 100× slower at once: every host's
			// estimate climbs at the same pace, none stands out.
			{"the pool slows down", -1, func(_, round int) time.Duration {
				return map[bool]time.Duration{true: time.Second, false: 10 * ms}[round >= 25]
			}},
			// A host whose first calls hung starts with a high estimate;
			// its calls since are as fast as its peers'.
			{"first calls hung", -1, func(i, round int) time.Duration {
				return map[bool]time.Duration{true: time.Second, false: 10 * ms}[i == 0 && round < 3]
			}},
			{"2× slower", -1, func(i, _ int) time.Duration { return map[bool]time.Duration{true: 20 * ms, false: 10 * ms}[i == 0] }},
			// One call that hung (100× the usual) in each block of 20: the
			// median of the block does not see it.
			{"one hung call per block", -1, func(i, round int) time.Duration {
				return map[bool]time.Duration{true: time.Second, false: 10 * ms}[i == 3 && round%20 == 7]
			}},
		} {
			for i, h := range run(c.lat).Snapshot().Hosts {
				if h.Ejected != (i == c.slow) {
					t.Errorf("%s: host %d %+v", c.name, i, h)
				}
				if i == c.slow && h.Reason != balance.ReasonSlow {
					t.Errorf("%s: reason %q", c.name, h.Reason)
				}
			}
		}
	})
}

func TestPeakEWMA(t *testing.T) {
	b := newBalancer(t, balance.Config{Hosts: hosts(2), Strategy: balance.PeakEWMA})
	// Unmeasured: one probe each, then each is the dearest while it holds
	// a call, so the other takes the next.
	p1, p2 := b.Pick(nil), b.Pick(nil)
	if p1 == p2 {
		t.Fatal("an unmeasured host with a call in flight took a second one")
	}
	p1.Done(watertight.Success, 10*time.Millisecond)
	p2.Done(watertight.Success, time.Millisecond)
	fast, slow := p2, p1
	// Idle, the faster host wins; while it does, the slow one's peak
	// decays (×0.9 per pick it loses idle) and the fast one's cost grows
	// with its calls in flight: (k+1) ms against 10 ms × 0.9^k, which the
	// slow host wins from k = 5.
	for k := range 5 {
		if h := b.Pick(nil); h != fast {
			t.Fatalf("pick %d went to the slow host (fast has %d in flight)", k, fast.InFlight())
		}
	}
	if h := b.Pick(nil); h != slow {
		t.Fatalf("pick 5: fast costs 6ms, slow 10ms×0.9^5 = 5.9ms, got %s", h.Addr())
	}
	// A slow call lifts the peak at once.
	fast.Done(watertight.Success, 50*time.Millisecond)
	if got := b.Snapshot().Hosts[fast.Index()].PeakEWMA; got != 50*time.Millisecond {
		t.Fatalf("peak after a 50ms call: %v", got)
	}
}

// One slow call must not starve a host: passed over while idle, its peak
// decays until it is tried again.
func TestPeakEWMAForgetsOneSlowCall(t *testing.T) {
	b := newBalancer(t, balance.Config{Hosts: hosts(3), Strategy: balance.PeakEWMA})
	got := make([]int, 3)
	for i := range 1000 {
		h := b.Pick(nil)
		got[h.Index()]++
		lat := 10 * time.Millisecond
		if i == 0 {
			lat = time.Second
		}
		h.Done(watertight.Success, lat)
	}
	for i, n := range got {
		if n < 100 {
			t.Fatalf("calls per host %v: host %d was starved", got, i)
		}
	}
}

// Ten thousand goroutines pick and end calls with random outcomes while
// hosts are ejected and come back: no call is lost from the counts, and
// the cap holds throughout.
func TestConcurrentNoLostCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBalancer(t, balance.Config{Hosts: hosts(5), MinSamples: 5, BaseEjection: time.Second, MaxEjection: 4 * time.Second})
		var wg sync.WaitGroup
		for g := range 10000 {
			wg.Go(func() {
				var last *balance.Host
				for k := range 5 {
					h := b.Pick(last)
					if s := b.Snapshot(); s.Ejected > s.MaxEjected {
						t.Errorf("%d ejected, cap %d", s.Ejected, s.MaxEjected)
					}
					time.Sleep(time.Duration(g%7) * time.Millisecond)
					o := watertight.Success
					if (g+k+h.Index())%3 == 0 {
						o = watertight.Failure
					}
					h.Done(o, time.Duration(1+h.Index()*h.Index())*time.Millisecond)
					last = h
				}
			})
		}
		wg.Wait()
		for _, h := range b.Snapshot().Hosts {
			if h.InFlight != 0 {
				t.Fatalf("host %s: %d in flight after every call ended", h.Addr, h.InFlight)
			}
		}
	})
}

func TestNext(t *testing.T) {
	b := newBalancer(t, balance.Config{Hosts: hosts(3)})
	hs := b.Hosts()
	seen := map[*balance.Host]bool{}
	for range 100 {
		h := b.Next(func(h *balance.Host) bool { return h == hs[0] })
		if h == hs[0] || h == nil {
			t.Fatalf("Next returned %v", h)
		}
		seen[h] = true
	}
	if len(seen) != 2 {
		t.Fatalf("Next did not spread over the hosts it may take: %d", len(seen))
	}
	if h := b.Next(func(*balance.Host) bool { return true }); h != nil {
		t.Fatal("every host skipped: want nil")
	}
	if n := hs[1].InFlight() + hs[2].InFlight(); n != 100 {
		t.Fatalf("%d calls counted, want 100", n)
	}
}
