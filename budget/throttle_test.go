package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
)

func mustThrottler(t testing.TB, cfg budget.ThrottleConfig) *budget.Throttler {
	t.Helper()
	th, err := budget.NewThrottler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// never is a Rand that fails the test if it is called.
func never(t *testing.T) func() float64 {
	return func() float64 {
		t.Helper()
		t.Error("Rand called with a rejection probability of zero")
		return 0
	}
}

// constant is a Rand that always returns x.
func constant(x float64) func() float64 { return func() float64 { return x } }

func TestThrottleConfigDefaults(t *testing.T) {
	th := mustThrottler(t, budget.ThrottleConfig{})
	c := th.Config()
	d := budget.DefaultThrottleConfig()
	if c.K != d.K || c.Window != d.Window || c.Buckets != d.Buckets || c.Rand == nil || c.Rejected == nil {
		t.Errorf("Config() = %+v, want %+v with Rand and Rejected set", c, d)
	}
	if d.K != 2 || d.Window != 2*time.Minute || d.Buckets != 120 {
		t.Errorf("DefaultThrottleConfig() = %+v", d)
	}
}

func TestThrottleConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   budget.ThrottleConfig
		field string
	}{
		{budget.ThrottleConfig{K: 0.5}, "ThrottleConfig.K"},
		{budget.ThrottleConfig{K: -2}, "ThrottleConfig.K"},
		{budget.ThrottleConfig{K: math.NaN()}, "ThrottleConfig.K"},
		{budget.ThrottleConfig{K: math.Inf(1)}, "ThrottleConfig.K"},
		{budget.ThrottleConfig{Window: -time.Second}, "ThrottleConfig.Window"},
		{budget.ThrottleConfig{Buckets: -1}, "ThrottleConfig.Buckets"},
		{budget.ThrottleConfig{Window: time.Second, Buckets: 2000}, "ThrottleConfig.Buckets"},
	} {
		th, err := budget.NewThrottler(tc.cfg)
		if err == nil || th != nil {
			t.Errorf("NewThrottler(%+v) = %v, %v; want an error", tc.cfg, th, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "budget: "+tc.field+" ") {
			t.Errorf("NewThrottler(%+v) error %q does not name %s", tc.cfg, err, tc.field)
		}
	}
	for _, cfg := range []budget.ThrottleConfig{
		{K: 1}, {Window: time.Second, Buckets: 1000}, {Buckets: 1},
	} {
		if _, err := budget.NewThrottler(cfg); err != nil {
			t.Errorf("NewThrottler(%+v): %v", cfg, err)
		}
	}
}

func TestErrThrottled(t *testing.T) {
	if !watertight.IsRejection(fmt.Errorf("call: %w", budget.ErrThrottled)) {
		t.Error("ErrThrottled, wrapped, is not a rejection")
	}
	if got := budget.ErrThrottled.Error(); got != "budget: throttled locally (adaptive throttling)" {
		t.Errorf("ErrThrottled = %q", got)
	}
}

func TestNilThrottlerIsDisabled(t *testing.T) {
	var th *budget.Throttler
	for range 100 {
		if err := th.Allow(); err != nil {
			t.Fatal(err)
		}
	}
	th.Accepted()
	ctx := context.Background()
	c, tk, err := th.Enter(ctx)
	if c != ctx || err != nil {
		t.Errorf("Enter = %v, %v", c, err)
	}
	boom := errors.New("boom")
	if got := th.Exit(ctx, tk, boom); got != boom {
		t.Errorf("Exit returned %v", got)
	}
	if s := th.Snapshot(); s != (budget.ThrottleSnapshot{}) {
		t.Errorf("nil Snapshot = %+v", s)
	}
	if err := watertight.MustNew(th).Run(ctx, func(context.Context) error { return nil }); err != nil {
		t.Error(err)
	}
}

// While the backend accepts everything, nothing is rejected and no random
// number is drawn.
func TestHealthyNeverDraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustThrottler(t, budget.ThrottleConfig{Rand: never(t)})
		for i := range 10_000 {
			if err := th.Allow(); err != nil {
				t.Fatal(err)
			}
			th.Accepted()
			if i%100 == 0 {
				time.Sleep(time.Second)
			}
		}
		s := th.Snapshot()
		if s.Requests != s.Accepts || s.RejectProbability != 0 || s.Rejected != 0 {
			t.Errorf("Snapshot %+v", s)
		}
		// Half of the requests accepted, K = 2: still zero.
		for range 1000 {
			th.Allow()
			th.Allow()
			th.Accepted()
		}
		if s := th.Snapshot(); s.RejectProbability != 0 || s.Rejected != 0 {
			t.Errorf("at half accepted: Snapshot %+v", s)
		}
	})
}

// The probability is the SRE book's, over the requests before each one.
func TestProbability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var draws atomic.Int64
		x := 0.5
		th := mustThrottler(t, budget.ThrottleConfig{Rand: func() float64 { draws.Add(1); return x }})
		// The first request: no history, probability 0, no draw.
		if err := th.Allow(); err != nil || draws.Load() != 0 {
			t.Fatalf("first request: %v, %d draws", err, draws.Load())
		}
		th.Accepted()
		// 1 request, 1 accept: 1 - 2 < 0.
		if err := th.Allow(); err != nil || draws.Load() != 0 {
			t.Fatalf("second request: %v, %d draws", err, draws.Load())
		}
		// 2 requests, 1 accept: (2 - 2)/3 = 0, no draw either.
		if s := th.Snapshot(); s.Requests != 2 || s.Accepts != 1 || s.RejectProbability != 0 {
			t.Fatalf("Snapshot %+v", s)
		}
		// Eight more requests, none accepted: (10 - 2)/11.
		x = 0.99
		for range 8 {
			if err := th.Allow(); err != nil {
				t.Fatal(err)
			}
		}
		s := th.Snapshot()
		if want := 8.0 / 11; s.Requests != 10 || s.Accepts != 1 || s.RejectProbability != want {
			t.Fatalf("Snapshot %+v, want 10 requests, 1 accept, probability %v", s, want)
		}
		// A draw below the probability rejects, and the rejected request
		// counts: (11 - 2)/12 next.
		x = 8.0/11 - 0.01
		if err := th.Allow(); !errors.Is(err, budget.ErrThrottled) {
			t.Fatalf("Allow = %v, want ErrThrottled", err)
		}
		s = th.Snapshot()
		if want := 9.0 / 12; s.Requests != 11 || s.RejectProbability != want || s.Rejected != 1 {
			t.Fatalf("Snapshot %+v, want 11 requests, probability %v, 1 rejected", s, want)
		}
		// K = 1.5 over the same counts.
		th15 := mustThrottler(t, budget.ThrottleConfig{K: 1.5, Rand: constant(0.99)})
		for range 10 {
			th15.Allow()
		}
		for range 4 {
			th15.Accepted()
		}
		if s, want := th15.Snapshot(), (10-1.5*4)/11.0; s.RejectProbability != want {
			t.Errorf("K=1.5: probability %v, want %v", s.RejectProbability, want)
		}
	})
}

// Counts leave the window a bucket at a time, and a throttler left idle for
// a window forgets everything.
func TestWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustThrottler(t, budget.ThrottleConfig{Window: 10 * time.Second, Buckets: 10, Rand: constant(0.999)})
		for range 5 { // t=0: 5 requests, none accepted
			th.Allow()
		}
		time.Sleep(3500 * time.Millisecond)
		for range 3 { // t=3.5s: 3 requests, 3 accepted
			th.Allow()
			th.Accepted()
		}
		check := func(when string, req, acc int64) {
			t.Helper()
			if s := th.Snapshot(); s.Requests != req || s.Accepts != acc {
				t.Errorf("%s: Snapshot %+v, want %d requests, %d accepts", when, s, req, acc)
			}
		}
		check("3.5s", 8, 3)
		time.Sleep(6400 * time.Millisecond) // 9.9s: the first bucket is still in
		check("9.9s", 8, 3)
		time.Sleep(100 * time.Millisecond) // 10s: it is out
		check("10s", 3, 3)
		time.Sleep(3 * time.Second) // 13s: the bucket of 3.5s is out
		check("13s", 0, 0)
		// Idle for a long time, then a burst of rejections is remembered.
		time.Sleep(time.Hour)
		for range 4 {
			th.Allow()
		}
		check("after an hour", 4, 0)
		if s := th.Snapshot(); s.RejectProbability != 4.0/5 {
			t.Errorf("probability %v, want 0.8", s.RejectProbability)
		}
	})
}

// Exit counts an accept for everything but an overload rejection or a local
// rejection further in.
func TestExitClassification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		for _, tc := range []struct {
			name     string
			err      error
			rejected func(error) bool
			accept   bool
		}{
			{"success", nil, nil, true},
			{"an error of the call", boom, nil, true},
			{"not found", fmt.Errorf("get: %w", errors.New("404")), nil, true},
			{"a timeout", context.DeadlineExceeded, nil, true},
			{"overloaded", watertight.ErrOverloaded, nil, false},
			{"overloaded, wrapped", fmt.Errorf("call: %w", watertight.ErrOverloaded), nil, false},
			{"marked overloaded", watertight.Overloaded(boom), nil, false},
			{"a breaker's rejection", watertight.NewRejection("circuit: open"), nil, false},
			{"a bulkhead's saturation", watertight.NewSaturation("bulkhead: full"), nil, false},
			{"timeouts count, by config", context.DeadlineExceeded, func(err error) bool {
				return errors.Is(err, context.DeadlineExceeded)
			}, false},
			{"custom: success still accepted", nil, func(error) bool { return true }, true},
		} {
			th := mustThrottler(t, budget.ThrottleConfig{Rejected: tc.rejected})
			ctx := context.Background()
			c, tk, err := th.Enter(ctx)
			if err != nil || c != ctx {
				t.Fatalf("%s: Enter = %v, %v", tc.name, c, err)
			}
			if got := th.Exit(c, tk, tc.err); got != tc.err {
				t.Errorf("%s: Exit returned %v, want the error unchanged", tc.name, got)
			}
			want := int64(0)
			if tc.accept {
				want = 1
			}
			if s := th.Snapshot(); s.Requests != 1 || s.Accepts != want {
				t.Errorf("%s: Snapshot %+v, want 1 request, %d accepts", tc.name, s, want)
			}
		}
	})
}

// Exit counts the accept in the bucket its request was counted in, and drops
// it once that bucket has left the window.
func TestExitCountsInTheRequestsBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := mustThrottler(t, budget.ThrottleConfig{Window: 10 * time.Second, Buckets: 10})
		ctx := context.Background()
		_, early, _ := th.Enter(ctx)
		_, late, _ := th.Enter(ctx)
		time.Sleep(5 * time.Second)
		th.Allow() // moves the window on
		th.Exit(ctx, early, nil)
		if s := th.Snapshot(); s.Requests != 3 || s.Accepts != 1 {
			t.Errorf("Snapshot %+v, want 3 requests, 1 accept", s)
		}
		time.Sleep(5 * time.Second) // the first bucket leaves, with its request and accept
		if s := th.Snapshot(); s.Requests != 1 || s.Accepts != 0 {
			t.Errorf("Snapshot %+v, want 1 request, 0 accepts", s)
		}
		th.Exit(ctx, late, nil) // its bucket is gone: dropped
		if s := th.Snapshot(); s.Requests != 1 || s.Accepts != 0 {
			t.Errorf("after a late Exit: Snapshot %+v, want 1 request, 0 accepts", s)
		}
		// After an idle spell the window jumps, and buckets out of it are not
		// reused at once: an Exit for one of them is dropped all the same.
		time.Sleep(3 * time.Second) // 13s
		_, old, _ := th.Enter(ctx)
		time.Sleep(15 * time.Second) // 28s: the bucket of 13s is out, not reused
		if s := th.Snapshot(); s.Requests != 0 {
			t.Fatalf("Snapshot %+v, want an empty window", s)
		}
		th.Exit(ctx, old, nil)
		if s := th.Snapshot(); s.Requests != 0 || s.Accepts != 0 {
			t.Errorf("after an Exit out of the window: Snapshot %+v, want it empty", s)
		}
		// An accept from the bucket before the current one counts at once.
		_, prev, _ := th.Enter(ctx)
		time.Sleep(time.Second)
		th.Allow()
		th.Exit(ctx, prev, nil)
		if s := th.Snapshot(); s.Requests != 2 || s.Accepts != 1 {
			t.Errorf("Snapshot %+v, want 2 requests, 1 accept", s)
		}
	})
}

// The throttler in a pipeline: a backend that rejects everything gets only
// the first few requests; the rest are rejected locally, as rejections, and
// the function is not called for them.
func TestPolicyInPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		th := mustThrottler(t, budget.ThrottleConfig{Rand: rng.Float64})
		p := watertight.MustNew(th)
		calls, throttled := 0, 0
		for range 1000 {
			err := p.Run(context.Background(), func(context.Context) error {
				calls++
				return watertight.ErrOverloaded
			})
			switch {
			case errors.Is(err, budget.ErrThrottled):
				throttled++
				if !watertight.IsRejection(err) {
					t.Fatal("ErrThrottled is not a rejection")
				}
			case !errors.Is(err, watertight.ErrOverloaded):
				t.Fatalf("Run = %v", err)
			}
		}
		if calls+throttled != 1000 || calls > 20 {
			t.Errorf("%d calls reached the backend, %d throttled", calls, throttled)
		}
		if s := th.Snapshot(); s.Requests != 1000 || s.Accepts != 0 || s.Rejected != uint64(throttled) {
			t.Errorf("Snapshot %+v", s)
		}
	})
}

// TestConvergence simulates the SRE book's overload: a backend that accepts
// at most C requests per second and rejects the rest with ErrOverloaded,
// clients offering 5·C per second through a Throttler, for five windows. Over
// the last window, the requests that reach the backend are K times what it
// accepts, within 5%.
func TestConvergence(t *testing.T) {
	for _, k := range []float64{2, 1.5} {
		t.Run(fmt.Sprint("K=", k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const capacity, offered = 40, 5 * 40 // per second
				const tick = 10 * time.Millisecond   // offered/100 requests per tick
				rng := rand.New(rand.NewPCG(7, uint64(k*10)))
				th := mustThrottler(t, budget.ThrottleConfig{K: k, Rand: rng.Float64})
				window := th.Config().Window
				p := watertight.MustNew(th)
				ctx := context.Background()

				start := time.Now()
				second, used := time.Duration(-1), 0
				backend := func(context.Context) error {
					if s := time.Since(start) / time.Second; s != second {
						second, used = s, 0
					}
					if used < capacity {
						used++
						return nil
					}
					return watertight.ErrOverloaded
				}
				type tickCount struct{ sent, accepted int }
				var ticks []tickCount
				for range int(5 * window / tick) {
					var c tickCount
					for range offered * int(tick) / int(time.Second) {
						err := p.Run(ctx, func(ctx context.Context) error {
							c.sent++
							return backend(ctx)
						})
						if err == nil {
							c.accepted++
						}
					}
					ticks = append(ticks, c)
					time.Sleep(tick)
				}
				var sent, accepted int
				for _, c := range ticks[len(ticks)-int(window/tick):] {
					sent += c.sent
					accepted += c.accepted
				}
				ratio := float64(sent) / float64(accepted)
				t.Logf("last window: %d sent, %d accepted: %.3f× (K = %v); offered %d", sent, accepted, ratio, k, offered*int(window/time.Second))
				if math.Abs(ratio-k)/k > 0.05 {
					t.Errorf("backend saw %.3f× what it accepted, want K = %v within 5%%", ratio, k)
				}
				if want := capacity * int(window/time.Second); accepted < want*95/100 {
					t.Errorf("backend accepted %d, want about its capacity %d", accepted, want)
				}
			})
		})
	}
}

// Allow, Accepted, Enter/Exit and Snapshot from 8 goroutines: the counts add
// up exactly (no time passes in the bubble, so the window holds everything).
func TestThrottlerConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		var mu sync.Mutex
		th := mustThrottler(t, budget.ThrottleConfig{Rand: func() float64 {
			mu.Lock()
			defer mu.Unlock()
			return rng.Float64()
		}})
		const goroutines, perG = 8, 5000
		var accepted, rejected atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				ctx := context.Background()
				for i := range perG {
					ok := (i+g)%3 == 0 // a third accepted: with K = 2, some are throttled
					if i%2 == 0 {
						if err := th.Allow(); err != nil {
							rejected.Add(1)
							continue
						}
						if ok {
							th.Accepted()
							accepted.Add(1)
						}
						continue
					}
					c, tk, err := th.Enter(ctx)
					if err != nil {
						rejected.Add(1)
						continue
					}
					err = nil
					if !ok {
						err = watertight.ErrOverloaded
					} else {
						accepted.Add(1)
					}
					th.Exit(c, tk, err)
					if i%500 == 0 {
						th.Snapshot()
					}
				}
			})
		}
		wg.Wait()
		s := th.Snapshot()
		if s.Requests != goroutines*perG || s.Accepts != accepted.Load() || s.Rejected != uint64(rejected.Load()) {
			t.Errorf("Snapshot %+v; want %d requests, %d accepts, %d rejected", s, goroutines*perG, accepted.Load(), rejected.Load())
		}
	})
}

// A burst of concurrent first requests, before any answer has come back, is
// not taken for an overloaded backend: requests in flight count as accepts.
func TestColdStartBurstIsNotThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, err := budget.NewThrottler(budget.ThrottleConfig{Rand: func() float64 { return 0 }}) // any p > 0 would reject
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var tickets []watertight.Ticket
		for i := range 100 {
			_, tk, err := th.Enter(ctx)
			if err != nil {
				t.Fatalf("request %d of a cold burst throttled: %v", i, err)
			}
			tickets = append(tickets, tk)
		}
		// The backend then refuses them all: the throttle engages.
		for _, tk := range tickets {
			_ = th.Exit(ctx, tk, watertight.ErrOverloaded)
		}
		if _, _, err := th.Enter(ctx); !errors.Is(err, budget.ErrThrottled) {
			t.Fatalf("after 100 refusals the next request went through: %v", err)
		}
	})
}

func TestThrottlerEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		th := mustThrottler(t, budget.ThrottleConfig{Name: "search", Rand: constant(0), Listener: rec})
		// Requests without accepts: from the second on, the probability is
		// above zero ((1 - 0)/2 for the second) and a draw of 0 rejects.
		var rejected int
		for range 5 {
			if errors.Is(th.Allow(), budget.ErrThrottled) {
				rejected++
			}
		}
		evs := rec.take()
		if rejected != 4 || len(evs) != 4 {
			t.Fatalf("%d rejected, events %v", rejected, evs)
		}
		for _, e := range evs {
			if e.Kind != watertight.EventRejected || e.Source != "budget" || e.Name != "search" || e.Err != budget.ErrThrottled || e.Reason == "" || !e.Time.Equal(time.Now()) {
				t.Errorf("event %+v", e)
			}
		}
	})
}

// A listener may call back into the throttler, whose Snapshot may move the
// window on under its mutex.
func TestThrottlerListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var th *budget.Throttler
		depth, n := 0, 0
		th = mustThrottler(t, budget.ThrottleConfig{Rand: constant(0), Listener: watertight.ListenerFunc(func(watertight.Event) {
			depth++
			defer func() { depth-- }()
			n++
			time.Sleep(time.Second) // a new bucket: Snapshot and Allow rotate under the mutex
			_ = th.Snapshot()
			if depth == 1 {
				_ = th.Allow() // rejected again, within the event
			}
		})})
		for range 2 { // the second is rejected
			_ = th.Allow()
		}
		if n != 2 {
			t.Fatalf("%d events, want 2", n)
		}
	})
}
