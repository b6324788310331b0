package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// tableLen bounds the precomputed exponentials: with a multiplier of 2 or
// more, every exponential below the cap fits (Cap/Base < 2^63), so Delay is
// a table lookup; smaller multipliers compute the rare longer ones.
const tableLen = 64

// Backoff computes the delays before retries. Build it with New; it is
// immutable and safe for concurrent use (as long as Config.Rand is). Delay
// allocates nothing, takes no lock and does not read the clock.
//
// A nil *Backoff is valid and means "no backoff": its Delay returns 0, and so
// does a zero Backoff{} that New did not build.
type Backoff struct {
	cfg    Config
	jitter Jitter
	base   time.Duration
	cap    time.Duration
	capF   float64
	mult   float64
	lnMult float64        // ln Multiplier
	rnd    func() float64 // nil: math/rand/v2's Float64, called directly
	// limit is the smallest n >= 1 for which Base·Multiplier^n >= Cap:
	// from there on the exponential is Cap, so the exponent never
	// overflows.
	limit int
	// tab[n] = min(Cap, Base·Multiplier^n) for n in [1, len(tab)).
	tab []time.Duration
}

// New returns a Backoff for cfg, or an error that names the first invalid
// field and its rule.
func New(cfg Config) (*Backoff, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	b := &Backoff{
		cfg:    c,
		jitter: c.Jitter,
		base:   c.Base,
		cap:    c.Cap,
		capF:   float64(c.Cap),
		mult:   c.Multiplier,
		lnMult: math.Log(c.Multiplier),
		rnd:    cfg.Rand,
	}
	b.limit = b.findLimit()
	n := min(b.limit, tableLen)
	b.tab = make([]time.Duration, n+1)
	for i := range b.tab {
		b.tab[i] = b.exp(i)
	}
	return b, nil
}

// Config returns the resolved configuration: defaults filled in, and Rand
// set to math/rand/v2's Float64 if it was nil. A nil *Backoff returns the
// zero Config.
func (b *Backoff) Config() Config {
	if b == nil {
		return Config{}
	}
	return b.cfg
}

// Delay returns the wait before retry number n, where the first retry —
// after the first failure — is n = 1 (Brooker's convention: full jitter's
// first delay is drawn from [0, min(Cap, 2·Base)]). An n below 1 is taken as
// 1, and an n of any size is safe: once Base·Multiplier^n reaches Cap the
// exponential is Cap.
//
// prev is the delay Delay returned for the previous retry of the same call,
// or 0 before the first; only Decorrelated uses it (a prev below Base is
// taken as Base, above Cap as Cap). With e = min(Cap, Base·Multiplier^n):
//
//	Full          U(0, e)
//	None          e
//	Equal         e/2 + U(0, e/2)
//	Decorrelated  min(Cap, U(Base, 3·prev))
//	Constant      Base
//
// The result is never negative nor above Cap. A nil *Backoff returns 0.
func (b *Backoff) Delay(n int, prev time.Duration) time.Duration {
	if b == nil {
		return 0
	}
	switch b.jitter {
	case Constant:
		return b.base
	case Decorrelated:
		return b.decorrelated(prev)
	}
	if n < 1 {
		n = 1
	}
	var e time.Duration
	if n < len(b.tab) {
		e = b.tab[n]
	} else {
		e = b.exp(n)
	}
	switch b.jitter {
	case None:
		return e
	case Equal:
		h := e / 2
		return e - h + scale(b.random(), h)
	}
	return scale(b.random(), e)
}

func (b *Backoff) decorrelated(prev time.Duration) time.Duration {
	p := min(max(prev, b.base), b.cap)
	lo := float64(b.base)
	f := lo + unit(b.random())*(3*float64(p)-lo)
	if f >= b.capF {
		return b.cap
	}
	// f < capF <= 2^63, so the conversion is exact to the float's integer
	// part and at most Cap; float rounding of Base may leave it just below.
	return max(time.Duration(f), b.base)
}

// random returns the next number from Config.Rand.
func (b *Backoff) random() float64 {
	if b.rnd == nil {
		return rand.Float64()
	}
	return b.rnd()
}

// unit clamps r to [0, 1]; NaN is taken as 0.
func unit(r float64) float64 {
	if !(r > 0) {
		return 0
	}
	return min(r, 1)
}

// scale returns r·d for r in [0, 1] (clamped), in [0, d].
func scale(r float64, d time.Duration) time.Duration {
	df := float64(d)
	f := unit(r) * df
	if f >= df {
		return d
	}
	// f < float64(d): the float below float64(d) is below d too, and
	// below 2^63, so the conversion cannot overflow.
	return time.Duration(f)
}

// exp returns min(Cap, Base·Multiplier^n) for n >= 0, rounded to the
// nanosecond, without overflow.
func (b *Backoff) exp(n int) time.Duration {
	if b.mult == 1 {
		return b.base
	}
	if n >= b.limit {
		return b.cap
	}
	// Below the limit the product is below Cap, so it cannot overflow.
	if b.mult == 2 {
		return b.base << uint(n)
	}
	f := b.expF(n)
	if f >= b.capF {
		return b.cap
	}
	return min(time.Duration(math.Round(f)), b.cap)
}

// expF returns Base·Multiplier^n as a float. Up to tableLen it uses
// math.Pow, exact for small integer powers; beyond (multipliers below 2
// only), exp(n·ln Multiplier), whose relative error stays near 1e-15 for
// results below Cap however large n is — repeated squaring's does not.
func (b *Backoff) expF(n int) float64 {
	if n <= tableLen {
		return float64(b.base) * math.Pow(b.mult, float64(n))
	}
	return float64(b.base) * math.Exp(float64(n)*b.lnMult)
}

// reached reports whether Base·Multiplier^n >= Cap, computed as exp does.
func (b *Backoff) reached(n int) bool {
	if b.mult == 2 {
		return n >= 63 || b.base > math.MaxInt64>>uint(n) || b.base<<uint(n) >= b.cap
	}
	return b.expF(n) >= b.capF
}

// findLimit returns the smallest n >= 1 for which reached(n) holds, or
// math.MaxInt if the exponential never reaches Cap (Multiplier 1).
func (b *Backoff) findLimit() int {
	if b.base >= b.cap {
		return 1
	}
	if b.mult == 1 {
		return math.MaxInt
	}
	// Double, then bisect: at most about 2·62 evaluations, whatever the
	// multiplier (1+2^-52 reaches the cap near n = 2^57).
	lo, hi := 0, 1 // !reached(lo), and reached(hi) once the doubling stops
	for !b.reached(hi) {
		if hi >= 1<<61 {
			return math.MaxInt
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if b.reached(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
