// Package backoff computes how long to wait before retrying a failed call,
// after Marc Brooker's "Exponential Backoff And Jitter" (AWS Architecture
// Blog, 2015).
//
// Waiting longer after each failure gives an overloaded or contended
// dependency room to recover instead of meeting the same callers again at
// once; drawing the wait at random (jitter) keeps the callers that failed
// together from retrying together. A Backoff is only the arithmetic: package
// retry decides whether to retry, and sleeps.
//
// # Formulas
//
// With n the retry number and e = min(Cap, Base·Multiplier^n) (Multiplier is
// 2 unless configured), Config.Jitter selects one of:
//
//	Full          sleep = U(0, e)                      (the default)
//	None          sleep = e                            ("exponential")
//	Equal         sleep = e/2 + U(0, e/2)
//	Decorrelated  sleep = min(Cap, U(Base, 3·prev))    prev: the last sleep, Base at first
//	Constant      sleep = Base
//
// where U(a, b) is drawn uniformly from [a, b].
//
// # Why full jitter is the default
//
// In Brooker's simulation — clients contending on one row under optimistic
// concurrency — plain exponential backoff (None) is the clear loser: clients
// that failed together sleep the same time and collide again, so it takes
// the most calls and the most time. Jitter spreads them out. Among the
// jittered variants, full jitter takes the fewest calls (the least work for
// the contended server), Equal takes slightly more calls and much longer, and
// Decorrelated finishes slightly sooner than full jitter but with more calls.
// Full jitter also needs no state between retries. So it is the zero value of
// Jitter; Decorrelated is there for callers who favour completion time.
//
// # Retry numbers
//
// Delay(n, prev) numbers retries from 1: the first retry, after the first
// failure, is n = 1, so full jitter's first wait is drawn from
// [0, min(Cap, 2·Base)] — Brooker's convention, as in his simulator, where
// the attempt counter is incremented before the backoff is computed. An n
// below 1 is taken as 1, and any n is safe: the exponent stops growing once
// the exponential reaches Cap, so it never overflows. Decorrelated uses prev,
// the delay returned for the previous retry (0 before the first), instead of
// n; the caller keeps it, so a Backoff holds no per-call state.
//
// # Randomness and simulations
//
// Config.Rand is the random source. If nil, math/rand/v2's Float64 is used:
// safe for concurrent use and never the same in two processes, which is what
// desynchronises clients. For reproducible simulations and tests, set it to a
// seeded source, such as rand.New(rand.NewPCG(1, 2)).Float64: equal seeds
// give equal sequences of delays. A seeded source is not safe for concurrent
// use; guard it, or give each goroutine its own Backoff.
//
// A Backoff is immutable and safe for concurrent use; Delay allocates
// nothing, takes no lock and does not read the clock. A nil *Backoff means
// no backoff: Delay returns 0.
package backoff
