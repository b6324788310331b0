package circuit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

var errBoom = errors.New("boom")

func mustNew(t *testing.T, cfg circuit.Config) *circuit.Breaker {
	t.Helper()
	b, err := circuit.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func fail(b *circuit.Breaker, n int) {
	for range n {
		if p, err := b.Allow(); err == nil {
			p.Done(watertight.Failure)
		}
	}
}

func succeed(b *circuit.Breaker, n int) {
	for range n {
		if p, err := b.Allow(); err == nil {
			p.Done(watertight.Success)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  circuit.Config
		want string
	}{
		{circuit.Config{WindowSize: -1}, "WindowSize must be >= 0"},
		{circuit.Config{WindowSize: 5, MinCalls: 10}, "WindowSize must be >= MinCalls (10)"},
		{circuit.Config{MinCalls: -3}, "MinCalls must be >= 0"},
		{circuit.Config{FailureRateThreshold: 101}, "FailureRateThreshold must be a percentage in (0, 100], got 101"},
		{circuit.Config{FailureRateThreshold: math.NaN()}, "FailureRateThreshold must be a percentage in (0, 100]"},
		{circuit.Config{SlowCallRateThreshold: 150}, "SlowCallRateThreshold must be a percentage in (0, 100]"},
		{circuit.Config{OpenDuration: -time.Second, MaxOpenDuration: -time.Second}, "MaxOpenDuration must be >= 0"},
		{circuit.Config{ConsecutiveFailures: -1}, "ConsecutiveFailures must be >= 0 (0 turns the rule off), got -1"},
		{circuit.Config{FailureCountThreshold: -2}, "FailureCountThreshold must be >= 0"},
		{circuit.Config{WindowSize: 5, MinCalls: 5, FailureCountThreshold: 6}, "FailureCountThreshold must be <= WindowSize (5)"},
		{circuit.Config{WindowSize: 5, FailureRateThreshold: -1, SlowCallDuration: time.Second}, "WindowSize must be >= MinCalls (20)"},
		{circuit.Config{HalfOpenSuccesses: -1}, "HalfOpenSuccesses must be >= 0"},
		{circuit.Config{HalfOpenCalls: 3, HalfOpenSuccesses: 4}, "HalfOpenSuccesses must be <= HalfOpenCalls (3)"},
		{circuit.Config{OpenDurationMultiplier: 0.5}, "OpenDurationMultiplier must be 0 or >= 1"},
		{circuit.Config{OpenJitter: -1, OpenDuration: time.Minute, MaxOpenDuration: time.Second}, "MaxOpenDuration must be >= OpenDuration"},
		{circuit.Config{OpenJitter: 1}, "OpenJitter must be a fraction below 1"},
		{circuit.Config{OpenJitter: math.NaN()}, "OpenJitter must be a fraction below 1"},
		{circuit.Config{HalfOpenCalls: -1}, "HalfOpenCalls must be >= 0"},
		{circuit.Config{WindowType: 7}, "WindowType must be CountBased or TimeBased"},
		{circuit.Config{WindowType: circuit.TimeBased, WindowDuration: -time.Second}, "WindowDuration must be >= 0"},
		{circuit.Config{WindowType: circuit.TimeBased, WindowBuckets: -2}, "WindowBuckets must be >= 0"},
	} {
		_, err := circuit.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "circuit: Config.") {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := circuit.New(circuit.Config{}); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if _, err := circuit.New(circuit.DefaultConfig()); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
}

func TestTripsOnFailureRateOnlyAfterMinCalls(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 10, MinCalls: 5, FailureRateThreshold: 50})
	fail(b, 4)
	if b.State() != circuit.Closed {
		t.Fatalf("opened after 4 calls with MinCalls 5")
	}
	fail(b, 1)
	if b.State() != circuit.Open {
		t.Fatalf("state %v after 5 failures, want open", b.State())
	}
	_, err := b.Allow()
	if !errors.Is(err, circuit.ErrOpen) || !watertight.IsRejection(err) {
		t.Fatalf("Allow while open: %v", err)
	}
	if got := b.Snapshot().Rejected; got != 1 {
		t.Fatalf("Rejected = %d", got)
	}
	b.Reset()
}

func TestSuccessesKeepItClosed(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 10, MinCalls: 10, FailureRateThreshold: 50})
	for range 100 {
		fail(b, 4)
		succeed(b, 6)
	}
	if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 10 || s.Failures != 4 || s.FailureRate != 40 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestSlowCallsTripEvenWhenTheySucceed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, circuit.Config{WindowSize: 4, MinCalls: 4, SlowCallDuration: time.Second, SlowCallRateThreshold: 50})
		for i := range 4 {
			p, err := b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				time.Sleep(time.Second) // exactly the threshold: slow
			}
			p.Done(watertight.Success)
		}
		s := b.Snapshot()
		if s.State != circuit.Open {
			t.Fatalf("state %v (%+v), want open on 50%% slow calls", s.State, s)
		}
		b.Reset()
	})
}

func TestOpenThenHalfOpenThenClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []circuit.StateChange
		b := mustNew(t, circuit.Config{
			Name: "payments", WindowSize: 4, MinCalls: 4, OpenDuration: 10 * time.Second, OpenJitter: -1, HalfOpenCalls: 2,
			OnStateChange: func(ev circuit.StateChange) { mu.Lock(); seen = append(seen, ev); mu.Unlock() },
		})
		fail(b, 4)
		time.Sleep(10*time.Second - time.Nanosecond)
		if b.State() != circuit.Open {
			t.Fatalf("half-open too early")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if b.State() != circuit.HalfOpen {
			t.Fatalf("state %v after the open duration", b.State())
		}
		p1, err1 := b.Allow()
		p2, err2 := b.Allow()
		_, err3 := b.Allow()
		if err1 != nil || err2 != nil || !errors.Is(err3, circuit.ErrHalfOpen) {
			t.Fatalf("half-open admission: %v %v %v", err1, err2, err3)
		}
		p1.Done(watertight.Success)
		if b.State() != circuit.HalfOpen {
			t.Fatalf("closed before all trials ended")
		}
		p2.Done(watertight.Success)
		if b.State() != circuit.Closed {
			t.Fatalf("state %v after 2 successful trials", b.State())
		}
		mu.Lock()
		defer mu.Unlock()
		var got []string
		for _, ev := range seen {
			if ev.Name != "payments" || ev.Reason == "" {
				t.Errorf("event %+v lacks name or reason", ev)
			}
			got = append(got, ev.From.String()+">"+ev.To.String())
		}
		if want := "[closed>open open>half-open half-open>closed]"; fmt.Sprint(got) != want {
			t.Fatalf("events %v, want %v", got, want)
		}
		if seen[0].OpenFor != 10*time.Second {
			t.Fatalf("OpenFor %v", seen[0].OpenFor)
		}
	})
}

func TestFailedTrialReopensWithGrowingDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opens []time.Duration
		b := mustNew(t, circuit.Config{
			WindowSize: 2, MinCalls: 2, OpenDuration: time.Second, OpenDurationMultiplier: 2,
			MaxOpenDuration: 5 * time.Second, OpenJitter: -1, HalfOpenCalls: 3,
			OnStateChange: func(ev circuit.StateChange) {
				if ev.To == circuit.Open {
					opens = append(opens, ev.OpenFor)
				}
			},
		})
		fail(b, 2)
		for range 4 {
			time.Sleep(opens[len(opens)-1])
			synctest.Wait()
			if b.State() != circuit.HalfOpen {
				t.Fatalf("state %v", b.State())
			}
			fail(b, 2) // 2 of 3 trials failed: at least 50%, opens at once
			if b.State() != circuit.Open {
				t.Fatalf("state %v after failed trials", b.State())
			}
		}
		if want := "[1s 2s 4s 5s 5s]"; fmt.Sprint(opens) != want {
			t.Fatalf("open durations %v, want %v", opens, want)
		}
		b.Reset()
	})
}

func TestJitterStaysInBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r float64
		var got []time.Duration
		b := mustNew(t, circuit.Config{
			WindowSize: 1, MinCalls: 1, OpenDuration: 10 * time.Second, OpenJitter: 0.2,
			Rand:          func() float64 { return r },
			OnStateChange: func(ev circuit.StateChange) { got = append(got, ev.OpenFor) },
		})
		for _, r = range []float64{0, 0.5, 0.999} {
			fail(b, 1)
			b.Reset()
		}
		if len(got) != 6 || got[0] != 8*time.Second || got[2] != 10*time.Second || got[4] < 11*time.Second || got[4] >= 12*time.Second {
			t.Fatalf("jittered durations %v", got)
		}
	})
}

func TestMaxHalfOpenWaitReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 1, MaxHalfOpenWait: 3 * time.Second})
		fail(b, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		p, err := b.Allow() // a trial that never ends in time
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if b.State() != circuit.Open {
			t.Fatalf("state %v, want open after MaxHalfOpenWait", b.State())
		}
		p.Done(watertight.Success) // stale: dropped
		if b.State() != circuit.Open {
			t.Fatalf("a stale trial outcome changed the state")
		}
		b.Reset()
	})
}

func TestStaleOutcomesAreDropped(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 2, MinCalls: 2})
	late, _ := b.Allow()
	fail(b, 2)
	b.Reset()
	late.Done(watertight.Failure) // from the generation before Reset
	if s := b.Snapshot(); s.Calls != 0 || s.Failures != 0 {
		t.Fatalf("stale outcome recorded: %+v", s)
	}
}

func TestIgnoredAndCancelledDoNotCount(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 2, MinCalls: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 10 {
		_, _ = circuit.Call(ctx, b, func(ctx context.Context) (int, error) { return 0, ctx.Err() })
		_, _ = circuit.Call(context.Background(), b, func(context.Context) (int, error) {
			return 0, watertight.Mark(errBoom, watertight.Ignored) // e.g. an HTTP 404: the caller's fault
		})
	}
	if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 0 {
		t.Fatalf("ignored outcomes counted: %+v", s)
	}
	// A deadline that ran out is the dependency being too slow: it counts.
	dl, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	for range 2 {
		_, _ = circuit.Call(dl, b, func(ctx context.Context) (int, error) { return 0, ctx.Err() })
	}
	if b.State() != circuit.Open {
		t.Fatalf("deadline exceeded did not count as failure")
	}
}

func TestIgnoredTrialFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenJitter: -1, OpenDuration: time.Second, HalfOpenCalls: 1})
		fail(b, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		p, _ := b.Allow()
		if _, err := b.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("second trial admitted: %v", err)
		}
		p.Done(watertight.Ignored)
		p2, err := b.Allow()
		if err != nil {
			t.Fatalf("slot not freed by an ignored trial: %v", err)
		}
		p2.Done(watertight.Success)
		if b.State() != circuit.Closed {
			t.Fatalf("state %v", b.State())
		}
	})
}

func TestSaturationCountsOnlyWhenConfigured(t *testing.T) {
	full := watertight.NewSaturation("bulkhead: full")
	for _, count := range []bool{false, true} {
		b := mustNew(t, circuit.Config{WindowSize: 4, MinCalls: 4, CountSaturation: count})
		p := watertight.MustNew(b)
		for range 4 {
			_ = p.Run(context.Background(), func(context.Context) error { return full })
		}
		s := b.Snapshot()
		if count && (s.State != circuit.Open) || !count && (s.State != circuit.Closed || s.Calls != 0) {
			t.Fatalf("CountSaturation=%v: %+v", count, s)
		}
		b.Reset()
		if count {
			succeed(b, 1)
			_ = p.Run(context.Background(), func(context.Context) error { return full })
			if s := b.Snapshot(); s.Saturated != 1 || s.Failures != 0 || s.FailureRate != 50 {
				t.Fatalf("saturation not labelled apart: %+v", s)
			}
		}
	}
}

func TestManualStates(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 2, MinCalls: 2})
	b.ForceOpen()
	if _, err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("forced open admitted: %v", err)
	}
	b.Disable()
	fail(b, 10)
	if s := b.Snapshot(); s.State != circuit.Disabled || s.Calls != 0 {
		t.Fatalf("disabled: %+v", s)
	}
	b.SetMetricsOnly()
	fail(b, 10)
	if s := b.Snapshot(); s.State != circuit.MetricsOnly || s.Calls != 2 || s.FailureRate != 100 {
		t.Fatalf("metrics-only: %+v", s)
	}
	b.Reset()
	if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 0 {
		t.Fatalf("reset: %+v", s)
	}
	if s := b.Snapshot(); s.Opens != 1 {
		t.Fatalf("Opens = %d, want 1 (the forced opening)", s.Opens)
	}
}

func TestListenerMayCallBackIn(t *testing.T) {
	var b *circuit.Breaker
	var snaps []circuit.Snapshot
	b = mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OnStateChange: func(ev circuit.StateChange) {
		snaps = append(snaps, b.Snapshot()) // would deadlock if called under the lock
		if ev.To == circuit.Open {
			b.Reset()
		}
	}})
	fail(b, 1)
	if len(snaps) != 2 || b.State() != circuit.Closed {
		t.Fatalf("listener: %d snapshots, state %v", len(snaps), b.State())
	}
}

func TestCallRecordsPanicAsFailure(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1})
	func() {
		defer func() { _ = recover() }()
		_, _ = circuit.Call(context.Background(), b, func(context.Context) (int, error) { panic("bug") })
	}()
	if b.State() != circuit.Open {
		t.Fatalf("panic not recorded as a failure: %v", b.State())
	}
	b.Reset()
}

func TestTimeWindowForgetsOldBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, circuit.Config{WindowType: circuit.TimeBased, WindowDuration: 10 * time.Second, WindowBuckets: 10, MinCalls: 4, FailureRateThreshold: 50})
		fail(b, 3)
		time.Sleep(10 * time.Second) // the three failures slide out
		succeed(b, 1)
		fail(b, 1)
		if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 2 {
			t.Fatalf("old buckets still counted: %+v", s)
		}
		time.Sleep(9 * time.Second)
		fail(b, 2) // 3 failures of 4 calls within 10s
		if b.State() != circuit.Open {
			t.Fatalf("state %v, want open", b.State())
		}
		b.Reset()
	})
}

func TestConcurrentUseIsConsistent(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 1000, MinCalls: 1000})
	var wg sync.WaitGroup
	var n atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				p, err := b.Allow()
				if err != nil {
					continue
				}
				n.Add(1)
				if (g+i)%10 == 0 {
					p.Done(watertight.Failure)
				} else {
					p.Done(watertight.Success)
				}
			}
		}()
	}
	wg.Wait()
	s := b.Snapshot()
	if s.State != circuit.Closed || s.Calls != 1000 || s.Failures < 50 || s.Failures > 150 {
		t.Fatalf("after %d calls: %+v", n.Load(), s)
	}
}

func TestRegistry(t *testing.T) {
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{WindowSize: 1, MinCalls: 1}, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := r.Get("a")
	a2, _ := r.Get("a")
	if a1 != a2 || a1.Name() != "a" {
		t.Fatalf("one breaker per key")
	}
	bb, _ := r.Get("b")
	fail(a1, 1)
	fail(bb, 1)
	if _, err := r.Get("c"); !errors.Is(err, circuit.ErrTooManyKeys) {
		t.Fatalf("full registry of open breakers: %v", err)
	}
	a1.Reset()
	c, err := r.Get("c") // evicts the closed "a"
	if err != nil || c.Name() != "c" || r.Len() != 2 {
		t.Fatalf("eviction: %v len %d", err, r.Len())
	}
	snaps := r.Snapshots()
	if len(snaps) != 2 || snaps[0].Name != "b" || snaps[0].State != circuit.Open || snaps[1].Name != "c" {
		t.Fatalf("snapshots %+v", snaps)
	}
	if _, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{MinCalls: -1}}); err == nil {
		t.Fatalf("bad config accepted")
	}
	bb.Reset()
}

func TestMaxHalfOpenWaitDecidesOnEndedTrials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reasons []string
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenJitter: -1, OpenDuration: time.Second, HalfOpenCalls: 5, MaxHalfOpenWait: 3 * time.Second,
			OnStateChange: func(ev circuit.StateChange) { mu.Lock(); reasons = append(reasons, ev.Reason); mu.Unlock() }})
		fail(b, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		succeed(b, 2) // a quiet dependency: only 2 of 5 trials come in time
		time.Sleep(3 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if b.State() != circuit.Closed {
			t.Fatalf("state %v: two successful trials should close at MaxHalfOpenWait (%q)", b.State(), reasons)
		}
		if got := reasons[len(reasons)-1]; !strings.Contains(got, "2 trial calls ended within 3s") {
			t.Fatalf("reason %q", got)
		}
	})
}

func TestJitterNeverPassesTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got time.Duration
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: 20 * time.Millisecond, MaxOpenDuration: 20 * time.Millisecond,
			OpenJitter: 0.5, Rand: func() float64 { return 0.999 },
			OnStateChange: func(ev circuit.StateChange) {
				if ev.To == circuit.Open {
					got = ev.OpenFor
				}
			}})
		fail(b, 1)
		if got != 20*time.Millisecond {
			t.Fatalf("OpenFor %v, want the 20ms cap", got)
		}
		b.Reset()
	})
}

func TestSaturationTripIsLabelled(t *testing.T) {
	var reason string
	b := mustNew(t, circuit.Config{WindowSize: 2, MinCalls: 2, CountSaturation: true,
		OnStateChange: func(ev circuit.StateChange) { reason = ev.Reason }})
	for range 2 {
		p, _ := b.Allow()
		p.Done(watertight.Saturated)
	}
	if !strings.Contains(reason, "0 failures, 2 saturated") {
		t.Fatalf("reason %q does not tell saturation apart", reason)
	}
	b.Reset()
}

// recorder is a Listener that keeps the events it receives.
type recorder struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (r *recorder) OnEvent(e watertight.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) take() []watertight.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

// brief renders an event's kind and the fields a breaker fills.
func brief(e watertight.Event) string {
	s := fmt.Sprintf("%v %s/%s/%s", e.Kind, e.Source, e.Name, e.Key)
	if e.Kind == watertight.EventStateChange {
		s += fmt.Sprintf(" %s>%s delay=%v", e.From, e.To, e.Delay)
	}
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	return s
}

func TestListenerEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := mustNew(t, circuit.Config{Name: "payments", WindowSize: 2, MinCalls: 2, OpenDuration: 10 * time.Second, OpenJitter: -1, HalfOpenCalls: 1, Listener: rec})
		start := time.Now()
		succeed(b, 1)
		if evs := rec.take(); len(evs) != 0 {
			t.Fatalf("a success emitted %v", evs)
		}
		fail(b, 1)
		if _, err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("Allow while open: %v", err)
		}
		evs := rec.take()
		want := []string{
			"state_change circuit/payments/ closed>open delay=10s",
			"rejected circuit/payments/ err=circuit: open",
		}
		if len(evs) != len(want) {
			t.Fatalf("events %v, want %v", evs, want)
		}
		for i, e := range evs {
			if got := brief(e); got != want[i] {
				t.Errorf("event %d: %q, want %q", i, got, want[i])
			}
			if !e.Time.Equal(start) {
				t.Errorf("event %d at %v, want %v", i, e.Time, start)
			}
		}
		if evs[0].Reason != "failure rate 50% >= 50% over 2 calls" {
			t.Errorf("reason %q", evs[0].Reason)
		}

		time.Sleep(10 * time.Second) // the timer turns the breaker half-open
		synctest.Wait()
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("second trial: %v", err)
		}
		p.Done(watertight.Success)
		b.ForceOpen()
		b.Reset()
		var got []string
		for _, e := range rec.take() {
			got = append(got, brief(e))
			if e.Kind == watertight.EventStateChange && e.Reason == "" {
				t.Errorf("%v has no reason", e)
			}
		}
		want = []string{
			"state_change circuit/payments/ open>half-open delay=0s",
			"rejected circuit/payments/ err=circuit: half-open, all trial calls in flight",
			"state_change circuit/payments/ half-open>closed delay=0s",
			"state_change circuit/payments/ closed>forced-open delay=0s",
			"state_change circuit/payments/ forced-open>closed delay=0s",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

func TestListenerKeepsTypedHooks(t *testing.T) {
	rec := &recorder{}
	var changes, rejects int
	b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, Listener: rec,
		OnStateChange: func(circuit.StateChange) { changes++ },
		OnReject:      func(string, error) { rejects++ }})
	fail(b, 2)
	b.Reset()
	if n := len(rec.take()); changes != 2 || rejects != 1 || n != 3 {
		t.Fatalf("OnStateChange %d, OnReject %d, events %d; want 2, 1, 3", changes, rejects, n)
	}
}

func TestRegistryEventsCarryKey(t *testing.T) {
	rec := &recorder{}
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{Name: "upstreams", WindowSize: 1, MinCalls: 1, OpenJitter: -1, Listener: rec}, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("api.example.com")
	fail(a, 1)
	if _, err := r.Get("cdn.example.com"); !errors.Is(err, circuit.ErrTooManyKeys) {
		t.Fatalf("Get on a full registry: %v", err)
	}
	a.Reset()
	var got []string
	for _, e := range rec.take() {
		got = append(got, brief(e))
	}
	want := []string{
		"state_change circuit/upstreams/api.example.com closed>open delay=30s",
		"rejected circuit/upstreams/cdn.example.com err=circuit: too many keys",
		"state_change circuit/upstreams/api.example.com open>closed delay=0s",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a.Name() != "api.example.com" {
		t.Fatalf("a registry's breaker is named %q, want its key", a.Name())
	}
}

// A listener may call back into the breaker, on every kind of event: events
// are never sent under the breaker's lock.
func TestEventListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b *circuit.Breaker
		// Atomics: the timer's goroutine sends the half-open event.
		var depth, states, rejects atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			d := depth.Add(1)
			defer depth.Add(-1)
			_ = b.Snapshot()
			switch e.Kind {
			case watertight.EventStateChange:
				states.Add(1)
				if e.To == "half-open" {
					b.ForceOpen() // a state change from within a state change
				}
			case watertight.EventRejected:
				rejects.Add(1)
				if d == 1 {
					_, _ = b.Allow() // rejected again, from within a rejection
				}
			}
		})
		b = mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: time.Second, OpenJitter: -1, Listener: l})
		fail(b, 1)
		_, _ = b.Allow()
		time.Sleep(time.Second) // open → half-open, from the timer's goroutine
		synctest.Wait()
		if b.State() != circuit.ForcedOpen || states.Load() != 3 || rejects.Load() != 2 {
			t.Fatalf("state %v, %d state changes, %d rejections; want forced-open, 3, 2", b.State(), states.Load(), rejects.Load())
		}
		b.Reset()
	})
}

// With a listener that does not allocate, neither does a rejection nor a
// closed breaker's call.
func TestListenerAllocs(t *testing.T) {
	var n atomic.Int64
	l := watertight.ListenerFunc(func(watertight.Event) { n.Add(1) })
	b := mustNew(t, circuit.Config{Listener: l})
	if a := testing.AllocsPerRun(100, func() { succeed(b, 1) }); a != 0 {
		t.Errorf("closed breaker with a listener: %v allocs per call", a)
	}
	b.ForceOpen()
	if a := testing.AllocsPerRun(100, func() { _, _ = b.Allow() }); a != 0 {
		t.Errorf("rejection with a listener: %v allocs per call", a)
	}
	if n.Load() < 100 {
		t.Fatalf("listener saw %d events", n.Load())
	}
	b.Reset()
}

// An open breaker reconfigured stays open, rejects, and goes half-open at
// the new open duration counted from when it opened; the reconfiguration
// itself reports no state change.
func TestReconfigureKeepsOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		open   time.Duration // the new OpenDuration
		halfAt time.Duration // since the opening
	}{
		{"longer", 30 * time.Second, 30 * time.Second},
		{"shorter", 6 * time.Second, 6 * time.Second},
		{"already over", 2 * time.Second, 4 * time.Second}, // reconfigured at 4s: half-open at once
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var changes atomic.Int64
				cfg := circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: 10 * time.Second, OpenJitter: -1,
					OnStateChange: func(circuit.StateChange) { changes.Add(1) }}
				b := mustNew(t, cfg)
				opened := time.Now()
				fail(b, 1)
				time.Sleep(4 * time.Second)
				cfg.OpenDuration = tc.open
				if err := b.Reconfigure(cfg); err != nil {
					t.Fatal(err)
				}
				if tc.halfAt > 4*time.Second {
					if b.State() != circuit.Open || changes.Load() != 1 {
						t.Fatalf("after Reconfigure: state %v, %d state changes; want open, 1", b.State(), changes.Load())
					}
					time.Sleep(tc.halfAt - time.Since(opened) - time.Nanosecond)
					synctest.Wait()
					if _, err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
						t.Fatalf("Allow 1ns before the new open time = %v, want ErrOpen", err)
					}
					time.Sleep(time.Nanosecond)
				}
				synctest.Wait()
				if b.State() != circuit.HalfOpen || time.Since(opened) != tc.halfAt {
					t.Fatalf("state %v at %v; want half-open at %v", b.State(), time.Since(opened), tc.halfAt)
				}
				if s := b.Snapshot(); s.Opens != 1 {
					t.Fatalf("Opens = %d, want 1", s.Opens)
				}
				b.Reset()
			})
		})
	}
}

// A reconfigured closed breaker keeps its window when the shape is the same
// and judges it by the new thresholds at once; another shape starts empty.
func TestReconfigureWindow(t *testing.T) {
	cfg := circuit.Config{WindowSize: 10, MinCalls: 10, FailureRateThreshold: 50}
	b := mustNew(t, cfg)
	fail(b, 3)
	succeed(b, 5)
	cfg.FailureRateThreshold = 60
	if err := b.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 8 || s.Failures != 3 {
		t.Fatalf("same shape: %+v, want the 8 calls and 3 failures kept", s)
	}
	cfg.WindowSize, cfg.MinCalls = 20, 5
	if err := b.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); s.Calls != 0 {
		t.Fatalf("new WindowSize: %d calls kept, want a fresh window", s.Calls)
	}
	fail(b, 3)
	succeed(b, 3)
	cfg.FailureRateThreshold = 50 // 3 of 6 failed: 50% with 6 >= MinCalls 5
	if err := b.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if b.State() != circuit.Open {
		t.Fatalf("state %v, want open: the kept window breaks the new threshold", b.State())
	}
	b.Reset()
}

// Half-open: the new HalfOpenCalls decides the trials that already ended.
func TestReconfigureHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 3}
		b := mustNew(t, cfg)
		fail(b, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		succeed(b, 1)
		if b.State() != circuit.HalfOpen {
			t.Fatalf("state %v, want half-open with 1 of 3 trials done", b.State())
		}
		cfg.HalfOpenCalls = 1
		if err := b.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if b.State() != circuit.Closed {
			t.Fatalf("state %v, want closed: the one trial needed has succeeded", b.State())
		}
	})
}

// An invalid configuration is refused and changes nothing; manual states
// are kept.
func TestReconfigureInvalidAndManual(t *testing.T) {
	b := mustNew(t, circuit.Config{Name: "db", WindowSize: 4, MinCalls: 4})
	err := b.Reconfigure(circuit.Config{WindowSize: 2, MinCalls: 4})
	if err == nil || !strings.Contains(err.Error(), "WindowSize must be >= MinCalls") {
		t.Fatalf("Reconfigure(invalid) = %v", err)
	}
	b.ForceOpen()
	if err := b.Reconfigure(circuit.Config{Name: "other", OpenDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	if b.State() != circuit.ForcedOpen || b.Name() != "db" {
		t.Fatalf("state %v, name %q; want forced-open, db", b.State(), b.Name())
	}
	b.Reset()
}

// Reconfigure races with calls (run with -race).
func TestReconfigureConcurrent(t *testing.T) {
	b := mustNew(t, circuit.Config{WindowSize: 4, MinCalls: 4, OpenDuration: time.Millisecond})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := b.Allow(); err == nil {
					p.Done([]watertight.Outcome{watertight.Success, watertight.Failure}[i%2])
				}
			}
		})
	}
	for i := range 200 {
		c := circuit.Config{WindowSize: 4 + i%3, MinCalls: 4, OpenDuration: time.Millisecond, SlowCallDuration: time.Duration(i%2) * time.Second}
		if err := b.Reconfigure(c); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	b.ForceOpen() // stop the timers
}

// OpenJitter: zero means DefaultOpenJitter, negative means none.
func TestOpenJitterDefault(t *testing.T) {
	if got := circuit.DefaultConfig().OpenJitter; got != 0.1 {
		t.Fatalf("DefaultConfig().OpenJitter = %v, want 0.1", got)
	}
	for _, tc := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 9 * time.Second}, {-1, 10 * time.Second}, {0.5, 5 * time.Second}} {
		var got time.Duration
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: 10 * time.Second, OpenJitter: tc.jitter,
			Rand: func() float64 { return 0 }, // the shortest draw
			OnStateChange: func(ev circuit.StateChange) {
				if ev.To == circuit.Open {
					got = ev.OpenFor
				}
			}})
		fail(b, 1)
		b.Reset()
		if got != tc.want {
			t.Errorf("OpenJitter %v: open for %v, want %v", tc.jitter, got, tc.want)
		}
	}
	// Without Rand, backoff.Spread draws within ±10% by default.
	seen := map[time.Duration]bool{}
	for range 20 {
		var got time.Duration
		b := mustNew(t, circuit.Config{WindowSize: 1, MinCalls: 1, OpenDuration: 10 * time.Second,
			OnStateChange: func(ev circuit.StateChange) {
				if ev.To == circuit.Open {
					got = ev.OpenFor
				}
			}})
		fail(b, 1)
		b.Reset()
		if got < 9*time.Second || got > 11*time.Second {
			t.Fatalf("default jitter: open for %v, want within 10s ± 10%%", got)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 openings all lasted %v: no jitter by default", seen)
	}
}

// OpenLeft counts down the open duration, and is zero once half-open.
func TestSnapshotOpenLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, circuit.Config{ConsecutiveFailures: 1, OpenDuration: 10 * time.Second, OpenJitter: -1})
		if s := b.Snapshot(); s.OpenLeft != 0 {
			t.Fatalf("closed: OpenLeft %v", s.OpenLeft)
		}
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		p.Done(watertight.Failure)
		if s := b.Snapshot(); s.State != circuit.Open || s.OpenLeft != 10*time.Second {
			t.Fatalf("just opened: %v, OpenLeft %v, want open, 10s", s.State, s.OpenLeft)
		}
		time.Sleep(4 * time.Second)
		if s := b.Snapshot(); s.OpenLeft != 6*time.Second {
			t.Fatalf("after 4s: OpenLeft %v, want 6s", s.OpenLeft)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if s := b.Snapshot(); s.State != circuit.HalfOpen || s.OpenLeft != 0 {
			t.Fatalf("after 10s: %v, OpenLeft %v, want half-open, 0", s.State, s.OpenLeft)
		}
		b.Reset()
	})
}
