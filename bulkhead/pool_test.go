package bulkhead_test

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
	"github.com/watertight-go/watertight/bulkhead"
)

func mustPool(t testing.TB, cfg bulkhead.PoolConfig) *bulkhead.Pool {
	t.Helper()
	p, err := bulkhead.NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool(%+v): %v", cfg, err)
	}
	return p
}

func shutdown(t testing.TB, p *bulkhead.Pool) {
	t.Helper()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// drops records what OnDrop is called with.
type drops struct {
	mu   sync.Mutex
	errs []error
}

func (d *drops) add(err error) { d.mu.Lock(); d.errs = append(d.errs, err); d.mu.Unlock() }

func (d *drops) get() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.errs...)
}

// gate blocks tasks until opened.
type gate chan struct{}

func (g gate) wait(context.Context) { <-g }

func TestPoolDefaults(t *testing.T) {
	if got := bulkhead.DefaultPoolConfig(); got.Workers != 10 || got.QueueSize != 100 || got.MaxQueueWait != 0 {
		t.Fatalf("DefaultPoolConfig() = %+v", got)
	}
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Name: "jobs"})
		synctest.Wait()
		want := bulkhead.PoolSnapshot{Name: "jobs", Workers: 10, QueueCapacity: 100}
		if s := p.Snapshot(); s != want {
			t.Fatalf("Snapshot() = %+v, want %+v", s, want)
		}
		shutdown(t, p)
	})
}

func TestPoolConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  bulkhead.PoolConfig
		want string
	}{
		{bulkhead.PoolConfig{Workers: -1}, "PoolConfig.Workers"},
		{bulkhead.PoolConfig{MaxQueueWait: -time.Second}, "PoolConfig.MaxQueueWait"},
	} {
		p, err := bulkhead.NewPool(tc.cfg)
		if err == nil || p != nil {
			t.Fatalf("NewPool(%+v) = %v, %v; want an error", tc.cfg, p, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPool(%+v) error %q does not name %s", tc.cfg, err, tc.want)
		}
	}
}

func TestSubmitNilTaskPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1})
		defer shutdown(t, p)
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil task") {
				t.Fatalf("recover() = %v, want a panic about a nil task", r)
			}
		}()
		_ = p.Submit(context.Background(), nil)
	})
}

func TestZeroPool(t *testing.T) {
	var p bulkhead.Pool
	if err := p.Submit(context.Background(), func(context.Context) {}); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("zero Pool Submit = %v, want ErrQueueFull", err)
	}
	if _, err := bulkhead.Call(context.Background(), &p, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, bulkhead.ErrQueueFull) {
		t.Fatalf("zero Pool Call = %v, want ErrQueueFull", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("zero Pool Shutdown = %v", err)
	}
}

func TestCallResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 2})
		v, err := bulkhead.Call(context.Background(), p, func(context.Context) (string, error) { return "ok", nil })
		if v != "ok" || err != nil {
			t.Fatalf("Call = %q, %v; want ok, nil", v, err)
		}
		boom := errors.New("boom")
		v, err = bulkhead.Call(context.Background(), p, func(context.Context) (string, error) { return "partial", boom })
		if v != "partial" || err != boom {
			t.Fatalf("Call = %q, %v; want partial, boom", v, err)
		}
		synctest.Wait()
		if s := p.Snapshot(); s.Completed != 2 || s.Busy != 0 {
			t.Fatalf("Snapshot() = %+v, want 2 completed, none busy", s)
		}
		shutdown(t, p)
	})
}

// TestPoolLimit runs many tasks through 3 workers and checks that no more
// than 3 ever run at once.
func TestPoolLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers, tasks = 3, 30
		p := mustPool(t, bulkhead.PoolConfig{Workers: workers, QueueSize: tasks})
		var inflight, peak atomic.Int64
		var wg sync.WaitGroup
		for i := range tasks {
			wg.Go(func() {
				_, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) {
					recordPeak(&peak, inflight.Add(1))
					time.Sleep(time.Duration(1+i%4) * time.Millisecond)
					inflight.Add(-1)
					return i, nil
				})
				if err != nil {
					t.Errorf("Call %d: %v", i, err)
				}
			})
		}
		synctest.Wait()
		if s := p.Snapshot(); s.Busy != workers || s.Queued != tasks-workers {
			t.Fatalf("Snapshot() = %+v, want %d busy and %d queued", s, workers, tasks-workers)
		}
		wg.Wait()
		if got := peak.Load(); got != workers {
			t.Fatalf("peak in flight = %d, want %d", got, workers)
		}
		synctest.Wait()
		if s := p.Snapshot(); s.Completed != tasks || s.Busy != 0 || s.Queued != 0 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		shutdown(t, p)
	})
}

func TestPoolQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Name: "jobs", Workers: 1, QueueSize: 2})
		synctest.Wait() // the worker is idle
		g := make(gate)
		for i := range 3 { // one runs, two wait
			if err := p.Submit(context.Background(), g.wait); err != nil {
				t.Fatalf("Submit %d: %v", i, err)
			}
		}
		synctest.Wait()
		err := p.Submit(context.Background(), g.wait)
		if !errors.Is(err, bulkhead.ErrQueueFull) || !watertight.IsSaturation(err) {
			t.Fatalf("Submit to a full pool = %v, want ErrQueueFull", err)
		}
		if got, want := err.Error(), "bulkhead: jobs: queue full"; got != want {
			t.Fatalf("error = %q, want %q", got, want)
		}
		if _, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("Call on a full pool = %v, want ErrQueueFull", err)
		}
		if s := p.Snapshot(); s.Busy != 1 || s.Queued != 2 || s.Rejected != 2 {
			t.Fatalf("Snapshot() = %+v, want 1 busy, 2 queued, 2 rejected", s)
		}
		close(g)
		synctest.Wait()
		if s := p.Snapshot(); s.Completed != 3 || s.Queued != 0 {
			t.Fatalf("Snapshot() = %+v, want 3 completed", s)
		}
		shutdown(t, p)
	})
}

func TestPoolWithoutQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 2, QueueSize: -1})
		synctest.Wait() // both workers idle
		g := make(gate)
		for i := range 2 {
			if err := p.Submit(context.Background(), g.wait); err != nil {
				t.Fatalf("Submit %d with an idle worker: %v", i, err)
			}
		}
		if err := p.Submit(context.Background(), g.wait); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("Submit with no idle worker = %v, want ErrQueueFull", err)
		}
		if s := p.Snapshot(); s.QueueCapacity != 0 || s.Busy != 2 || s.Queued != 0 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		close(g)
		synctest.Wait()
		if err := p.Submit(context.Background(), func(context.Context) {}); err != nil {
			t.Fatalf("Submit once a worker is idle again: %v", err)
		}
		shutdown(t, p)
	})
}

// TestMaxQueueWait: a task that waits too long in the queue is dropped and
// never runs, whether submitted with Submit or Call.
func TestMaxQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d drops
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: 10, MaxQueueWait: 100 * time.Millisecond, OnDrop: d.add})
		busy := func(context.Context) { time.Sleep(150 * time.Millisecond) }
		if err := p.Submit(context.Background(), busy); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Bool
		if err := p.Submit(context.Background(), func(context.Context) { ran.Store(true) }); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) {
			ran.Store(true)
			return 1, nil
		})
		if !errors.Is(err, bulkhead.ErrQueueTimeout) || !watertight.IsSaturation(err) {
			t.Fatalf("Call = %v, want ErrQueueTimeout", err)
		}
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Fatalf("Call gave up after %v, want exactly MaxQueueWait", took)
		}
		time.Sleep(time.Second) // the worker frees up and meets the stale task
		synctest.Wait()
		if ran.Load() {
			t.Fatal("a task that waited longer than MaxQueueWait ran")
		}
		got := d.get()
		if len(got) != 2 || !errors.Is(got[0], bulkhead.ErrQueueTimeout) || !errors.Is(got[1], bulkhead.ErrQueueTimeout) {
			t.Fatalf("OnDrop saw %v, want ErrQueueTimeout twice", got)
		}
		if s := p.Snapshot(); s.Dropped != 2 || s.Completed != 1 || s.Queued != 0 {
			t.Fatalf("Snapshot() = %+v, want 2 dropped, 1 completed", s)
		}
		shutdown(t, p)
	})
}

// TestMaxQueueWaitInTime: a task taken by a worker within MaxQueueWait runs,
// even if it then runs longer.
func TestMaxQueueWaitInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, MaxQueueWait: 100 * time.Millisecond})
		_ = p.Submit(context.Background(), func(context.Context) { time.Sleep(50 * time.Millisecond) })
		v, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) {
			time.Sleep(time.Second)
			return 7, nil
		})
		if v != 7 || err != nil {
			t.Fatalf("Call = %v, %v; want 7, nil", v, err)
		}
		shutdown(t, p)
	})
}

// TestFullQueuePrunesStale: when the queue is full of tasks that can no
// longer run, a new task takes the place of the oldest ones.
func TestFullQueuePrunesStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d drops
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: 2, MaxQueueWait: 50 * time.Millisecond, OnDrop: d.add})
		synctest.Wait() // the worker is idle
		g := make(gate)
		_ = p.Submit(context.Background(), g.wait)
		canceled, cancel := context.WithCancel(context.Background())
		var ran atomic.Int32
		count := func(context.Context) { ran.Add(1) }
		_ = p.Submit(context.Background(), count)
		_ = p.Submit(canceled, count)
		time.Sleep(60 * time.Millisecond) // the first queued task is now stale
		cancel()                          // and the second will not run either
		if err := p.Submit(context.Background(), count); err != nil {
			t.Fatalf("Submit to a queue full of stale tasks = %v, want it accepted", err)
		}
		got := d.get()
		if len(got) != 2 || !errors.Is(got[0], bulkhead.ErrQueueTimeout) || !errors.Is(got[1], context.Canceled) {
			t.Fatalf("OnDrop saw %v, want ErrQueueTimeout then Canceled", got)
		}
		close(g)
		synctest.Wait()
		if n := ran.Load(); n != 1 {
			t.Fatalf("%d tasks ran, want only the fresh one", n)
		}
		if s := p.Snapshot(); s.Dropped != 2 || s.Completed != 2 {
			t.Fatalf("Snapshot() = %+v, want 2 dropped, 2 completed", s)
		}
		shutdown(t, p)
	})
}

// TestCanceledWhileQueued: a task whose context ends while it is queued never
// runs.
func TestCanceledWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d drops
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, OnDrop: d.add})
		g := make(gate)
		_ = p.Submit(context.Background(), g.wait)
		var ran atomic.Bool

		// Submit: dropped when a worker reaches it.
		ctx1, cancel1 := context.WithCancel(context.Background())
		if err := p.Submit(ctx1, func(context.Context) { ran.Store(true) }); err != nil {
			t.Fatal(err)
		}
		// Call: returns at once, and the slot is freed at once.
		ctx2, cancel2 := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := bulkhead.Call(ctx2, p, func(context.Context) (int, error) { ran.Store(true); return 0, nil })
			errc <- err
		}()
		synctest.Wait()
		if s := p.Snapshot(); s.Queued != 2 {
			t.Fatalf("Queued = %d, want 2", s.Queued)
		}
		cancel2()
		if err := <-errc; !errors.Is(err, context.Canceled) || watertight.Classify(nil, err) != watertight.Ignored {
			t.Fatalf("Call = %v, want Canceled, ignored", err)
		}
		if s := p.Snapshot(); s.Queued != 1 || s.Dropped != 1 {
			t.Fatalf("after Call gave up: %+v, want 1 queued, 1 dropped", s)
		}
		cancel1()
		close(g)
		synctest.Wait()
		if ran.Load() {
			t.Fatal("a task whose context ended while queued ran")
		}
		if got := d.get(); len(got) != 2 || !errors.Is(got[0], context.Canceled) || !errors.Is(got[1], context.Canceled) ||
			watertight.Classify(nil, got[1]) != watertight.Ignored {
			t.Fatalf("OnDrop saw %v, want Canceled twice, ignored", got)
		}
		if s := p.Snapshot(); s.Dropped != 2 || s.Completed != 1 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		shutdown(t, p)
	})
}

func TestCallWithDoneContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := bulkhead.Call(ctx, p, func(context.Context) (int, error) { t.Error("ran"); return 0, nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Call = %v, want Canceled", err)
		}
		shutdown(t, p)
	})
}

// A deadline that ends while the task is queued is the caller giving up:
// ignored, neither a failure nor a saturation. One that ends while it runs
// is a call too slow: a failure.
func TestCallDeadlineClassified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1})
		g := make(gate)
		_ = p.Submit(context.Background(), g.wait)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err := bulkhead.Call(ctx, p, func(context.Context) (int, error) { t.Error("ran"); return 0, nil })
		if !errors.Is(err, context.DeadlineExceeded) || watertight.Classify(ctx, err) != watertight.Ignored || watertight.IsSaturation(err) {
			t.Fatalf("Call whose deadline ended while queued = %v (%v), want DeadlineExceeded, ignored", err, watertight.Classify(ctx, err))
		}
		_, err = bulkhead.Call(ctx, p, func(context.Context) (int, error) { t.Error("ran"); return 0, nil })
		if !errors.Is(err, context.DeadlineExceeded) || watertight.Classify(ctx, err) != watertight.Ignored {
			t.Fatalf("Call with a done context = %v, want DeadlineExceeded, ignored", err)
		}
		close(g)
		synctest.Wait()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel2()
		_, err = bulkhead.Call(ctx2, p, func(context.Context) (int, error) { time.Sleep(time.Second); return 0, nil })
		if !errors.Is(err, context.DeadlineExceeded) || watertight.Classify(ctx2, err) != watertight.Failure {
			t.Fatalf("Call whose deadline ended while it ran = %v, want DeadlineExceeded, a failure", err)
		}
		time.Sleep(time.Second)
		shutdown(t, p)
	})
}

// TestCallReturnsWhileTaskRuns: the caller stops waiting when its context
// ends, but the task keeps its worker until it returns: the limit holds.
func TestCallReturnsWhileTaskRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: -1})
		synctest.Wait() // the worker is idle
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := bulkhead.Call(ctx, p, func(context.Context) (int, error) {
			time.Sleep(time.Second) // ignores its context
			return 1, nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Call = %v, want DeadlineExceeded", err)
		}
		if took := time.Since(start); took != 10*time.Millisecond {
			t.Fatalf("Call returned after %v, want 10ms", took)
		}
		if s := p.Snapshot(); s.Busy != 1 {
			t.Fatalf("Busy = %d while the abandoned task runs, want 1", s.Busy)
		}
		if err := p.Submit(context.Background(), func(context.Context) {}); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("Submit while the only worker runs abandoned work = %v, want ErrQueueFull", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if s := p.Snapshot(); s.Busy != 0 || s.Completed != 1 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		shutdown(t, p)
	})
}

func TestPoolPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panics []*bulkhead.PanicError
		var mu sync.Mutex
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, OnPanic: func(e *bulkhead.PanicError) {
			mu.Lock()
			panics = append(panics, e)
			mu.Unlock()
		}})
		_, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) { panic("kaboom") })
		var pe *bulkhead.PanicError
		if !errors.As(err, &pe) || pe.Value != "kaboom" || !strings.Contains(err.Error(), "task panicked: kaboom") {
			t.Fatalf("Call of a panicking task = %v, want a PanicError with kaboom", err)
		}
		if !strings.Contains(string(pe.Stack), "TestPoolPanic") {
			t.Errorf("the stack does not show the panicking function:\n%s", pe.Stack)
		}
		if err := p.Submit(context.Background(), func(context.Context) { panic(fmt.Errorf("wrapped")) }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The single worker is still there.
		v, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) { return 5, nil })
		if v != 5 || err != nil {
			t.Fatalf("Call after panics = %v, %v; want 5, nil", v, err)
		}
		if s := p.Snapshot(); s.Panicked != 2 || s.Completed != 3 || s.Busy != 0 {
			t.Fatalf("Snapshot() = %+v, want 2 panicked of 3 completed", s)
		}
		mu.Lock()
		if len(panics) != 2 {
			t.Fatalf("OnPanic called %d times, want 2", len(panics))
		}
		mu.Unlock()
		shutdown(t, p)
	})
}

func TestPoolGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1})
		_, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) {
			runtime.Goexit()
			return 0, nil
		})
		var pe *bulkhead.PanicError
		if !errors.As(err, &pe) || pe.Value != nil || !strings.Contains(err.Error(), "Goexit") {
			t.Fatalf("Call of a task that calls Goexit = %v", err)
		}
		v, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) { return 5, nil })
		if v != 5 || err != nil {
			t.Fatalf("Call after Goexit = %v, %v; want 5, nil", v, err)
		}
		synctest.Wait()
		if s := p.Snapshot(); s.Panicked != 1 || s.Completed != 2 || s.Busy != 0 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		shutdown(t, p)
	})
}

// TestShutdown: queued tasks are dropped with ErrClosed, running ones finish,
// new ones are refused, every worker exits.
func TestShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d drops
		p := mustPool(t, bulkhead.PoolConfig{Workers: 2, OnDrop: d.add})
		var finished atomic.Int32
		for range 2 {
			_ = p.Submit(context.Background(), func(context.Context) {
				time.Sleep(time.Second)
				finished.Add(1)
			})
		}
		errc := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := bulkhead.Call(context.Background(), p, func(context.Context) (int, error) {
					t.Error("a queued task ran after Shutdown")
					return 0, nil
				})
				errc <- err
			}()
		}
		synctest.Wait()
		start := time.Now()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("Shutdown returned after %v, want when the running tasks end (1s)", took)
		}
		if n := finished.Load(); n != 2 {
			t.Fatalf("%d running tasks finished, want 2", n)
		}
		for range 3 {
			if err := <-errc; !errors.Is(err, bulkhead.ErrClosed) {
				t.Fatalf("queued Call = %v, want ErrClosed", err)
			}
		}
		if got := d.get(); len(got) != 3 || !errors.Is(got[0], bulkhead.ErrClosed) {
			t.Fatalf("OnDrop saw %v, want ErrClosed 3 times", got)
		}
		if err := p.Submit(context.Background(), func(context.Context) {}); !errors.Is(err, bulkhead.ErrClosed) || !watertight.IsRejection(err) {
			t.Fatalf("Submit after Shutdown = %v, want ErrClosed", err)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("second Shutdown = %v", err)
		}
		if s := p.Snapshot(); s.Dropped != 3 || s.Completed != 2 || s.Rejected != 1 || s.Busy != 0 {
			t.Fatalf("Snapshot() = %+v", s)
		}
		// synctest.Test fails if a worker goroutine is left behind.
	})
}

func TestShutdownTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1})
		_ = p.Submit(context.Background(), func(context.Context) { time.Sleep(time.Minute) })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
		}
		// The worker exits when its task ends; a later Shutdown waits for it.
		shutdown(t, p)
	})
}

// TestPoolStress has many goroutines Call and Submit at once, some with
// contexts that end, and checks the accounting and the limit.
func TestPoolStress(t *testing.T) {
	const workers, callers = 4, 2000
	var dropped atomic.Int64
	p := mustPool(t, bulkhead.PoolConfig{Workers: workers, QueueSize: 16, OnDrop: func(error) { dropped.Add(1) }})
	var inflight, peak atomic.Int64
	var ok, rejected, canceled atomic.Int64
	task := func(context.Context) (int, error) {
		recordPeak(&peak, inflight.Add(1))
		runtime.Gosched()
		inflight.Add(-1)
		return 1, nil
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			<-start
			if i%5 == 0 {
				go cancel()
			}
			_, err := bulkhead.Call(ctx, p, task)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, bulkhead.ErrQueueFull):
				rejected.Add(1)
			case errors.Is(err, context.Canceled):
				canceled.Add(1)
			default:
				t.Errorf("Call: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	shutdown(t, p)
	s := p.Snapshot()
	if got := peak.Load(); got > workers {
		t.Fatalf("peak in flight = %d, want <= %d", got, workers)
	}
	if int64(s.Rejected) != rejected.Load() || int64(s.Dropped) != dropped.Load() {
		t.Fatalf("Snapshot %+v; callers saw %d rejected, OnDrop %d", s, rejected.Load(), dropped.Load())
	}
	// Every task offered either was refused, ran (Completed) or was dropped;
	// a Call whose context had ended before it started offered nothing.
	if n := s.Completed + s.Dropped + s.Rejected; n > callers || n < callers-uint64(canceled.Load()) {
		t.Fatalf("Completed %d + Dropped %d + Rejected %d = %d, want %d less at most the %d canceled",
			s.Completed, s.Dropped, s.Rejected, n, callers, canceled.Load())
	}
	if ok.Load() > int64(s.Completed) || ok.Load()+rejected.Load()+canceled.Load() != callers {
		t.Fatalf("ok %d, rejected %d, canceled %d; snapshot %+v", ok.Load(), rejected.Load(), canceled.Load(), s)
	}
	t.Logf("peak %d; %+v", peak.Load(), s)
}

func TestPoolEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		var dropped []error
		p := mustPool(t, bulkhead.PoolConfig{Name: "jobs", Workers: 1, QueueSize: 1, MaxQueueWait: time.Second, Listener: rec,
			OnDrop: func(err error) { dropped = append(dropped, err) }})
		g := make(gate)
		if err := p.Submit(context.Background(), g.wait); err != nil { // runs
			t.Fatal(err)
		}
		synctest.Wait()
		if err := p.Submit(context.Background(), g.wait); err != nil { // queued
			t.Fatal(err)
		}
		if err := p.Submit(context.Background(), g.wait); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("Submit to a full queue: %v", err)
		}
		time.Sleep(2 * time.Second) // the queued task waits past MaxQueueWait
		close(g)                    // the worker finds it too old and drops it
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		g2 := make(gate)
		_ = p.Submit(context.Background(), g2.wait) // runs
		synctest.Wait()
		go func() {
			synctest.Wait()
			cancel()
		}()
		if _, err := bulkhead.Call(ctx, p, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Call cancelled while queued: %v", err)
		}
		close(g2)
		shutdown(t, p)
		if err := p.Submit(context.Background(), g.wait); !errors.Is(err, bulkhead.ErrClosed) {
			t.Fatalf("Submit after Shutdown: %v", err)
		}
		checkEvents(t, rec.take(),
			`bulkhead_full bulkhead/jobs/ "every worker busy and the queue full" err=bulkhead: jobs: queue full`,
			`dropped bulkhead/jobs/ "an accepted task was dropped from the queue without running" err=bulkhead: jobs: task waited longer than MaxQueueWait in the queue and was not run`,
			`dropped bulkhead/jobs/ "an accepted task was dropped from the queue without running" err=context canceled`,
			`rejected bulkhead/jobs/ "the pool is shut down" err=bulkhead: jobs: pool closed`)
		if len(dropped) != 2 {
			t.Fatalf("OnDrop saw %v, want two drops", dropped)
		}
	})
}

// A listener may call back into the pool: it is never called under the
// pool's lock, including for the tasks Shutdown drops.
func TestPoolListenerMayCallBackIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p *bulkhead.Pool
		var depth, n atomic.Int64
		l := watertight.ListenerFunc(func(e watertight.Event) {
			d := depth.Add(1)
			defer depth.Add(-1)
			n.Add(1)
			_ = p.Snapshot()
			if d == 1 {
				_ = p.Submit(context.Background(), func(context.Context) {}) // refused again, within the event
			}
		})
		p = mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: 1, Listener: l})
		g := make(gate)
		_ = p.Submit(context.Background(), g.wait)
		synctest.Wait()
		_ = p.Submit(context.Background(), g.wait) // queued
		_ = p.Submit(context.Background(), g.wait) // refused: full; the listener is refused too
		go func() {
			synctest.Wait()
			close(g)
		}()
		shutdown(t, p) // drops the queued task; the listener's Submit is refused (closed)
		if got := n.Load(); got != 4 {
			t.Fatalf("%d events, want 4 (full twice, dropped, closed)", got)
		}
	})
}
