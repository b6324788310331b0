package retry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
)

var errRefused = fmt.Errorf("dial: %w", syscall.ECONNREFUSED)

func constant(t testing.TB, d time.Duration) *backoff.Backoff {
	t.Helper()
	b, err := backoff.New(backoff.Config{Jitter: backoff.Constant, Base: d, Cap: d})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPolicy(t testing.TB, cfg retry.Config) *retry.Policy {
	t.Helper()
	p, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// failing returns a function that fails with errs in turn (the last one
// repeats) and counts its calls.
func failing(calls *int, errs ...error) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		*calls++
		err := errs[min(*calls, len(errs))-1]
		if err == nil {
			return "ok", nil
		}
		return "", err
	}
}

func TestRetriesTransientFailuresThenSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []string
		p := mustPolicy(t, retry.Config{Name: "payments", Idempotent: true, Backoff: constant(t, 100*time.Millisecond),
			OnEvent: func(ev retry.Event) { events = append(events, fmt.Sprintf("%v#%d+%v", ev.Kind, ev.Attempt, ev.Delay)) }})
		calls := 0
		start := time.Now()
		v, err := retry.Do(context.Background(), p, failing(&calls, errRefused, errRefused, nil))
		if v != "ok" || err != nil || calls != 3 {
			t.Fatalf("Do = %q, %v after %d calls", v, err, calls)
		}
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Fatalf("took %v, want 2×100ms", took)
		}
		if fmt.Sprint(events) != "[scheduled#1+100ms scheduled#2+100ms]" {
			t.Fatalf("events %v", events)
		}
	})
}

func TestExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var kinds []retry.EventKind
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Millisecond),
			OnEvent: func(ev retry.Event) { kinds = append(kinds, ev.Kind) }})
		calls := 0
		_, err := retry.Do(context.Background(), p, failing(&calls, errRefused))
		var ex *retry.ExhaustedError
		if calls != 3 || !errors.As(err, &ex) || ex.Attempts != 3 || !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%d calls, err %v", calls, err)
		}
		if !watertight.IsOverloaded(err) {
			t.Fatalf("an exhausted error must tell the layers above not to retry")
		}
		if !strings.HasPrefix(err.Error(), "retry: all 3 attempts failed: dial: connection refused") {
			t.Fatalf("message %q", err)
		}
		if fmt.Sprint(kinds) != "[scheduled scheduled exhausted]" {
			t.Fatalf("events %v", kinds)
		}
	})
}

func TestNotRetried(t *testing.T) {
	permanent := errors.New("invalid card number")
	open := watertight.NewRejection("circuit: open")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"permanent", permanent},
		{"marked permanent", retry.MarkPermanent(errRefused)},
		{"rejection", open},
		{"overloaded", watertight.Overloaded(errRefused)},
		{"cancelled", fmt.Errorf("read: %w", context.Canceled)},
		{"lower layer exhausted", &retry.ExhaustedError{Attempts: 3, Last: errRefused}},
		{"lower layer skipped", &retry.SkippedError{Attempts: 1, Reason: retry.ErrNotIdempotent, Err: errRefused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond)})
			calls := 0
			_, err := retry.Do(context.Background(), p, failing(&calls, tc.err))
			if calls != 1 || err != tc.err {
				t.Fatalf("%d calls, err %v; want 1 call and the error as it is", calls, err)
			}
		})
	}
}

func TestTransientClassification(t *testing.T) {
	for _, err := range []error{errRefused, syscall.ECONNRESET, context.DeadlineExceeded, retry.MarkTransient(errors.New("x")),
		retry.After(errors.New("429"), time.Second), fmt.Errorf("body: %w", syscall.EPIPE)} {
		if !retry.IsTransient(err) {
			t.Errorf("IsTransient(%v) = false", err)
		}
	}
	for _, err := range []error{nil, errors.New("boom"), context.Canceled, watertight.NewSaturation("bulkhead: full"),
		retry.MarkPermanent(syscall.ECONNRESET), watertight.Overloaded(syscall.ECONNRESET)} {
		if retry.IsTransient(err) {
			t.Errorf("IsTransient(%v) = true", err)
		}
	}
}

func TestOnlyIdempotentCallsAreRetried(t *testing.T) {
	p := mustPolicy(t, retry.Config{Backoff: constant(t, time.Nanosecond)})
	calls := 0
	_, err := retry.Do(context.Background(), p, failing(&calls, errRefused))
	var sk *retry.SkippedError
	if calls != 1 || !errors.As(err, &sk) || !errors.Is(err, retry.ErrNotIdempotent) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("unmarked call: %d calls, err %v", calls, err)
	}
	if !strings.Contains(err.Error(), "not marked idempotent") {
		t.Fatalf("the error should say why it was not retried: %q", err)
	}
	if watertight.IsOverloaded(err) {
		t.Fatalf("a call skipped for idempotency is not an overload signal")
	}
	for name, ctx := range map[string]context.Context{
		"Idempotent":         retry.Idempotent(context.Background()),
		"WithIdempotencyKey": retry.WithIdempotencyKey(context.Background(), "k-123"),
	} {
		calls = 0
		_, err = retry.Do(ctx, p, failing(&calls, errRefused, nil))
		if calls != 2 || err != nil {
			t.Fatalf("%s: %d calls, err %v", name, calls, err)
		}
	}
	if k, ok := retry.IdempotencyKey(retry.WithIdempotencyKey(context.Background(), "k-123")); !ok || k != "k-123" {
		t.Fatalf("IdempotencyKey = %q, %v", k, ok)
	}
	if retry.IsIdempotent(retry.WithIdempotencyKey(context.Background(), "")) {
		t.Fatalf("an empty key marks nothing")
	}
}

func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Millisecond), MaxDelay: 5 * time.Second, MaxRetryAfter: -1})
		calls := 0
		start := time.Now()
		_, err := retry.Do(context.Background(), p, failing(&calls, retry.After(errors.New("429"), 2*time.Second), nil))
		if err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("err %v after %v, want the server's 2s", err, time.Since(start))
		}
		start = time.Now()
		calls = 0
		_, err = retry.Do(context.Background(), p, failing(&calls, retry.After(errors.New("503"), 484289*time.Hour), nil))
		if err != nil || time.Since(start) != 5*time.Second {
			t.Fatalf("err %v after %v, want MaxDelay 5s", err, time.Since(start))
		}
	})
}

// A server's requested wait beyond MaxRetryAfter (5s by default) is neither
// slept through nor cut short: the call returns at once with a
// *RetryAfterError that carries the wait and the attempt's error.
func TestRetryAfterBeyondCapReturnsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      time.Duration
		wantMax  time.Duration
		askedFor time.Duration
	}{
		{"default cap", 0, retry.DefaultMaxRetryAfter, 24 * time.Hour},
		{"own cap", 2 * time.Second, 2 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var events []retry.Event
				p := mustPolicy(t, retry.Config{Idempotent: true, MaxRetryAfter: tc.max,
					OnEvent: func(ev retry.Event) { events = append(events, ev) }})
				calls := 0
				last := errors.New("503")
				start := time.Now()
				_, err := retry.Do(context.Background(), p, failing(&calls, retry.After(last, tc.askedFor), nil))
				if elapsed := time.Since(start); elapsed != 0 || calls != 1 {
					t.Fatalf("%d calls, returned after %v; want 1 call and no wait", calls, elapsed)
				}
				var ra *retry.RetryAfterError
				if !errors.As(err, &ra) || ra.Wait != tc.askedFor || ra.Max != tc.wantMax || ra.Attempts != 1 {
					t.Fatalf("err = %v (%#v), want a *RetryAfterError{Wait: %v, Max: %v, Attempts: 1}", err, ra, tc.askedFor, tc.wantMax)
				}
				if !errors.Is(err, retry.ErrRetryAfterTooLong) || !errors.Is(err, last) {
					t.Fatalf("err = %v: want it to match ErrRetryAfterTooLong and the attempt's error", err)
				}
				if !watertight.IsOverloaded(err) || watertight.IsRejection(err) || retry.IsTransient(err) {
					t.Fatalf("err = %v: want overloaded, not a rejection, not transient for a layer above", err)
				}
				if d, ok := retry.RetryAfter(err); !ok || d != tc.askedFor {
					t.Fatalf("RetryAfter(err) = %v, %v", d, ok)
				}
				if len(events) != 1 || events[0].Kind != retry.Skipped || events[0].Reason != retry.ErrRetryAfterTooLong || events[0].Delay != tc.askedFor {
					t.Fatalf("events = %+v, want one Skipped with ErrRetryAfterTooLong and the requested wait", events)
				}
				if !strings.Contains(err.Error(), tc.askedFor.String()) {
					t.Fatalf("message %q does not give the requested wait", err)
				}
			})
		})
	}
}

// A wait up to MaxRetryAfter is honoured; a negative MaxRetryAfter honours
// any (capped by MaxDelay).
func TestRetryAfterWithinCapIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			max, asked, want time.Duration
		}{
			{0, retry.DefaultMaxRetryAfter, retry.DefaultMaxRetryAfter},
			{-1, 24 * time.Hour, retry.DefaultMaxDelay},
		} {
			p := mustPolicy(t, retry.Config{Idempotent: true, MaxRetryAfter: tc.max})
			calls := 0
			start := time.Now()
			_, err := retry.Do(context.Background(), p, failing(&calls, retry.After(errors.New("429"), tc.asked), nil))
			if err != nil || calls != 2 || time.Since(start) != tc.want {
				t.Fatalf("MaxRetryAfter %v, asked %v: err %v, %d calls after %v; want success after %v", tc.max, tc.asked, err, calls, time.Since(start), tc.want)
			}
		}
	})
}

func TestDeadlineAware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var skipped []error
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, 800*time.Millisecond), MinAttemptTime: 300 * time.Millisecond,
			OnEvent: func(ev retry.Event) {
				if ev.Kind == retry.Skipped {
					skipped = append(skipped, ev.Reason)
				}
			}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		calls := 0
		_, err := retry.Do(ctx, p, failing(&calls, errRefused))
		if calls != 1 || !errors.Is(err, retry.ErrNoTime) || time.Since(start) != 0 {
			t.Fatalf("%d calls, err %v, after %v: a retry that would leave 200ms < 300ms must be skipped at once", calls, err, time.Since(start))
		}
		if len(skipped) != 1 || skipped[0] != retry.ErrNoTime {
			t.Fatalf("skipped events %v", skipped)
		}
		// Without a minimum, the wait may not pass the deadline either.
		p = mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, 2*time.Second)})
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		start = time.Now()
		_, err = retry.Do(ctx2, p, failing(&calls, errRefused))
		if !errors.Is(err, retry.ErrNoTime) || time.Since(start) != 0 {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

func TestCallerCancelsDuringTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Second)})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		calls := 0
		start := time.Now()
		_, err := retry.Do(ctx, p, failing(&calls, errRefused))
		if calls != 1 || !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("%d calls, err %v after %v", calls, err, time.Since(start))
		}
	})
}

func TestBudgetRefusesRetries(t *testing.T) {
	b, err := budget.New(budget.Config{Ratio: 0.1, MaxTokens: 1, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond), Budget: b})
	total, skipped := 0, 0
	for range 1000 {
		calls := 0
		_, err := retry.Do(context.Background(), p, failing(&calls, errRefused))
		total += calls
		if errors.Is(err, retry.ErrNoBudget) {
			skipped++
			if !watertight.IsOverloaded(err) || !errors.Is(err, budget.ErrExhausted) || !watertight.IsRejection(err) {
				t.Fatalf("a budget refusal must be a rejection, carry the overloaded signal and match budget.ErrExhausted: %v", err)
			}
		}
	}
	// 1000 calls deposit 100 tokens (+1 saved up): about 100 retries in all.
	if total > 1000+101+1 || total < 1000+90 || skipped == 0 {
		t.Fatalf("%d attempts for 1000 calls (%d skipped): the budget should hold retries to ~10%%", total, skipped)
	}
}

// Three layers that each retry three times would make 27 calls to a
// dependency that is down; with the signal, only the lowest layer retries.
func TestOneLayerRetries(t *testing.T) {
	layer := func(next func(context.Context) (string, error)) func(context.Context) (string, error) {
		p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond)})
		return func(ctx context.Context) (string, error) { return retry.Do(ctx, p, next) }
	}
	calls := 0
	provider := failing(&calls, errRefused)
	gateway := layer(layer(layer(provider)))
	_, err := gateway(context.Background())
	if calls != 3 || !errors.Is(err, retry.ErrExhausted) {
		t.Fatalf("%d provider calls, err %v; want 3", calls, err)
	}
}

func TestEachAttemptPassesTheBreaker(t *testing.T) {
	br, err := circuit.New(circuit.Config{WindowSize: 2, MinCalls: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := watertight.MustNew(mustPolicy(t, retry.Config{Idempotent: true, MaxAttempts: 5, Backoff: constant(t, time.Nanosecond)}), br)
	calls := 0
	_, err = watertight.Do(context.Background(), p, failing(&calls, errRefused))
	if calls != 2 || !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("%d calls, err %v: the open breaker should end the retries", calls, err)
	}
	br.Reset()
}

func TestMaxAttemptsOneIsNoRetry(t *testing.T) {
	p := mustPolicy(t, retry.Config{Idempotent: true, MaxAttempts: 1})
	calls := 0
	_, err := retry.Do(context.Background(), p, failing(&calls, errRefused))
	if calls != 1 || err != errRefused {
		t.Fatalf("%d calls, err %v", calls, err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  retry.Config
		want string
	}{
		{retry.Config{MaxAttempts: -1}, "Config.MaxAttempts must be >= 0"},
		{retry.Config{MaxDelay: -time.Second}, "Config.MaxDelay must be >= 0"},
		{retry.Config{MinAttemptTime: -time.Second}, "Config.MinAttemptTime must be >= 0"},
	} {
		if _, err := retry.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestSuccessPathAllocatesNothing(t *testing.T) {
	b, _ := budget.New(budget.Config{})
	p := mustPolicy(t, retry.Config{Budget: b})
	x := "ok"
	if n := testing.AllocsPerRun(100, func() {
		_, _ = retry.Do(context.Background(), p, func(context.Context) (string, error) { return x, nil })
	}); n != 0 {
		t.Fatalf("%v allocations per successful call", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond)})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				calls := 0
				if _, err := retry.Do(context.Background(), p, failing(&calls, errRefused, nil)); err != nil || calls != 2 {
					t.Errorf("err %v after %d calls", err, calls)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestCustomRetryableNeverRetriesCancellation(t *testing.T) {
	p := mustPolicy(t, retry.Config{Idempotent: true, Backoff: constant(t, time.Nanosecond), Retryable: func(error) bool { return true }})
	calls := 0
	_, err := retry.Do(context.Background(), p, failing(&calls, fmt.Errorf("read: %w", context.Canceled)))
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("%d calls, err %v", calls, err)
	}
}

// recorder is a Listener that keeps the events it receives, one line each.
type recorder struct {
	mu  sync.Mutex
	evs []string
	at  []time.Time
}

func (r *recorder) OnEvent(e watertight.Event) {
	s := fmt.Sprintf("%v %s/%s/%s #%d +%v %q", e.Kind, e.Source, e.Name, e.Key, e.Attempt, e.Delay, e.Reason)
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	r.mu.Lock()
	r.evs = append(r.evs, s)
	r.at = append(r.at, e.Time)
	r.mu.Unlock()
}

func (r *recorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.evs, "\n")
	r.evs, r.at = nil, nil
	return s
}

func TestListenerEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		var typed int
		bud, _ := budget.New(budget.Config{MinPerSecond: -1}) // an empty balance, no floor: refuses
		p := mustPolicy(t, retry.Config{Name: "inventory", Backoff: constant(t, 100*time.Millisecond), Listener: rec,
			OnEvent: func(retry.Event) { typed++ }})
		ctx := retry.Idempotent(context.Background())
		start := time.Now()
		calls := 0
		_, _ = retry.Do(ctx, p, failing(&calls, errRefused))
		rec.mu.Lock()
		if len(rec.at) != 3 || !rec.at[0].Equal(start) || !rec.at[1].Equal(start.Add(100*time.Millisecond)) {
			t.Errorf("event times %v, want at the decisions (start %v)", rec.at, start)
		}
		rec.mu.Unlock()
		want := strings.Join([]string{
			`retry_scheduled retry/inventory/ #1 +100ms "" err=dial: connection refused`,
			`retry_scheduled retry/inventory/ #2 +100ms "" err=dial: connection refused`,
			`retry_exhausted retry/inventory/ #3 +0s "" err=dial: connection refused`,
		}, "\n")
		if got := rec.take(); got != want {
			t.Fatalf("events:\n%s\nwant:\n%s", got, want)
		}

		_, _ = retry.Do(context.Background(), p, failing(&calls, errRefused)) // not marked idempotent
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _ = retry.Do(short, p, failing(&calls, errRefused)) // no time for a 100ms wait
		cancel()
		broke := mustPolicy(t, retry.Config{Name: "inventory", Idempotent: true, Budget: bud, Listener: rec})
		_, _ = retry.Do(context.Background(), broke, failing(&calls, errRefused))
		want = strings.Join([]string{
			`retry_skipped retry/inventory/ #1 +0s "not idempotent" err=dial: connection refused`,
			`retry_skipped retry/inventory/ #1 +0s "not enough time left before the deadline" err=dial: connection refused`,
			`retry_skipped retry/inventory/ #1 +0s "retry budget exhausted" err=dial: connection refused`,
		}, "\n")
		if got := rec.take(); got != want {
			t.Fatalf("events:\n%s\nwant:\n%s", got, want)
		}
		if typed != 5 {
			t.Fatalf("OnEvent called %d times, want 5 alongside the Listener", typed)
		}
	})
}

// A listener may call back into the policy and its budget.
func TestListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bud, _ := budget.New(budget.Config{})
		var p *retry.Policy
		var depth, n int
		l := watertight.ListenerFunc(func(e watertight.Event) {
			depth++
			defer func() { depth-- }()
			n++
			_ = bud.Snapshot()
			if depth == 1 {
				calls := 0
				_, _ = retry.Do(context.Background(), p, failing(&calls, errRefused)) // a nested call with its own events
			}
		})
		p = mustPolicy(t, retry.Config{Idempotent: true, MaxAttempts: 2, Backoff: constant(t, time.Millisecond), Budget: bud, Listener: l})
		calls := 0
		if _, err := retry.Do(context.Background(), p, failing(&calls, errRefused)); !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("Do: %v", err)
		}
		// Outer: scheduled, exhausted; each runs a nested call that sends
		// scheduled and exhausted.
		if n != 6 {
			t.Fatalf("%d events, want 6", n)
		}
	})
}

func TestListenerAllocs(t *testing.T) {
	var n int
	p := mustPolicy(t, retry.Config{MaxAttempts: 2, Idempotent: true, Backoff: constant(t, time.Nanosecond), Listener: watertight.ListenerFunc(func(watertight.Event) { n++ })})
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 0, errRefused }
	// The ExhaustedError is the call's own allocation; the events add none.
	plain := mustPolicy(t, retry.Config{MaxAttempts: 2, Idempotent: true, Backoff: constant(t, time.Nanosecond)})
	without := testing.AllocsPerRun(100, func() { _, _ = retry.Do(ctx, plain, fn) })
	with := testing.AllocsPerRun(100, func() { _, _ = retry.Do(ctx, p, fn) })
	if with != without {
		t.Fatalf("a failing call allocates %v times with a listener, %v without", with, without)
	}
	if n < 200 {
		t.Fatalf("%d events", n)
	}
}
