package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

// repeater retries up to max attempts, waiting wait between them; its
// Ticket.Seq counts attempts. Exit wraps the error with the attempt count.
type repeater struct {
	max    uint64
	wait   time.Duration
	againN atomic.Int64
}

func (r *repeater) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{Seq: 1}, nil
}

func (r *repeater) Again(ctx context.Context, t watertight.Ticket, err error) (watertight.Ticket, time.Duration, bool) {
	r.againN.Add(1)
	if t.Seq >= r.max {
		return t, 0, false
	}
	t.Seq++
	return t, r.wait, true
}

func (r *repeater) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("after %d attempts: %w", t.Seq, err)
}

var errFlaky = errors.New("flaky")

func TestRepeaterRunsTheRestAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		inner := newRecording("inner", log)
		rep := &repeater{max: 3, wait: 10 * time.Millisecond}
		p := watertight.MustNew(rep, inner)
		start := time.Now()
		calls := 0
		v, err := watertight.Do(context.Background(), p, func(context.Context) (int, error) {
			calls++
			if calls < 3 {
				return 0, errFlaky
			}
			return 42, nil
		})
		if v != 42 || err != nil || calls != 3 {
			t.Fatalf("Do = %v, %v after %d calls", v, err, calls)
		}
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Fatalf("took %v, want two waits of 10ms", took)
		}
		if inner.enters.Load() != 3 {
			t.Fatalf("inner policy entered %d times, want once per attempt", inner.enters.Load())
		}
		inner.check(t)
	})
}

func TestRepeaterStopsAndExitSeesTheLastError(t *testing.T) {
	rep := &repeater{max: 3}
	p := watertight.MustNew(rep, nop{})
	calls := 0
	_, err := watertight.Do(context.Background(), p, func(context.Context) (int, error) {
		calls++
		return 0, fmt.Errorf("attempt %d: %w", calls, errFlaky)
	})
	if calls != 3 || err == nil || err.Error() != "after 3 attempts: attempt 3: flaky" {
		t.Fatalf("%d calls, err %v", calls, err)
	}
	if n, err := watertight.Do(context.Background(), watertight.MustNew(rep), func(context.Context) (int, error) { return 7, nil }); n != 7 || err != nil {
		t.Fatalf("repeater alone: %v %v", n, err)
	}
}

func TestRepeaterWaitEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := &repeater{max: 10, wait: time.Second}
		p := watertight.MustNew(rep)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		calls := 0
		_, err := watertight.Do(ctx, p, func(context.Context) (int, error) { calls++; return 0, errFlaky })
		if calls != 2 || !errors.Is(err, errFlaky) || time.Since(start) != 1500*time.Millisecond {
			t.Fatalf("%d calls, err %v, after %v", calls, err, time.Since(start))
		}
	})
}

func TestRepeaterPanicExitsEveryPolicy(t *testing.T) {
	log := &eventLog{}
	outer := newRecording("outer", log)
	inner := newRecording("inner", log)
	p := watertight.MustNew(outer, &repeater{max: 3}, inner)
	func() {
		defer func() { _ = recover() }()
		_, _ = watertight.Do(context.Background(), p, func(context.Context) (int, error) { panic("bug") })
	}()
	outer.check(t)
	inner.check(t)
}

func TestRepeaterAllocatesNothing(t *testing.T) {
	p := watertight.MustNew(&repeater{max: 3}, nop{})
	x := 1
	n := testing.AllocsPerRun(100, func() {
		_, _ = watertight.Do(context.Background(), p, func(context.Context) (int, error) { return x, nil })
	})
	if n != 0 {
		t.Fatalf("Do through a repeater allocates %v times on success", n)
	}
}

// Abandoned attempts keep the permits outside the repeater until every one
// of them has really ended.
func TestRepeaterWithDetachedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		res := &resource{name: "bulkhead", log: log}
		attempt, err := timeout.New(timeout.Config{Name: "attempt", Timeout: 100 * time.Millisecond, Abandon: true})
		if err != nil {
			t.Fatal(err)
		}
		p := watertight.MustNew(res, &repeater{max: 3}, attempt)
		release := make(chan struct{})
		var running atomic.Int64
		_, err = watertight.DoDetached(context.Background(), p, func(context.Context) (int, error) {
			running.Add(1)
			defer running.Add(-1)
			<-release // ignores its context
			return 0, nil
		})
		if !errors.Is(err, timeout.ErrTimeout) || running.Load() != 3 {
			t.Fatalf("err %v with %d attempts still running", err, running.Load())
		}
		if res.held.Load() != 1 {
			t.Fatalf("the permit outside the repeater was released while attempts run")
		}
		close(release)
		synctest.Wait()
		if res.held.Load() != 0 || res.exits.Load() != 1 || running.Load() != 0 {
			t.Fatalf("after the attempts ended: held %d, exits %d", res.held.Load(), res.exits.Load())
		}
	})
}

type overloadedErr struct{}

func (overloadedErr) Error() string    { return "shed" }
func (overloadedErr) Overloaded() bool { return true }

func TestOverloaded(t *testing.T) {
	base := errors.New("503")
	o := watertight.Overloaded(base)
	if !errors.Is(o, watertight.ErrOverloaded) || !errors.Is(o, base) || !watertight.IsOverloaded(o) {
		t.Fatalf("Overloaded(%v) = %v", base, o)
	}
	if !watertight.IsOverloaded(fmt.Errorf("call: %w", o)) || !watertight.IsOverloaded(watertight.Overloaded(nil)) {
		t.Fatalf("wrapped or nil")
	}
	if !watertight.IsOverloaded(fmt.Errorf("x: %w", overloadedErr{})) {
		t.Fatalf("an error with Overloaded() bool is not recognised")
	}
	if watertight.IsOverloaded(base) || watertight.IsOverloaded(nil) {
		t.Fatalf("plain errors are not overloaded")
	}
	if o.Error() != "503 (overloaded, do not retry)" {
		t.Fatalf("message %q", o.Error())
	}
}

// ticketRepeater is repeater that records the Tickets its Exit sees, with
// the error.
type ticketRepeater struct {
	repeater
	exits []watertight.Ticket
	errs  []error
}

func (r *ticketRepeater) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	r.exits = append(r.exits, t)
	r.errs = append(r.errs, err)
	return r.repeater.Exit(ctx, t, err)
}

// When an attempt after the first panics, the repeater's Exit runs once,
// with ErrPanicked and the Ticket as its last Again left it: a Ticket that
// stands for something held during the retry (a slot of a concurrent-retry
// budget) is given back. Through Do and through DoDetached.
func TestRepeaterPanicExitSeesTheLastTicket(t *testing.T) {
	attempt, err := timeout.New(timeout.Config{Name: "attempt", Timeout: time.Hour, Abandon: true})
	if err != nil {
		t.Fatal(err)
	}
	do := func(p *watertight.Pipeline, fn func(context.Context) (int, error)) (int, error) {
		return watertight.Do(context.Background(), p, fn)
	}
	doDetached := func(p *watertight.Pipeline, fn func(context.Context) (int, error)) (int, error) {
		return watertight.DoDetached(context.Background(), p, fn)
	}
	for _, tc := range []struct {
		name string
		do   func(*watertight.Pipeline, func(context.Context) (int, error)) (int, error)
		pols func(rep watertight.Policy) []watertight.Policy
	}{
		{"Do", do, func(rep watertight.Policy) []watertight.Policy { return []watertight.Policy{rep, nop{}} }},
		{"DoDetached", doDetached, func(rep watertight.Policy) []watertight.Policy { return []watertight.Policy{rep, attempt} }},
		// The repeater in the detached goroutine, after the detaching policy.
		{"DoDetached/inside", doDetached, func(rep watertight.Policy) []watertight.Policy { return []watertight.Policy{attempt, rep} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &ticketRepeater{repeater: repeater{max: 3}}
			p := watertight.MustNew(tc.pols(rep)...)
			calls := 0
			func() {
				defer func() {
					if recover() == nil {
						t.Error("the panic did not go on")
					}
				}()
				_, _ = tc.do(p, func(context.Context) (int, error) {
					calls++
					if calls == 1 {
						return 0, errFlaky
					}
					panic("bug")
				})
			}()
			if len(rep.exits) != 1 {
				t.Fatalf("%d Exits of the repeater, want 1", len(rep.exits))
			}
			if rep.exits[0].Seq != 2 || !errors.Is(rep.errs[0], watertight.ErrPanicked) {
				t.Fatalf("Exit saw Ticket %+v and %v; want Seq 2 (as Again left it) and ErrPanicked", rep.exits[0], rep.errs[0])
			}
		})
	}
}
