package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/fallback"
)

var (
	errDown        = errors.New("connection refused")
	errUnavailable = errors.New("prices unavailable, try again shortly")
	errRejected    = watertight.NewRejection("circuit: open")
)

// recorder is a Listener that keeps the events it gets.
type recorder struct {
	mu     sync.Mutex
	events []watertight.Event
}

func (r *recorder) OnEvent(e watertight.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []watertight.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watertight.Event(nil), r.events...)
}

func mustChain[T any](t testing.TB, cfg fallback.Config, steps ...fallback.Step[T]) *fallback.Chain[T] {
	t.Helper()
	c, err := fallback.New(cfg, steps...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustCache[T any](t testing.TB, cfg fallback.CacheConfig) *fallback.LastKnownGood[T] {
	t.Helper()
	c, err := fallback.NewLastKnownGood[T](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ok[T any](v T) func(context.Context) (T, error) {
	return func(context.Context) (T, error) { return v, nil }
}

func fail[T any](v T, err error) func(context.Context) (T, error) {
	return func(context.Context) (T, error) { return v, err }
}

func TestSuccessPassesThroughAndRecords(t *testing.T) {
	cache := mustCache[int](t, fallback.CacheConfig{})
	rec := &recorder{}
	c := mustChain(t, fallback.Config{Listener: rec}, fallback.Stale(cache), fallback.Default(-1))
	r, err := c.DoResult(context.Background(), "k", ok(7))
	if err != nil || r.Value != 7 || r.Kind != fallback.KindPrimary || r.Fallback() || r.Step != "" || r.Cause != nil {
		t.Fatalf("DoResult = %+v, %v; want the primary's 7", r, err)
	}
	if v, _, found := cache.Get("k"); !found || v != 7 {
		t.Fatalf("cache after success: %v, %v; want 7 recorded", v, found)
	}
	if v, err := c.Do(context.Background(), "k", ok(8)); v != 8 || err != nil {
		t.Fatalf("Do = %v, %v", v, err)
	}
	if v, _, _ := cache.Get("k"); v != 8 {
		t.Fatalf("cache = %v after a second success, want 8", v)
	}
	if n := len(rec.all()); n != 0 {
		t.Fatalf("%d events on success, want none", n)
	}
}

func TestEachKindAnswers(t *testing.T) {
	ctx := context.Background()
	cache := mustCache[string](t, fallback.CacheConfig{MaxStale: -1})
	cache.Put("hit", "cached")
	var enqueued []string
	for _, tc := range []struct {
		name  string
		step  fallback.Step[string]
		key   string
		want  string
		kind  fallback.Kind
		isErr error // the Error step's error
	}{
		{"stale", fallback.Stale(cache), "hit", "cached", fallback.KindStale, nil},
		{"default", fallback.Default("dflt"), "k", "dflt", fallback.KindDefault, nil},
		{"reduced", fallback.Reduced(func(ctx context.Context, key string, err error) (string, error) {
			if !errors.Is(err, errDown) {
				return "", fmt.Errorf("reduced got %v, want the primary's error", err)
			}
			return "reduced:" + key, nil
		}), "k", "reduced:k", fallback.KindReduced, nil},
		{"defer", fallback.Defer(func(ctx context.Context, key string, err error) error {
			enqueued = append(enqueued, key+"/"+err.Error())
			return nil
		}, "accepted"), "job", "accepted", fallback.KindDeferred, nil},
		{"error", fallback.Error[string](errUnavailable), "k", "", fallback.KindError, errUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			c := mustChain(t, fallback.Config{Name: "prices", Listener: rec}, tc.step)
			r, err := c.DoResult(ctx, tc.key, fail("partial", errDown))
			if tc.isErr != nil {
				if !errors.Is(err, tc.isErr) || !errors.Is(err, errDown) {
					t.Fatalf("err = %v; want it to match %v and the primary's %v", err, tc.isErr, errDown)
				}
				if want := tc.isErr.Error() + ": " + errDown.Error(); err.Error() != want {
					t.Fatalf("message = %q, want %q", err, want)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if r.Value != tc.want || r.Kind != tc.kind || r.Step != tc.kind.String() || r.Cause != errDown || !r.Fallback() {
				t.Fatalf("Result = %+v; want %q from %v with cause %v", r, tc.want, tc.kind, errDown)
			}
			ev := rec.all()
			if len(ev) != 1 {
				t.Fatalf("%d events, want 1", len(ev))
			}
			e := ev[0]
			if e.Kind != watertight.EventFallbackUsed || e.Source != "fallback" || e.Name != "prices" ||
				e.Key != tc.key || e.Reason != tc.kind.String() || e.Err != errDown || e.Time.IsZero() {
				t.Fatalf("event = %+v", e)
			}
		})
	}
	if len(enqueued) != 1 || enqueued[0] != "job/"+errDown.Error() {
		t.Fatalf("enqueued %q, want the key and the primary's error once", enqueued)
	}
}

// Steps are tried in order; a step that cannot answer passes to the next.
func TestStepsInOrder(t *testing.T) {
	ctx := context.Background()
	cache := mustCache[string](t, fallback.CacheConfig{})
	var tried []string
	reduced := fallback.Reduced(func(ctx context.Context, key string, err error) (string, error) {
		tried = append(tried, "reduced")
		return "", errors.New("reduced feature down too")
	})
	deferred := fallback.Defer(func(ctx context.Context, key string, err error) error {
		tried = append(tried, "defer")
		return errors.New("queue full")
	}, "accepted")
	c := mustChain(t, fallback.Config{}, fallback.Stale(cache), reduced, deferred, fallback.Default("dflt"))

	r, err := c.DoResult(ctx, "k", fail("", errDown))
	if err != nil || r.Kind != fallback.KindDefault || r.Value != "dflt" {
		t.Fatalf("cold cache: %+v, %v; want the default after the others failed", r, err)
	}
	if strings.Join(tried, ",") != "reduced,defer" {
		t.Fatalf("tried %v, want reduced then defer", tried)
	}
	// A success fills the cache; the next failure is answered from it.
	if _, err := c.Do(ctx, "k", ok("fresh")); err != nil {
		t.Fatal(err)
	}
	tried = nil
	r, err = c.DoResult(ctx, "k", fail("", errDown))
	if err != nil || r.Kind != fallback.KindStale || r.Value != "fresh" || len(tried) != 0 {
		t.Fatalf("warm cache: %+v, %v (tried %v); want the stale value first", r, err, tried)
	}
	// Another key is not served another key's value.
	r, _ = c.DoResult(ctx, "other", fail("", errDown))
	if r.Kind != fallback.KindDefault {
		t.Fatalf("other key answered by %v, want default", r.Kind)
	}
}

// A step narrowed with When applies only to the errors it accepts.
func TestWhen(t *testing.T) {
	ctx := context.Background()
	timeoutErr := fmt.Errorf("attempt: %w", context.DeadlineExceeded)
	overloaded := watertight.Overloaded(errDown)
	c := mustChain(t, fallback.Config{},
		fallback.Default("on-rejection").When(fallback.OnRejection).Named("rej"),
		fallback.Default("on-timeout").When(fallback.OnTimeout),
		fallback.Default("on-overload").When(fallback.OnOverload),
		fallback.Default("either").When(fallback.Or(func(err error) bool { return err == errDown }, fallback.OnTimeout)),
	)
	for _, tc := range []struct {
		err  error
		want string
		step string
		ok   bool
	}{
		{errRejected, "on-rejection", "rej", true},
		{fmt.Errorf("wrapped: %w", errRejected), "on-rejection", "rej", true},
		{timeoutErr, "on-timeout", "default", true},
		{overloaded, "on-overload", "default", true},
		{watertight.NewSaturation("bulkhead: full"), "on-rejection", "rej", true},
		{errDown, "either", "default", true},
		{errors.New("something else"), "primary", "", false},
	} {
		r, err := c.DoResult(ctx, "k", fail("primary", tc.err))
		if tc.ok != (err == nil) || r.Value != tc.want || r.Step != tc.step {
			t.Errorf("%v: %+v, %v; want %q from %q", tc.err, r, err, tc.want, tc.step)
		}
		if !tc.ok && (err != tc.err || r.Kind != fallback.KindPrimary) {
			t.Errorf("%v: err = %v (%v), want the primary's error unchanged", tc.err, err, r.Kind)
		}
	}
}

// When nothing answers, Do returns the primary's value and error unchanged,
// the very same error value.
func TestNothingAnswers(t *testing.T) {
	rec := &recorder{}
	cache := mustCache[int](t, fallback.CacheConfig{})
	c := mustChain(t, fallback.Config{Listener: rec}, fallback.Stale(cache))
	v, err := c.Do(context.Background(), "k", fail(42, errDown))
	if v != 42 || err != errDown {
		t.Fatalf("Do = %v, %v; want 42, %v", v, err, errDown)
	}
	empty := mustChain[int](t, fallback.Config{})
	if v, err := empty.Do(context.Background(), "k", fail(3, errDown)); v != 3 || err != errDown {
		t.Fatalf("empty chain: %v, %v", v, err)
	}
	var nilChain *fallback.Chain[int]
	if v, err := nilChain.Do(context.Background(), "k", fail(4, errDown)); v != 4 || err != errDown {
		t.Fatalf("nil chain Do: %v, %v", v, err)
	}
	if r, err := nilChain.DoResult(context.Background(), "k", ok(5)); r.Value != 5 || err != nil || r.Fallback() {
		t.Fatalf("nil chain DoResult: %+v, %v", r, err)
	}
	if n := len(rec.all()); n != 0 {
		t.Fatalf("%d events, want none", n)
	}
}

// The caller's own cancellation or deadline never falls back.
func TestCallerContextDone(t *testing.T) {
	var calls atomic.Int32
	c := mustChain(t, fallback.Config{},
		fallback.Reduced(func(ctx context.Context, key string, err error) (int, error) {
			calls.Add(1)
			return 1, nil
		}),
		fallback.Default(2))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v, err := c.Do(ctx, "k", fail(0, ctx.Err())); err != context.Canceled || v != 0 {
		t.Fatalf("cancelled caller: %v, %v; want context.Canceled unchanged", v, err)
	}
	// Even when the primary's error is something else.
	if _, err := c.Do(ctx, "k", fail(0, errDown)); err != errDown {
		t.Fatalf("cancelled caller, other error: %v; want it unchanged", err)
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		time.Sleep(2 * time.Second)
		if _, err := c.Do(ctx, "k", fail(0, ctx.Err())); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller's deadline passed: %v; want no fallback", err)
		}
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("reduced step ran %d times for a caller that had gone", n)
	}
	// A timeout inside the pipeline leaves the caller's context live: it
	// falls back.
	inner := fmt.Errorf("timeout: total: %w", context.DeadlineExceeded)
	if v, err := c.Do(context.Background(), "k", fail(0, inner)); err != nil || v != 1 {
		t.Fatalf("inner timeout: %v, %v; want the reduced answer", v, err)
	}
	// So does a cancellation from inside (the caller's context is live).
	if v, err := c.Do(context.Background(), "k", fail(0, context.Canceled)); err != nil || v != 1 {
		t.Fatalf("inner cancellation: %v, %v; want the reduced answer", v, err)
	}
}

// When the caller goes away while a step runs, the chain stops there.
func TestCallerGoesDuringStep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var later atomic.Bool
	c := mustChain(t, fallback.Config{},
		fallback.Reduced(func(ctx context.Context, key string, err error) (int, error) {
			cancel() // the caller gives up while the reduced feature runs
			return 0, ctx.Err()
		}),
		fallback.Reduced(func(ctx context.Context, key string, err error) (int, error) {
			later.Store(true)
			return 1, nil
		}))
	if _, err := c.Do(ctx, "k", fail(0, errDown)); err != errDown {
		t.Fatalf("err = %v, want the primary's", err)
	}
	if later.Load() {
		t.Fatal("a step ran after the caller had gone")
	}
}

func TestHandles(t *testing.T) {
	ctx := context.Background()
	def := mustChain(t, fallback.Config{}, fallback.Default(1))
	callerFault := watertight.Mark(errors.New("404 not found"), watertight.Ignored)
	if _, err := def.Do(ctx, "k", fail(0, callerFault)); err != callerFault {
		t.Fatalf("caller's own error: %v; want it unchanged", err)
	}
	for _, err := range []error{
		errDown,
		errRejected,
		watertight.Mark(errDown, watertight.Failure),
		watertight.Mark(errRejected, watertight.Ignored), // a rejection marked ignored is still a rejection
	} {
		if v, got := def.Do(ctx, "k", fail(0, err)); got != nil || v != 1 {
			t.Fatalf("%v: %v, %v; want the default", err, v, got)
		}
	}
	if fallback.DefaultHandles(callerFault) || !fallback.DefaultHandles(errDown) || !fallback.DefaultHandles(errRejected) {
		t.Fatal("DefaultHandles disagrees with its documentation")
	}
	only := mustChain(t, fallback.Config{Handles: fallback.OnRejection}, fallback.Default(1))
	if _, err := only.Do(ctx, "k", fail(0, errDown)); err != errDown {
		t.Fatalf("custom Handles: %v, want errDown unchanged", err)
	}
	if v, err := only.Do(ctx, "k", fail(0, errRejected)); err != nil || v != 1 {
		t.Fatalf("custom Handles: %v, %v; want the default for a rejection", v, err)
	}
}

func TestNewValidates(t *testing.T) {
	cache := mustCache[int](t, fallback.CacheConfig{})
	for _, tc := range []struct {
		steps []fallback.Step[int]
		want  string
	}{
		{[]fallback.Step[int]{fallback.Stale[int](nil)}, "fallback: step 1 (stale): Stale needs a non-nil cache"},
		{[]fallback.Step[int]{fallback.Reduced[int](nil)}, "fallback: step 1 (reduced): Reduced needs a non-nil function"},
		{[]fallback.Step[int]{fallback.Defer[int](nil, 0)}, "fallback: step 1 (defer): Defer needs a non-nil enqueue function"},
		{[]fallback.Step[int]{fallback.Default(1), fallback.Error[int](nil)}, "fallback: step 2 (error) follows step 1 (default), which always answers: it could never run"},
		{[]fallback.Step[int]{fallback.Error[int](nil)}, "fallback: step 1 (error): Error needs a non-nil error"},
		{[]fallback.Step[int]{fallback.Error[int](errDown).Named("fast"), fallback.Stale(cache)}, "fallback: step 2 (stale) follows step 1 (fast), which always answers: it could never run"},
		{[]fallback.Step[int]{{}}, "fallback: step 1 (): not built with Stale, Default, Reduced, Defer or Error"},
	} {
		_, err := fallback.New(fallback.Config{}, tc.steps...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("New = %v, want %q", err, tc.want)
		}
	}
	// A Default narrowed with When may be followed by more steps.
	if _, err := fallback.New(fallback.Config{}, fallback.Default(1).When(fallback.OnTimeout), fallback.Default(2)); err != nil {
		t.Errorf("conditional default followed by another: %v", err)
	}
}

// Two Stale steps over one cache record each success once.
func TestSharedCacheRecordedOnce(t *testing.T) {
	cache := mustCache[int](t, fallback.CacheConfig{MaxEntries: 1})
	c := mustChain(t, fallback.Config{},
		fallback.Stale(cache).When(fallback.OnRejection), fallback.Stale(cache).Named("stale-any"))
	if _, err := c.Do(context.Background(), "k", ok(1)); err != nil {
		t.Fatal(err)
	}
	if n := cache.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	r, err := c.DoResult(context.Background(), "k", fail(0, errDown))
	if err != nil || r.Step != "stale-any" || r.Value != 1 {
		t.Fatalf("%+v, %v; want the second stale step", r, err)
	}
}

func TestStaleAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cache := mustCache[int](t, fallback.CacheConfig{MaxStale: time.Minute})
		c := mustChain(t, fallback.Config{}, fallback.Stale(cache))
		if _, err := c.Do(context.Background(), "k", ok(1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Second)
		r, err := c.DoResult(context.Background(), "k", fail(0, errDown))
		if err != nil || r.Age != 40*time.Second || r.Value != 1 {
			t.Fatalf("%+v, %v; want the value, 40s old", r, err)
		}
		time.Sleep(21 * time.Second)
		if _, err := c.Do(context.Background(), "k", fail(0, errDown)); err != errDown {
			t.Fatalf("61s old with MaxStale 1m: err = %v, want the primary's", err)
		}
	})
}

// Do allocates nothing on the success path, with or without a stale cache
// (once the key is in it).
func TestSuccessAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	fn := ok(1)
	cache := mustCache[int](t, fallback.CacheConfig{})
	for _, c := range []*fallback.Chain[int]{
		mustChain(t, fallback.Config{}, fallback.Default(0)),
		mustChain(t, fallback.Config{}, fallback.Stale(cache), fallback.Default(0)),
	} {
		c.Do(ctx, "k", fn)
		if n := testing.AllocsPerRun(100, func() { c.Do(ctx, "k", fn) }); n != 0 {
			t.Errorf("Do: %v allocations per success, want 0", n)
		}
		if n := testing.AllocsPerRun(100, func() { c.DoResult(ctx, "k", fn) }); n != 0 {
			t.Errorf("DoResult: %v allocations per success, want 0", n)
		}
	}
}

// Many goroutines succeed and fail through one chain at once (run with -race).
func TestConcurrent(t *testing.T) {
	cache := mustCache[int](t, fallback.CacheConfig{MaxEntries: 100})
	c := mustChain(t, fallback.Config{Listener: &recorder{}}, fallback.Stale(cache), fallback.Default(-1))
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint((g + i) % 150)
				if i%3 == 0 {
					v, err := c.Do(context.Background(), key, fail(0, errDown))
					if err != nil || v < -1 {
						bad.Add(1)
					}
					continue
				}
				if v, err := c.Do(context.Background(), key, ok(i)); err != nil || v != i {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d calls went wrong", n)
	}
	if n := cache.Len(); n > 100 {
		t.Fatalf("cache holds %d entries, bound 100", n)
	}
}

func TestKindString(t *testing.T) {
	want := []string{"primary", "stale", "default", "reduced", "defer", "error", "kind(6)"}
	for k := range fallback.Kind(7) {
		if got := k.String(); got != want[k] {
			t.Errorf("Kind(%d) = %q, want %q", k, got, want[k])
		}
	}
	s := fallback.Default(1).Named("x")
	if s.Kind() != fallback.KindDefault || s.Name() != "x" {
		t.Errorf("step %v %q", s.Kind(), s.Name())
	}
}
