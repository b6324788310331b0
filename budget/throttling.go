package budget

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/watertight-go/watertight"
)

// Defaults used for zero fields of RetryThrottleConfig: the example of gRFC
// A6 (gRPC's retryThrottling has no defaults; both fields are required there).
const (
	DefaultRetryThrottleMaxTokens  = 10.0
	DefaultRetryThrottleTokenRatio = 0.1
)

// MaxRetryThrottleMaxTokens is the largest RetryThrottleConfig.MaxTokens, as
// in gRPC's service config (maxTokens in (0, 1000]).
const MaxRetryThrottleMaxTokens = 1000.0

// RetryThrottleConfig configures a RetryThrottle: the retryThrottling of a
// gRPC service config (gRFC A6). The zero value is valid: every zero field
// takes the default named in its comment. Both numbers are kept in fixed
// point to three decimal places, as gRPC keeps them (milli-tokens): digits
// beyond the third are dropped, so a TokenRatio of 0.1239 is 0.123.
type RetryThrottleConfig struct {
	// Name labels the throttle in events. It may be empty.
	Name string
	// MaxTokens is the most tokens the throttle holds, and where it starts;
	// retries are allowed only while it holds more than half of them. Zero
	// means DefaultRetryThrottleMaxTokens (10). Must be in (0, 1000] once
	// cut to three decimals (at least 0.001); negative is an error.
	MaxTokens float64
	// TokenRatio is what each successful call adds back (a failure takes
	// one whole token). Zero means DefaultRetryThrottleTokenRatio (0.1: ten
	// successes repay one failure). Must be at least 0.001 once cut to three
	// decimals; negative is an error; above MaxTokens, it acts as MaxTokens
	// (one success refills the throttle). There is no way to say a real zero,
	// which gRPC does not allow either: a throttle that never refills would
	// stop retries for good after MaxTokens/2 failures.
	TokenRatio float64
	// Listener, if not nil, receives an EventBudgetExhausted, with Source
	// "budget", Name this Name and Err ErrExhausted, for each failure after
	// which a retry is refused. It is called in the caller's goroutine with
	// no lock held. If nil, no events are built.
	Listener watertight.Listener
}

// milli is the fixed-point form of a non-negative number: thousandths,
// digits beyond the third dropped. The small addend keeps a decimal such as
// 0.29, whose float64 is a hair below, from losing its last thousandth.
func milli(x float64) int64 { return int64(math.Floor(x*1000 + 1e-6)) }

// RetryThrottle is gRPC's retry throttling (gRFC A6, "Throttling Retry
// Attempts and Hedged RPCs"), usable by any client: a token count that starts
// at MaxTokens, loses one token for each failed call (floored at zero) and
// gains TokenRatio for each successful one (capped at MaxTokens); while it
// holds MaxTokens/2 or less, no call is retried. Unlike a Budget it counts
// failures rather than requests: a dependency that fails more than
// TokenRatio/(1+TokenRatio) of the calls drains it, and retries stop until
// successes refill it past half.
//
// Use it in two calls: Success after each call (attempt) that succeeded, and
// Failed after each one that failed in a way that would be retried, which
// takes the token and reports whether the retry may go — in that order, so
// that a refused retry still costs its token, as in gRPC. Calls that fail in
// a way not worth retrying are not reported. Package watertightgrpc does this
// for every attempt of its client interceptor (ClientConfig.RetryThrottle).
//
// A nil *RetryThrottle is valid and disabled: Success does nothing, and
// Failed and Allow always report true. The zero RetryThrottle is not usable:
// use NewRetryThrottle. It is safe for concurrent use.
//
// Cost: the count is one atomic word. Success on a full throttle — every
// call of a healthy dependency — is one atomic load and writes nothing, so
// it does not move the cache line between cores; below the cap it is a
// compare-and-swap, as is Failed. Neither allocates, locks or reads the
// clock.
type RetryThrottle struct {
	tokens atomic.Int64 // milli-tokens in [0, max]
	max    int64        // milli-tokens
	ratio  int64        // milli-tokens per success
	cfg    RetryThrottleConfig
}

// NewRetryThrottle returns a RetryThrottle for cfg, full, or an error naming
// the first invalid field and its rule.
func NewRetryThrottle(cfg RetryThrottleConfig) (*RetryThrottle, error) {
	bad := func(field, rule string, got float64) error {
		return fmt.Errorf("budget: RetryThrottleConfig.%s %s, got %v", field, rule, got)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultRetryThrottleMaxTokens
	}
	if !(cfg.MaxTokens > 0 && cfg.MaxTokens <= MaxRetryThrottleMaxTokens) || milli(cfg.MaxTokens) < 1 {
		return nil, bad("MaxTokens", "must be in [0.001, 1000] (0 means 10)", cfg.MaxTokens)
	}
	if cfg.TokenRatio == 0 {
		cfg.TokenRatio = DefaultRetryThrottleTokenRatio
	}
	if !(cfg.TokenRatio > 0) || math.IsInf(cfg.TokenRatio, 1) || milli(cfg.TokenRatio) < 1 {
		return nil, bad("TokenRatio", "must be a finite number of at least 0.001, three decimals kept (0 means 0.1)", cfg.TokenRatio)
	}
	// A ratio above MaxTokens fills the throttle at one success, as MaxTokens does.
	cfg.TokenRatio = min(cfg.TokenRatio, cfg.MaxTokens)
	t := &RetryThrottle{max: milli(cfg.MaxTokens), ratio: milli(cfg.TokenRatio), cfg: cfg}
	t.tokens.Store(t.max)
	return t, nil
}

// Success records a call that succeeded: it adds TokenRatio, up to
// MaxTokens.
func (t *RetryThrottle) Success() {
	if t == nil {
		return
	}
	for {
		n := t.tokens.Load()
		if n >= t.max {
			return // full: nothing written, the line stays shared
		}
		if t.tokens.CompareAndSwap(n, min(n+t.ratio, t.max)) {
			return
		}
	}
}

// Failed records a call that failed in a way worth retrying: it takes one
// token (the count never goes below zero) and reports whether a retry may
// follow, that is, whether more than MaxTokens/2 remain.
func (t *RetryThrottle) Failed() bool {
	if t == nil {
		return true
	}
	for {
		n := t.tokens.Load()
		m := max(n-1000, 0)
		if t.tokens.CompareAndSwap(n, m) {
			if 2*m > t.max {
				return true
			}
			t.refused()
			return false
		}
	}
}

// refused sends an EventBudgetExhausted, if there is a listener.
func (t *RetryThrottle) refused() {
	if t.cfg.Listener == nil {
		return
	}
	watertight.Emit(t.cfg.Listener, watertight.Event{
		Kind: watertight.EventBudgetExhausted, Source: source, Name: t.cfg.Name, Err: ErrExhausted,
		Reason: "tokens at or below half of MaxTokens", Code: CodeTokensBelowHalf,
	})
}

// Allow reports whether a retry would be allowed now (more than MaxTokens/2
// tokens), without recording anything: for a caller that must decide before
// an attempt has failed, such as a hedge.
func (t *RetryThrottle) Allow() bool {
	return t == nil || 2*t.tokens.Load() > t.max
}

// Tokens returns the tokens held now, to three decimals. A nil throttle
// holds none and returns 0.
func (t *RetryThrottle) Tokens() float64 {
	if t == nil {
		return 0
	}
	return float64(t.tokens.Load()) / 1000
}

// Config returns the configuration, with defaults filled in and both numbers
// cut to three decimals. A nil throttle returns the zero RetryThrottleConfig.
func (t *RetryThrottle) Config() RetryThrottleConfig {
	if t == nil {
		return RetryThrottleConfig{}
	}
	c := t.cfg
	c.MaxTokens = float64(t.max) / 1000
	c.TokenRatio = float64(t.ratio) / 1000
	return c
}
