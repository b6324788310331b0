package budget_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
)

func newRetryThrottle(t testing.TB, cfg budget.RetryThrottleConfig) *budget.RetryThrottle {
	t.Helper()
	rt, err := budget.NewRetryThrottle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestRetryThrottleGRFC follows gRFC A6's arithmetic step by step, with the
// numbers of gRPC core's own test (retry_throttle_test.cc): 4 tokens, so
// retries stop at 2 and below; each success adds 1.6.
func TestRetryThrottleGRFC(t *testing.T) {
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 4, TokenRatio: 1.6})
	steps := []struct {
		op     string // "fail" or "ok"
		allow  bool   // Failed's answer, for "fail"
		tokens float64
	}{
		{"fail", true, 3},      // above the threshold
		{"ok", false, 4},       // capped at the max
		{"fail", true, 3},      //
		{"fail", false, 2},     // at the threshold: no retry
		{"ok", false, 3.6},     //
		{"fail", true, 2.6},    // above again
		{"fail", false, 1.6},   //
		{"fail", false, 0.6},   //
		{"fail", false, 0},     // floored at zero, not -0.4
		{"ok", false, 1.6},     //
		{"ok", false, 3.2},     //
		{"fail", true, 2.2},    //
		{"fail", false, 1.2},   //
		{"ok", false, 2.8},     //
		{"ok", false, 4},       // 4.4 capped
		{"fail", true, 3},      //
		{"fail", false, 2},     //
		{"fail", false, 1},     //
		{"fail", false, 0},     //
		{"fail", false, 0},     // still zero
		{"ok", false, 1.6},     //
		{"ok", false, 3.2},     //
		{"ok", false, 4},       //
		{"fail", true, 3},      //
		{"fail", false, 2.000}, //
	}
	for i, s := range steps {
		switch s.op {
		case "fail":
			if got := rt.Failed(); got != s.allow {
				t.Fatalf("step %d: Failed() = %v, want %v (tokens before %v)", i, got, s.allow, rt.Tokens())
			}
		case "ok":
			rt.Success()
		}
		if got := rt.Tokens(); got != s.tokens {
			t.Fatalf("step %d (%s): Tokens() = %v, want %v", i, s.op, got, s.tokens)
		}
		if got, want := rt.Allow(), s.tokens > 2; got != want {
			t.Fatalf("step %d: Allow() = %v at %v tokens, want %v", i, got, s.tokens, want)
		}
	}
}

// TestRetryThrottleHalfMax checks "at or below half the max means no retry"
// for odd and fractional maxima, where half is not a whole number of tokens.
func TestRetryThrottleHalfMax(t *testing.T) {
	for _, tc := range []struct {
		max     float64
		retries int // failures after which a retry is still allowed
	}{
		{1, 0},      // 1 → 0: 0 ≤ 0.5
		{2, 0},      // 2 → 1: 1 ≤ 1
		{3, 1},      // 3 → 2 (> 1.5) → 1
		{10, 4},     // 9 8 7 6 allowed, 5 not
		{11, 5},     // 10 9 8 7 6 allowed, 5 ≤ 5.5 not
		{4.5, 2},    // 3.5 2.5 allowed (> 2.25), 1.5 not
		{1000, 499}, // gRPC's largest
	} {
		rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: tc.max, TokenRatio: 0.001})
		n := 0
		for rt.Failed() {
			n++
			if n > 2000 {
				t.Fatalf("max %v: Failed never refused", tc.max)
			}
		}
		if n != tc.retries {
			t.Errorf("max %v: %d failures allowed a retry, want %d", tc.max, n, tc.retries)
		}
	}
}

// TestRetryThrottleFixedPoint checks that both numbers are kept to three
// decimals, digits beyond dropped (gRPC keeps milli-tokens), and that
// decimals whose float64 lies just below them (0.29, 0.57) keep their last
// thousandth.
func TestRetryThrottleFixedPoint(t *testing.T) {
	for _, tc := range []struct {
		ratio, want float64
	}{
		{0.1, 0.1}, {0.1239, 0.123}, {0.0019, 0.001}, {0.29, 0.29}, {0.57, 0.57}, {1.6, 1.6}, {0.9999, 0.999},
	} {
		rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 5, TokenRatio: tc.ratio})
		if got := rt.Config().TokenRatio; got != tc.want {
			t.Errorf("TokenRatio %v: Config().TokenRatio = %v, want %v", tc.ratio, got, tc.want)
		}
		for rt.Failed() {
		}
		// Drain to zero, then one success adds exactly the cut ratio.
		for rt.Tokens() > 0 {
			rt.Failed()
		}
		rt.Success()
		if got := rt.Tokens(); got != tc.want {
			t.Errorf("TokenRatio %v: one success from zero gives %v tokens, want %v", tc.ratio, got, tc.want)
		}
	}
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 2.5005})
	if got := rt.Config().MaxTokens; got != 2.5 {
		t.Errorf("MaxTokens 2.5005: Config().MaxTokens = %v, want 2.5", got)
	}
	if got := rt.Tokens(); got != 2.5 {
		t.Errorf("a new throttle holds %v tokens, want MaxTokens 2.5", got)
	}
	// 1000 successes of 0.001 refill exactly one token, with no float drift.
	rt = newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 10, TokenRatio: 0.001})
	rt.Failed()
	for range 1000 {
		rt.Success()
	}
	if got := rt.Tokens(); got != 10 {
		t.Errorf("after a failure and 1000 successes of 0.001: %v tokens, want 10", got)
	}
}

func TestRetryThrottleConfig(t *testing.T) {
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{})
	if c := rt.Config(); c.MaxTokens != budget.DefaultRetryThrottleMaxTokens || c.TokenRatio != budget.DefaultRetryThrottleTokenRatio {
		t.Errorf("zero config resolves to %+v, want the defaults", c)
	}
	for _, tc := range []struct {
		cfg   budget.RetryThrottleConfig
		field string
	}{
		{budget.RetryThrottleConfig{MaxTokens: -1}, "MaxTokens"},
		{budget.RetryThrottleConfig{MaxTokens: 1000.5}, "MaxTokens"},
		{budget.RetryThrottleConfig{MaxTokens: 0.0004}, "MaxTokens"},
		{budget.RetryThrottleConfig{TokenRatio: -0.1}, "TokenRatio"},
		{budget.RetryThrottleConfig{TokenRatio: 0.0009}, "TokenRatio"},
	} {
		_, err := budget.NewRetryThrottle(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "RetryThrottleConfig."+tc.field) {
			t.Errorf("NewRetryThrottle(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestRetryThrottleNil(t *testing.T) {
	var rt *budget.RetryThrottle
	rt.Success()
	if !rt.Failed() || !rt.Allow() || rt.Tokens() != 0 || rt.Config() != (budget.RetryThrottleConfig{}) {
		t.Fatal("a nil RetryThrottle must allow every retry")
	}
}

func TestRetryThrottleListener(t *testing.T) {
	var events []watertight.Event
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{Name: "db", MaxTokens: 2, Listener: watertight.ListenerFunc(func(e watertight.Event) {
		events = append(events, e)
	})})
	rt.Failed() // 1 ≤ 1: refused
	rt.Success()
	if len(events) != 1 {
		t.Fatalf("got %d events, want 1", len(events))
	}
	e := events[0]
	if e.Kind != watertight.EventBudgetExhausted || e.Source != "budget" || e.Name != "db" || !errors.Is(e.Err, budget.ErrExhausted) {
		t.Errorf("event %+v", e)
	}
}

// TestRetryThrottleModel checks the throttle against a reference model of
// gRFC A6 in exact milli-token integers, over random sequences of
// successes and failures and random configurations.
func TestRetryThrottleModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxM := rapid.Int64Range(1, 1_000_000).Draw(t, "maxMilli")
		ratioM := rapid.Int64Range(1, 5000).Draw(t, "ratioMilli")
		rt, err := budget.NewRetryThrottle(budget.RetryThrottleConfig{MaxTokens: float64(maxM) / 1000, TokenRatio: float64(ratioM) / 1000})
		if err != nil {
			t.Fatal(err)
		}
		tokens := maxM
		ops := rapid.SliceOfN(rapid.Bool(), 1, 300).Draw(t, "failures")
		for i, fail := range ops {
			if fail {
				tokens = max(tokens-1000, 0)
				want := 2*tokens > maxM // more than half the max
				if got := rt.Failed(); got != want {
					t.Fatalf("op %d: Failed() = %v, model %v (tokens %d/%d milli)", i, got, want, tokens, maxM)
				}
			} else {
				tokens = min(tokens+ratioM, maxM)
				rt.Success()
			}
			if got := rt.Tokens(); got != float64(tokens)/1000 {
				t.Fatalf("op %d: Tokens() = %v, model %v", i, got, float64(tokens)/1000)
			}
		}
	})
}

// TestRetryThrottleConcurrent checks, under -race, that concurrent calls
// lose no update: n failures and n successes from many goroutines, starting
// and ending in a range where neither the floor nor the cap is reached,
// leave the count where a serial run would.
func TestRetryThrottleConcurrent(t *testing.T) {
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 1000, TokenRatio: 1})
	for range 500 {
		rt.Failed() // to 500 tokens
	}
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				if g%2 == 0 {
					rt.Failed()
				} else {
					rt.Success()
				}
			}
		})
	}
	wg.Wait()
	if got := rt.Tokens(); got != 500 {
		t.Fatalf("after %d failures and as many successes of 1: %v tokens, want 500", goroutines/2*each, got)
	}
}
