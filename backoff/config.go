package backoff

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Jitter selects how a delay is drawn around the capped exponential
// e = min(Cap, Base·Multiplier^n). The zero value is Full.
type Jitter uint8

const (
	// Full draws the delay uniformly from [0, e]: Brooker's "full jitter",
	// and the default.
	Full Jitter = iota
	// None returns e itself: plain capped exponential backoff, no jitter.
	// Clients that failed together retry together.
	None
	// Equal keeps half of e and draws the other half: e/2 + U(0, e/2).
	Equal
	// Decorrelated draws from the previous delay instead of the retry
	// number: min(Cap, U(Base, 3·prev)), with prev = Base for the first
	// retry. It ignores n and Multiplier.
	Decorrelated
	// Constant returns Base every time. It ignores n, prev, Cap, Multiplier
	// and Rand.
	Constant
)

// String returns "full", "none", "equal", "decorrelated" or "constant".
func (j Jitter) String() string {
	switch j {
	case Full:
		return "full"
	case None:
		return "none"
	case Equal:
		return "equal"
	case Decorrelated:
		return "decorrelated"
	case Constant:
		return "constant"
	}
	return fmt.Sprintf("Jitter(%d)", uint8(j))
}

// Defaults used for zero fields of Config.
const (
	DefaultBase       = 100 * time.Millisecond
	DefaultCap        = 10 * time.Second
	DefaultMultiplier = 2.0
)

// Config configures a Backoff. The zero value is valid: every zero field
// takes the default named in its comment (see DefaultConfig), which gives
// full jitter over 100ms·2^n capped at 10s.
type Config struct {
	// Jitter selects the formula. The zero value is Full.
	Jitter Jitter
	// Base is the scale of the delays: the exponential is Base·Multiplier^n,
	// Decorrelated never waits less than Base, Constant always waits Base.
	// Zero means DefaultBase (100ms). Must not be negative.
	Base time.Duration
	// Cap bounds every delay. Zero means DefaultCap (10s). Must not be
	// negative, and must be >= Base (set Cap too when Base is above 10s).
	Cap time.Duration
	// Multiplier is the growth factor of the exponential, in place of
	// Brooker's 2: Base·Multiplier^n. Zero means DefaultMultiplier (2);
	// otherwise it must be a finite number >= 1 (1 means no growth: Base
	// every time, jittered). Decorrelated and Constant do not use it.
	Multiplier float64
	// Rand returns the random numbers the jitter is drawn from, in [0, 1)
	// (values below 0 are taken as 0, above 1 as 1). If nil, math/rand/v2's
	// Float64 is used, which is safe for concurrent use. Set it to a seeded
	// source (rand.New(rand.NewPCG(seed1, seed2)).Float64) for reproducible
	// simulations and tests; a seeded source is not safe for concurrent
	// use, so making it safe, if the Backoff is shared, is the caller's job.
	Rand func() float64
}

// DefaultConfig returns the configuration that zero fields resolve to: full
// jitter, Base 100ms, Cap 10s, Multiplier 2, and Rand nil (math/rand/v2).
func DefaultConfig() Config {
	return Config{
		Jitter:     Full,
		Base:       DefaultBase,
		Cap:        DefaultCap,
		Multiplier: DefaultMultiplier,
	}
}

// resolve fills defaults and validates; the error names the field and the rule.
func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("backoff: Config.%s %s, got %v", field, rule, got)
	}
	if c.Jitter > Constant {
		return c, bad("Jitter", "must be Full, None, Equal, Decorrelated or Constant", c.Jitter)
	}
	if c.Base < 0 {
		return c, bad("Base", "must be >= 0 (0 means 100ms)", c.Base)
	}
	if c.Base == 0 {
		c.Base = DefaultBase
	}
	if c.Cap < 0 {
		return c, bad("Cap", "must be >= 0 (0 means 10s)", c.Cap)
	}
	if c.Cap == 0 {
		if c.Base > DefaultCap {
			return c, fmt.Errorf("backoff: Config.Cap must be >= Base (%v), got 0, which means 10s: set Cap with a Base above 10s", c.Base)
		}
		c.Cap = DefaultCap
	}
	if c.Cap < c.Base {
		return c, fmt.Errorf("backoff: Config.Cap must be >= Base (%v), got %v", c.Base, c.Cap)
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	if !(c.Multiplier >= 1) || math.IsInf(c.Multiplier, 1) {
		return c, bad("Multiplier", "must be 0 (meaning 2) or a finite number >= 1", c.Multiplier)
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c, nil
}
