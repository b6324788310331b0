package retry_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
)

func mustConcurrency(t testing.TB, cfg budget.ConcurrencyConfig) *budget.Concurrency {
	t.Helper()
	c, err := budget.NewConcurrency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventList is a Listener that keeps the events it receives.
type eventList struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (l *eventList) OnEvent(e watertight.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventList) take() []watertight.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.evs
	l.evs = nil
	return evs
}

// checkIdle fails unless c has nothing active and no slot held.
func checkIdle(t *testing.T, c *budget.Concurrency) {
	t.Helper()
	if s := c.Snapshot(); s.Active != 0 || s.InFlight != 0 {
		t.Fatalf("after the call: %d active, %d slots held; want 0 and 0", s.Active, s.InFlight)
	}
}

// A retry the concurrent budget refuses is not made: the call ends after
// its first attempt with a SkippedError that says why, matches
// budget.ErrExhausted, is a rejection and carries the overloaded signal.
// The slot it could not have is held by another call's retry, through that
// retry's wait and attempt.
func TestConcurrencyRefusesRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &eventList{}
		conc := mustConcurrency(t, budget.ConcurrencyConfig{Name: "payments", Percent: -1, MinConcurrency: 1, Listener: rec})
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Second), Concurrency: conc})

		// Call A fails once and waits a second for its retry, holding the
		// one slot.
		done := make(chan error)
		go func() {
			calls := 0
			_, err := retry.Do(context.Background(), p, func(context.Context) (string, error) {
				calls++
				if calls == 1 {
					return "", errRefused
				}
				if s := conc.Snapshot(); s.Active != 1 || s.InFlight != 1 {
					t.Errorf("during the retry: %+v, want 1 active and its slot held", s)
				}
				return "ok", nil
			})
			done <- err
		}()
		synctest.Wait()
		if s := conc.Snapshot(); s.Active != 1 || s.InFlight != 1 {
			t.Fatalf("during the wait: %+v, want 1 active and the slot held", s)
		}

		// Call B fails meanwhile: no slot, no retry.
		calls := 0
		_, err := retry.Do(context.Background(), p, failing(&calls, errRefused))
		if calls != 1 {
			t.Fatalf("%d attempts, want 1: the retry was refused", calls)
		}
		var skipped *retry.SkippedError
		if !errors.As(err, &skipped) || skipped.Reason != retry.ErrNoConcurrency || skipped.Attempts != 1 {
			t.Fatalf("err %v, want a SkippedError for ErrNoConcurrency after 1 attempt", err)
		}
		if !errors.Is(err, retry.ErrNoConcurrency) || !errors.Is(err, budget.ErrExhausted) || !errors.Is(err, errRefused) ||
			!watertight.IsRejection(err) || !watertight.IsOverloaded(err) || errors.Is(err, retry.ErrNoBudget) {
			t.Fatalf("err %v: want ErrNoConcurrency, budget.ErrExhausted and the attempt's error, a rejection, overloaded", err)
		}
		if !strings.Contains(err.Error(), "too many retries in flight") {
			t.Fatalf("err %q does not say why", err)
		}
		if evs := rec.take(); len(evs) != 1 || evs[0].Kind != watertight.EventBudgetExhausted || evs[0].Name != "payments" {
			t.Fatalf("budget events %v, want one EventBudgetExhausted", evs)
		}

		if err := <-done; err != nil {
			t.Fatalf("call A: %v", err)
		}
		checkIdle(t, conc)
		if s := conc.Snapshot(); s.Granted != 1 || s.Refused != 1 {
			t.Fatalf("Snapshot %+v, want 1 granted and 1 refused", s)
		}
	})
}

// The retry's slot and the call's count as active are given back on every
// path: success, exhaustion, a permanent error, the context's end during
// the wait or during the retry, and a panic in the retry, through Do and
// through DoDetached.
func TestConcurrencyReleasedOnEveryPath(t *testing.T) {
	errPermanent := retry.MarkPermanent(errors.New("bad request"))
	for _, tc := range []struct {
		name     string
		attempts []error // attempt i's error; a nil is a success
		cancelAt int     // cancel the context during the wait after this attempt (0: never)
		cancelIn int     // cancel the context during this attempt (0: never)
		panicIn  int     // panic in this attempt (0: never)
	}{
		{name: "success on retry", attempts: []error{errRefused, nil}},
		{name: "exhausted", attempts: []error{errRefused, errRefused, errRefused}},
		{name: "permanent after a retry", attempts: []error{errRefused, errPermanent}},
		{name: "cancelled during the wait", attempts: []error{errRefused, errRefused}, cancelAt: 2},
		{name: "cancelled during the retry", attempts: []error{errRefused, errRefused, nil}, cancelIn: 2},
		{name: "panic in the retry", attempts: []error{errRefused, nil}, panicIn: 2},
	} {
		for _, detached := range []bool{false, true} {
			name := tc.name
			if detached {
				name += "/detached"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					conc := mustConcurrency(t, budget.ConcurrencyConfig{})
					p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Second), Concurrency: conc})
					pipe := watertight.MustNew(p)
					if detached {
						attempt, err := timeout.New(timeout.Config{Timeout: time.Hour, Abandon: true})
						if err != nil {
							t.Fatal(err)
						}
						pipe = watertight.MustNew(p, attempt)
					}
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					calls := 0
					fn := func(ctx context.Context) (string, error) {
						calls++
						if calls >= 2 {
							if s := conc.Snapshot(); s.Active != 1 || s.InFlight != 1 {
								t.Errorf("attempt %d: %+v, want the call active and its slot held", calls, s)
							}
						}
						if calls == tc.panicIn {
							panic("bug")
						}
						if calls == tc.cancelIn {
							cancel()
							<-ctx.Done()
							return "", ctx.Err()
						}
						if calls == tc.cancelAt {
							go func() { time.Sleep(time.Second / 2); cancel() }()
						}
						if err := tc.attempts[calls-1]; err != nil {
							return "", err
						}
						return "ok", nil
					}
					func() {
						defer func() {
							if r := recover(); (r != nil) != (tc.panicIn > 0) {
								t.Errorf("recovered %v", r)
							}
						}()
						if detached {
							_, _ = watertight.DoDetached(ctx, pipe, fn)
						} else {
							_, _ = watertight.Do(ctx, pipe, fn)
						}
					}()
					synctest.Wait()
					checkIdle(t, conc)
				})
			})
		}
	}
}

// With both budgets, a retry needs both: a slot refused spends no token, and
// a token refused gives the slot back.
func TestConcurrencyWithBudget(t *testing.T) {
	// The ratio budget has no token: the slot is granted, then given back.
	conc := mustConcurrency(t, budget.ConcurrencyConfig{})
	empty, err := budget.New(budget.Config{MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond), Budget: empty, Concurrency: conc})
	calls := 0
	_, err = retry.Do(context.Background(), p, failing(&calls, errRefused))
	if calls != 1 || !errors.Is(err, retry.ErrNoBudget) || errors.Is(err, retry.ErrNoConcurrency) {
		t.Fatalf("%d calls, err %v; want ErrNoBudget after 1", calls, err)
	}
	if s := conc.Snapshot(); s.Granted != 1 || s.InFlight != 0 || s.Active != 0 {
		t.Fatalf("concurrency %+v, want the slot granted and given back", s)
	}

	// The concurrent budget has no slot (one held outside the call): the
	// ratio budget's token stays.
	full, err := budget.New(budget.Config{Ratio: 1, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	full.Deposit()
	one := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1})
	one.TryAcquire()
	p = mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond), Budget: full, Concurrency: one})
	calls = 0
	_, err = retry.Do(context.Background(), p, failing(&calls, errRefused))
	if calls != 1 || !errors.Is(err, retry.ErrNoConcurrency) {
		t.Fatalf("%d calls, err %v; want ErrNoConcurrency after 1", calls, err)
	}
	if s := full.Snapshot(); s.Withdrawals != 0 || s.Balance < 1 {
		t.Fatalf("budget %+v: a token was spent on a retry that was not made", s)
	}
	one.Release()

	// Both grant: the retry runs.
	calls = 0
	if _, err := retry.Do(context.Background(), p, failing(&calls, errRefused, nil)); err != nil || calls != 2 {
		t.Fatalf("%d calls, err %v; want a retry that succeeds", calls, err)
	}
	if s := one.Snapshot(); s.InFlight != 0 || s.Active != 0 {
		t.Fatalf("concurrency %+v after the call", s)
	}
}

// The skip is reported to the policy's listeners with its reason.
func TestConcurrencySkipEvents(t *testing.T) {
	one := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1})
	one.TryAcquire() // the one slot, held elsewhere
	defer one.Release()
	rec := &eventList{}
	var evs []retry.Event
	p := mustPolicy(t, retry.Config{Name: "inventory", Idempotent: true, Concurrency: one, Listener: rec,
		OnEvent: func(e retry.Event) { evs = append(evs, e) }})
	calls := 0
	_, _ = retry.Do(context.Background(), p, failing(&calls, errRefused))
	if len(evs) != 1 || evs[0].Kind != retry.Skipped || evs[0].Reason != retry.ErrNoConcurrency || evs[0].Attempt != 1 {
		t.Fatalf("OnEvent got %+v, want one Skipped for ErrNoConcurrency", evs)
	}
	got := rec.take()
	if len(got) != 1 || got[0].Kind != watertight.EventRetrySkipped || got[0].Name != "inventory" ||
		got[0].Reason != "retry concurrency budget exhausted: too many retries in flight" || !errors.Is(got[0].Err, errRefused) {
		t.Fatalf("Listener got %+v", got)
	}
}

func TestConcurrencySuccessPathAllocatesNothing(t *testing.T) {
	b, _ := budget.New(budget.Config{})
	conc := mustConcurrency(t, budget.ConcurrencyConfig{})
	p := mustPolicy(t, retry.Config{Budget: b, Concurrency: conc})
	x := "ok"
	if n := testing.AllocsPerRun(100, func() {
		_, _ = retry.Do(context.Background(), p, func(context.Context) (string, error) { return x, nil })
	}); n != 0 {
		t.Fatalf("%v allocations per successful call", n)
	}
	checkIdle(t, conc)
}

// Many goroutines through one policy, each call failing once and retrying:
// at the end nothing is active and no slot is held, and every retry asked
// for was granted or refused.
func TestConcurrencyThroughPolicyConcurrently(t *testing.T) {
	conc := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 10, MinConcurrency: 1})
	p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond), Concurrency: conc})
	const goroutines, perG = 8, 300
	var mu sync.Mutex
	retried, refused := 0, 0
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perG {
				calls := 0
				_, err := retry.Do(context.Background(), p, failing(&calls, errRefused, nil))
				mu.Lock()
				switch {
				case err == nil && calls == 2:
					retried++
				case errors.Is(err, retry.ErrNoConcurrency) && calls == 1:
					refused++
				default:
					t.Errorf("err %v after %d calls", err, calls)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	checkIdle(t, conc)
	if s := conc.Snapshot(); s.Granted != uint64(retried) || s.Refused != uint64(refused) || retried+refused != goroutines*perG {
		t.Fatalf("Snapshot %+v; %d retried, %d refused", s, retried, refused)
	}
}
