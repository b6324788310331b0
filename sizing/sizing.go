package sizing

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Observation is what a dependency was seen doing over a window.
type Observation struct {
	// Rate is the calls started per second.
	Rate float64
	// P99 and P999 are the 99th and 99.9th percentiles of call latency.
	P99, P999 time.Duration
	// Samples is how many calls the percentiles were computed from.
	Samples int
}

// Config tunes the advice. The zero value gives the defaults.
type Config struct {
	// Blocking is the share of calls, arriving at random at the observed
	// rate, that the suggested bulkhead may refuse for want of a permit.
	// Zero means DefaultBlocking (0.1%); it must be in (0, 1).
	Blocking float64
	// Headroom is the growth the size allows for, as a share of the
	// observed load: 0.25 sizes for 25% more calls in flight. Zero means
	// DefaultHeadroom (25%); negative means none.
	Headroom float64
	// TimeoutFactor multiplies the observed p99.9 to give the attempt
	// timeout. Zero means DefaultTimeoutFactor (1.5); it must be >= 1.
	TimeoutFactor float64
	// MinTimeout is the floor of the suggested timeout, so that a
	// scheduler pause is not a dependency failure. Zero means
	// DefaultMinTimeout (10ms); negative means no floor.
	MinTimeout time.Duration
	// MinSamples is the fewest samples Suggest accepts; fewer give
	// ErrTooFewSamples, since a p99.9 of a few calls is noise. Zero means
	// DefaultMinSamples (1000); negative means no minimum.
	MinSamples int
}

// Defaults for zero Config fields.
const (
	DefaultBlocking      = 0.001
	DefaultHeadroom      = 0.25
	DefaultTimeoutFactor = 1.5
	DefaultMinTimeout    = 10 * time.Millisecond
	DefaultMinSamples    = 1000
)

// maxSize bounds the suggested bulkhead size (bulkhead.MaxConcurrentLimit;
// sizing does not import bulkhead).
const maxSize = 1 << 23

// ErrTooFewSamples is returned by Suggest when the observation holds fewer
// samples than Config.MinSamples.
var ErrTooFewSamples = errors.New("sizing: too few samples for a p99.9; observe longer")

// Advice is what Suggest proposes.
type Advice struct {
	// InFlight is Little's L: the observed rate × p99 latency, the calls in
	// flight on average when every call is as slow as the p99.
	InFlight float64
	// MaxConcurrent is the suggested bulkhead size.
	MaxConcurrent int
	// MaxWait is the suggested longest wait for a permit: one p99 call, the
	// time a permit takes to come back when the bulkhead is merely busy.
	MaxWait time.Duration
	// Timeout is the suggested attempt timeout.
	Timeout time.Duration
	// Explanation shows the arithmetic, for logs and the CLI.
	Explanation string
}

// Suggest returns the sizes for a dependency observed as obs, or an error
// that says which field of cfg or obs is invalid.
func Suggest(cfg Config, obs Observation) (Advice, error) {
	if err := cfg.fill(); err != nil {
		return Advice{}, err
	}
	switch {
	case math.IsNaN(obs.Rate) || math.IsInf(obs.Rate, 0) || obs.Rate < 0:
		return Advice{}, fmt.Errorf("sizing: Observation.Rate must be a finite number >= 0, got %v", obs.Rate)
	case obs.P99 < 0 || obs.P999 < 0:
		return Advice{}, fmt.Errorf("sizing: Observation.P99 and P999 must be >= 0, got %v and %v", obs.P99, obs.P999)
	case obs.P999 < obs.P99:
		return Advice{}, fmt.Errorf("sizing: Observation.P999 (%v) must be >= P99 (%v)", obs.P999, obs.P99)
	case cfg.MinSamples > 0 && obs.Samples < cfg.MinSamples:
		return Advice{}, fmt.Errorf("%w: have %d, need %d (Config.MinSamples)", ErrTooFewSamples, obs.Samples, cfg.MinSamples)
	}
	a := Advice{InFlight: obs.Rate * obs.P99.Seconds(), MaxWait: obs.P99}
	load := a.InFlight * (1 + cfg.Headroom)
	a.MaxConcurrent = ErlangSize(load, cfg.Blocking)
	t := time.Duration(float64(obs.P999) * cfg.TimeoutFactor)
	if cfg.MinTimeout > 0 {
		t = max(t, cfg.MinTimeout)
	}
	a.Timeout = t
	a.Explanation = fmt.Sprintf("L = %.1f/s × %v (p99) = %.2f in flight; ×%.2f headroom = %.2f; Erlang B ≤ %g → %d permits; timeout %.2g × %v (p99.9) = %v",
		obs.Rate, obs.P99, a.InFlight, 1+cfg.Headroom, load, cfg.Blocking, a.MaxConcurrent, cfg.TimeoutFactor, obs.P999, a.Timeout)
	return a, nil
}

func (cfg *Config) fill() error {
	if cfg.Blocking == 0 {
		cfg.Blocking = DefaultBlocking
	}
	if !(cfg.Blocking > 0 && cfg.Blocking < 1) {
		return fmt.Errorf("sizing: Config.Blocking must be in (0, 1), got %v", cfg.Blocking)
	}
	switch {
	case cfg.Headroom == 0:
		cfg.Headroom = DefaultHeadroom
	case cfg.Headroom < 0:
		cfg.Headroom = 0
	case math.IsNaN(cfg.Headroom) || math.IsInf(cfg.Headroom, 0):
		return fmt.Errorf("sizing: Config.Headroom must be finite, got %v", cfg.Headroom)
	}
	if cfg.TimeoutFactor == 0 {
		cfg.TimeoutFactor = DefaultTimeoutFactor
	}
	if !(cfg.TimeoutFactor >= 1) || math.IsInf(cfg.TimeoutFactor, 0) {
		return fmt.Errorf("sizing: Config.TimeoutFactor must be a finite number >= 1, got %v", cfg.TimeoutFactor)
	}
	if cfg.MinTimeout == 0 {
		cfg.MinTimeout = DefaultMinTimeout
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = DefaultMinSamples
	}
	return nil
}

// ErlangSize returns the fewest permits n for which Erlang's loss formula
// B(n, load) — the share of calls that find all n permits busy when calls
// arrive at random and load calls are in flight on average — is at most
// blocking, and at least 1. B(0) = 1, B(n) = load·B(n-1) / (n + load·B(n-1)).
// A load that would need more than 2^23 permits returns 2^23.
func ErlangSize(load, blocking float64) int {
	if !(load > 0) {
		return 1
	}
	b := 1.0
	n := 0
	for b > blocking && n < maxSize {
		n++
		b = load * b / (float64(n) + load*b)
	}
	return max(n, 1)
}
