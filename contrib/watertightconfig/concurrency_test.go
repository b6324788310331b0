package watertightconfig

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
)

// concurrency_budgets: Envoy's retry_budget in a file, named by retries,
// written back, and built into the policies that name it.
func TestConcurrencyBudgets(t *testing.T) {
	src := strings.Join([]string{
		"retries:",
		"  a: {max_attempts: 3, concurrency: envoy}",
		"  b: {max_attempts: 3, concurrency: envoy, budget: ratio}",
		"  c: {max_attempts: 2, idempotent: true, concurrency: cap}",
		"budgets:",
		"  ratio: {}",
		"concurrency_budgets:",
		"  envoy: {}",
		"  cap: {percent: off, min_concurrency: 1}",
		"  nofloor: {percent: 50%, min_concurrency: 0}",
	}, "\n") + "\n"
	f := mustParse(t, src)
	check := func(f *File, when string) {
		t.Helper()
		want := map[string]budget.ConcurrencyConfig{
			"envoy":   {Name: "envoy", Percent: budget.DefaultPercent, MinConcurrency: budget.DefaultMinConcurrency},
			"cap":     {Name: "cap", Percent: -1, MinConcurrency: 1},
			"nofloor": {Name: "nofloor", Percent: 50, MinConcurrency: -1},
		}
		for name, w := range want {
			if got := f.ConcurrencyBudgets[name].Config; got != w {
				t.Errorf("%s: %s = %+v, want %+v", when, name, got, w)
			}
		}
		if f.Retries["a"].Concurrency != "envoy" || f.Retries["c"].Concurrency != "cap" {
			t.Errorf("%s: retries %+v", when, f.Retries)
		}
	}
	check(f, "parsed")
	var sb strings.Builder
	if err := f.Write(&sb); err != nil {
		t.Fatal(err)
	}
	check(mustParse(t, sb.String()), "written and read back")

	r, err := NewRegistry(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	envoy, err := r.ConcurrencyBudget("envoy")
	if err != nil {
		t.Fatal(err)
	}
	ra, _ := r.RetryConfig("a")
	rb, _ := r.RetryConfig("b")
	if ra.Concurrency != envoy || rb.Concurrency != envoy || rb.Budget == nil {
		t.Fatalf("retries a and b do not share the envoy budget: %p %p %p", ra.Concurrency, rb.Concurrency, envoy)
	}
	if _, err := r.ConcurrencyBudget("nope"); !errors.Is(err, ErrNotFound) || err.Error() != `config: no such instance: no concurrency budget named "nope" (have: cap, envoy, nofloor)` {
		t.Errorf("lookup: %v", err)
	}

	// The cap of one: with a retry in flight, a second call's retry is
	// refused, and says so. (In a bubble: the backoff waits are virtual.)
	synctest.Test(t, func(t *testing.T) {
		r, err := NewRegistry(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.Retry("c")
		if err != nil {
			t.Fatal(err)
		}
		fail := retry.MarkTransient(errors.New("unavailable"))
		inRetry, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempt := 0
			_, _ = retry.Do(context.Background(), p, func(context.Context) (int, error) {
				attempt++
				if attempt == 2 {
					close(inRetry)
					<-release
					return 1, nil
				}
				return 0, fail
			})
		}()
		<-inRetry
		_, err = retry.Do(context.Background(), p, func(context.Context) (int, error) { return 0, fail })
		close(release)
		wg.Wait()
		if !errors.Is(err, retry.ErrNoConcurrency) || !errors.Is(err, budget.ErrExhausted) {
			t.Fatalf("a retry beyond the cap: %v, want ErrNoConcurrency", err)
		}
		c, _ := r.ConcurrencyBudget("cap")
		if s := c.Snapshot(); s.Active != 0 || s.InFlight != 0 || s.Granted != 1 || s.Refused != 1 {
			t.Fatalf("cap snapshot %+v", s)
		}
	})
}

func TestConcurrencyBudgetErrors(t *testing.T) {
	_, err := Parse("test.yaml", []byte(strings.Join([]string{
		"retries:",
		"  a: {concurrency: nope}",
		"  b: {max_attempts: 1, concurrency: c}",
		"concurrency_budgets:",
		"  c: {percent: 120%, min_concurrency: -1}",
		"  d: {percent: off, min_concurrency: 0}",
		"  e: {percent: 0}",
	}, "\n")+"\n"))
	got := err.Error()
	for _, want := range []string{
		`test.yaml:2: retries.a.concurrency: no concurrency budget named "nope" (concurrency_budgets: c, d, e)`,
		`test.yaml:3: retries.b.concurrency: has no effect with max_attempts: 1 (no retries)`,
		`test.yaml:5: concurrency_budgets.c.percent: must be in (0, 1]`,
		`test.yaml:5: concurrency_budgets.c.min_concurrency: must be >= 0`,
		`test.yaml:6: concurrency_budgets.d.min_concurrency: must be > 0 with percent: off (it is then the cap on retries in flight, and 0 would refuse every retry), got 0`,
		`test.yaml:7: concurrency_budgets.e.percent: must be in (0, 1] (a fraction, or a percentage such as "50%"), got 0; write off to turn the rule off`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// A reload that changes a concurrent-retry budget rebuilds it and the
// policies that name it; one that does not keeps both.
func TestConcurrencyBudgetReload(t *testing.T) {
	const v1 = "retries:\n  a: {concurrency: envoy}\n  b: {}\nconcurrency_budgets:\n  envoy: {}\n"
	const v2 = "retries:\n  a: {concurrency: envoy}\n  b: {}\nconcurrency_budgets:\n  envoy: {percent: 50%}\n"
	r, err := NewRegistry(mustParse(t, v1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := r.ConcurrencyBudget("envoy")
	oldA, _ := r.Retry("a")
	ch, err := r.Reload(mustParse(t, v1))
	if err != nil || !slices.Contains(ch.Kept, "concurrency_budgets.envoy") || !slices.Contains(ch.Kept, "retries.a") {
		t.Fatalf("same file: %+v, %v", ch, err)
	}
	ch, err = r.Reload(mustParse(t, v2))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ch.Rebuilt, "concurrency_budgets.envoy") || !slices.Contains(ch.Changed, "retries.a") || !slices.Contains(ch.Kept, "retries.b") {
		t.Fatalf("changed budget: %+v", ch)
	}
	nb, _ := r.ConcurrencyBudget("envoy")
	na, _ := r.Retry("a")
	rc, _ := r.RetryConfig("a")
	if nb == old || na == oldA || rc.Concurrency != nb || nb.Config().Percent != 50 {
		t.Fatalf("after reload: budget %p (old %p), policy %p (old %p), config's budget %p", nb, old, na, oldA, rc.Concurrency)
	}
}
