package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/timeout"
)

var errBoom = errors.New("boom")

func TestDoOrder(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	a.rewrite = wrapWith("a")
	b := newRecording("b", log)
	b.rewrite = wrapWith("b")
	c := newRecording("c", log)
	p := watertight.MustNew(a, b, c)

	v, err := watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		log.fn()
		for _, k := range []string{"a", "b", "c"} {
			if ctx.Value(ctxKey(k)) == nil {
				t.Errorf("fn's context lacks what policy %s derived", k)
			}
		}
		return 7, errBoom
	})
	if v != 7 {
		t.Errorf("v = %d, want 7", v)
	}
	if got, want := fmt.Sprint(err), "a: b: boom"; got != want {
		t.Errorf("err = %q, want %q", got, want)
	}
	if !errors.Is(err, errBoom) {
		t.Errorf("errors.Is(err, errBoom) = false for %v", err)
	}
	want := []string{"enter a", "enter b", "enter c", "fn", "exit c", "exit b", "exit a"}
	if got := log.ops(); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	// Each Exit sees the error as rewritten by the policies inside it.
	for name, want := range map[string]string{"c": "boom", "b": "boom", "a": "b: boom"} {
		if got := fmt.Sprint(log.find(t, "exit", name).err); got != want {
			t.Errorf("exit %s got err %q, want %q", name, got, want)
		}
	}
	for _, r := range []*recording{a, b, c} {
		r.check(t)
	}
}

func TestDoSuccess(t *testing.T) {
	log := &eventLog{}
	a, b := newRecording("a", log), newRecording("b", log)
	p := watertight.MustNew(a, b)
	for i := range 3 {
		v, err := watertight.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			return "ok" + strconv.Itoa(i), nil
		})
		if v != "ok"+strconv.Itoa(i) || err != nil {
			t.Fatalf("Do = %q, %v; want ok%d, nil", v, err, i)
		}
	}
	for _, e := range log.events() {
		if e.op == "exit" && e.err != nil {
			t.Errorf("%v got err %v, want nil", e, e.err)
		}
	}
	a.check(t)
	b.check(t)
}

// An Exit may replace an error with nil, and nil with an error.
func TestDoExitRewritesToAndFromNil(t *testing.T) {
	log := &eventLog{}
	swallow := newRecording("swallow", log)
	swallow.rewrite = func(error) error { return nil }
	invent := newRecording("invent", log)
	invent.rewrite = func(err error) error {
		if err == nil {
			return errBoom
		}
		return err
	}
	_, err := watertight.Do(context.Background(), watertight.MustNew(invent, swallow), func(ctx context.Context) (int, error) {
		return 0, errors.New("lost")
	})
	if err != errBoom {
		t.Errorf("err = %v, want %v", err, errBoom)
	}
	if got := log.find(t, "exit", "invent").err; got != nil {
		t.Errorf("outer Exit got %v, want nil (the inner one swallowed it)", got)
	}
}

func TestDoRefused(t *testing.T) {
	rej := watertight.NewRejection("fake: refused")
	for _, tc := range []struct {
		name    string
		at      int // where the rejecting policy sits among 3
		entered []string
	}{
		{"outermost", 0, nil},
		{"middle", 1, []string{"p0"}},
		{"innermost", 2, []string{"p0", "p1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &eventLog{}
			var recs []*recording
			var pols []watertight.Policy
			r := &rejecting{name: "rej", log: log, err: rej}
			for i := range 3 {
				if i == tc.at {
					pols = append(pols, r)
					continue
				}
				rec := newRecording("p"+strconv.Itoa(i), log)
				recs = append(recs, rec)
				pols = append(pols, rec)
			}
			called := false
			_, err := watertight.Do(context.Background(), watertight.MustNew(pols...), func(ctx context.Context) (int, error) {
				called = true
				return 1, nil
			})
			if called {
				t.Error("fn was called through a refusing policy")
			}
			if err != rej {
				t.Errorf("err = %v, want the rejection", err)
			}
			if !watertight.IsRejection(err) {
				t.Error("IsRejection(err) = false")
			}
			if n := r.exits.Load(); n != 0 {
				t.Errorf("the refusing policy's Exit ran %d times, want 0", n)
			}
			var want []string
			for _, n := range tc.entered {
				want = append(want, "enter "+n)
			}
			want = append(want, "enter rej")
			for i := len(tc.entered) - 1; i >= 0; i-- {
				want = append(want, "exit "+tc.entered[i])
			}
			if got := log.ops(); !slices.Equal(got, want) {
				t.Errorf("events = %v, want %v", got, want)
			}
			for _, n := range tc.entered {
				if e := log.find(t, "exit", n); e.err != rej {
					t.Errorf("exit %s got %v, want the rejection", n, e.err)
				}
			}
			for _, rec := range recs {
				rec.check(t)
			}
		})
	}
}

type panicValue struct{ n int }

// callRecovering calls f and returns what it panicked with (nil if it did not).
func callRecovering(f func()) (pv any) {
	defer func() { pv = recover() }()
	f()
	return nil
}

func TestDoPanic(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	res := &resource{name: "res", log: log}
	c := newRecording("c", log)
	p := watertight.MustNew(a, res, c)
	pv := callRecovering(func() {
		watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			panic(panicValue{42})
		})
		t.Error("Do returned after fn panicked")
	})
	if pv != (panicValue{42}) {
		t.Fatalf("recovered %v, want panicValue{42}", pv)
	}
	want := []string{"enter a", "enter res", "enter c", "exit c", "exit res", "exit a"}
	if got := log.ops(); !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	for _, e := range log.events() {
		if e.op == "exit" && !errors.Is(e.err, watertight.ErrPanicked) {
			t.Errorf("%v got %v, want ErrPanicked", e, e.err)
		}
	}
	if n := res.held.Load(); n != 0 {
		t.Errorf("%d permits held after the panic, want 0", n)
	}
	a.check(t)
	c.check(t)
}

// panicking panics in Enter.
type panicking struct{ nop }

func (panicking) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	panic("enter")
}

func TestDoPanicInEnter(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	b := newRecording("b", log)
	pv := callRecovering(func() {
		watertight.Do(context.Background(), watertight.MustNew(a, panicking{}, b), func(ctx context.Context) (int, error) {
			t.Error("fn called")
			return 0, nil
		})
	})
	if pv != "enter" {
		t.Fatalf("recovered %v, want \"enter\"", pv)
	}
	if got, want := log.ops(), []string{"enter a", "exit a"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if err := log.find(t, "exit", "a").err; !errors.Is(err, watertight.ErrPanicked) {
		t.Errorf("exit a got %v, want ErrPanicked", err)
	}
}

func TestDoEmpty(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey("caller"), 1)
	for name, p := range map[string]*watertight.Pipeline{
		"nil":      nil,
		"zero":     {},
		"New()":    watertight.MustNew(),
		"New(nil)": watertight.MustNew(nil, nil),
	} {
		t.Run(name, func(t *testing.T) {
			if n := p.Len(); n != 0 {
				t.Errorf("Len = %d, want 0", n)
			}
			for _, do := range []func(context.Context, *watertight.Pipeline, func(context.Context) (int, error)) (int, error){
				watertight.Do[int], watertight.DoDetached[int],
			} {
				v, err := do(ctx, p, func(c context.Context) (int, error) {
					if c != ctx {
						t.Error("fn did not get the caller's context")
					}
					return 5, errBoom
				})
				if v != 5 || err != errBoom {
					t.Errorf("got %d, %v; want 5, boom", v, err)
				}
			}
			err := p.Run(ctx, func(c context.Context) error {
				if c != ctx {
					t.Error("fn did not get the caller's context")
				}
				return errBoom
			})
			if err != errBoom {
				t.Errorf("Run = %v, want boom", err)
			}
		})
	}
}

func TestNewSkipsNil(t *testing.T) {
	log := &eventLog{}
	a, b := newRecording("a", log), newRecording("b", log)
	p := watertight.MustNew(nil, a, nil, b, nil)
	if n := p.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	_, err := watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		log.fn()
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := log.ops(), []string{"enter a", "enter b", "fn", "exit b", "exit a"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// More than 8 policies take the path that keeps the frames on the heap.
func TestDoManyPolicies(t *testing.T) {
	for _, n := range []int{7, 8, 9, 20} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			log := &eventLog{}
			var recs []*recording
			var pols []watertight.Policy
			var want []string
			for i := range n {
				r := newRecording(strconv.Itoa(i), log)
				r.rewrite = wrapWith(strconv.Itoa(i))
				recs = append(recs, r)
				pols = append(pols, r)
				want = append(want, "enter "+r.name)
			}
			want = append(want, "fn")
			for i := n - 1; i >= 0; i-- {
				want = append(want, "exit "+strconv.Itoa(i))
			}
			p := watertight.MustNew(pols...)
			if p.Len() != n {
				t.Fatalf("Len = %d, want %d", p.Len(), n)
			}
			_, err := watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				log.fn()
				return 0, errBoom
			})
			if got := log.ops(); !slices.Equal(got, want) {
				t.Errorf("events = %v, want %v", got, want)
			}
			wantErr := "boom"
			for i := n - 1; i >= 0; i-- {
				wantErr = strconv.Itoa(i) + ": " + wantErr
			}
			if err == nil || err.Error() != wantErr {
				t.Errorf("err = %v, want %s", err, wantErr)
			}
			for _, r := range recs {
				r.check(t)
			}

			// A refusal deep in the pipeline exits exactly those entered.
			log2 := &eventLog{}
			var pols2 []watertight.Policy
			var recs2 []*recording
			for i := range n {
				r := newRecording(strconv.Itoa(i), log2)
				recs2 = append(recs2, r)
				pols2 = append(pols2, r)
			}
			rej := watertight.NewRejection("deep")
			pols2 = append(pols2, &rejecting{name: "rej", log: log2, err: rej})
			_, err = watertight.Do(context.Background(), watertight.MustNew(pols2...), func(ctx context.Context) (int, error) {
				t.Error("fn called")
				return 0, nil
			})
			if err != rej {
				t.Errorf("err = %v, want the rejection", err)
			}
			for _, r := range recs2 {
				r.check(t)
			}

			// And so does a panic.
			log3 := &eventLog{}
			var recs3 []*recording
			var pols3 []watertight.Policy
			for i := range n {
				r := newRecording(strconv.Itoa(i), log3)
				recs3 = append(recs3, r)
				pols3 = append(pols3, r)
			}
			pv := callRecovering(func() {
				watertight.Do(context.Background(), watertight.MustNew(pols3...), func(ctx context.Context) (int, error) {
					panic(panicValue{n})
				})
			})
			if pv != (panicValue{n}) {
				t.Errorf("recovered %v", pv)
			}
			for _, r := range recs3 {
				r.check(t)
				if err := log3.find(t, "exit", r.name).err; !errors.Is(err, watertight.ErrPanicked) {
					t.Errorf("exit %s got %v", r.name, err)
				}
			}
		})
	}
}

func TestDoNeedsDetached(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	to, err := timeout.New(timeout.Config{Timeout: time.Second, Abandon: true})
	if err != nil {
		t.Fatal(err)
	}
	p := watertight.MustNew(a, to)
	_, err = watertight.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		t.Error("fn called")
		return 0, nil
	})
	if err != watertight.ErrNeedsDetached {
		t.Errorf("Do = %v, want ErrNeedsDetached", err)
	}
	err = p.Run(context.Background(), func(ctx context.Context) error {
		t.Error("fn called")
		return nil
	})
	if err != watertight.ErrNeedsDetached {
		t.Errorf("Run = %v, want ErrNeedsDetached", err)
	}
	if ev := log.events(); len(ev) != 0 {
		t.Errorf("policies ran: %v", ev)
	}

	// A disabled timeout has no deadline to abandon at: Do runs it.
	off, _ := timeout.New(timeout.Config{Timeout: -1, Abandon: true})
	v, err := watertight.Do(context.Background(), watertight.MustNew(off), func(ctx context.Context) (int, error) {
		return 3, nil
	})
	if v != 3 || err != nil {
		t.Errorf("Do through a disabled abandoning timeout = %d, %v; want 3, nil", v, err)
	}
}

func TestRun(t *testing.T) {
	log := &eventLog{}
	a := newRecording("a", log)
	a.rewrite = wrapWith("a")
	p := watertight.MustNew(a)
	err := p.Run(context.Background(), func(ctx context.Context) error {
		log.fn()
		if ctx.Value(ctxKey("a")) == nil {
			t.Error("fn's context lacks what the policy derived")
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) || err.Error() != "a: boom" {
		t.Errorf("Run = %v, want a: boom", err)
	}
	if err := p.Run(context.Background(), func(ctx context.Context) error { return nil }); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if got, want := log.ops(), []string{"enter a", "fn", "exit a", "enter a", "exit a"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	a.check(t)
}

// Do must not keep fn: a closure that captures the caller's variables stays
// on the caller's stack, and two trivial policies cost nothing.
func TestDoAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	ctx := context.Background()
	p := watertight.MustNew(nop{}, nop{})
	var total int
	allocs := testing.AllocsPerRun(1000, func() {
		base := total
		v, err := watertight.Do(ctx, p, func(ctx context.Context) (int, error) {
			return base + 1, nil
		})
		if err != nil {
			panic(err)
		}
		total = v
	})
	if allocs != 0 {
		t.Errorf("Do through 2 policies allocates %v times per call, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		base := total
		err := p.Run(ctx, func(ctx context.Context) error {
			total = base + 1
			return nil
		})
		if err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Run through 2 policies allocates %v times per call, want 0", allocs)
	}
}

// TestNewRefusesTypedNil: a constructor error that was discarded leaves a
// nil pointer in the Policy interface; New must refuse it, naming its
// position and type, instead of panicking on the first call.
func TestNewRefusesTypedNil(t *testing.T) {
	var missing *nilPolicy // what `bh, _ := bulkhead.New(bad)` leaves behind
	p, err := watertight.New(&nilPolicy{}, nil, missing)
	if err == nil || p != nil {
		t.Fatalf("New with a nil *nilPolicy = %v, %v; want an error", p, err)
	}
	for _, want := range []string{"policy 3 of 3", "*watertight_test.nilPolicy", "not checked"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := watertight.New(nil, &nilPolicy{}); err != nil {
		t.Errorf("New(nil, valid) = %v; an untyped nil is skipped", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustNew with a typed nil did not panic")
		}
	}()
	watertight.MustNew(missing)
}

type nilPolicy struct{}

func (*nilPolicy) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{}, nil
}
func (*nilPolicy) Exit(_ context.Context, _ watertight.Ticket, err error) error { return err }

// TestNewSkipsNilDisabled: a nil of a type whose nil is a disabled policy
// (a nil *budget.Throttler) is skipped, not refused.
func TestNewSkipsNilDisabled(t *testing.T) {
	var off *disabledWhenNil
	p, err := watertight.New(off, &nilPolicy{})
	if err != nil || p.Len() != 1 {
		t.Fatalf("New(nil *disabledWhenNil, policy) = %v (len %d), %v; want the nil skipped", p, p.Len(), err)
	}
}

type disabledWhenNil struct{ nilPolicy }

func (*disabledWhenNil) NilDisabled() {}
