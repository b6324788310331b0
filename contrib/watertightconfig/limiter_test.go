package watertightconfig

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/limit"
)

// limiters: named adaptive limiters, written back, built, and reconfigured
// in place by a reload that keeps what they hold.
func TestLimiters(t *testing.T) {
	src := "limiters:\n" +
		"  api: {algorithm: watertight, initial_limit: 40, min_limit: 10, max_limit: 200, max_wait: 50ms, max_waiters: 100, queue_order: newest_first, window_samples: 20, min_window: 500ms}\n" +
		"  dflt: {}\n" +
		"  fast: {min_window: off}\n"
	f := mustParse(t, src)
	check := func(f *File, when string) {
		t.Helper()
		api, dflt, fast := f.Limiters["api"], f.Limiters["dflt"], f.Limiters["fast"]
		want := limit.Config{Name: "api", InitialLimit: 40, MinLimit: 10, MaxLimit: 200, MaxWait: 50 * time.Millisecond, MaxWaiters: 100,
			QueueOrder: bulkhead.NewestFirst, WindowSamples: 20, MinWindow: 500 * time.Millisecond}
		if api.Algorithm != "watertight" || api.Config.Name != want.Name || api.Config.InitialLimit != want.InitialLimit ||
			api.Config.MaxWaiters != want.MaxWaiters || api.Config.QueueOrder != want.QueueOrder || api.Config.MinWindow != want.MinWindow {
			t.Errorf("%s: api %+v", when, api)
		}
		if dflt.Algorithm != "watertight" || dflt.Config.InitialLimit != limit.DefaultInitialLimit || dflt.Config.MaxLimit != limit.DefaultMaxLimit || dflt.Config.MinWindow != limit.DefaultMinWindow {
			t.Errorf("%s: dflt %+v", when, dflt)
		}
		if fast.Config.MinWindow != -1 {
			t.Errorf("%s: fast %+v", when, fast)
		}
	}
	check(f, "parsed")
	var sb strings.Builder
	if err := f.Write(&sb); err != nil {
		t.Fatal(err)
	}
	check(mustParse(t, sb.String()), "written and read back")

	r := r0(t, f)
	l, err := r.Limiter("api")
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Limit != 40 || s.Algorithm != "watertight" {
		t.Fatalf("built: %+v", s)
	}
	held, _ := l.TryAcquire()
	// initial_limit applies when a limiter is built: the live one keeps its
	// limit, moved inside the new bounds.
	ch, err := r.Reload(mustParse(t, strings.Replace(src, "initial_limit: 40, min_limit: 10, max_limit: 200", "initial_limit: 25, min_limit: 10, max_limit: 30", 1)))
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := r.Limiter("api")
	if l2 != l || l.Limit() != 30 || l.Snapshot().InFlight != 1 {
		t.Fatalf("after lowering max_limit: same %v, %+v (changes %+v)", l2 == l, l.Snapshot(), ch)
	}
	held.Ignore()
	if _, err := r.Reload(mustParse(t, strings.Replace(src, "newest_first", "oldest_first", 1))); err == nil || !strings.Contains(err.Error(), "limiters.api.queue_order: cannot change") {
		t.Fatalf("changing the order: %v", err)
	}
	if _, err := r.Limiter("nope"); err == nil || !strings.Contains(err.Error(), `no limiter named "nope" (have: api, dflt, fast)`) {
		t.Fatalf("lookup: %v", err)
	}
}

func TestLimiterErrors(t *testing.T) {
	_, err := Parse("test.yaml", []byte("limiters:\n"+
		"  a: {algorithm: netflix, min_limit: 0}\n"+
		"  b: {min_limit: 50, max_limit: 10}\n"+
		"  c: {initial_limit: 5, min_limit: 10}\n"+
		"  d: {max_waiters: 3}\n"))
	got := err.Error()
	for _, want := range []string{
		`test.yaml:2: limiters.a.algorithm: must be one of watertight, aimd, gradient2, vegas, got "netflix"`,
		`test.yaml:2: limiters.a.min_limit: must be > 0, got 0`,
		`test.yaml:3: limiters.b.min_limit: must be <= max_limit (10), got 50`,
		`test.yaml:4: limiters.c.initial_limit: must be in [min_limit, max_limit] ([10, 1000]), got 5`,
		`test.yaml:5: limiters.d.max_waiters: has no effect with max_wait: 0s (nobody waits)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// A keyed limiter registry from the file: one limiter per key, handed to a
// Transport by name, reconfigured in place by a reload that keeps
// max_keys, rebuilt by one that changes it.
func TestLimiterRegistry(t *testing.T) {
	src := "limiters:\n  up: {initial_limit: 8, max_limit: 50, max_keys: 10}\n"
	r := r0(t, mustParse(t, src))
	reg, err := r.LimiterRegistry("up")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := reg.Get("a")
	if a.Limit() != 8 || a.Name() != "a" {
		t.Fatalf("keyed limiter %q at %d", a.Name(), a.Limit())
	}
	tc, err := r.TransportConfig(TransportNames{Limiter: "up"})
	if err != nil || tc.Limiters != reg {
		t.Fatalf("TransportConfig: %v (same registry: %v)", err, tc.Limiters == reg)
	}
	ch, err := r.Reload(mustParse(t, strings.Replace(src, "initial_limit: 8, max_limit: 50", "initial_limit: 2, max_limit: 5", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.LimiterRegistry("up"); again != reg || a.Limit() != 5 {
		t.Fatalf("after lowering max_limit: same registry %v, limit %d (changes %+v)", again == reg, a.Limit(), ch)
	}
	ch, err = r.Reload(mustParse(t, strings.Replace(src, "max_keys: 10", "max_keys: 20", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.LimiterRegistry("up"); again == reg || !slices.Contains(ch.Rebuilt, "limiters.up.keyed") {
		t.Fatalf("after changing max_keys: same registry %v, changes %+v", again == reg, ch)
	}
	if _, err := r.LimiterRegistry("nope"); err == nil {
		t.Fatal("an unknown name was found")
	}
}
