package watertightconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
)

// File is a valid configuration file: every named instance, resolved — the
// defaults section applied under the instance's own fields, and every field
// left out anywhere filled with its package's default — so that each
// Config is what the package will run with. Build it with Load or Parse.
//
// The maps are keyed by instance name. Each Config's Name is the instance
// name and its function fields (Classify, OnStateChange, Retryable...) are
// nil: set them through Options when building a Registry.
type File struct {
	// Name is the file's name, as given to Load or Parse.
	Name string
	// Breakers are the circuit breakers (section breakers:).
	Breakers map[string]Breaker
	// Bulkheads are the semaphore bulkheads (section bulkheads:).
	Bulkheads map[string]Bulkhead
	// Retries are the retry policies (section retries:).
	Retries map[string]Retry
	// Budgets are the retry budgets (section budgets:).
	Budgets map[string]Budget
	// ConcurrencyBudgets are the concurrent-retry budgets (section
	// concurrency_budgets:).
	ConcurrencyBudgets map[string]ConcurrencyBudget
	// Timeouts are the timeouts (section timeouts:).
	Timeouts map[string]Timeout
	// Hedges are the hedging policies (section hedges:).
	Hedges map[string]Hedge
	// Limiters are the adaptive concurrency limiters (section limiters:).
	Limiters map[string]Limiter
}

// Breaker is a named circuit breaker of a File.
type Breaker struct {
	// Config is the breaker's configuration, defaults filled in.
	Config circuit.Config
	// MaxKeys bounds a keyed registry built from this breaker
	// (Registry.CircuitRegistry: one breaker per host or route); -1 means
	// no bound. Default circuit.DefaultMaxKeys.
	MaxKeys int
	src     source
}

// Bulkhead is a named semaphore bulkhead of a File.
type Bulkhead struct {
	// Config is the bulkhead's configuration, defaults filled in.
	Config bulkhead.Config
	// MaxKeys bounds a keyed registry built from this bulkhead
	// (Registry.BulkheadRegistry); -1 means no bound. Default
	// bulkhead.DefaultMaxKeys.
	MaxKeys int
	src     source
}

// Retry is a named retry policy of a File.
type Retry struct {
	// Config is the policy's configuration, defaults filled in; its Backoff
	// and Budget are nil: the fields below say what they will be.
	Config retry.Config
	// Backoff configures the policy's backoff, defaults filled in.
	Backoff backoff.Config
	// Budget names the File's budget the policy draws its retries from;
	// empty for none. Policies that name the same budget share one Budget.
	Budget string
	// Concurrency names the File's concurrent-retry budget whose slots the
	// policy's retries hold; empty for none. Policies that name the same
	// one share one budget.Concurrency.
	Concurrency string
	src         source
}

// Budget is a named retry budget of a File.
type Budget struct {
	// Config is the budget's configuration, defaults filled in.
	Config budget.Config
	src    source
}

// ConcurrencyBudget is a named concurrent-retry budget of a File (Envoy's
// retry_budget: retries in flight at most a share of the active requests).
type ConcurrencyBudget struct {
	// Config is the budget's configuration, defaults filled in.
	Config budget.ConcurrencyConfig
	src    source
}

// Limiter is a named adaptive concurrency limiter of a File.
type Limiter struct {
	// Config is the limiter's configuration, defaults filled in; its
	// Algorithm is nil: the field below names it.
	Config limit.Config
	// Algorithm names the limiter's algorithm: "watertight" (the
	// default), "aimd", "vegas" or "gradient2", each with its defaults.
	Algorithm string
	// MaxKeys bounds a keyed registry built from this limiter
	// (Registry.LimiterRegistry: one limiter per host or endpoint); -1
	// means no bound. Default limit.DefaultMaxKeys.
	MaxKeys int
	src     source
}

// Timeout is a named timeout of a File.
type Timeout struct {
	// Config is the timeout's configuration, defaults filled in; a negative
	// Timeout means off.
	Config timeout.Config
	src    source
}

// Hedge is a named hedging policy of a File.
type Hedge struct {
	// Config is the policy's configuration, defaults filled in; its
	// Budget, Breaker and Bulkhead are nil: the fields below name them.
	Config hedge.Config
	// Budget names the File's budget that must grant every hedge; empty
	// for none.
	Budget string
	// Breaker names the File's breaker that must be closed for a hedge to
	// be sent; empty for none.
	Breaker string
	// Bulkhead names the File's bulkhead that must have a free permit for
	// a hedge to be sent; empty for none.
	Bulkhead string
	src      source
}

// Keywords of the file format.
var (
	kwOff       = map[string]time.Duration{"off": 0}
	kwTimeout   = map[string]time.Duration{"off": -1}
	kwUnlimited = map[string]time.Duration{"unlimited": -1}
	kwKeys      = map[string]int{"unlimited": -1}
	kwFloor     = map[string]float64{"off": -1}
	kwOffInt    = map[string]int{"off": 0}
)

var windowTypes = []string{"count", "time"}

var queueOrders = []string{bulkhead.OldestFirst.String(), bulkhead.NewestFirst.String()}

var jitters = []string{"full", "none", "equal", "decorrelated", "constant"}

var breakerFields = []field[Breaker]{
	enumField("window_type", windowTypes, func(b *Breaker, i int) { b.Config.WindowType = circuit.WindowType(i) }),
	intField("window_size", 1, maxInt, nil, func(b *Breaker) *int { return &b.Config.WindowSize }),
	durField("window_duration", 1, nil, func(b *Breaker) *time.Duration { return &b.Config.WindowDuration }),
	intField("window_buckets", 1, maxInt, nil, func(b *Breaker) *int { return &b.Config.WindowBuckets }),
	intField("min_calls", 1, maxInt, nil, func(b *Breaker) *int { return &b.Config.MinCalls }),
	offRate(rateField("failure_rate_threshold", 0, 1, true, false, true, func(b *Breaker) *float64 { return &b.Config.FailureRateThreshold }),
		func(b *Breaker) *float64 { return &b.Config.FailureRateThreshold }), // off: circuit's negative
	intField("consecutive_failures", 1, maxInt, kwOffInt, func(b *Breaker) *int { return &b.Config.ConsecutiveFailures }),
	intField("failure_count_threshold", 1, maxInt, kwOffInt, func(b *Breaker) *int { return &b.Config.FailureCountThreshold }),
	durField("slow_call_duration", 1, kwOff, func(b *Breaker) *time.Duration { return &b.Config.SlowCallDuration }),
	rateField("slow_call_rate_threshold", 0, 1, true, false, true, func(b *Breaker) *float64 { return &b.Config.SlowCallRateThreshold }),
	boolField("count_saturation", func(b *Breaker) *bool { return &b.Config.CountSaturation }),
	zeroMeans(durField("open_duration", 0, nil, func(b *Breaker) *time.Duration { return &b.Config.OpenDuration }),
		func(b *Breaker) *time.Duration { return &b.Config.OpenDuration }, -1), // 0 in a file is no wait: circuit's negative
	floatField("open_duration_multiplier", 1, math.MaxFloat64, false, nil, func(b *Breaker) *float64 { return &b.Config.OpenDurationMultiplier }),
	durField("max_open_duration", 1, nil, func(b *Breaker) *time.Duration { return &b.Config.MaxOpenDuration }),
	zeroMeans(rateField("open_jitter", 0, 1, false, true, false, func(b *Breaker) *float64 { return &b.Config.OpenJitter }),
		func(b *Breaker) *float64 { return &b.Config.OpenJitter }, -1), // 0 in a file is no jitter: circuit's -1
	intField("half_open_calls", 1, maxInt, nil, func(b *Breaker) *int { return &b.Config.HalfOpenCalls }),
	intField("half_open_successes", 1, maxInt, kwOffInt, func(b *Breaker) *int { return &b.Config.HalfOpenSuccesses }),
	durField("max_half_open_wait", 1, kwUnlimited, func(b *Breaker) *time.Duration { return &b.Config.MaxHalfOpenWait }),
	intField("max_keys", 1, maxInt, kwKeys, func(b *Breaker) *int { return &b.MaxKeys }),
}

var bulkheadFields = []field[Bulkhead]{
	intField("max_concurrent", 1, bulkhead.MaxConcurrentLimit, nil, func(b *Bulkhead) *int { return &b.Config.MaxConcurrent }),
	durField("max_wait", 0, kwUnlimited, func(b *Bulkhead) *time.Duration { return &b.Config.MaxWait }),
	intField("max_waiters", 1, maxInt, kwKeys, func(b *Bulkhead) *int { return &b.Config.MaxWaiters }),
	enumField("queue_order", queueOrders, func(b *Bulkhead, i int) { b.Config.QueueOrder = bulkhead.QueueOrder(i) }),
	intField("max_keys", 1, maxInt, kwKeys, func(b *Bulkhead) *int { return &b.MaxKeys }),
}

var backoffFields = []field[backoff.Config]{
	enumField("jitter", jitters, func(c *backoff.Config, i int) { c.Jitter = backoff.Jitter(i) }),
	durField("base", 1, nil, func(c *backoff.Config) *time.Duration { return &c.Base }),
	durField("cap", 1, nil, func(c *backoff.Config) *time.Duration { return &c.Cap }),
	floatField("multiplier", 1, math.MaxFloat64, false, nil, func(c *backoff.Config) *float64 { return &c.Multiplier }),
}

var retryFields = []field[Retry]{
	intField("max_attempts", 1, maxInt, nil, func(r *Retry) *int { return &r.Config.MaxAttempts }),
	durField("max_delay", 1, nil, func(r *Retry) *time.Duration { return &r.Config.MaxDelay }),
	durField("min_attempt_time", 0, nil, func(r *Retry) *time.Duration { return &r.Config.MinAttemptTime }),
	boolField("idempotent", func(r *Retry) *bool { return &r.Config.Idempotent }),
	{key: "backoff", sub: func(d *decoder, n *yaml.Node, path string, r *Retry, src *source, fromDefaults bool) bool {
		return decodeFields(d, n, path, "backoff.", backoffFields, &r.Backoff, src, fromDefaults)
	}},
	stringField("budget", func(r *Retry) *string { return &r.Budget }),
	stringField("concurrency", func(r *Retry) *string { return &r.Concurrency }),
}

var concurrencyFields = []field[ConcurrencyBudget]{
	offRate(rateField("percent", 0, 1, true, false, true, func(b *ConcurrencyBudget) *float64 { return &b.Config.Percent }),
		func(b *ConcurrencyBudget) *float64 { return &b.Config.Percent }), // off: min_concurrency alone is the cap
	zeroMeans(intField("min_concurrency", 0, budget.MaxMinConcurrency, nil, func(b *ConcurrencyBudget) *int { return &b.Config.MinConcurrency }),
		func(b *ConcurrencyBudget) *int { return &b.Config.MinConcurrency }, -1), // 0 in a file is no floor: the package's negative
}

var budgetFields = []field[Budget]{
	rateField("ratio", budget.MinRatio, 1, false, false, false, func(b *Budget) *float64 { return &b.Config.Ratio }),
	intField("max_tokens", 1, budget.MaxMaxTokens, nil, func(b *Budget) *int { return &b.Config.MaxTokens }),
	floatField("min_per_second", 0, budget.MaxMinPerSecond, true, kwFloor, func(b *Budget) *float64 { return &b.Config.MinPerSecond }),
}

var hedgeFields = []field[Hedge]{
	durField("delay", 1, nil, func(h *Hedge) *time.Duration { return &h.Config.Delay }),
	percentileField("percentile", func(h *Hedge) *float64 { return &h.Config.Percentile }),
	durField("min_delay", 0, nil, func(h *Hedge) *time.Duration { return &h.Config.MinDelay }),
	intField("min_samples", 1, maxInt, nil, func(h *Hedge) *int { return &h.Config.MinSamples }),
	durField("window", 1, nil, func(h *Hedge) *time.Duration { return &h.Config.Window }),
	intField("max_hedges", 1, hedge.MaxMaxHedges, kwHedges, func(h *Hedge) *int { return &h.Config.MaxHedges }),
	boolField("idempotent", func(h *Hedge) *bool { return &h.Config.Idempotent }),
	durField("overload_cooldown", 1, kwTimeout, func(h *Hedge) *time.Duration { return &h.Config.OverloadCooldown }),
	stringField("budget", func(h *Hedge) *string { return &h.Budget }),
	stringField("breaker", func(h *Hedge) *string { return &h.Breaker }),
	stringField("bulkhead", func(h *Hedge) *string { return &h.Bulkhead }),
}

var kwHedges = map[string]int{"off": -1}

// algorithms are the limiter algorithms a file can name, with their
// defaults.
var algorithms = map[string]func() limit.Algorithm{
	"watertight": func() limit.Algorithm { return limit.NewDefault(limit.DefaultOptions{}) },
	"aimd":       func() limit.Algorithm { return limit.NewAIMD(limit.AIMDOptions{}) },
	"vegas":      func() limit.Algorithm { return limit.NewVegas(limit.VegasOptions{}) },
	"gradient2":  func() limit.Algorithm { return limit.NewGradient2(limit.Gradient2Options{}) },
}

// algorithmNames lists the algorithms, the default first.
func algorithmNames() []string {
	names := []string{"watertight"}
	for _, n := range sortedKeys(algorithms) {
		if n != "watertight" {
			names = append(names, n)
		}
	}
	return names
}

var limiterFields = []field[Limiter]{
	{key: "algorithm", set: func(n *yaml.Node, l *Limiter) string {
		names := algorithmNames()
		s := deref(n)
		if s == nil || s.Kind != yaml.ScalarNode || algorithms[s.Value] == nil {
			return "must be one of " + strings.Join(names, ", ") + ", got " + describe(n)
		}
		l.Algorithm = s.Value
		return ""
	}},
	intField("initial_limit", 1, bulkhead.MaxConcurrentLimit, nil, func(l *Limiter) *int { return &l.Config.InitialLimit }),
	intField("min_limit", 1, bulkhead.MaxConcurrentLimit, nil, func(l *Limiter) *int { return &l.Config.MinLimit }),
	intField("max_limit", 1, bulkhead.MaxConcurrentLimit, nil, func(l *Limiter) *int { return &l.Config.MaxLimit }),
	durField("max_wait", 0, kwUnlimited, func(l *Limiter) *time.Duration { return &l.Config.MaxWait }),
	intField("max_waiters", 1, maxInt, kwKeys, func(l *Limiter) *int { return &l.Config.MaxWaiters }),
	enumField("queue_order", queueOrders, func(l *Limiter, i int) { l.Config.QueueOrder = bulkhead.QueueOrder(i) }),
	intField("window_samples", 1, maxInt, nil, func(l *Limiter) *int { return &l.Config.WindowSamples }),
	durField("min_window", 1, kwTimeout, func(l *Limiter) *time.Duration { return &l.Config.MinWindow }),
	intField("max_keys", 1, maxInt, kwKeys, func(l *Limiter) *int { return &l.MaxKeys }),
}

var limiterKind = kind[Limiter]{
	name:   "limiters",
	fields: limiterFields,
	init: func() Limiter {
		return Limiter{Algorithm: "watertight", MaxKeys: limit.DefaultMaxKeys, Config: limit.Config{
			InitialLimit: limit.DefaultInitialLimit, MinLimit: limit.DefaultMinLimit, MaxLimit: limit.DefaultMaxLimit,
			WindowSamples: limit.DefaultWindowSamples, MinWindow: limit.DefaultMinWindow,
		}}
	},
	finish: func(l *Limiter, name string) { l.Config.Name = name },
	check: func(l *Limiter, src source) []problem {
		var ps []problem
		c := l.Config
		if c.MaxWait == 0 {
			for _, k := range []string{"max_waiters", "queue_order"} {
				ps = appendUnused(ps, src, k, "max_wait", "has no effect with max_wait: 0s (nobody waits)")
			}
		}
		if c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit {
			ps = append(ps, problem{key: "initial_limit", msg: fmt.Sprintf("must be in [min_limit, max_limit] ([%d, %d]), got %d", c.MinLimit, c.MaxLimit, c.InitialLimit)})
		}
		if _, err := limit.New(c); err != nil {
			ps = append(ps, packageProblem(err, "", limiterFields, src))
		}
		return ps
	},
	src: func(l *Limiter) *source { return &l.src },
}

// percentileField reads the hedge percentile: a rate in [0, 1), or off
// (0: a fixed delay).
func percentileField[T any](key string, ptr func(*T) *float64) field[T] {
	rf := rateField(key, 0, 1, false, true, false, ptr)
	return field[T]{key: key, set: func(n *yaml.Node, c *T) string {
		if s := deref(n); s != nil && s.Kind == yaml.ScalarNode && s.Tag == "!!str" && s.Value == "off" {
			*ptr(c) = 0
			return ""
		}
		if msg := rf.set(n, c); msg != "" {
			return strings.Replace(msg, "), got", ") or off, got", 1)
		}
		return ""
	}}
}

var timeoutFields = []field[Timeout]{
	durField("timeout", 1, kwTimeout, func(t *Timeout) *time.Duration { return &t.Config.Timeout }),
	boolField("abandon", func(t *Timeout) *bool { return &t.Config.Abandon }),
}

// problem is a rule broken by a combination of fields, found once each
// field is valid on its own.
type problem struct{ key, msg string }

// kind describes one section of the file.
type kind[T any] struct {
	name   string
	fields []field[T]
	// init returns an instance with every package default filled in,
	// except those computed from other fields (finish fills those).
	init   func() T
	finish func(t *T, name string)
	check  func(t *T, src source) []problem
	// normalize, if not nil, resets the fields that have no effect to
	// their defaults, after check: two instances that differ only there
	// are the same (a reload keeps the object), and Write can leave them
	// out.
	normalize func(t *T)
	src       func(t *T) *source
}

var breakerKind = kind[Breaker]{
	name:   "breakers",
	fields: breakerFields,
	init: func() Breaker {
		c := circuit.DefaultConfig()
		c.MaxOpenDuration = 0 // 10·OpenDuration, in finish
		return Breaker{Config: c, MaxKeys: circuit.DefaultMaxKeys}
	},
	finish: func(b *Breaker, name string) {
		b.Config.Name = name
		if b.Config.MaxOpenDuration == 0 && b.Config.OpenDuration > 0 { // with no wait (negative) it stays 0: unused
			b.Config.MaxOpenDuration = 10 * b.Config.OpenDuration
			if b.Config.OpenDuration > math.MaxInt64/10 {
				b.Config.MaxOpenDuration = math.MaxInt64
			}
		}
	},
	check: func(b *Breaker, src source) []problem {
		var ps []problem
		c := b.Config
		if c.WindowType == circuit.TimeBased {
			ps = appendUnused(ps, src, "window_size", "window_type", "applies only to window_type: count (this breaker's window_type is time)")
		} else {
			ps = appendUnused(ps, src, "window_duration", "window_type", "applies only to window_type: time (this breaker's window_type is count)")
			ps = appendUnused(ps, src, "window_buckets", "window_type", "applies only to window_type: time (this breaker's window_type is count)")
		}
		if c.SlowCallDuration == 0 {
			ps = appendUnused(ps, src, "slow_call_rate_threshold", "slow_call_duration", "has no effect without slow_call_duration")
		}
		if _, err := circuit.New(c); err != nil {
			ps = append(ps, packageProblem(err, "", breakerFields, src))
		}
		return ps
	},
	normalize: func(b *Breaker) {
		c, d := &b.Config, circuit.DefaultConfig()
		if c.WindowType == circuit.TimeBased {
			c.WindowSize = d.WindowSize
		} else {
			c.WindowDuration, c.WindowBuckets = d.WindowDuration, d.WindowBuckets
		}
		if c.SlowCallDuration == 0 {
			c.SlowCallRateThreshold = d.SlowCallRateThreshold
		}
	},
	src: func(b *Breaker) *source { return &b.src },
}

var bulkheadKind = kind[Bulkhead]{
	name:   "bulkheads",
	fields: bulkheadFields,
	init: func() Bulkhead {
		return Bulkhead{Config: bulkhead.DefaultConfig(), MaxKeys: bulkhead.DefaultMaxKeys}
	},
	finish: func(b *Bulkhead, name string) { b.Config.Name = name },
	check: func(b *Bulkhead, src source) []problem {
		var ps []problem
		if b.Config.MaxWait == 0 {
			for _, k := range []string{"max_waiters", "queue_order"} {
				ps = appendUnused(ps, src, k, "max_wait", "has no effect with max_wait: 0s (nobody waits)")
			}
		}
		if _, err := bulkhead.New(b.Config); err != nil {
			ps = append(ps, packageProblem(err, "", bulkheadFields, src))
		}
		return ps
	},
	src: func(b *Bulkhead) *source { return &b.src },
}

var retryKind = kind[Retry]{
	name:   "retries",
	fields: retryFields,
	init: func() Retry {
		return Retry{
			Config:  retry.Config{MaxAttempts: retry.DefaultMaxAttempts, MaxDelay: retry.DefaultMaxDelay},
			Backoff: backoff.DefaultConfig(),
		}
	},
	finish: func(r *Retry, name string) { r.Config.Name = name },
	check: func(r *Retry, src source) []problem {
		var ps []problem
		switch r.Backoff.Jitter {
		case backoff.Decorrelated:
			ps = appendUnused(ps, src, "backoff.multiplier", "backoff.jitter", "has no effect with jitter: decorrelated")
		case backoff.Constant:
			ps = appendUnused(ps, src, "backoff.multiplier", "backoff.jitter", "has no effect with jitter: constant")
		}
		if r.Config.MaxAttempts == 1 {
			for _, k := range []string{"backoff", "max_delay", "min_attempt_time", "budget", "concurrency"} {
				ps = appendUnused(ps, src, k, "max_attempts", "has no effect with max_attempts: 1 (no retries)")
			}
		}
		if _, err := backoff.New(r.Backoff); err != nil {
			ps = append(ps, packageProblem(err, "backoff.", backoffFields, src))
		}
		if _, err := retry.New(r.Config); err != nil {
			ps = append(ps, packageProblem(err, "", retryFields, src))
		}
		return ps
	},
	normalize: func(r *Retry) {
		if r.Config.MaxAttempts == 1 {
			r.Config.MaxDelay, r.Config.MinAttemptTime = retry.DefaultMaxDelay, 0
			r.Backoff, r.Budget, r.Concurrency = backoff.DefaultConfig(), "", ""
		}
		if r.Backoff.Jitter == backoff.Decorrelated || r.Backoff.Jitter == backoff.Constant {
			r.Backoff.Multiplier = backoff.DefaultMultiplier
		}
	},
	src: func(r *Retry) *source { return &r.src },
}

var budgetKind = kind[Budget]{
	name:   "budgets",
	fields: budgetFields,
	init:   func() Budget { return Budget{Config: budget.DefaultConfig()} },
	finish: func(b *Budget, name string) { b.Config.Name = name },
	check: func(b *Budget, src source) []problem {
		if _, err := budget.New(b.Config); err != nil {
			return []problem{packageProblem(err, "", budgetFields, src)}
		}
		return nil
	},
	src: func(b *Budget) *source { return &b.src },
}

var concurrencyKind = kind[ConcurrencyBudget]{
	name:   "concurrency_budgets",
	fields: concurrencyFields,
	init:   func() ConcurrencyBudget { return ConcurrencyBudget{Config: budget.DefaultConcurrencyConfig()} },
	finish: func(b *ConcurrencyBudget, name string) { b.Config.Name = name },
	check: func(b *ConcurrencyBudget, src source) []problem {
		if b.Config.Percent < 0 && b.Config.MinConcurrency < 0 {
			return []problem{{key: "min_concurrency", msg: "must be > 0 with percent: off (it is then the cap on retries in flight, and 0 would refuse every retry), got 0"}}
		}
		if _, err := budget.NewConcurrency(b.Config); err != nil {
			return []problem{packageProblem(err, "", concurrencyFields, src)}
		}
		return nil
	},
	src: func(b *ConcurrencyBudget) *source { return &b.src },
}

var timeoutKind = kind[Timeout]{
	name:   "timeouts",
	fields: timeoutFields,
	init:   func() Timeout { return Timeout{Config: timeout.DefaultConfig()} },
	finish: func(t *Timeout, name string) { t.Config.Name = name },
	check: func(t *Timeout, src source) []problem {
		var ps []problem
		if t.Config.Abandon && t.Config.Timeout < 0 {
			ps = appendUnused(ps, src, "abandon", "timeout", "has no effect with timeout: off")
		}
		if _, err := timeout.New(t.Config); err != nil {
			ps = append(ps, packageProblem(err, "", timeoutFields, src))
		}
		return ps
	},
	normalize: func(t *Timeout) {
		if t.Config.Timeout < 0 {
			t.Config.Abandon = false
		}
	},
	src: func(t *Timeout) *source { return &t.src },
}

var hedgeKind = kind[Hedge]{
	name:   "hedges",
	fields: hedgeFields,
	init:   func() Hedge { return Hedge{Config: hedge.DefaultConfig()} },
	finish: func(h *Hedge, name string) {
		h.Config.Name = name
		if h.Config.Percentile > 0 && h.Config.Delay == 0 {
			h.Config.Delay = h.Config.MinDelay // as package hedge reads it
		}
	},
	check: func(h *Hedge, src source) []problem {
		var ps []problem
		c := h.Config
		if c.Percentile == 0 {
			for _, k := range []string{"min_delay", "min_samples", "window"} {
				ps = appendUnused(ps, src, k, "percentile", "has no effect with percentile: off (a fixed delay)")
			}
			if c.Delay == 0 {
				ps = append(ps, problem{key: "delay", msg: "must be set with percentile: off (the fixed delay)"})
			}
		} else if c.Delay == 0 {
			ps = append(ps, problem{key: "min_delay", msg: "must be > 0 with a percentile unless delay is set: it is the delay until min_samples latencies are known, got 0s"})
		}
		if len(ps) == 0 {
			if _, err := hedge.New(c); err != nil {
				ps = append(ps, packageProblem(err, "", hedgeFields, src))
			}
		}
		return ps
	},
	normalize: func(h *Hedge) {
		if h.Config.Percentile == 0 {
			d := hedge.DefaultConfig()
			h.Config.MinDelay, h.Config.MinSamples, h.Config.Window = d.MinDelay, d.MinSamples, d.Window
		}
	},
	src: func(h *Hedge) *source { return &h.src },
}

// appendUnused reports key, when it was set, as having no effect because of
// gate's value — unless key was inherited from the defaults while the
// instance set gate itself (the defaults serve other instances).
func appendUnused(ps []problem, src source, key, gate, msg string) []problem {
	if _, set := src.set[key]; !set {
		if key != "backoff" {
			return ps
		}
		// The backoff mapping is set when any of its keys is.
		any := false
		for k := range src.set {
			if strings.HasPrefix(k, "backoff.") {
				any, key = true, k
				break
			}
		}
		if !any {
			return ps
		}
	}
	if !src.inInstance(key) && src.inInstance(gate) {
		return ps
	}
	return append(ps, problem{key: key, msg: msg})
}

// packageErr matches a package's validation error: "circuit:
// Config.WindowSize must be >= MinCalls (20), ..., got 10".
var packageErr = regexp.MustCompile(`^[a-z]+: (?:[A-Za-z]+\.)?[A-Za-z]*Config\.([A-Z][A-Za-z]*) (.*)$`)

var goIdent = regexp.MustCompile(`\b[A-Z][A-Za-z]*\b`)

// packageProblem turns a package's validation error into a problem on the
// field's YAML key, with Go field names in its rule turned into keys.
func packageProblem[T any](err error, prefix string, fields []field[T], src source) problem {
	m := packageErr.FindStringSubmatch(err.Error())
	if m == nil {
		return problem{msg: err.Error()}
	}
	key := prefix + snake(m[1])
	rule := goIdent.ReplaceAllStringFunc(m[2], func(s string) string {
		for _, f := range fields {
			if f.key == snake(s) {
				return f.key
			}
		}
		return s
	})
	if _, set := src.set[key]; !set {
		rule += " (the default)"
	}
	return problem{key: key, msg: rule}
}

// decodeKind reads a section and its defaults. It returns the instances,
// and the defaults with their source (for cross-references).
func decodeKind[T any](d *decoder, k kind[T], defaults *yaml.Node, section *yaml.Node) (map[string]T, T, source) {
	base := k.init()
	bsrc := source{set: map[string]origin{}}
	baseProblems := map[problem]bool{}
	dpath := "defaults." + k.name
	if defaults != nil {
		bsrc.line = lineOf(defaults)
		ok := decodeFields(d, defaults, dpath, "", k.fields, &base, &bsrc, true)
		t := base
		k.finish(&t, "")
		for _, p := range k.check(&t, bsrc) {
			// Reported once here, and not again for each instance that
			// inherits it; when a default is itself invalid, what follows
			// from it is not reported at all.
			baseProblems[p] = true
			if ok {
				d.fail(bsrc.lineOf(p.key), join(dpath, p.key), "%s", p.msg)
			}
		}
	}
	out := map[string]T{}
	ps, _ := d.pairs(section, k.name)
	for _, p := range ps {
		path := join(k.name, p.key)
		if !validName(p.key) {
			d.fail(p.line, path, "invalid name: names must not be blank, contain dots or control characters, or be longer than 200 bytes")
			continue
		}
		t := base
		src := bsrc.clone()
		src.line = p.line
		ok := decodeFields(d, p.val, path, "", k.fields, &t, &src, false)
		k.finish(&t, p.key)
		if ok {
			for _, pr := range k.check(&t, src) {
				if baseProblems[pr] {
					continue // reported once, in the defaults
				}
				d.fail(src.lineOf(pr.key), join(path, pr.key), "%s", pr.msg)
			}
		}
		if k.normalize != nil {
			k.normalize(&t)
		}
		*k.src(&t) = src
		out[p.key] = t
	}
	return out, base, bsrc
}

// sections are the top-level keys, in the order a resolved file is written.
var sections = []string{"breakers", "bulkheads", "retries", "budgets", "concurrency_budgets", "timeouts", "hedges", "limiters"}

// Load reads and validates the configuration file at path. YAML and JSON
// are both accepted (JSON is YAML). When the file is invalid, the error is
// an Errors value listing every problem found, each with its line.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// yamlLine matches the position in the YAML parser's messages.
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// parserProblems are the YAML parser's (not scanner's) messages: for
// those, the line it reports counts from 0 (go-yaml issue: the parser's
// marks are 0-based and only scanner errors are corrected), and no line
// means line 1.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

var anchorProblem = regexp.MustCompile(`^(?:unknown anchor '(.*)' referenced|anchor '(.*)' value contains itself)$`)

// syntaxLine extracts the line of a YAML syntax error, and the message
// without it.
func syntaxLine(text string, data []byte) (int, string) {
	m := yamlLine.FindStringSubmatch(text)
	if m == nil {
		return 0, text
	}
	line, msg := 0, m[2]
	if m[1] != "" {
		line, _ = strconv.Atoi(m[1])
	}
	switch {
	case contains(parserProblems, msg):
		line++
	case m[1] != "":
	case anchorProblem.MatchString(msg):
		// No line: find the alias (or the anchor) in the text.
		a := anchorProblem.FindStringSubmatch(msg)
		mark := "*" + a[1]
		if a[2] != "" {
			mark = "&" + a[2]
		}
		if i := bytes.Index(data, []byte(mark)); i >= 0 {
			line = 1 + bytes.Count(data[:i], []byte("\n"))
		}
	case strings.HasPrefix(text, "yaml: ") && !strings.Contains(msg, "alias") && !strings.HasPrefix(msg, "cannot"):
		line = 1 // a scanner error on the first line
	}
	return line, msg
}

// Parse validates a configuration file's contents; name is the file's name
// for the errors. When the file is invalid, the error is an Errors value
// listing every problem found, each with its line (a syntax error stops the
// reading: it is then the only error).
func Parse(name string, data []byte) (f *File, err error) {
	d := &decoder{file: name}
	var root yaml.Node
	if err := parseYAML(data, &root); err != nil {
		line, msg := syntaxLine(err.Error(), data)
		d.fail(line, "", "invalid YAML: %s", msg)
		return nil, d.errs
	}
	f = d.readFile(&root)
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		return nil, d.errs
	}
	return f, nil
}

// errMultiDoc rejects a stream of several documents.
var errMultiDoc = errors.New("the file holds more than one document (---): put every section in one")

// parseYAML reads one document into root; the YAML parser's panics, should
// there be any left, become errors.
func parseYAML(data []byte, root *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(root); err != nil && err != io.EOF {
		return err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("yaml: line %d: %w", next.Line, errMultiDoc)
}

// readFile reads the document into a File.
func (d *decoder) readFile(root *yaml.Node) *File {
	f := &File{Name: d.file}
	doc := root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			doc = nil
		} else {
			doc = doc.Content[0]
		}
	}
	top := map[string]*yaml.Node{}
	defs := map[string]*yaml.Node{}
	if doc != nil && doc.Kind != 0 {
		known := append([]string{"defaults"}, sections...)
		known = append(known, sortedKeys(d.extra)...)
		if dd := deref(doc); dd == nil || (dd.Kind != yaml.MappingNode && !isNull(dd)) {
			d.fail(doc.Line, "", "the file must be a mapping with the sections %s; got %s", strings.Join(known, ", "), describe(doc))
			return f
		}
		ps, _ := d.pairs(doc, "")
		for _, p := range ps {
			switch {
			case p.key == "defaults":
				dps, _ := d.pairs(p.val, "defaults")
				for _, dp := range dps {
					switch {
					case contains(sections, dp.key):
						if !isNull(deref(dp.val)) {
							defs[dp.key] = dp.val
						}
					default:
						d.unknown(dp.line, join("defaults", dp.key), dp.key, sections)
					}
				}
			case contains(sections, p.key):
				top[p.key] = p.val
			case d.extra[p.key] != nil:
				if d.extraNodes == nil {
					d.extraNodes = map[string]*yaml.Node{}
				}
				d.extraNodes[p.key] = p.val
			case strings.HasPrefix(p.key, "x-"):
				// Extension keys, left alone: a place for anchors.
			default:
				d.unknown(p.line, p.key, p.key, known)
			}
		}
	}
	f.Breakers, _, _ = decodeKind(d, breakerKind, defs["breakers"], top["breakers"])
	f.Bulkheads, _, _ = decodeKind(d, bulkheadKind, defs["bulkheads"], top["bulkheads"])
	f.Budgets, _, _ = decodeKind(d, budgetKind, defs["budgets"], top["budgets"])
	f.ConcurrencyBudgets, _, _ = decodeKind(d, concurrencyKind, defs["concurrency_budgets"], top["concurrency_budgets"])
	var rbase Retry
	var rsrc source
	f.Retries, rbase, rsrc = decodeKind(d, retryKind, defs["retries"], top["retries"])
	f.Timeouts, _, _ = decodeKind(d, timeoutKind, defs["timeouts"], top["timeouts"])
	var hbase Hedge
	var hsrc source
	f.Hedges, hbase, hsrc = decodeKind(d, hedgeKind, defs["hedges"], top["hedges"])
	f.Limiters, _, _ = decodeKind(d, limiterKind, defs["limiters"], top["limiters"])

	// Cross-references: each name a retry or hedging policy gives must be
	// in its section. Names from the defaults are checked once, there.
	budgets, breakers, bulkheads := sortedKeys(f.Budgets), sortedKeys(f.Breakers), sortedKeys(f.Bulkheads)
	concurrency := sortedKeys(f.ConcurrencyBudgets)
	d.ref(rsrc, true, "defaults.retries", "budget", rbase.Budget, budgets)
	d.ref(rsrc, true, "defaults.retries", "concurrency", rbase.Concurrency, concurrency)
	for _, name := range sortedKeys(f.Retries) {
		r := f.Retries[name]
		d.ref(r.src, false, "retries."+name, "budget", r.Budget, budgets)
		d.ref(r.src, false, "retries."+name, "concurrency", r.Concurrency, concurrency)
	}
	d.ref(hsrc, true, "defaults.hedges", "budget", hbase.Budget, budgets)
	d.ref(hsrc, true, "defaults.hedges", "breaker", hbase.Breaker, breakers)
	d.ref(hsrc, true, "defaults.hedges", "bulkhead", hbase.Bulkhead, bulkheads)
	for _, name := range sortedKeys(f.Hedges) {
		h := f.Hedges[name]
		d.ref(h.src, false, "hedges."+name, "budget", h.Budget, budgets)
		d.ref(h.src, false, "hedges."+name, "breaker", h.Breaker, breakers)
		d.ref(h.src, false, "hedges."+name, "bulkhead", h.Bulkhead, bulkheads)
	}
	return f
}

// ref reports a name given in field key that its section does not have.
// Only names set where they are checked are reported: in the defaults, or
// in the instance itself.
func (d *decoder) ref(src source, defaults bool, path, key, name string, have []string) {
	if name == "" {
		return
	}
	if o, ok := src.set[key]; !ok || o.defaults != defaults {
		return
	}
	if contains(have, name) {
		return
	}
	what := map[string]string{"budget": "budgets", "breaker": "breakers", "bulkhead": "bulkheads", "concurrency": "concurrency_budgets"}[key]
	noun := key
	if key == "concurrency" {
		noun = "concurrency budget"
	}
	d.fail(src.lineOf(key), path+"."+key, "%s", missingName(noun, what, name, have, false))
}

// missingName says that no noun is named name in section, which has the
// names have: "no breaker named "x" (breakers: a, b)", and, with suggest,
// the closest name when it looks like a typo.
func missingName(noun, section, name string, have []string, withSuggestion bool) string {
	list := strings.Join(have, ", ")
	if list == "" {
		list = "none"
	}
	msg := fmt.Sprintf("no %s named %q (%s: %s)", noun, name, section, list)
	if withSuggestion {
		if s := suggest(name, have); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
	}
	return msg
}

func (d *decoder) unknown(line int, path, key string, known []string) {
	if s := suggest(key, known); s != "" {
		d.fail(line, path, "unknown section (did you mean %s?)", s)
		return
	}
	d.fail(line, path, "unknown section (sections: %s)", strings.Join(known, ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
