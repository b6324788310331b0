package watertightgrpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// throttledConfig is a grpc-go service config with a retryPolicy for every
// method (3 attempts, UNAVAILABLE, microsecond waits) and retryThrottling.
func throttledConfig(throttling string) string {
	return `{
		"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.000001s",
			"maxBackoff": "0.000001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": ` + throttling + `}`
}

func TestParseRetryThrottling(t *testing.T) {
	for _, c := range []struct {
		js         string
		max, ratio float64
	}{
		{`{"maxTokens": 10, "tokenRatio": 0.1}`, 10, 0.1},
		{`{"maxTokens": 1000, "tokenRatio": 1}`, 1000, 1},
		{`{"maxTokens": 4, "tokenRatio": 0.1239}`, 4, 0.123}, // cut, not rounded
		{`{"maxTokens": 4, "tokenRatio": 0.29}`, 4, 0.29},
		{`{"maxTokens": 2.5005, "tokenRatio": 1e-3}`, 2.5, 0.001},
		{`{"maxTokens": 0.001, "tokenRatio": 5}`, 0.001, 0.001}, // a ratio above the max acts as the max
		{`{"maxTokens": 4, "tokenRatio": 16E-1}`, 4, 1.6},
	} {
		rt, err := watertightgrpc.ParseRetryThrottling([]byte(throttledConfig(c.js)))
		if err != nil {
			t.Fatalf("%s: %v", c.js, err)
		}
		if cfg := rt.Config(); cfg.MaxTokens != c.max || cfg.TokenRatio != c.ratio {
			t.Errorf("%s: MaxTokens %v, TokenRatio %v; want %v, %v", c.js, cfg.MaxTokens, cfg.TokenRatio, c.max, c.ratio)
		}
		if rt.Tokens() != c.max {
			t.Errorf("%s: starts with %v tokens, want %v", c.js, rt.Tokens(), c.max)
		}
	}
	for _, js := range []string{`{}`, `{"methodConfig": []}`, `{"retryThrottling": null}`} {
		rt, err := watertightgrpc.ParseRetryThrottling([]byte(js))
		if rt != nil || err != nil {
			t.Errorf("%s: got %v, %v; want nil, nil (no throttling)", js, rt, err)
		}
	}
	for _, c := range []struct{ js, field string }{
		{`{"tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 0, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 1001, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 1000.001, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": -5, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 0.0009, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": "10", "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 1e999999, "tokenRatio": 0.1}`, ".maxTokens"},
		{`{"maxTokens": 10}`, ".tokenRatio"},
		{`{"maxTokens": 10, "tokenRatio": 0}`, ".tokenRatio"},
		{`{"maxTokens": 10, "tokenRatio": -0.1}`, ".tokenRatio"},
		{`{"maxTokens": 10, "tokenRatio": 0.0009}`, ".tokenRatio"},
		{`{"maxTokens": 10, "tokenRatio": true}`, ".tokenRatio"},
		{`[]`, ""},
		{`3`, ""},
	} {
		_, err := watertightgrpc.ParseRetryThrottling([]byte(throttledConfig(c.js)))
		if err == nil || !strings.Contains(err.Error(), "retryThrottling"+c.field+":") {
			t.Errorf("%s: err = %v; want one naming retryThrottling%s", c.js, err, c.field)
		}
	}
	if _, err := watertightgrpc.ParseRetryThrottling([]byte(`nope`)); err == nil {
		t.Error("not JSON: no error")
	}
}

// A server on 127.0.0.1 that answers UNAVAILABLE, behind a client whose
// service config has retryThrottling {maxTokens 4, tokenRatio 1}: the
// throttle starts at 4, retries stop at 2 and below, as in grpc-go.
func TestRetryThrottlingUnavailable(t *testing.T) {
	js := throttledConfig(`{"maxTokens": 4, "tokenRatio": 1}`)
	mcs, err := watertightgrpc.ParseServiceConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := watertightgrpc.ParseRetryThrottling([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failing, seen := true, 0
	e := clientEnv(t, "tcp", &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		seen++
		if failing {
			return "", fail(ctx, codes.Unavailable, "")
		}
		return "ok", nil
	}}, watertightgrpc.ClientConfig{Methods: mcs, RetryThrottle: rt})
	setFailing := func(f bool) { mu.Lock(); failing = f; mu.Unlock() }
	attempts := func() int { mu.Lock(); defer mu.Unlock(); n := seen; seen = 0; return n }

	steps := []struct {
		failing  bool
		attempts int     // the server sees
		tokens   float64 // after the call
	}{
		{true, 2, 2},  // 4 → 3 (retry) → 2 (at half: no retry)
		{true, 1, 1},  // 2 → 1: no retry
		{true, 1, 0},  // 1 → 0
		{true, 1, 0},  // floored at 0
		{false, 1, 1}, // a success gives 1 back
		{false, 1, 2}, //
		{true, 1, 1},  // 2 → 1: still no retry
		{false, 1, 2}, //
		{false, 1, 3}, //
		{false, 1, 4}, //
		{false, 1, 4}, // capped
		{true, 2, 2},  // full again: 4 → 3 → 2, one retry
	}
	for i, s := range steps {
		setFailing(s.failing)
		_, err := e.call(bounded(t), methodCall, "x")
		if s.failing {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("step %d: err = %v; want UNAVAILABLE", i, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: err = %v", i, err)
		}
		if n := attempts(); n != s.attempts {
			t.Errorf("step %d: server saw %d attempts, want %d", i, n, s.attempts)
		}
		if got := rt.Tokens(); got != s.tokens {
			t.Errorf("step %d: %v tokens after the call, want %v", i, got, s.tokens)
		}
	}
}

// Without RetryThrottle the same server gets every attempt: the throttle,
// not the policy, is what stopped the retries above.
func TestRetryThrottlingOff(t *testing.T) {
	mcs, err := watertightgrpc.ParseServiceConfig([]byte(throttledConfig(`{"maxTokens": 4, "tokenRatio": 1}`)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := 0
	e := clientEnv(t, "tcp", &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		mu.Lock()
		seen++
		mu.Unlock()
		return "", fail(ctx, codes.Unavailable, "")
	}}, watertightgrpc.ClientConfig{Methods: mcs})
	for range 4 {
		if _, err := e.call(bounded(t), methodCall, "x"); !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("err = %v; want exhausted", err)
		}
	}
	if seen != 4*3 {
		t.Errorf("server saw %d attempts, want 12", seen)
	}
}

// Codes the policy does not retry cost no token; a pushback that says not
// to retry costs one, as in grpc-go.
func TestRetryThrottlingCounts(t *testing.T) {
	rt, err := budget.NewRetryThrottle(budget.RetryThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	var code codes.Code
	var pushback string
	var mu sync.Mutex
	e := clientEnv(t, "tcp", &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return "", fail(ctx, code, pushback)
	}}, watertightgrpc.ClientConfig{Retry: retryTimes(2), Idempotent: []string{methodCall}, RetryThrottle: rt})
	for _, c := range []struct {
		code     codes.Code
		pushback string
		tokens   float64
	}{
		{codes.InvalidArgument, "", 10}, // not retryable: not counted
		{codes.Unavailable, "-1", 9},    // overloaded: counted, not retried
		{codes.Unavailable, "", 7},      // two retryable failures
	} {
		mu.Lock()
		code, pushback = c.code, c.pushback
		mu.Unlock()
		if _, err := e.call(bounded(t), methodCall, "x"); status.Code(err) != c.code {
			t.Fatalf("err = %v; want %v", err, c.code)
		}
		if got := rt.Tokens(); got != c.tokens {
			t.Errorf("%v (pushback %q): %v tokens, want %v", c.code, c.pushback, got, c.tokens)
		}
	}
}

func FuzzParseRetryThrottling(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"retryThrottling": null}`, `{"retryThrottling": 3}`,
		`{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`,
		`{"retryThrottling": {"maxTokens": 1000, "tokenRatio": 0.0001}}`,
		`{"retryThrottling": {"maxTokens": 1e3, "tokenRatio": 1e-3}}`,
		`{"retryThrottling": {"maxTokens": 1e-999999999, "tokenRatio": 1e999999999}}`,
		`{"retryThrottling": {"maxTokens": -0, "tokenRatio": 123456789012345678901234567890}}`,
		`{"retryThrottling": {"maxTokens": "4", "tokenRatio": [1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		rt, err := watertightgrpc.ParseRetryThrottling(js)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "watertightgrpc: service config") {
				t.Fatalf("error without the prefix: %v", err)
			}
			return
		}
		if rt == nil {
			return
		}
		c := rt.Config()
		if !(c.MaxTokens > 0 && c.MaxTokens <= 1000 && c.TokenRatio > 0 && c.TokenRatio <= c.MaxTokens) || rt.Tokens() != c.MaxTokens {
			t.Fatalf("accepted %q as %+v, %v tokens", js, c, rt.Tokens())
		}
	})
}
