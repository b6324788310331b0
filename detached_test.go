package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

func abandoning(t *testing.T, name string, d time.Duration) *timeout.Timeout {
	t.Helper()
	to, err := timeout.New(timeout.Config{Name: name, Timeout: d, Abandon: true})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

func isTimeout(err error) bool {
	return errors.Is(err, timeout.ErrTimeout) && errors.Is(err, context.DeadlineExceeded)
}

// A function that ignores its context is abandoned at the deadline; the
// permit it holds stays held until it really ends.
func TestDoDetachedAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log) // a breaker, say: sees the timeout at once
		res := &resource{name: "bulkhead", log: log}
		inner := newRecording("inner", log) // runs with fn in the detached goroutine
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", 100*time.Millisecond), inner)

		errFinal := errors.New("finally done")
		release := make(chan struct{})
		start := time.Now()
		v, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
			log.fn()
			<-release // ignores ctx
			return 9, errFinal
		})
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("DoDetached returned after %v, want 100ms", d)
		}
		if v != 0 {
			t.Errorf("v = %d, want the zero value", v)
		}
		if !isTimeout(err) {
			t.Errorf("err = %v, want a timeout.ErrTimeout and context.DeadlineExceeded", err)
		}
		var te *timeout.Error
		if !errors.As(err, &te) || te.Name != "attempt" {
			t.Errorf("err = %#v, want a *timeout.Error named attempt", err)
		}
		if n := res.held.Load(); n != 1 {
			t.Errorf("%d permits held after the abandonment, want 1", n)
		}
		want := []string{"enter outer", "enter bulkhead", "enter inner", "fn", "exit outer"}
		if got := log.ops(); !slices.Equal(got, want) {
			t.Errorf("events at the deadline = %v, want %v", got, want)
		}
		if e := log.find(t, "exit", "outer"); !isTimeout(e.err) || !e.at.Equal(start.Add(100*time.Millisecond)) {
			t.Errorf("outer exited at +%v with %v; want +100ms with the timeout", e.at.Sub(start), e.err)
		}

		time.Sleep(time.Hour) // the work goes on, the permit stays held
		if n := res.held.Load(); n != 1 {
			t.Errorf("%d permits held while the abandoned work runs, want 1", n)
		}
		close(release)
		synctest.Wait()
		if n := res.held.Load(); n != 0 {
			t.Errorf("%d permits held after the work ended, want 0", n)
		}
		want = append(want, "exit inner", "exit bulkhead")
		if got := log.ops(); !slices.Equal(got, want) {
			t.Errorf("events = %v, want %v", got, want)
		}
		if e := log.find(t, "exit", "bulkhead"); e.err != errFinal {
			t.Errorf("bulkhead exited with %v, want fn's final error", e.err)
		}
		outer.check(t)
		inner.check(t)
	})
}

func TestDoDetachedFinishesFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"nil", nil}, {"error", errBoom}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &eventLog{}
				outer := newRecording("outer", log)
				res := &resource{name: "bulkhead", log: log}
				inner := newRecording("inner", log)
				p := watertight.MustNew(outer, res, abandoning(t, "attempt", 100*time.Millisecond), inner)

				start := time.Now()
				v, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
					log.fn()
					time.Sleep(50 * time.Millisecond)
					return 42, tc.err
				})
				if d := time.Since(start); d != 50*time.Millisecond {
					t.Errorf("DoDetached took %v, want 50ms", d)
				}
				if v != 42 || err != tc.err {
					t.Errorf("DoDetached = %d, %v; want 42, %v", v, err, tc.err)
				}
				want := []string{"enter outer", "enter bulkhead", "enter inner", "fn", "exit inner", "exit bulkhead", "exit outer"}
				if got := log.ops(); !slices.Equal(got, want) {
					t.Errorf("events = %v, want %v", got, want)
				}
				for _, e := range log.events() {
					if e.op == "exit" && e.err != tc.err {
						t.Errorf("%v got %v, want %v", e, e.err, tc.err)
					}
				}
				if n := res.held.Load(); n != 0 {
					t.Errorf("%d permits held, want 0", n)
				}
				outer.check(t)
				inner.check(t)
			})
		})
	}
}

// Without a detaching policy, DoDetached is Do.
func TestDoDetachedWithoutDetacher(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	res := &resource{name: "res", log: log}
	to, err := timeout.New(timeout.Config{Timeout: time.Hour}) // does not abandon
	if err != nil {
		t.Fatal(err)
	}
	p := watertight.MustNew(a, res, to)
	v, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
		log.fn()
		return 1, errBoom
	})
	if v != 1 || err != errBoom {
		t.Errorf("DoDetached = %d, %v; want 1, boom", v, err)
	}
	if got, want := log.ops(), []string{"enter a", "enter res", "fn", "exit res", "exit a"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	// A panic goes on in the caller, as with Do.
	pv := callRecovering(func() {
		watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
			panic(panicValue{1})
		})
	})
	if pv != (panicValue{1}) {
		t.Errorf("recovered %v", pv)
	}
	if n := res.held.Load(); n != 0 {
		t.Errorf("%d permits held, want 0", n)
	}
	a.check(t)
}

// When fn returns at the very instant of the deadline, either the call
// finished or it was abandoned, but every Exit runs exactly once.
func TestDoDetachedFinishAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log)
		res := &resource{name: "bulkhead", log: log}
		inner := newRecording("inner", log)
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", 100*time.Millisecond), inner)

		const calls = 500
		finished, abandoned := 0, 0
		for i := range calls {
			start := time.Now()
			v, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
				time.Sleep(100 * time.Millisecond) // ignores ctx, ends with the deadline
				return 1, nil
			})
			if d := time.Since(start); d != 100*time.Millisecond {
				t.Fatalf("call %d took %v, want 100ms", i, d)
			}
			switch {
			case err == nil && v == 1:
				finished++
			case isTimeout(err) && v == 0:
				abandoned++
			default:
				t.Fatalf("call %d: DoDetached = %d, %v", i, v, err)
			}
			synctest.Wait() // let abandoned work end
			if n := res.held.Load(); n != 0 {
				t.Fatalf("call %d: %d permits held after the work ended, want 0", i, n)
			}
			for _, x := range []struct {
				name string
				n    int64
			}{{"outer", outer.exits.Load()}, {"inner", inner.exits.Load()}, {"bulkhead", res.exits.Load()}} {
				if x.n != int64(i+1) {
					t.Fatalf("after %d calls %s exited %d times", i+1, x.name, x.n)
				}
			}
		}
		t.Logf("%d calls finished, %d abandoned", finished, abandoned)
		outer.check(t)
		inner.check(t)
	})
}

// The caller's cancellation ends the wait as the deadline does, and is not
// our timeout.
func TestDoDetachedCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log)
		res := &resource{name: "bulkhead", log: log}
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", time.Second))

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		release := make(chan struct{})
		start := time.Now()
		_, err := watertight.DoDetached(ctx, p, func(ctx context.Context) (int, error) {
			<-release
			return 0, ctx.Err()
		})
		if d := time.Since(start); d != 30*time.Millisecond {
			t.Errorf("DoDetached returned after %v, want 30ms", d)
		}
		if !errors.Is(err, context.Canceled) || errors.Is(err, timeout.ErrTimeout) {
			t.Errorf("err = %v, want context.Canceled and not ErrTimeout", err)
		}
		if n := res.held.Load(); n != 1 {
			t.Errorf("%d permits held, want 1", n)
		}
		close(release)
		synctest.Wait()
		if n := res.held.Load(); n != 0 {
			t.Errorf("%d permits held after the work ended, want 0", n)
		}
		outer.check(t)
	})
}

// A rejection inside the detaching policy comes back through it.
func TestDoDetachedRefusedInside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log)
		res := &resource{name: "bulkhead", log: log}
		rej := watertight.NewRejection("fake: refused")
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", time.Second), &rejecting{name: "rej", log: log, err: rej})
		_, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
			t.Error("fn called")
			return 0, nil
		})
		if err != rej {
			t.Errorf("err = %v, want the rejection", err)
		}
		want := []string{"enter outer", "enter bulkhead", "enter rej", "exit bulkhead", "exit outer"}
		if got := log.ops(); !slices.Equal(got, want) {
			t.Errorf("events = %v, want %v", got, want)
		}
		if n := res.held.Load(); n != 0 {
			t.Errorf("%d permits held, want 0", n)
		}
	})
}

// A panic in the detached function, while the caller waits, goes on in the
// caller's goroutine after every policy has exited with ErrPanicked.
func TestDoDetachedPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log)
		res := &resource{name: "bulkhead", log: log}
		inner := newRecording("inner", log)
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", 100*time.Millisecond), inner)
		pv := callRecovering(func() {
			watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
				time.Sleep(10 * time.Millisecond)
				panic(panicValue{7})
			})
			t.Error("DoDetached returned after fn panicked")
		})
		if pv != (panicValue{7}) {
			t.Fatalf("recovered %v, want panicValue{7}", pv)
		}
		want := []string{"enter outer", "enter bulkhead", "enter inner", "exit inner", "exit bulkhead", "exit outer"}
		if got := log.ops(); !slices.Equal(got, want) {
			t.Errorf("events = %v, want %v", got, want)
		}
		for _, e := range log.events() {
			if e.op == "exit" && !errors.Is(e.err, watertight.ErrPanicked) {
				t.Errorf("%v got %v, want ErrPanicked", e, e.err)
			}
		}
		if n := res.held.Load(); n != 0 {
			t.Errorf("%d permits held, want 0", n)
		}
		outer.check(t)
		inner.check(t)
	})
}

// Two abandoning timeouts, nested: a permit outside both stays held until fn
// returns, whichever timeout fires.
func TestDoDetachedNested(t *testing.T) {
	for _, tc := range []struct {
		name           string
		total, attempt time.Duration
		fires          string
	}{
		{"attempt first", 200 * time.Millisecond, 100 * time.Millisecond, "attempt"},
		{"total first", 100 * time.Millisecond, 200 * time.Millisecond, "total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &eventLog{}
				outerRes := &resource{name: "outer-bulkhead", log: log}
				mid := newRecording("breaker", log)
				innerRes := &resource{name: "inner-bulkhead", log: log}
				p := watertight.MustNew(outerRes, abandoning(t, "total", tc.total), mid, innerRes, abandoning(t, "attempt", tc.attempt))

				errFinal := errors.New("finally done")
				release := make(chan struct{})
				start := time.Now()
				_, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
					<-release
					return 0, errFinal
				})
				if d := time.Since(start); d != 100*time.Millisecond {
					t.Errorf("DoDetached returned after %v, want 100ms", d)
				}
				var te *timeout.Error
				if !errors.As(err, &te) || te.Name != tc.fires || !isTimeout(err) {
					t.Errorf("err = %v, want the %s timeout", err, tc.fires)
				}
				synctest.Wait()
				// The breaker sits inside the total timeout: when the total
				// fires, it sees the bare deadline, not a timeout of its own.
				if e := log.find(t, "exit", "breaker"); !errors.Is(e.err, context.DeadlineExceeded) {
					t.Errorf("breaker exited with %v, want a deadline", e.err)
				}

				time.Sleep(time.Hour) // both timeouts have fired long ago
				synctest.Wait()
				if n, m := outerRes.held.Load(), innerRes.held.Load(); n != 1 || m != 1 {
					t.Errorf("permits held while fn runs: outer %d, inner %d; want 1, 1", n, m)
				}
				close(release)
				synctest.Wait()
				if n, m := outerRes.held.Load(), innerRes.held.Load(); n != 0 || m != 0 {
					t.Errorf("permits held after fn returned: outer %d, inner %d; want 0, 0", n, m)
				}
				ops := log.ops()
				if i, j := slices.Index(ops, "exit inner-bulkhead"), slices.Index(ops, "exit outer-bulkhead"); i < 0 || j < i {
					t.Errorf("events = %v, want the inner permit released before the outer", ops)
				}
				for _, r := range []*resource{outerRes, innerRes} {
					if e := log.find(t, "exit", r.name); e.err != errFinal {
						t.Errorf("%s exited with %v, want fn's final error", r.name, e.err)
					}
				}
				mid.check(t)
			})
		})
	}
}

// runtime.Goexit in the detached function (t.FailNow called from it, say)
// neither hangs the caller nor leaks the permit: the call ends with
// ErrPanicked.
func TestDoDetachedGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		outer := newRecording("outer", log)
		res := &resource{name: "bulkhead", log: log}
		inner := newRecording("inner", log)
		p := watertight.MustNew(outer, res, abandoning(t, "attempt", 100*time.Millisecond), inner)
		start := time.Now()
		_, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
			time.Sleep(10 * time.Millisecond)
			runtime.Goexit()
			return 0, nil
		})
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Errorf("DoDetached returned after %v, want 10ms", d)
		}
		if !errors.Is(err, watertight.ErrPanicked) {
			t.Errorf("err = %v, want ErrPanicked", err)
		}
		for _, e := range log.events() {
			if e.op == "exit" && !errors.Is(e.err, watertight.ErrPanicked) {
				t.Errorf("%v got %v, want ErrPanicked", e, e.err)
			}
		}
		if n := res.held.Load(); n != 0 {
			t.Errorf("%d permits held, want 0", n)
		}
		outer.check(t)
		inner.check(t)
	})
}

// Nested detaching policies abandoned one after the other, in both orders:
// the permits outside each stay held until fn returns.
func TestDoDetachedNestedAbandonOrder(t *testing.T) {
	for _, outerFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("outerFirst=%v", outerFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &eventLog{}
				outerRes := &resource{name: "outer-bulkhead", log: log}
				d1 := &detacher{name: "d1", log: log}
				innerRes := &resource{name: "inner-bulkhead", log: log}
				d2 := &detacher{name: "d2", log: log}
				p := watertight.MustNew(outerRes, d1, innerRes, d2)

				errFinal := errors.New("finally done")
				release := make(chan struct{})
				returned := make(chan error, 1)
				go func() {
					_, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
						<-release
						return 0, errFinal
					})
					returned <- err
				}()
				synctest.Wait()
				first, second := d1, d2
				if !outerFirst {
					first, second = d2, d1
				}
				first.abandon()
				synctest.Wait()
				var err error
				select {
				case err = <-returned:
				default:
					t.Fatal("DoDetached did not return when its work was abandoned")
				}
				want := "d1: " + errAbandoned.Error()
				if !outerFirst {
					want = "d2: " + errAbandoned.Error()
				}
				if err == nil || err.Error() != want || !errors.Is(err, errAbandoned) {
					t.Errorf("err = %v, want %s", err, want)
				}
				second.abandon() // the other level lets go too, fn still runs
				synctest.Wait()
				if n, m := outerRes.held.Load(), innerRes.held.Load(); n != 1 || m != 1 {
					t.Errorf("permits held while fn runs: outer %d, inner %d; want 1, 1", n, m)
				}
				close(release)
				synctest.Wait()
				if n, m := outerRes.held.Load(), innerRes.held.Load(); n != 0 || m != 0 {
					t.Errorf("permits held after fn returned: outer %d, inner %d; want 0, 0", n, m)
				}
				ops := log.ops()
				if i, j := slices.Index(ops, "exit inner-bulkhead"), slices.Index(ops, "exit outer-bulkhead"); i < 0 || j < i {
					t.Errorf("events = %v, want the inner permit released before the outer", ops)
				}
				for _, r := range []*resource{outerRes, innerRes} {
					if e := log.find(t, "exit", r.name); e.err != errFinal {
						t.Errorf("%s exited with %v, want fn's final error", r.name, e.err)
					}
				}
			})
		})
	}
}

// A panic in fn after DoDetached has returned has nobody to recover it: the
// held permit is released with ErrPanicked and the program ends. The program
// is a child process running this test.
func TestDoDetachedPanicAfterAbandon(t *testing.T) {
	if os.Getenv("WATERTIGHT_CRASH_CHILD") == "1" {
		d := &detacher{name: "d", log: &eventLog{}}
		p := watertight.MustNew(printingResource{}, d)
		entered, release := make(chan struct{}), make(chan struct{})
		go func() {
			<-entered
			d.abandon()
		}()
		_, err := watertight.DoDetached(context.Background(), p, func(ctx context.Context) (int, error) {
			close(entered)
			<-release
			panic("late panic")
		})
		fmt.Fprintln(os.Stderr, "returned:", err)
		close(release)
		select {} // the panic in the detached goroutine ends the process
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoDetachedPanicAfterAbandon$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WATERTIGHT_CRASH_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child process did not crash; output:\n%s", out)
	}
	returned := strings.Index(string(out), "returned: d: "+errAbandoned.Error())
	released := strings.Index(string(out), "released: "+watertight.ErrPanicked.Error())
	crashed := strings.Index(string(out), "panic: late panic")
	if returned < 0 || released < returned || crashed < released {
		t.Errorf("want, in order: DoDetached returned, the permit released with ErrPanicked, the panic; child output:\n%s", out)
	}
}

// printingResource is a Resource whose Exit reports on stderr, for a child
// process that crashes.
type printingResource struct{}

func (printingResource) HoldsResource() bool { return true }

func (printingResource) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{}, nil
}

func (printingResource) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	fmt.Fprintln(os.Stderr, "released:", err)
	return err
}
