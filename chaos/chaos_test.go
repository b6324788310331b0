package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/chaos"
)

var errBoom = errors.New("boom")

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

func mustNew(t testing.TB, cfg chaos.Config) *chaos.Injector {
	t.Helper()
	inj, err := chaos.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

// counted returns a function that counts its calls and answers 1.
func counted(n *atomic.Int64) func(context.Context) (int, error) {
	return func(context.Context) (int, error) {
		n.Add(1)
		return 1, nil
	}
}

// An injector is off until enabled, and switches at run time.
func TestOffByDefaultAndSwitchable(t *testing.T) {
	rec := &recorder{}
	inj := mustNew(t, chaos.Config{Rules: map[string]chaos.Rule{"db": {ErrorRate: 1}}, Listener: rec})
	var calls atomic.Int64
	fn := counted(&calls)
	ctx := context.Background()
	if inj.Enabled() {
		t.Fatal("enabled without Config.Enabled")
	}
	if v, err := chaos.Do(ctx, inj, "db", fn); v != 1 || err != nil {
		t.Fatalf("disabled: %v, %v; want the call to run", v, err)
	}
	if f := inj.Decide("db"); f != (chaos.Fault{}) {
		t.Fatalf("disabled: Decide = %+v, want the zero Fault", f)
	}
	inj.Enable()
	if _, err := chaos.Do(ctx, inj, "db", fn); !errors.Is(err, chaos.ErrInjected) {
		t.Fatalf("enabled: err = %v, want ErrInjected", err)
	}
	inj.Disable()
	if _, err := chaos.Do(ctx, inj, "db", fn); err != nil {
		t.Fatalf("disabled again: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("fn ran %d times, want 2 (not when the fault was injected)", n)
	}
	if s := inj.Snapshot(); s != (chaos.Stats{Calls: 1, Errors: 1}) {
		t.Fatalf("Snapshot = %+v", s)
	}
	if n := len(rec.all()); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	on := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{"db": {ErrorRate: 1}}})
	if !on.Enabled() {
		t.Fatal("Config.Enabled did not enable")
	}
}

// A nil Injector injects nothing and does not panic.
func TestNilInjector(t *testing.T) {
	var inj *chaos.Injector
	var calls atomic.Int64
	if v, err := chaos.Do(context.Background(), inj, "k", counted(&calls)); v != 1 || err != nil || calls.Load() != 1 {
		t.Fatalf("Do = %v, %v", v, err)
	}
	p := watertight.MustNew(inj.Policy("k"))
	if v, err := watertight.Do(context.Background(), p, counted(&calls)); v != 1 || err != nil {
		t.Fatalf("Policy: %v, %v", v, err)
	}
	if inj.Enabled() || inj.Snapshot() != (chaos.Stats{}) || inj.Decide("k") != (chaos.Fault{}) {
		t.Fatal("nil injector is not inert")
	}
	if _, ok := inj.Rule("k"); ok || len(inj.Rules()) != 0 {
		t.Fatal("nil injector has rules")
	}
}

// Only keys with a rule are touched; AnyKey covers the others.
func TestScopedByKey(t *testing.T) {
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{"payments": {ErrorRate: 1}}})
	ctx := context.Background()
	var calls atomic.Int64
	if _, err := chaos.Do(ctx, inj, "payments", counted(&calls)); err == nil {
		t.Fatal("payments: no fault")
	}
	if _, err := chaos.Do(ctx, inj, "search", counted(&calls)); err != nil {
		t.Fatalf("search, which has no rule: %v", err)
	}
	if s := inj.Snapshot(); s.Calls != 1 {
		t.Fatalf("Calls = %d, want only the call with a rule counted", s.Calls)
	}
	if err := inj.SetRule(chaos.AnyKey, chaos.Rule{ErrorRate: 1, Err: errBoom}); err != nil {
		t.Fatal(err)
	}
	if _, err := chaos.Do(ctx, inj, "search", counted(&calls)); err != errBoom {
		t.Fatalf("search under AnyKey: %v, want errBoom", err)
	}
	if _, err := chaos.Do(ctx, inj, "payments", counted(&calls)); err != chaos.ErrInjected {
		t.Fatalf("payments keeps its own rule: %v", err)
	}
	inj.DeleteRule(chaos.AnyKey)
	inj.DeleteRule("payments")
	if _, err := chaos.Do(ctx, inj, "payments", counted(&calls)); err != nil {
		t.Fatalf("after DeleteRule: %v", err)
	}
	if len(inj.Rules()) != 0 {
		t.Fatalf("Rules = %v after deleting all", inj.Rules())
	}
}

// Rates hold statistically, and a seed repeats the same faults exactly.
func TestRates(t *testing.T) {
	const n = 20000
	rule := chaos.Rule{ErrorRate: 0.1, ResultRate: 0.25, Result: -1, LatencyRate: 0.05, Latency: time.Nanosecond}
	run := func(seed uint64) (chaos.Stats, string) {
		inj := mustNew(t, chaos.Config{Enabled: true, Rand: chaos.SeededRand(seed), Rules: map[string]chaos.Rule{"k": rule}})
		var trace strings.Builder
		for range n {
			f := inj.Decide("k")
			switch {
			case f.Err != nil:
				trace.WriteByte('e')
			case f.Replace:
				trace.WriteByte('r')
			default:
				trace.WriteByte('.')
			}
			if f.Latency > 0 {
				trace.WriteByte('l')
			}
		}
		return inj.Snapshot(), trace.String()
	}
	s1, trace1 := run(1)
	s1b, trace1b := run(1)
	s2, trace2 := run(2)
	if s1 != s1b || trace1 != trace1b {
		t.Fatal("the same seed gave different faults")
	}
	if trace1 == trace2 {
		t.Fatal("different seeds gave the same faults")
	}
	for _, s := range []chaos.Stats{s1, s2} {
		if s.Calls != n {
			t.Fatalf("Calls = %d, want %d", s.Calls, n)
		}
		for _, c := range []struct {
			name string
			got  uint64
			p    float64
		}{{"errors", s.Errors, rule.ErrorRate}, {"results", s.Results, rule.ResultRate}, {"latencies", s.Latencies, rule.LatencyRate}} {
			mean := n * c.p
			sigma := math.Sqrt(n * c.p * (1 - c.p))
			if math.Abs(float64(c.got)-mean) > 5*sigma {
				t.Errorf("%s = %d, want %v ± %.0f (5 sigma)", c.name, c.got, mean, 5*sigma)
			}
		}
	}
	// The exact counts for seed 1: a change here means the draws changed,
	// and with them every seeded game-day script.
	if want := (chaos.Stats{Calls: n, Errors: 1996, Latencies: 972, Results: 5058}); s1 != want {
		t.Errorf("seed 1: %+v, want %+v", s1, want)
	}
}

// Rates of 0 and 1 are never and always.
func TestRateBounds(t *testing.T) {
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
		"always": {ErrorRate: 1, LatencyRate: 1, Latency: time.Nanosecond},
		"never":  {ErrorRate: 0, ResultRate: 0, LatencyRate: 0},
		"result": {ResultRate: 1, Result: 7},
	}})
	for range 1000 {
		if f := inj.Decide("always"); f.Err != chaos.ErrInjected || f.Latency != time.Nanosecond || f.Status != 503 {
			t.Fatalf("always: %+v", f)
		}
		if f := inj.Decide("never"); f != (chaos.Fault{}) {
			t.Fatalf("never: %+v", f)
		}
		if f := inj.Decide("result"); !f.Replace || f.Result != 7 || f.Err != nil {
			t.Fatalf("result: %+v", f)
		}
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		rule chaos.Rule
		want string
	}{
		{chaos.Rule{ErrorRate: 1.5}, `chaos: Config.Rules["k"].ErrorRate must be between 0 and 1, got 1.5`},
		{chaos.Rule{LatencyRate: -0.1, Latency: 1}, `chaos: Config.Rules["k"].LatencyRate must be between 0 and 1, got -0.1`},
		{chaos.Rule{ResultRate: math.NaN()}, `chaos: Config.Rules["k"].ResultRate must be between 0 and 1, got NaN`},
		{chaos.Rule{ErrorRate: 0.6, ResultRate: 0.5, Result: 1}, `chaos: Config.Rules["k"].ErrorRate + ResultRate must not exceed 1, got 0.6 + 0.5`},
		{chaos.Rule{LatencyRate: 0.5}, `chaos: Config.Rules["k"].Latency must be > 0 when LatencyRate is > 0 (and never negative), got 0s`},
		{chaos.Rule{Latency: -time.Second}, `chaos: Config.Rules["k"].Latency must be > 0 when LatencyRate is > 0 (and never negative), got -1s`},
		{chaos.Rule{ResultRate: 0.5}, `chaos: Config.Rules["k"].Result must not be nil when ResultRate is > 0`},
		{chaos.Rule{ErrorRate: 1, Status: 42}, `chaos: Config.Rules["k"].Status must be 0 (503) or a status code from 100 to 599, got 42`},
	} {
		_, err := chaos.New(chaos.Config{Rules: map[string]chaos.Rule{"k": tc.rule}})
		if err == nil || err.Error() != tc.want {
			t.Errorf("New = %v\nwant %s", err, tc.want)
		}
	}
	inj := mustNew(t, chaos.Config{})
	err := inj.SetRule("db", chaos.Rule{ErrorRate: 2})
	if want := `chaos: Rule (key "db").ErrorRate must be between 0 and 1, got 2`; err == nil || err.Error() != want {
		t.Errorf("SetRule = %v, want %s", err, want)
	}
	if _, ok := inj.Rule("db"); ok {
		t.Error("an invalid rule was set")
	}
}

// Rules are a copy: changing the map passed in or returned changes nothing.
func TestRulesAreCopied(t *testing.T) {
	rules := map[string]chaos.Rule{"k": {ErrorRate: 1}}
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: rules})
	rules["k"] = chaos.Rule{}
	inj.Rules()["k"] = chaos.Rule{}
	if r, ok := inj.Rule("k"); !ok || r.ErrorRate != 1 {
		t.Fatalf("Rule = %+v, %v", r, ok)
	}
}

// Rules and the switch change while calls run (for -race).
func TestRunTimeChanges(t *testing.T) {
	inj := mustNew(t, chaos.Config{Rules: map[string]chaos.Rule{"k": {ErrorRate: 0.5}}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				chaos.Do(context.Background(), inj, "k", func(context.Context) (int, error) { return 1, nil })
			}
		})
	}
	for i := range 200 {
		if i%2 == 0 {
			inj.Enable()
		} else {
			inj.Disable()
		}
		if err := inj.SetRule(fmt.Sprint("k", i%3), chaos.Rule{ErrorRate: float64(i%10) / 10}); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	// After Disable returns, nothing is injected.
	inj.Disable()
	inj.SetRule("k", chaos.Rule{ErrorRate: 1})
	before := inj.Snapshot()
	for range 100 {
		if _, err := chaos.Do(context.Background(), inj, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatalf("disabled: %v", err)
		}
	}
	if inj.Snapshot() != before {
		t.Fatal("counters moved while disabled")
	}
}

func TestEvents(t *testing.T) {
	rec := &recorder{}
	inj := mustNew(t, chaos.Config{Name: "gameday", Enabled: true, Listener: rec, Rules: map[string]chaos.Rule{
		"slow-fail": {LatencyRate: 1, Latency: time.Nanosecond, ErrorRate: 1, Err: errBoom},
		"result":    {ResultRate: 1, Result: "x"},
	}})
	inj.Decide("slow-fail")
	inj.Decide("result")
	inj.Decide("none")
	ev := rec.all()
	if len(ev) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(ev), ev)
	}
	want := []struct {
		key, reason string
		delay       time.Duration
		err         error
	}{{"slow-fail", "latency", time.Nanosecond, nil}, {"slow-fail", "error", 0, errBoom}, {"result", "result", 0, nil}}
	for i, w := range want {
		e := ev[i]
		if e.Kind != watertight.EventFaultInjected || e.Source != "chaos" || e.Name != "gameday" ||
			e.Key != w.key || e.Reason != w.reason || e.Code != w.reason || e.Delay != w.delay || e.Err != w.err || e.Time.IsZero() {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
}

// Do replaces results of the right type, and says so when the type is
// wrong.
func TestDoResult(t *testing.T) {
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
		"int":    {ResultRate: 1, Result: 42},
		"string": {ResultRate: 1, Result: "oops"},
	}})
	var calls atomic.Int64
	if v, err := chaos.Do(context.Background(), inj, "int", counted(&calls)); v != 42 || err != nil {
		t.Fatalf("Do = %v, %v; want the replacement 42", v, err)
	}
	_, err := chaos.Do(context.Background(), inj, "string", counted(&calls))
	if want := `chaos: the Rule.Result for key "string" is a string, not the int the call returns`; err == nil || err.Error() != want {
		t.Fatalf("wrong type: %v", err)
	}
	if calls.Load() != 0 {
		t.Fatal("fn ran although its result was replaced")
	}
}

// Injected latency waits on the virtual clock and honours the context.
func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
			"slow": {LatencyRate: 1, Latency: 2 * time.Second},
		}})
		var calls atomic.Int64
		start := time.Now()
		if v, err := chaos.Do(context.Background(), inj, "slow", counted(&calls)); v != 1 || err != nil {
			t.Fatalf("Do = %v, %v", v, err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("took %v, want exactly the 2s injected", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := chaos.Do(ctx, inj, "slow", counted(&calls)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's deadline", err)
		}
		if d := time.Since(start); d != 500*time.Millisecond {
			t.Fatalf("took %v, want the 500ms of the deadline", d)
		}
		if calls.Load() != 1 {
			t.Fatalf("fn ran %d times, want once (not after the deadline cut the wait)", calls.Load())
		}
	})
}

// The Policy injects errors and latency into a pipeline; the protections
// outside it see them.
func TestPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
			"fail":   {ErrorRate: 1, Err: errBoom},
			"slow":   {LatencyRate: 1, Latency: time.Second},
			"result": {ResultRate: 1, Result: 99},
		}})
		var seen []error
		outer := &observer{exit: func(err error) { seen = append(seen, err) }}
		var calls atomic.Int64
		do := func(key string) (int, time.Duration, error) {
			start := time.Now()
			v, err := watertight.Do(context.Background(), watertight.MustNew(outer, inj.Policy(key)), counted(&calls))
			return v, time.Since(start), err
		}
		if _, _, err := do("fail"); err != errBoom {
			t.Fatalf("fail: %v", err)
		}
		if len(seen) != 1 || seen[0] != errBoom {
			t.Fatalf("outer policy saw %v, want errBoom", seen)
		}
		if v, d, err := do("slow"); v != 1 || err != nil || d != time.Second {
			t.Fatalf("slow: %v, %v after %v", v, err, d)
		}
		// A policy cannot replace results: the call runs, nothing counted.
		before := inj.Snapshot().Results
		if v, _, err := do("result"); v != 1 || err != nil {
			t.Fatalf("result through a policy: %v, %v; want the call to run", v, err)
		}
		if inj.Snapshot().Results != before {
			t.Fatal("a result the policy could not inject was counted")
		}
		if calls.Load() != 2 {
			t.Fatalf("fn ran %d times, want 2", calls.Load())
		}
		// A deadline during the injected latency ends the call.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := watertight.Do(ctx, watertight.MustNew(inj.Policy("slow")), counted(&calls)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow under a deadline: %v", err)
		}
	})
}

// observer is a policy that records the errors it exits with.
type observer struct{ exit func(error) }

func (o *observer) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{}, nil
}

func (o *observer) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	o.exit(err)
	return err
}

// Disabled, the integrations allocate nothing.
func TestDisabledAllocatesNothing(t *testing.T) {
	inj := mustNew(t, chaos.Config{Rules: map[string]chaos.Rule{"k": {ErrorRate: 1}}})
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	p := watertight.MustNew(inj.Policy("k"))
	if n := testing.AllocsPerRun(100, func() { chaos.Do(ctx, inj, "k", fn) }); n != 0 {
		t.Errorf("Do: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { watertight.Do(ctx, p, fn) }); n != 0 {
		t.Errorf("Policy: %v allocations", n)
	}
}

func TestDefaultConfig(t *testing.T) {
	inj := mustNew(t, chaos.DefaultConfig())
	if inj.Enabled() || len(inj.Rules()) != 0 {
		t.Fatal("DefaultConfig is not off and empty")
	}
}
