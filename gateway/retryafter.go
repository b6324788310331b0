package gateway

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight/circuit"
)

// The gateway's own 503s say when to come back (Retry-After), from what
// refused the request: an open breaker from when it goes half-open, a full
// route from how long its queue takes to drain at the route's pace, a
// spent retry budget or a rejection of another kind from the route's pace.
// The value is whole seconds (RFC 9110 §10.2.3), at least one, spread at
// random over d to d plus up to ten seconds (1 or 2 for d of a second, 30
// to 40 for 30 s), so that the clients it refused do not come back
// together.

// maxRetryAfter caps the Retry-After the gateway sends.
const maxRetryAfter = 5 * time.Minute

// retryAfterValue is the Retry-After header value for a wait of about d.
func retryAfterValue(d time.Duration) string {
	s := math.Ceil(min(max(d, time.Second), maxRetryAfter).Seconds())
	return strconv.Itoa(int(s + math.Floor(rand.Float64()*(min(s, 10)+1))))
}

// drainTime is how long the route's bulkhead takes to free a permit for a
// newcomer: the calls in flight and waiting, each taking the route's
// typical time, MaxConcurrent at a time.
func (rt *route) drainTime() time.Duration {
	var waiting, max int
	switch {
	case rt.bulk != nil:
		s := rt.bulk.Snapshot()
		waiting, max = s.Waiting, s.MaxConcurrent
	case rt.tenants != nil:
		s := rt.tenants.Snapshot()
		waiting, max = s.Waiting, s.MaxConcurrent
	case rt.limiter != nil:
		s := rt.limiter.Snapshot()
		waiting, max = s.Waiting, s.Limit
	}
	if max <= 0 {
		return rt.latency.value()
	}
	return time.Duration(float64(rt.latency.value()) * float64(waiting+1) / float64(max))
}

// upstreamBack is how long until the route's upstream can be asked again
// after err: for open breakers, until the first of the pool's hosts'
// breakers goes half-open; otherwise the route's typical time.
func (rt *route) upstreamBack(err error) time.Duration {
	if !errors.Is(err, circuit.ErrOpen) || rt.up.breakers == nil {
		return rt.latency.value()
	}
	var soonest time.Duration
	for _, h := range rt.up.cfg.Hosts {
		b, gerr := rt.up.breakers.Get(h)
		if gerr != nil {
			continue
		}
		s := b.Snapshot()
		if s.State != circuit.Open {
			return rt.latency.value() // a host takes calls, or will try one
		}
		if soonest == 0 || s.OpenLeft < soonest {
			soonest = s.OpenLeft
		}
	}
	return soonest
}

// ewma is an exponentially weighted mean of durations, updated without a
// lock (a lost update under a race only drops one sample).
type ewma struct{ bits atomic.Uint64 }

// ewmaWeight is the weight of a new sample.
const ewmaWeight = 0.05

func (e *ewma) observe(d time.Duration) {
	old := e.bits.Load()
	v := float64(d)
	if old != 0 {
		v = math.Float64frombits(old)*(1-ewmaWeight) + v*ewmaWeight
	}
	e.bits.CompareAndSwap(old, math.Float64bits(v))
}

// value is the mean, zero before the first sample.
func (e *ewma) value() time.Duration {
	return time.Duration(math.Float64frombits(e.bits.Load()))
}
