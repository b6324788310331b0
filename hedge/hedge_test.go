package hedge_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
)

var errBoom = errors.New("boom")

func newPolicy(t testing.TB, cfg hedge.Config) *hedge.Policy {
	t.Helper()
	p, err := hedge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// events records the events a policy emits.
type events struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (e *events) OnEvent(ev watertight.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// String lists the events as "sent:2@10ms won:2 suppressed:3(budget)".
func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var parts []string
	for _, ev := range e.evs {
		if ev.Source != "hedge" {
			parts = append(parts, "bad-source:"+ev.Source)
		}
		if ev.Code != "" && ev.Kind != watertight.EventHedgeSuppressed {
			parts = append(parts, "unexpected-code:"+ev.Code)
		}
		switch ev.Kind {
		case watertight.EventHedgeSent:
			parts = append(parts, fmt.Sprintf("sent:%d@%v", ev.Attempt, ev.Delay))
		case watertight.EventHedgeWon:
			parts = append(parts, fmt.Sprintf("won:%d", ev.Attempt))
		case watertight.EventHedgeSuppressed:
			parts = append(parts, fmt.Sprintf("suppressed:%d(%s)", ev.Attempt, ev.Code))
			if ev.Reason != ev.Code {
				parts = append(parts, "reason-not-code:"+ev.Reason)
			}
		default:
			parts = append(parts, ev.Kind.String())
		}
	}
	return strings.Join(parts, " ")
}

// idem is a context marked idempotent.
var idem = retry.Idempotent(context.Background())

// replica returns a hedged function whose attempts take the given times
// (attempt n takes lat[n-1]) and then return n, or fail with errs[n-1] if
// set; an attempt whose latency is negative never answers, and returns only
// when its context ends. Every attempt honours its context.
func replica(lat []time.Duration, errs ...error) func(context.Context, int) (int, error) {
	return func(ctx context.Context, n int) (int, error) {
		d := lat[n-1]
		var wait <-chan time.Time
		if d >= 0 {
			tm := time.NewTimer(d)
			defer tm.Stop()
			wait = tm.C
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		if n-1 < len(errs) && errs[n-1] != nil {
			return 0, errs[n-1]
		}
		return n, nil
	}
}

const never = -1

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  hedge.Config
		want string
	}{
		{hedge.Config{}, "hedge: Config.Delay must be > 0 without Percentile, got 0s"},
		{hedge.Config{Delay: -1}, "hedge: Config.Delay must be >= 0, got -1ns"},
		{hedge.Config{Delay: 1, MinDelay: -1}, "hedge: Config.MinDelay must be >= 0, got -1ns"},
		{hedge.Config{Percentile: 1, MinDelay: 1}, "hedge: Config.Percentile must be in [0, 1) (0 means a fixed Delay), got 1"},
		{hedge.Config{Percentile: -0.5, MinDelay: 1}, "hedge: Config.Percentile must be in [0, 1)"},
		{hedge.Config{Percentile: 0.95}, "hedge: Config.Delay or Config.MinDelay must be > 0 with Percentile"},
		{hedge.Config{Delay: 1, Window: -1}, "hedge: Config.Window must be >= 0 (0 means 10s), got -1ns"},
		{hedge.Config{Delay: 1, MaxHedges: 17}, "hedge: Config.MaxHedges must be at most 16, got 17"},
		{hedge.Config{Percentile: 0.95, MinDelay: 1, Window: 3}, "hedge: Config.Window: latency:"},
	} {
		_, err := hedge.New(tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error starting %q", tc.cfg, err, tc.want)
		}
	}
	p := newPolicy(t, hedge.DefaultConfig())
	if got := p.Config(); got != hedge.DefaultConfig() {
		t.Errorf("Config() = %+v, want DefaultConfig %+v", got, hedge.DefaultConfig())
	}
	if got := newPolicy(t, hedge.Config{Delay: time.Second}).Config(); got.MaxHedges != 1 || got.MinSamples != 100 || got.OverloadCooldown != time.Second {
		t.Errorf("zero fields resolved to %+v", got)
	}
}

// The common case: the first attempt answers before the delay; nothing else
// runs.
func TestAnswerBeforeDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Listener: &ev})
		calls := 0
		v, err := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
			calls++
			time.Sleep(9 * time.Millisecond)
			return n, nil
		})
		if v != 1 || err != nil || calls != 1 {
			t.Fatalf("Do = %v, %v after %d calls; want 1, nil after 1", v, err, calls)
		}
		time.Sleep(time.Second) // a stray timer would fire now
		if s := p.Snapshot(); s.Calls != 1 || s.Sent != 0 || s.HedgedCalls != 0 || ev.String() != "" {
			t.Fatalf("snapshot %+v, events %q; want one call, no hedge", s, ev.String())
		}
	})
}

// A first attempt that fails before the delay is the answer: a hedge is
// not a retry.
func TestFailureBeforeDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		_, err := hedge.Do(idem, p, replica([]time.Duration{time.Millisecond, 0}, errBoom))
		if err != errBoom {
			t.Fatalf("Do error = %v, want %v", err, errBoom)
		}
		if s := p.Snapshot(); s.Sent != 0 {
			t.Fatalf("sent %d hedges, want 0", s.Sent)
		}
	})
}

// A slow first attempt is hedged after the delay; the hedge wins, and the
// first attempt is cancelled with ErrLost.
func TestHedgeWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Listener: &ev})
		var cause1 error
		start := time.Now()
		v, err := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
			if n == 1 {
				<-ctx.Done()
				cause1 = context.Cause(ctx)
				return 0, ctx.Err()
			}
			time.Sleep(3 * time.Millisecond)
			return n, nil
		})
		if v != 2 || err != nil {
			t.Fatalf("Do = %v, %v; want 2, nil", v, err)
		}
		if got := time.Since(start); got != 13*time.Millisecond {
			t.Fatalf("Do took %v, want 13ms (10ms delay + 3ms hedge)", got)
		}
		if cause1 != hedge.ErrLost || !errors.Is(cause1, context.Canceled) {
			t.Fatalf("attempt 1's cause = %v, want ErrLost (which is a context.Canceled)", cause1)
		}
		if got, want := ev.String(), "sent:2@10ms won:2"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		s := p.Snapshot()
		if s.Calls != 1 || s.Sent != 1 || s.Won != 1 || s.HedgedCalls != 1 || s.ExtraPercent() != 100 {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

// The first attempt answers after the hedge was sent: it wins, the hedge is
// cancelled, and Do returns without waiting for it.
func TestFirstWinsAfterHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Listener: &ev})
		hedgeDone := make(chan error, 1)
		start := time.Now()
		v, err := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
			if n == 1 {
				time.Sleep(12 * time.Millisecond)
				return 1, nil
			}
			<-ctx.Done()
			time.Sleep(time.Second) // slow to notice: Do must not wait for it
			hedgeDone <- context.Cause(ctx)
			return 0, ctx.Err()
		})
		if v != 1 || err != nil || time.Since(start) != 12*time.Millisecond {
			t.Fatalf("Do = %v, %v after %v; want 1, nil after 12ms", v, err, time.Since(start))
		}
		if cause := <-hedgeDone; cause != hedge.ErrLost {
			t.Fatalf("the hedge's cause = %v, want ErrLost", cause)
		}
		if got, want := ev.String(), "sent:2@10ms"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		if s := p.Snapshot(); s.Sent != 1 || s.Won != 0 {
			t.Fatalf("snapshot %+v: want 1 sent, 0 won", s)
		}
	})
}

// A failure does not end the call while another attempt runs.
func TestFailureWaitsForHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		start := time.Now()
		v, err := hedge.Do(idem, p, replica([]time.Duration{15 * time.Millisecond, 20 * time.Millisecond}, errBoom))
		if v != 2 || err != nil || time.Since(start) != 30*time.Millisecond {
			t.Fatalf("Do = %v, %v after %v; want 2, nil after 30ms", v, err, time.Since(start))
		}
		// And the other way round: the hedge fails, the first attempt wins.
		v, err = hedge.Do(idem, p, replica([]time.Duration{25 * time.Millisecond, time.Millisecond}, nil, errBoom))
		if v != 1 || err != nil {
			t.Fatalf("Do = %v, %v; want 1, nil", v, err)
		}
	})
}

// When every attempt fails, Do returns the last failure.
func TestAllFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2})
		errs := []error{errors.New("first"), errors.New("second"), errors.New("third")}
		start := time.Now()
		// Attempts at 0, 10 and 20ms, failing at 50, 35 and 21ms.
		_, err := hedge.Do(idem, p, replica([]time.Duration{50 * time.Millisecond, 25 * time.Millisecond, time.Millisecond}, errs...))
		if err != errs[0] || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("Do error %v after %v, want %v (the last to fail) after 50ms", err, time.Since(start), errs[0])
		}
		// Once every attempt sent has failed, the call ends: no hedge is
		// sent to replace them.
		start = time.Now()
		_, err = hedge.Do(idem, p, replica([]time.Duration{12 * time.Millisecond, time.Millisecond, 0}, errs[0], errs[1]))
		if err != errs[0] || time.Since(start) != 12*time.Millisecond {
			t.Fatalf("Do error %v after %v, want %v after 12ms", err, time.Since(start), errs[0])
		}
		if s := p.Snapshot(); s.Sent != 3 {
			t.Fatalf("sent %d hedges, want 3 (2 + 1)", s.Sent)
		}
	})
}

// MaxHedges extra attempts, one delay apart; the third attempt wins.
func TestMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2, Listener: &ev})
		var seen []int
		var mu sync.Mutex
		start := time.Now()
		v, err := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
			mu.Lock()
			seen = append(seen, n)
			mu.Unlock()
			return replica([]time.Duration{never, never, 5 * time.Millisecond})(ctx, n)
		})
		if v != 3 || err != nil || time.Since(start) != 25*time.Millisecond {
			t.Fatalf("Do = %v, %v after %v; want 3, nil after 25ms", v, err, time.Since(start))
		}
		if got, want := ev.String(), "sent:2@10ms sent:3@20ms won:3"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		if fmt.Sprint(seen) != "[1 2 3]" {
			t.Fatalf("attempts %v, want [1 2 3]", seen)
		}
	})
}

func TestNotIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		calls := 0
		v, err := hedge.Do(context.Background(), p, func(ctx context.Context, n int) (int, error) {
			calls++
			time.Sleep(50 * time.Millisecond)
			return n, nil
		})
		if v != 1 || err != nil || calls != 1 {
			t.Fatalf("Do = %v, %v after %d calls; want 1, nil after 1", v, err, calls)
		}
		if s := p.Snapshot(); s.Calls != 1 || s.NotIdempotent != 1 || s.Sent != 0 {
			t.Fatalf("snapshot %+v", s)
		}
		// An idempotency key marks the call too, and Config.Idempotent
		// marks every call.
		ctx := retry.WithIdempotencyKey(context.Background(), "k1")
		if v, _ := hedge.Do(ctx, p, replica([]time.Duration{never, time.Millisecond})); v != 2 {
			t.Fatalf("with an idempotency key: Do = %v, want 2 (the hedge)", v)
		}
		all := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Idempotent: true})
		if v, _ := hedge.Do(context.Background(), all, replica([]time.Duration{never, time.Millisecond})); v != 2 {
			t.Fatalf("with Config.Idempotent: Do = %v, want 2 (the hedge)", v)
		}
	})
}

func TestNilAndDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off := newPolicy(t, hedge.Config{Delay: time.Millisecond, MaxHedges: -1})
		for _, p := range []*hedge.Policy{nil, off} {
			calls := 0
			v, err := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
				calls++
				time.Sleep(time.Second)
				return n, nil
			})
			if v != 1 || err != nil || calls != 1 {
				t.Fatalf("policy %v: Do = %v, %v after %d calls; want 1, nil after 1", p, v, err, calls)
			}
		}
		if s := off.Snapshot(); s.Calls != 1 || s.Sent != 0 || s.Delay != 0 {
			t.Fatalf("disabled policy: %+v", s)
		}
		if s := (*hedge.Policy)(nil).Snapshot(); s != (hedge.Snapshot{}) {
			t.Fatalf("nil policy snapshot %+v", s)
		}
	})
}

// slowFirst is a hedged function whose first attempt answers after 50ms
// and whose hedges after 1ms.
var slowFirst = replica([]time.Duration{50 * time.Millisecond, time.Millisecond, time.Millisecond})

func TestSuppressedByBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		b, err := budget.New(budget.Config{Ratio: 0.5, MaxTokens: 1, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Budget: b, Listener: &ev})
		var got []int
		for range 4 {
			v, _ := hedge.Do(idem, p, slowFirst)
			got = append(got, v)
		}
		// Each call deposits half a token: the second and fourth calls find
		// a whole one.
		if fmt.Sprint(got) != "[1 2 1 2]" {
			t.Fatalf("answers %v, want [1 2 1 2]", got)
		}
		want := "suppressed:2(budget) sent:2@10ms won:2 suppressed:2(budget) sent:2@10ms won:2"
		if ev.String() != want {
			t.Fatalf("events %q, want %q", ev.String(), want)
		}
		ev.mu.Lock()
		if e := ev.evs[0].Err; !errors.Is(e, budget.ErrExhausted) {
			t.Errorf("the suppressed event's Err = %v, want budget.ErrExhausted", e)
		}
		ev.mu.Unlock()
		if s := p.Snapshot(); s.SuppressedBudget != 2 || s.Suppressed() != 2 || s.Sent != 2 || s.ExtraPercent() != 50 {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

func TestSuppressedByBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		cb, err := circuit.New(circuit.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Breaker: cb, Listener: &ev})
		cb.ForceOpen()
		if v, _ := hedge.Do(idem, p, slowFirst); v != 1 {
			t.Fatalf("breaker open: Do = %v, want 1 (no hedge)", v)
		}
		cb.Disable() // lets everything through: hedges go
		if v, _ := hedge.Do(idem, p, slowFirst); v != 2 {
			t.Fatalf("breaker disabled: Do = %v, want 2", v)
		}
		cb.Reset()
		if v, _ := hedge.Do(idem, p, slowFirst); v != 2 {
			t.Fatalf("breaker closed: Do = %v, want 2", v)
		}
		if got, want := ev.String(), "suppressed:2(breaker) sent:2@10ms won:2 sent:2@10ms won:2"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		if s := p.Snapshot(); s.SuppressedBreaker != 1 {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

func TestSuppressedByBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		bh, err := bulkhead.New(bulkhead.Config{MaxConcurrent: 1})
		if err != nil {
			t.Fatal(err)
		}
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, Bulkhead: bh, Listener: &ev})
		// The function holds the bulkhead's only permit while it runs: the
		// bulkhead is saturated when the hedge is due.
		fn := func(ctx context.Context, n int) (int, error) {
			if err := bh.Acquire(ctx); err != nil {
				return 0, err
			}
			defer bh.Release()
			return slowFirst(ctx, n)
		}
		if v, _ := hedge.Do(idem, p, fn); v != 1 {
			t.Fatalf("bulkhead saturated: Do = %v, want 1 (no hedge)", v)
		}
		// With room in the bulkhead, the hedge goes.
		if v, _ := hedge.Do(idem, p, slowFirst); v != 2 {
			t.Fatalf("bulkhead free: Do = %v, want 2", v)
		}
		if got, want := ev.String(), "suppressed:2(bulkhead) sent:2@10ms won:2"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		if s := p.Snapshot(); s.SuppressedBulkhead != 1 {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

// An attempt that says "overloaded" stops the call's hedges and, for the
// cool-down, every call's.
func TestSuppressedByOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2, OverloadCooldown: time.Second, Listener: &ev})
		over := watertight.Overloaded(errBoom)
		// The first hedge fails at once with the signal: the second is not
		// sent, and the first attempt's answer is the call's.
		v, err := hedge.Do(idem, p, replica([]time.Duration{30 * time.Millisecond, 0}, nil, over))
		if v != 1 || err != nil {
			t.Fatalf("Do = %v, %v; want 1, nil", v, err)
		}
		if got, want := ev.String(), "sent:2@10ms suppressed:3(overload)"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		if !p.Snapshot().Overloaded {
			t.Fatal("Snapshot().Overloaded = false during the cool-down")
		}
		// During the cool-down, no call hedges.
		if v, _ := hedge.Do(idem, p, slowFirst); v != 1 {
			t.Fatalf("during the cool-down: Do = %v, want 1", v)
		}
		time.Sleep(time.Second)
		if p.Snapshot().Overloaded {
			t.Fatal("Snapshot().Overloaded = true after the cool-down")
		}
		if v, _ := hedge.Do(idem, p, slowFirst); v != 2 {
			t.Fatalf("after the cool-down: Do = %v, want 2", v)
		}
		if s := p.Snapshot(); s.SuppressedOverload != 3 {
			t.Fatalf("snapshot %+v: want 3 suppressed for overload (1 + 2 in the cool-down)", s)
		}
	})
}

// With a negative cool-down, only the call that saw the signal stops.
func TestOverloadNoCooldown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2, OverloadCooldown: -1, Listener: &ev})
		over := watertight.Overloaded(errBoom)
		v, err := hedge.Do(idem, p, replica([]time.Duration{25 * time.Millisecond, 0, 0}, nil, over))
		if v != 1 || err != nil {
			t.Fatalf("Do = %v, %v; want 1, nil", v, err)
		}
		if p.Snapshot().Overloaded {
			t.Fatal("Overloaded with no cool-down")
		}
		if v, _ := hedge.Do(idem, p, slowFirst); v != 2 {
			t.Fatalf("next call: Do = %v, want 2", v)
		}
		if got, want := ev.String(), "sent:2@10ms suppressed:3(overload) sent:2@10ms won:2"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
}

// With Percentile, the delay is the cold-start delay until MinSamples
// latencies are known, then the tracked percentile, floored at MinDelay.
func TestPercentileDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Percentile: 0.9, Delay: 500 * time.Millisecond, MinDelay: 5 * time.Millisecond, MinSamples: 100})
		if d := p.Delay(); d != 500*time.Millisecond {
			t.Fatalf("cold Delay() = %v, want 500ms", d)
		}
		// 100 calls of 1..100ms, all answered before the delay.
		for i := range 100 {
			d := time.Duration(i+1) * time.Millisecond
			if v, err := hedge.Do(idem, p, replica([]time.Duration{d})); v != 1 || err != nil {
				t.Fatalf("Do = %v, %v", v, err)
			}
		}
		time.Sleep(100 * time.Millisecond) // the delay is recomputed at most every 100ms
		if d := p.Delay(); d < 87*time.Millisecond || d > 93*time.Millisecond {
			t.Fatalf("Delay() = %v, want the p90 of 1..100ms, 90ms within 1/32", d)
		}
		if s := p.Snapshot(); s.Sent != 0 || s.Delay != p.Delay() {
			t.Fatalf("snapshot %+v", s)
		}
		// Hedges now go after the tracked delay.
		start := time.Now()
		if v, _ := hedge.Do(idem, p, replica([]time.Duration{never, time.Millisecond})); v != 2 {
			t.Fatalf("Do = %v, want 2", v)
		}
		if got := time.Since(start) - time.Millisecond; got != p.Delay() {
			t.Fatalf("the hedge went after %v, want the delay %v", got, p.Delay())
		}
		// The floor: fast latencies give MinDelay.
		time.Sleep(10 * time.Second) // the window forgets
		for range 100 {
			hedge.Do(idem, p, replica([]time.Duration{time.Millisecond}))
		}
		time.Sleep(100 * time.Millisecond)
		if d := p.Delay(); d != 5*time.Millisecond {
			t.Fatalf("Delay() = %v, want the floor 5ms", d)
		}
	})
}

// A percentile policy records the losers too, at the time they were
// cancelled (a lower bound), so that hedging does not hide the tail it cuts
// and drag the delay down.
func TestPercentileCountsLosers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Percentile: 0.5, MinDelay: 10 * time.Millisecond, MinSamples: -1})
		// Every first attempt stalls; every hedge takes 1ms. Recording only
		// the winners would make the p50 1ms (floored at 10ms); with the
		// losers (cancelled at 11ms), the p50 is 11ms.
		for range 20 {
			if v, _ := hedge.Do(idem, p, replica([]time.Duration{never, time.Millisecond})); v != 2 {
				t.Fatalf("Do = %v, want 2", v)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if d := p.Delay(); d < 10*time.Millisecond || d > 12*time.Millisecond {
			t.Fatalf("Delay() = %v, want about 11ms", d)
		}
	})
}

// When the caller's context ends while Do waits for a hedge that ignores
// its own, Do returns the context's cause at once; the hedge's late result
// is discarded.
func TestCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		stop := errors.New("caller gave up")
		ctx, cancel := context.WithTimeoutCause(idem, 30*time.Millisecond, stop)
		defer cancel()
		var discarded []string
		var mu sync.Mutex
		start := time.Now()
		_, err := hedge.DoDiscard(ctx, p, func(ctx context.Context, n int) (int, error) {
			if n == 1 {
				time.Sleep(15 * time.Millisecond)
				return 0, errBoom
			}
			time.Sleep(time.Second) // ignores its context
			return n, nil
		}, func(v int, err error) {
			mu.Lock()
			discarded = append(discarded, fmt.Sprint(v, err))
			mu.Unlock()
		})
		if err != stop || time.Since(start) != 30*time.Millisecond {
			t.Fatalf("Do error %v after %v, want %v after 30ms", err, time.Since(start), stop)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if got, want := fmt.Sprint(discarded), "[0 boom 2 <nil>]"; got != want {
			t.Fatalf("discarded %v, want %v", got, want)
		}
	})
}

// DoDiscard hands every result it does not return to discard: the loser's
// success and a replaced failure.
func TestDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond, MaxHedges: 2})
		var discarded atomic.Int32
		var got []string
		var mu sync.Mutex
		discard := func(v int, err error) {
			discarded.Add(1)
			mu.Lock()
			got = append(got, fmt.Sprint(v, err))
			mu.Unlock()
		}
		// Attempt 1 fails at 12ms, attempt 2 wins at 21ms, attempt 3 ignores
		// its cancellation and succeeds at 40ms: 1 and 3 are discarded.
		fn := func(ctx context.Context, n int) (int, error) {
			switch n {
			case 1:
				time.Sleep(12 * time.Millisecond)
				return -1, errBoom
			case 2:
				time.Sleep(11 * time.Millisecond)
				return 2, nil
			}
			time.Sleep(20 * time.Millisecond)
			return 3, nil
		}
		v, err := hedge.DoDiscard(idem, p, fn, discard)
		if v != 2 || err != nil {
			t.Fatalf("Do = %v, %v; want 2, nil", v, err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(got) != "[-1 boom 3 <nil>]" {
			t.Fatalf("discarded %v, want [-1 boom 3 <nil>]", got)
		}
	})
}

// The contexts of the attempts: values and deadline from the caller's,
// cancelled when Do is done with them, and kept alive by DeferCancel.
func TestAttemptContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		type key struct{}
		parent, cancel := context.WithTimeout(context.WithValue(idem, key{}, "v"), time.Hour)
		defer cancel()
		var kept context.Context
		hedge.Do(parent, p, func(ctx context.Context, n int) (int, error) {
			kept = ctx
			if ctx.Value(key{}) != "v" {
				t.Error("the attempt's context lost the caller's value")
			}
			if dl, ok := ctx.Deadline(); !ok || dl != time.Now().Add(time.Hour) {
				t.Error("the attempt's context lost the caller's deadline")
			}
			if ctx.Err() != nil {
				t.Error("the attempt's context is done while the attempt runs")
			}
			return n, nil
		})
		if kept.Err() != context.Canceled {
			t.Fatalf("after Do returned, the attempt's context Err = %v, want context.Canceled", kept.Err())
		}
		select {
		case <-kept.Done():
		default:
			t.Fatal("after Do returned, the attempt's context is not done")
		}

		// DeferCancel keeps the winner's context until its function is
		// called, whether the function waited on it or not.
		for _, wait := range []bool{false, true} {
			var release func()
			hedge.Do(parent, p, func(ctx context.Context, n int) (int, error) {
				kept = ctx
				release = hedge.DeferCancel(ctx)
				if wait {
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
				}
				return n, nil
			})
			if kept.Err() != nil {
				t.Fatalf("wait=%v: a deferred winner's context ended with Do: %v", wait, kept.Err())
			}
			release()
			release()
			if kept.Err() != context.Canceled {
				t.Fatalf("wait=%v: after release, Err = %v, want context.Canceled", wait, kept.Err())
			}
		}

		// A deferred attempt that loses is cancelled all the same.
		lost := make(chan error, 1)
		v, _ := hedge.Do(parent, p, func(ctx context.Context, n int) (int, error) {
			if n == 2 {
				return n, nil
			}
			hedge.DeferCancel(ctx)
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return 0, ctx.Err()
		})
		if v != 2 || <-lost != hedge.ErrLost {
			t.Fatal("a deferred loser was not cancelled with ErrLost")
		}

		// DeferCancel on a context Do did not give does nothing.
		hedge.DeferCancel(context.Background())()

		// The parent's cancellation reaches the attempt.
		ctx, cancelParent := context.WithCancelCause(idem)
		stop := errors.New("stop")
		_, err := hedge.Do(ctx, p, func(ctx context.Context, n int) (int, error) {
			cancelParent(stop)
			if ctx.Err() != context.Canceled {
				t.Errorf("lazy: Err = %v after the parent's cancel", ctx.Err())
			}
			<-ctx.Done()
			return 0, context.Cause(ctx)
		})
		if err != stop {
			t.Fatalf("Do error %v, want the parent's cause", err)
		}
	})
}

// A context derived from an attempt's context ends when the attempt loses.
func TestDerivedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		afterFunc := make(chan error, 1)
		v, _ := hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
			if n == 2 {
				return n, nil
			}
			child, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			context.AfterFunc(ctx, func() { afterFunc <- context.Cause(ctx) })
			<-child.Done()
			if context.Cause(child) != hedge.ErrLost {
				t.Errorf("child's cause = %v, want ErrLost", context.Cause(child))
			}
			return 0, child.Err()
		})
		if v != 2 {
			t.Fatalf("Do = %v, want 2", v)
		}
		if err := <-afterFunc; err != hedge.ErrLost {
			t.Fatalf("AfterFunc saw %v, want ErrLost", err)
		}
	})
}

// A panic in the first attempt reaches the caller; the hedge in flight is
// cancelled and nothing is left running.
func TestPanicInFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
		hedgeCause := make(chan error, 1)
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Fatalf("recovered %v, want kaboom", r)
				}
			}()
			hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) {
				if n == 2 {
					<-ctx.Done()
					hedgeCause <- context.Cause(ctx)
					return 0, ctx.Err()
				}
				time.Sleep(20 * time.Millisecond)
				panic("kaboom")
			})
		}()
		if err := <-hedgeCause; !errors.Is(err, context.Canceled) {
			t.Fatalf("the hedge ended with %v, want a cancellation", err)
		}
		// And a panic before the delay leaves no timer behind.
		func() {
			defer func() { recover() }()
			hedge.Do(idem, p, func(ctx context.Context, n int) (int, error) { panic("early") })
		}()
		time.Sleep(time.Second)
		if s := p.Snapshot(); s.Sent != 1 {
			t.Fatalf("sent %d hedges, want 1", s.Sent)
		}
	})
}

// Many concurrent calls, in real time, with random latencies: every call
// gets one answer, every other result is discarded, and nothing is left
// running (goleak). Run with -race.
func TestConcurrentCalls(t *testing.T) {
	p := newPolicy(t, hedge.Config{Delay: 50 * time.Microsecond, MaxHedges: 3, Percentile: 0.5, MinSamples: 10})
	const callers, calls = 8, 200
	var started atomic.Int64
	// One token per result: returned by Do or given to discard.
	results := make(chan struct{}, callers*calls*4)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range calls {
				v, err := hedge.DoDiscard(idem, p, func(ctx context.Context, n int) (int, error) {
					started.Add(1)
					d := time.Duration((g*7+i*13+n*31)%100) * time.Microsecond
					tm := time.NewTimer(d)
					defer tm.Stop()
					select {
					case <-tm.C:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					if (g+i+n)%5 == 0 {
						return 0, errBoom
					}
					return n, nil
				}, func(int, error) { results <- struct{}{} })
				if err == nil && v == 0 || err != nil && v != 0 {
					t.Errorf("Do = %v, %v", v, err)
				}
				results <- struct{}{}
			}
		})
	}
	wg.Wait()
	// Once every Do has returned, no attempt starts; the losers finish in
	// the background, and their results are discarded.
	n := started.Load()
	for i := range n {
		select {
		case <-results:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d attempts started, only %d results returned or discarded", n, i)
		}
	}
	select {
	case <-results:
		t.Fatalf("more results than the %d attempts started", n)
	default:
	}
	s := p.Snapshot()
	if s.Calls != callers*calls || int64(s.Calls+s.Sent) != n {
		t.Fatalf("snapshot %+v, %d attempts started", s, n)
	}
}

// The common call allocates the call alone.
func TestAllocs(t *testing.T) {
	p := newPolicy(t, hedge.Config{Delay: time.Hour})
	fn := func(ctx context.Context, n int) (int, error) { return n, nil }
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(idem, p, fn) }); n > 1 {
		t.Fatalf("Do allocates %v times when no hedge is due, want at most 1", n)
	}
	pp := newPolicy(t, hedge.Config{Percentile: 0.95, MinDelay: time.Hour})
	if n := testing.AllocsPerRun(1000, func() { hedge.Do(idem, pp, fn) }); n > 1 {
		t.Fatalf("Do with Percentile allocates %v times when no hedge is due, want at most 1", n)
	}
}

// A policy used in several synctest bubbles, then outside: the timers made
// in a bubble stay in it (resetting one outside would stop the program).
func TestPolicyAcrossBubbles(t *testing.T) {
	// One P, so that the pool hands back what was put in it.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newPolicy(t, hedge.Config{Delay: 10 * time.Millisecond})
	for range 2 {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			if v, _ := hedge.Do(idem, p, replica([]time.Duration{never, time.Millisecond})); v != 2 || time.Since(start) != 11*time.Millisecond {
				t.Fatalf("Do = %v after %v, want 2 after 11ms of the bubble's clock", v, time.Since(start))
			}
			for range 3 {
				hedge.Do(idem, p, replica([]time.Duration{time.Millisecond})) // no hedge: the timer is stopped, and kept
			}
		})
	}
	for range 3 {
		if v, _ := hedge.Do(idem, p, replica([]time.Duration{0})); v != 1 {
			t.Fatalf("outside the bubbles: Do = %v, want 1", v)
		}
	}
}
