package limit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// VegasOptions tunes NewVegas. The zero value is the default of Netflix's
// VegasLimit.Builder. The functions take the current limit (truncated to a
// whole number, as Netflix's (int) casts do) and give a number of calls.
type VegasOptions struct {
	// Alpha and Beta bound the estimated queue, in calls: below Alpha the
	// limit grows (Increase), above Beta it shrinks (Decrease), in between
	// it stays. If nil, 3·log10(limit) and 6·log10(limit), where log10 is
	// Netflix's Log10RootIntFunction: the integer part of log10, at least 1.
	Alpha, Beta func(limit int) int
	// Threshold is the queue at or below which the limit grows fast, by
	// Beta. If nil, log10(limit).
	Threshold func(limit int) int
	// Increase and Decrease return the limit after a small queue, and after
	// a large queue or a drop. If nil, limit + log10(limit) and
	// limit − log10(limit).
	Increase, Decrease func(limit float64) float64
	// Smoothing weighs the new limit against the old one:
	// (1 − Smoothing)·old + Smoothing·new. It must be in (0, 1]; zero
	// means 1 (no smoothing).
	Smoothing float64
	// ProbeMultiplier sets how often the no-load latency is re-measured:
	// every ProbeMultiplier × limit windows, times a random jitter in
	// [0.5, 1), the window's latency becomes the no-load latency, whatever
	// it is. Zero means 30; negative means never (the no-load latency is
	// then the least window latency ever seen).
	ProbeMultiplier int
	// Rand, if not nil, is the source of the probe's jitter: it returns a
	// number in [0, 1). For reproducible simulations; nil means
	// math/rand/v2's global source (Netflix uses ThreadLocalRandom).
	Rand func() float64
}

// Defaults of VegasOptions' zero fields.
const (
	defaultVegasSmoothing = 1.0
	defaultVegasProbe     = 30
)

// NewVegas returns a port of Netflix concurrency-limits' VegasLimit, named
// "vegas", after TCP Vegas. It estimates the queue at the dependency from
// the window's mean latency (rtt) and a no-load latency (the least rtt
// seen, reset by the probe) as queue = ⌈limit × (1 − noload/rtt)⌉, then:
// after a drop the limit becomes Decrease(limit); if the traffic used less
// than half of the limit it stays; otherwise it grows by Beta when queue ≤
// Threshold, to Increase(limit) when queue < Alpha, shrinks to
// Decrease(limit) when queue > Beta, and stays in between. The result,
// floored at 1, is smoothed. A window whose rtt is a new minimum, the
// first window, and a probe window only record the no-load latency. The
// limit is kept as a fraction between windows and applied truncated, as
// Netflix does; a window whose Limit differs from it (the Limiter clamped
// it) restarts it from Limit.
//
// The limits are the Limiter's: Netflix's initialLimit 20 is
// Config.InitialLimit (default 20), its maxConcurrency 1000
// Config.MaxLimit (default 1000); its floor of 1 is Config.MinLimit's
// default. Netflix clamps before smoothing, the Limiter after: with
// Smoothing below 1 the limit can approach MaxLimit a little faster.
//
// Failure modes: the probe adopts whatever latency the probe window has as
// the no-load latency. If the dependency is loaded then, Vegas sees no
// queue, grows by Beta per window into the overload, and settles at a
// higher limit; each probe under load can ratchet it further. Between
// probes the no-load latency only goes down: after the dependency becomes
// lastingly slower (a deploy, a failover) Vegas sees a queue that is not
// there and holds the limit down until the next probe (hundreds of windows
// at the defaults). Without a probe (ProbeMultiplier < 0) that lasts
// forever. Drop-only windows (no latency) decrease the limit but do not
// probe. Netflix's in-flight count is the window's largest; Window.InFlight
// is the count when the window closed, so a bursty window may read as not
// using the limit.
//
// NewDefault is watertight's own algorithm, not one of Netflix's: its
// baseline is a minimum over a sliding span of windows, with no probe.
//
// NewVegas panics if Smoothing is outside (0, 1] and not zero.
func NewVegas(o VegasOptions) Algorithm {
	if o.Alpha == nil {
		o.Alpha = func(l int) int { return 3 * log10Root(l) }
	}
	if o.Beta == nil {
		o.Beta = func(l int) int { return 6 * log10Root(l) }
	}
	if o.Threshold == nil {
		o.Threshold = log10Root
	}
	if o.Increase == nil {
		o.Increase = func(l float64) float64 { return l + float64(log10Root(int(l))) }
	}
	if o.Decrease == nil {
		o.Decrease = func(l float64) float64 { return l - float64(log10Root(int(l))) }
	}
	if o.Smoothing == 0 {
		o.Smoothing = defaultVegasSmoothing
	}
	if !(o.Smoothing > 0 && o.Smoothing <= 1) {
		panic(fmt.Sprintf("limit: VegasOptions.Smoothing must be in (0, 1] (0 means 1), got %v", o.Smoothing))
	}
	if o.ProbeMultiplier == 0 {
		o.ProbeMultiplier = defaultVegasProbe
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	v := &vegas{o: o}
	v.resetJitter()
	return v
}

type vegas struct {
	o      VegasOptions
	est    estimate
	noload time.Duration // rtt_noload: 0 until the first measured window
	probes int           // probeCount: windows since the last probe
	jitter float64       // probeJitter, in [0.5, 1)
}

func (v *vegas) Name() string { return "vegas" }

// resetJitter is VegasLimit.resetProbeJitter: nextDouble(0.5, 1).
func (v *vegas) resetJitter() { v.jitter = 0.5 + 0.5*v.o.Rand() }

// shouldProbe is VegasLimit.shouldProbe.
func (v *vegas) shouldProbe() bool {
	return v.o.ProbeMultiplier > 0 && v.jitter*float64(v.o.ProbeMultiplier)*v.est.v <= float64(v.probes)
}

// Update is VegasLimit._update(startTime, rtt, inflight, didDrop), with rtt
// the window's mean latency, inflight its in-flight count and didDrop any
// drop, as WindowedLimit hands them over.
func (v *vegas) Update(w Window) float64 {
	v.est.sync(w.Limit)
	v.probes++
	if w.Samples == 0 || w.MeanLatency <= 0 {
		// No latency to judge (Netflix would average the drops' own times
		// in): only a drop says something, once a no-load latency is known.
		if w.Drops > 0 && v.noload > 0 {
			return v.apply(v.o.Decrease(v.est.v))
		}
		return v.est.get()
	}
	rtt := w.MeanLatency
	if v.shouldProbe() {
		v.resetJitter()
		v.probes = 0
		v.noload = rtt
		return v.est.get()
	}
	if v.noload == 0 || rtt < v.noload {
		v.noload = rtt
		return v.est.get()
	}
	return v.update(rtt, w.InFlight, w.Drops > 0)
}

// update is VegasLimit.updateEstimatedLimit.
func (v *vegas) update(rtt time.Duration, inflight int, drop bool) float64 {
	est := v.est.v
	queue := int(math.Ceil(est * (1 - float64(v.noload)/float64(rtt))))
	if drop {
		return v.apply(v.o.Decrease(est))
	}
	if float64(inflight*2) < est { // prevent upward drift if not close to the limit
		return v.est.get()
	}
	l := int(est)
	alpha, beta, threshold := v.o.Alpha(l), v.o.Beta(l), v.o.Threshold(l)
	switch {
	case queue <= threshold: // aggressive increase when no queuing
		return v.apply(est + float64(beta))
	case queue < alpha: // increase while the queue is manageable
		return v.apply(v.o.Increase(est))
	case queue > beta: // queuing: decrease
		return v.apply(v.o.Decrease(est))
	}
	return v.est.get()
}

// apply floors the new limit at 1 (Netflix's max(1, min(maxLimit, …)); the
// Limiter applies MaxLimit), smooths it and keeps it.
func (v *vegas) apply(next float64) float64 {
	next = max(1, next)
	v.est.v = (1-v.o.Smoothing)*v.est.v + v.o.Smoothing*next
	return v.est.get()
}

// log10Root is Netflix's Log10RootIntFunction with baseline 0: the integer
// part of log10(n), at least 1 (so 1 for n < 100, 2 below 1000, ...). It
// counts digits rather than calling math.Log10, which is exact for every
// integer (Java's Math.log10 is exact on powers of ten; math.Log10 is not
// promised to be).
func log10Root(n int) int {
	d := 0
	for ; n >= 10; n /= 10 {
		d++
	}
	return max(1, d)
}

// estimate is the fractional limit Netflix's Vegas and Gradient2 keep
// (estimatedLimit) while the limit they apply is its integer part.
type estimate struct {
	v  float64
	ok bool
}

// sync restarts the estimate from the limit in force when it is not the
// one the estimate gives: at the first window (Config.InitialLimit), and
// after the Limiter clamped it to [MinLimit, MaxLimit] (Netflix clamps
// estimatedLimit itself, to bounds the Limiter holds here).
func (e *estimate) sync(limit int) {
	if !e.ok || math.Trunc(e.v) != float64(limit) || math.IsNaN(e.v) {
		e.v, e.ok = float64(limit), true
	}
}

// get is the limit to apply: the estimate truncated, as Netflix's (int).
func (e *estimate) get() float64 { return math.Trunc(e.v) }
