package backoff

import (
	"math/rand/v2"
	"time"
)

// Spread returns d moved by a random fraction of itself, drawn uniformly
// from [d·(1-frac), d·(1+frac)]: jitter for anything many clients or many
// instances do on the same schedule — reconnections, cache and stale-value
// expiries, store TTLs, scheduled jobs, the half-open probes of breakers
// that opened together. Without it, clients that started together stay in
// step and hit the dependency together (seed 000: jitter belongs on
// everything done at once, not only on retries).
//
// frac is clamped to [0, 1]; zero (or a d that is not positive) returns d
// unchanged. It reads math/rand/v2's global source, which is safe for
// concurrent use and allocates nothing.
//
// For a period (a job that runs every d), draw each wait anew:
//
//	for {
//		select {
//		case <-time.After(backoff.Spread(time.Minute, 0.1)):
//			refresh()
//		case <-ctx.Done():
//			return
//		}
//	}
func Spread(d time.Duration, frac float64) time.Duration {
	return spread(d, frac, rand.Float64)
}

// SpreadUp is Spread that never shortens: it draws from [d, d·(1+frac)].
// Use it where d is a promise — a result kept at least its TTL, a breaker
// open at least its open duration — and only the end may move later.
func SpreadUp(d time.Duration, frac float64) time.Duration {
	if d <= 0 || !(frac > 0) {
		return d
	}
	frac = min(frac, 1)
	return d + time.Duration(float64(d)*frac*rand.Float64())
}

// spread is Spread with its random source, for tests.
func spread(d time.Duration, frac float64, r func() float64) time.Duration {
	if d <= 0 || !(frac > 0) {
		return d
	}
	frac = min(frac, 1)
	f := 1 - frac + 2*frac*r()
	return time.Duration(float64(d) * f)
}
