package limit

import (
	"math"
	"time"
)

// DefaultOptions tunes NewDefault. The zero value is the default.
type DefaultOptions struct {
	// BaselineWindows is how many windows the no-load latency (the
	// baseline) is the minimum of: the least latency seen in that many
	// recent windows. Zero means 120 (two minutes of one-second windows).
	// A minimum over a sliding span, not a periodic re-measurement (which
	// pins the limit low while it measures, and synchronises hosts, as
	// envoy#8337 reports) nor an average (which drifts up with a long
	// incident until the limit no longer protects, failsafe-go#127).
	BaselineWindows int
	// Alpha and Beta bound the estimated queue at the dependency (calls
	// waiting there beyond its capacity, limit × (1 − baseline/latency)),
	// as a fraction of the limit: below Alpha the limit grows, above Beta
	// it shrinks towards capacity. Zero means 0.05 and 0.2, each at least
	// 2 and 4 calls.
	Alpha, Beta float64
	// Backoff scales the limit down after a window with drops (timeouts,
	// overload answers), or whose latency ate half of the least deadline
	// a call had left. Zero means 0.9.
	Backoff float64
}

// NewDefault returns watertight's own algorithm, the one a zero
// Config.Algorithm uses. Like Vegas it estimates the queue that builds up
// at the dependency from the ratio of a no-load latency to the window's
// mean latency, and keeps that queue small: it grows the limit by about its
// square root per window while the queue is short and the traffic uses the
// limit, and cuts it to the estimated capacity plus a short queue when the
// queue is long. Unlike Vegas and Gradient2 it also acts on the signals
// they ignore: drops and timeouts (multiplicative decrease, as AIMD), and
// the callers' remaining deadlines (a latency that eats half the least
// deadline left is queueing nobody can afford). Its baseline is the minimum
// latency over a sliding span of windows, which neither needs the limit
// lowered to be measured nor drifts up during a long incident.
func NewDefault(o DefaultOptions) Algorithm {
	if o.BaselineWindows <= 0 {
		o.BaselineWindows = 120
	}
	if o.Alpha <= 0 {
		o.Alpha = 0.05
	}
	if o.Beta <= 0 {
		o.Beta = 0.2
	}
	if o.Backoff <= 0 || o.Backoff >= 1 {
		o.Backoff = 0.9
	}
	return &watertightAlg{o: o, mins: make([]time.Duration, 0, o.BaselineWindows)}
}

type watertightAlg struct {
	o    DefaultOptions
	mins []time.Duration // window minimums, a ring once full
	pos  int
}

func (a *watertightAlg) Name() string { return "watertight" }

func (a *watertightAlg) Update(w Window) float64 {
	lim := float64(w.Limit)
	if w.Samples == 0 {
		if w.Drops > 0 {
			return lim * a.o.Backoff
		}
		return lim
	}
	a.push(w.MinLatency)
	if w.Drops > 0 || (w.MinDeadline > 0 && w.MeanLatency > w.MinDeadline/2) {
		return lim * a.o.Backoff
	}
	base := a.baseline()
	if base <= 0 || w.MeanLatency <= 0 {
		return lim
	}
	queue := lim * (1 - float64(base)/float64(w.MeanLatency))
	alpha := max(2, a.o.Alpha*lim)
	beta := max(4, a.o.Beta*lim)
	switch {
	case queue < alpha:
		if 2*w.InFlight >= w.Limit || w.Waiting > 0 { // the traffic uses the limit
			return lim + max(1, math.Sqrt(lim))
		}
	case queue > beta:
		// Capacity is about lim - queue: aim a short queue above it, half way.
		target := lim - queue + alpha
		return (lim + target) / 2
	}
	return lim
}

func (a *watertightAlg) push(d time.Duration) {
	if len(a.mins) < cap(a.mins) {
		a.mins = append(a.mins, d)
		return
	}
	a.mins[a.pos] = d
	a.pos = (a.pos + 1) % len(a.mins)
}

func (a *watertightAlg) baseline() time.Duration {
	var m time.Duration
	for i, d := range a.mins {
		if i == 0 || d < m {
			m = d
		}
	}
	return m
}
