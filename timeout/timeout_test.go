package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

func mustNew(t *testing.T, cfg timeout.Config) *timeout.Timeout {
	t.Helper()
	to, err := timeout.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return to
}

// checkOurs fails unless err is the timeout named name of duration d,
// wrapping inner.
func checkOurs(t *testing.T, err error, name string, d time.Duration, inner error) {
	t.Helper()
	var te *timeout.Error
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want a *timeout.Error", err, err)
	}
	if te.Name != name || te.Timeout != d {
		t.Errorf("err = %+v, want Name %q and Timeout %v", te, name, d)
	}
	if te.Err != inner {
		t.Errorf("err.Err = %v, want %v", te.Err, inner)
	}
	if !errors.Is(err, timeout.ErrTimeout) {
		t.Error("errors.Is(err, ErrTimeout) = false")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is(err, context.DeadlineExceeded) = false")
	}
}

func TestTimeoutExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{Name: "attempt", Timeout: 2 * time.Second})
		start := time.Now()
		var fnCtx context.Context
		_, err := watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
			fnCtx = ctx
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(2*time.Second)) {
				t.Errorf("ctx.Deadline() = %v, %v; want start+2s", dl, ok)
			}
			<-ctx.Done()
			if ctx.Err() != context.DeadlineExceeded {
				t.Errorf("ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
			}
			var cause *timeout.Error
			if c := context.Cause(ctx); !errors.As(c, &cause) || cause.Name != "attempt" || cause.Timeout != 2*time.Second || cause.Err != nil {
				t.Errorf("context.Cause(ctx) = %#v, want the policy's *timeout.Error", c)
			}
			if !errors.Is(context.Cause(ctx), timeout.ErrTimeout) {
				t.Error("the cause is not ErrTimeout")
			}
			return 0, ctx.Err()
		})
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("the call took %v, want 2s", d)
		}
		checkOurs(t, err, "attempt", 2*time.Second, context.DeadlineExceeded)
		if got, want := err.Error(), "timeout: attempt: timed out after 2s"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
		if fnCtx.Err() == nil {
			t.Error("the derived context is not done after the call")
		}
		if o := watertight.Classify(context.Background(), err); o != watertight.Failure {
			t.Errorf("Classify = %v, want failure", o)
		}
	})
}

// Whatever the function returns once our deadline has ended it is reported
// as our timeout, wrapping what it returned.
func TestTimeoutWrapsCallError(t *testing.T) {
	errIO := errors.New("read tcp: i/o timeout")
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{Name: "attempt", Timeout: time.Second})
		_, err := watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, fmt.Errorf("get: %w", errIO)
		})
		var te *timeout.Error
		if !errors.As(err, &te) || !errors.Is(err, errIO) || !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("err = %v, want our timeout wrapping the call's error", err)
		}
		if got, want := err.Error(), "timeout: attempt: timed out after 1s: get: read tcp: i/o timeout"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}

		// A function that returns the context's cause is not wrapped twice.
		_, err = watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, context.Cause(ctx)
		})
		checkOurs(t, err, "attempt", time.Second, nil)
		if got, want := err.Error(), "timeout: attempt: timed out after 1s"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}

		// A function that succeeds despite the deadline succeeds.
		v, err := watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 1, nil
		})
		if v != 1 || err != nil {
			t.Errorf("Do = %d, %v; want 1, nil", v, err)
		}
	})
}

func TestTimeoutCallerDeadlineFirst(t *testing.T) {
	errCaller := errors.New("caller's budget")
	for _, tc := range []struct {
		name      string
		ctx       func() (context.Context, context.CancelFunc)
		wantCause error
	}{
		{"WithTimeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, context.DeadlineExceeded},
		{"WithTimeoutCause", func() (context.Context, context.CancelFunc) {
			return context.WithTimeoutCause(context.Background(), time.Second, errCaller)
		}, errCaller},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				to := mustNew(t, timeout.Config{Name: "attempt", Timeout: 2 * time.Second})
				ctx, cancel := tc.ctx()
				defer cancel()
				start := time.Now()
				_, err := watertight.Do(ctx, watertight.MustNew(to), func(ctx context.Context) (int, error) {
					if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(time.Second)) {
						t.Errorf("ctx.Deadline() = %v, %v; want the caller's, start+1s", dl, ok)
					}
					<-ctx.Done()
					if c := context.Cause(ctx); c != tc.wantCause {
						t.Errorf("context.Cause = %v, want the caller's %v", c, tc.wantCause)
					}
					return 0, ctx.Err()
				})
				if d := time.Since(start); d != time.Second {
					t.Errorf("the call took %v, want the caller's 1s", d)
				}
				if err != context.DeadlineExceeded {
					t.Errorf("err = %v, want the caller's context.DeadlineExceeded", err)
				}
				if errors.Is(err, timeout.ErrTimeout) {
					t.Error("the caller's deadline is reported as our timeout")
				}
			})
		})
	}
}

func TestTimeoutCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{Timeout: 2 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(500*time.Millisecond, cancel)
		start := time.Now()
		_, err := watertight.Do(ctx, watertight.MustNew(to), func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if d := time.Since(start); d != 500*time.Millisecond {
			t.Errorf("the call took %v, want 500ms", d)
		}
		if err != context.Canceled || errors.Is(err, timeout.ErrTimeout) {
			t.Errorf("err = %v, want context.Canceled and not ErrTimeout", err)
		}
		if o := watertight.Classify(ctx, err); o != watertight.Ignored {
			t.Errorf("Classify = %v, want ignored", o)
		}
	})
}

func TestTimeoutSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{Name: "attempt", Timeout: time.Second})
		errCall := errors.New("bad request")
		for _, want := range []error{nil, errCall} {
			var fnCtx context.Context
			start := time.Now()
			v, err := watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
				fnCtx = ctx
				time.Sleep(999 * time.Millisecond)
				return 5, want
			})
			if v != 5 || err != want {
				t.Errorf("Do = %d, %v; want 5, %v", v, err, want)
			}
			if d := time.Since(start); d != 999*time.Millisecond {
				t.Errorf("the call took %v", d)
			}
			// Exit released the context and its timer: it is cancelled,
			// not expired.
			if fnCtx.Err() != context.Canceled {
				t.Errorf("after the call, ctx.Err() = %v, want context.Canceled", fnCtx.Err())
			}
		}
	})
}

func TestTimeoutDefaults(t *testing.T) {
	if c := timeout.DefaultConfig(); c != (timeout.Config{Timeout: timeout.DefaultTimeout}) || timeout.DefaultTimeout != 10*time.Second {
		t.Errorf("DefaultConfig() = %+v, DefaultTimeout = %v", c, timeout.DefaultTimeout)
	}
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{})
		if d := to.Duration(); d != timeout.DefaultTimeout {
			t.Errorf("Duration() = %v, want DefaultTimeout", d)
		}
		start := time.Now()
		_, err := watertight.Do(context.Background(), watertight.MustNew(to), func(ctx context.Context) (int, error) {
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(10*time.Second)) {
				t.Errorf("ctx.Deadline() = %v, %v; want start+10s", dl, ok)
			}
			<-ctx.Done()
			return 0, ctx.Err()
		})
		checkOurs(t, err, "", 10*time.Second, context.DeadlineExceeded)
		if got, want := err.Error(), "timeout: timed out after 10s"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
	})
}

func TestTimeoutDisabled(t *testing.T) {
	for _, abandon := range []bool{false, true} {
		to := mustNew(t, timeout.Config{Timeout: -1, Abandon: abandon})
		if d := to.Duration(); d >= 0 {
			t.Errorf("Duration() = %v, want negative", d)
		}
		if to.Detaches() {
			t.Errorf("a disabled timeout (Abandon %v) detaches", abandon)
		}
		ctx := context.WithValue(context.Background(), struct{}{}, 1)
		c, tk, err := to.Enter(ctx)
		if c != ctx || err != nil || tk.Cancel != nil {
			t.Errorf("Enter = %v, %+v, %v; want the caller's context unchanged", c, tk, err)
		}
		if _, ok := c.Deadline(); ok {
			t.Error("a disabled timeout set a deadline")
		}
		if got := to.Exit(c, tk, context.DeadlineExceeded); got != context.DeadlineExceeded {
			t.Errorf("Exit = %v, want the error unchanged", got)
		}
		v, err := watertight.DoDetached(ctx, watertight.MustNew(to), func(c context.Context) (int, error) {
			if c != ctx {
				t.Error("fn did not get the caller's context")
			}
			return 2, nil
		})
		if v != 2 || err != nil {
			t.Errorf("DoDetached = %d, %v", v, err)
		}
	}
}

func TestTimeoutDetaches(t *testing.T) {
	if to := mustNew(t, timeout.Config{Timeout: time.Second}); to.Detaches() {
		t.Error("a timeout without Abandon detaches")
	}
	if to := mustNew(t, timeout.Config{Timeout: time.Second, Abandon: true}); !to.Detaches() {
		t.Error("a timeout with Abandon does not detach")
	}
}

// A total timeout around an attempt timeout: the error names the one that
// fired, and the other does not claim it.
func TestTimeoutNested(t *testing.T) {
	for _, tc := range []struct {
		total, attempt time.Duration
		fires          string
		after          time.Duration
	}{
		{5 * time.Second, time.Second, "attempt", time.Second},
		{time.Second, 5 * time.Second, "total", time.Second},
	} {
		t.Run(tc.fires, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				total := mustNew(t, timeout.Config{Name: "total", Timeout: tc.total})
				attempt := mustNew(t, timeout.Config{Name: "attempt", Timeout: tc.attempt})
				start := time.Now()
				_, err := watertight.Do(context.Background(), watertight.MustNew(total, attempt), func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				})
				if d := time.Since(start); d != tc.after {
					t.Errorf("the call took %v, want %v", d, tc.after)
				}
				d := tc.attempt
				if tc.fires == "total" {
					d = tc.total
				}
				checkOurs(t, err, tc.fires, d, context.DeadlineExceeded)
				if want := fmt.Sprintf("timeout: %s: timed out after %v", tc.fires, d); err.Error() != want {
					t.Errorf("Error() = %q, want %q", err.Error(), want)
				}
			})
		})
	}
}

// One Timeout serves concurrent calls, each with its own deadline.
func TestTimeoutConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := mustNew(t, timeout.Config{Name: "attempt", Timeout: 100 * time.Millisecond})
		p := watertight.MustNew(to)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond)
				began := time.Now()
				_, err := watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if i%2 == 0 {
						time.Sleep(50 * time.Millisecond)
						return 0, nil
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				switch {
				case i%2 == 0 && (err != nil || time.Since(began) != 50*time.Millisecond):
					t.Errorf("call %d: %v after %v; want nil after 50ms", i, err, time.Since(began))
				case i%2 == 1 && (!errors.Is(err, timeout.ErrTimeout) || time.Since(began) != 100*time.Millisecond):
					t.Errorf("call %d: %v after %v; want our timeout after 100ms", i, err, time.Since(began))
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != 290*time.Millisecond {
			t.Errorf("all calls took %v, want 290ms", d)
		}
	})
}

func TestErrorMessages(t *testing.T) {
	errIO := errors.New("i/o")
	for _, tc := range []struct {
		err  *timeout.Error
		want string
	}{
		{&timeout.Error{Name: "attempt", Timeout: 2 * time.Second}, "timeout: attempt: timed out after 2s"},
		{&timeout.Error{Name: "attempt", Timeout: 2 * time.Second, Err: context.DeadlineExceeded}, "timeout: attempt: timed out after 2s"},
		{&timeout.Error{Timeout: 1500 * time.Millisecond}, "timeout: timed out after 1.5s"},
		{&timeout.Error{Name: "total", Timeout: time.Minute, Err: errIO}, "timeout: total: timed out after 1m0s: i/o"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, timeout.ErrTimeout) || !errors.Is(tc.err, context.DeadlineExceeded) {
			t.Errorf("%v: not ErrTimeout and DeadlineExceeded", tc.err)
		}
		if errors.Unwrap(tc.err) != tc.err.Err {
			t.Errorf("%v: Unwrap = %v, want %v", tc.err, errors.Unwrap(tc.err), tc.err.Err)
		}
		if errors.Is(tc.err, context.Canceled) {
			t.Errorf("%v is context.Canceled", tc.err)
		}
	}
	if got := timeout.ErrTimeout.Error(); got != "timeout: deadline exceeded" {
		t.Errorf("ErrTimeout = %q", got)
	}
}
