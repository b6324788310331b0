package budget_test

// Tests for the budget rows of docs/migrating.md: each runs one case that
// the peer's documentation describes, quoted with its address, through the
// mapped budget type. Envoy's retry_budget is budget.Concurrency; gRPC's
// retryThrottling (gRFC A6) is budget.RetryThrottle. Other rows are proved by
// the tests named in the page (TestConcurrencyLimit, TestRetryThrottleGRFC,
// TestRetryThrottleHalfMax, TestRetryThrottleFixedPoint, and
// TestParseRetryThrottling in contrib/watertightgrpc).
//
// Read at: envoyproxy/envoy api/envoy/config/cluster/v3/circuit_breaker.proto
// (01c2c1fa), grpc/proposal A6-client-retries.md (0070717f).
//
// Run: go test -race -run Migrat ./budget/

import (
	"testing"

	"github.com/watertight-go/watertight/budget"
)

const (
	envoyProto = "https://github.com/envoyproxy/envoy/blob/01c2c1fadbc61d572c7e02568c98ff001c0bfe8f/api/envoy/config/cluster/v3/circuit_breaker.proto"
	grfcA6     = "https://github.com/grpc/proposal/blob/0070717fd63d2aea8c3dcd608e989507c3fdc373/A6-client-retries.md#throttling-retry-attempts-and-hedged-rpcs"
)

// "if there are 100 active requests and the budget_percent is set to 25,
// there may be 25 active retries." (envoyProto, RetryBudget.budget_percent)
// — Percent: 25, each request between Enter and Leave.
func TestMigratingEnvoyBudgetPercent(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 25})
	for range 100 {
		c.Enter()
	}
	if got := acquireAll(c); got != 25 {
		t.Errorf("100 active requests at 25%%: %d active retries, want 25 (%s)", got, envoyProto)
	}
}

// budget_percent: "This parameter is optional. Defaults to 20%."
// min_retry_concurrency: "The limit on the number of active retries may
// never go below this number. ... Defaults to 3." (envoyProto) — the zero
// ConcurrencyConfig.
func TestMigratingEnvoyRetryBudgetDefaults(t *testing.T) {
	for _, tc := range []struct{ active, want int }{
		{0, 3},    // never below min_retry_concurrency
		{10, 3},   // 20% of 10 is 2: the floor holds
		{100, 20}, // 20%
		{101, 20}, // 20.2, rounded down (Envoy's uint64 cast)
	} {
		c := mustConcurrency(t, budget.ConcurrencyConfig{})
		for range tc.active {
			c.Enter()
		}
		if got := acquireAll(c); got != tc.want {
			t.Errorf("defaults, %d active: %d retries, want %d (%s)", tc.active, got, tc.want, envoyProto)
		}
	}
}

// min_retry_concurrency: 0 is a real zero in Envoy (a UInt32Value that is
// set), no floor: MinConcurrency: -1, since 0 means the default 3 here.
func TestMigratingEnvoyMinRetryConcurrencyZero(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: 20, MinConcurrency: -1})
	for range 4 {
		c.Enter()
	}
	if got := acquireAll(c); got != 0 {
		t.Errorf("min_retry_concurrency 0, 4 active: %d retries, want 0", got)
	}
	c.Enter() // 5 active: 20% is 1
	if got := acquireAll(c); got != 1 {
		t.Errorf("min_retry_concurrency 0, 5 active: %d retries, want 1", got)
	}
}

// Without a retry_budget Envoy limits retries with max_retries: "The maximum
// number of parallel retries that Envoy will allow to the upstream cluster.
// If not specified, the default is 3." (envoyProto) — Percent: -1,
// MinConcurrency: max_retries, a fixed cap.
func TestMigratingEnvoyMaxRetries(t *testing.T) {
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 3})
	for range 1000 {
		c.Enter()
	}
	if got := acquireAll(c); got != 3 {
		t.Errorf("max_retries 3 with 1000 active: %d retries, want 3 (%s)", got, envoyProto)
	}
	c.Release()
	if !c.TryAcquire() {
		t.Error("a released retry slot was not granted again")
	}
}

// gRFC A6, with its example {"maxTokens": 10, "tokenRatio": 0.1}: "the gRPC
// client maintains a token_count variable which is initially set to
// maxTokens and can take values between 0 and maxTokens", "Every failed RPC
// will decrement the token_count by 1. Every successful RPC will increment
// the token_count by tokenRatio." and "If token_count is less than or equal
// to the threshold, defined to be (maxTokens / 2), then RPCs will not be
// retried until token_count rises over the threshold." (grfcA6) —
// RetryThrottleConfig{MaxTokens: 10, TokenRatio: 0.1}, Failed after each
// failure worth retrying (its answer: may it be retried?), Success after
// each success.
func TestMigratingGRFCA6Example(t *testing.T) {
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 10, TokenRatio: 0.1})
	if rt.Tokens() != 10 {
		t.Fatalf("starts with %v tokens, want maxTokens 10 (%s)", rt.Tokens(), grfcA6)
	}
	rt.Success()
	if rt.Tokens() != 10 {
		t.Fatalf("a success on a full count: %v tokens, want 10 (at most maxTokens)", rt.Tokens())
	}
	for i := range 4 { // 9 8 7 6: over the threshold
		if !rt.Failed() {
			t.Fatalf("failure %d: not retried at %v tokens, over the threshold 5", i+1, rt.Tokens())
		}
	}
	if rt.Failed() || rt.Tokens() != 5 { // 5 ≤ 5
		t.Fatalf("failure 5: retried, or %v tokens; want no retry at 5 (%s)", rt.Tokens(), grfcA6)
	}
	if rt.Allow() {
		t.Fatal("at the threshold: Allow, want no retry until the count rises over it")
	}
	rt.Success() // 5.1: over the threshold
	if !rt.Allow() || rt.Tokens() != 5.1 {
		t.Fatalf("one success: Allow %v at %v tokens, want true at 5.1", rt.Allow(), rt.Tokens())
	}
	if rt.Failed() || rt.Tokens() != 4.1 { // 4.1 ≤ 5
		t.Fatalf("a failure at 5.1: retried, or %v tokens; want no retry at 4.1", rt.Tokens())
	}
	for range 100 {
		rt.Failed()
	}
	if rt.Tokens() != 0 {
		t.Errorf("after many failures: %v tokens, want 0 (never below)", rt.Tokens())
	}
}

// "Throttling also applies to hedged RPCs. The first outgoing RPC will
// always be sent, but subsequent hedged RPCs will only be sent if
// token_count is greater than the threshold." (grfcA6) — Allow, which
// records nothing, before each hedge.
func TestMigratingGRFCA6Hedges(t *testing.T) {
	rt := newRetryThrottle(t, budget.RetryThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	rt.Failed() // 3 > 2
	if !rt.Allow() || rt.Tokens() != 3 {
		t.Fatalf("at 3 of 4: Allow %v (tokens %v), want a hedge sent and nothing taken", rt.Allow(), rt.Tokens())
	}
	rt.Failed() // 2: at the threshold
	if rt.Allow() {
		t.Errorf("at 2 of 4: a hedge allowed at the threshold (%s)", grfcA6)
	}
	rt.Success() // 3: over it again
	if !rt.Allow() {
		t.Error("at 3 of 4: no hedge over the threshold")
	}
}
