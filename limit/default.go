package limit

import (
	"slices"
	"time"
)

// DefaultOptions tunes NewDefault. The zero value is the default.
type DefaultOptions struct {
	// BaselineWindows is how many windows the no-load latency (the
	// baseline) is learned from: the lower quartile of the mean latencies
	// of that many recent windows in which the traffic did not fill the
	// limit. Zero means 120 (two minutes of one-second windows). Not a
	// periodic re-measurement (which pins the limit low while it measures,
	// and synchronises hosts, as envoy#8337 reports) nor an average of
	// every window (which drifts up with a long incident until the limit no
	// longer protects, failsafe-go#127).
	BaselineWindows int
	// Alpha and Beta bound the estimated queue at the dependency (calls
	// waiting there beyond its capacity, limit × (1 − baseline/latency)),
	// as a fraction of the limit: below Alpha the limit grows (by Alpha's
	// worth of calls, at least one, per window), above Beta it shrinks
	// towards capacity. Zero means 0.025 and 0.1, each at least 1 and 2
	// calls (a queue of a few calls is already 20% of a small limit).
	Alpha, Beta float64
	// Backoff scales the limit down after a window in which more than 1%
	// of the calls dropped (timeouts, overload answers: a single timeout
	// in the tail is not overload), or whose latency ate half of the least
	// deadline a call had left. Zero means 0.9.
	Backoff float64
}

// NewDefault returns watertight's own algorithm, the one a zero
// Config.Algorithm uses. Like Vegas it estimates the queue that builds up
// at the dependency from the ratio of a no-load latency to the window's
// mean latency, and keeps that queue small: while the queue is short and the
// traffic presses on the limit (it refused more than one call in twenty, or
// callers wait, or the calls in flight fill it) it grows the limit by the
// queue it tolerates (Alpha of the limit, at least one call: a step that the
// noise of one window's mean cannot turn into a run of steps past
// capacity); when the queue is long it cuts half way to the estimated
// capacity plus a short queue. Unlike Vegas and Gradient2 it also acts on the signals
// they ignore: drops and timeouts (multiplicative decrease, as AIMD), and
// the callers' remaining deadlines (a latency that eats half the least
// deadline left is queueing nobody can afford).
//
// Its baseline is the lower quartile of the mean latencies of recent
// windows in which the traffic did not fill the limit, or in which the
// limit was climbing from below capacity (their latency is the
// dependency's own, not a queue the limit let in), so it needs no lowering
// of the limit to be measured. Until it holds warmWindows of them it is
// their mean instead: the quartile of a handful of windows is their least,
// one window's luck, and a baseline learned low holds the limit down. It does not rise while the limit
// is full, however long: the latency then includes the queue the limit
// admits, and a baseline that followed it would ratchet the limit up
// through a long incident. It is learned again, from the current window,
// when the latency does not answer the limit: when the window is
// markedly faster than the baseline (the dependency got faster), or when
// three or more cuts running have taken the limit down by 30% while the
// mean latency stayed within 10% of the highest it reached meanwhile (the dependency itself
// got slower, and the queue the baseline saw is not there).
func NewDefault(o DefaultOptions) Algorithm {
	if o.BaselineWindows <= 0 {
		o.BaselineWindows = 120
	}
	if o.Alpha <= 0 {
		o.Alpha = 0.025
	}
	if o.Beta <= 0 {
		o.Beta = 0.1
	}
	if o.Backoff <= 0 || o.Backoff >= 1 {
		o.Backoff = 0.9
	}
	return &watertightAlg{o: o, means: make([]time.Duration, 0, o.BaselineWindows)}
}

// Relearning the baseline: a window this much faster than it, or cuts
// that took the limit down to cutShrink of where they began while the
// latency stayed above cutStay of where it was, after at least cutRuns
// windows.
const (
	fasterBy  = 0.9
	cutShrink = 0.7
	cutStay   = 0.9
	cutRuns   = 3
)

// The baseline's warm-up: while it holds fewer than warmPush windows, every
// window whose queue is at most Beta adds to it (the limit starts below
// capacity, where the latency is the dependency's own); while it holds
// fewer than warmWindows, it is their mean, not their lower quartile.
const (
	warmWindows = 16
	warmPush    = 12
	// pressedBy: the traffic presses on the limit when it refused more
	// than one call in this many measured.
	pressedBy = 20
)

type watertightAlg struct {
	o     DefaultOptions
	means []time.Duration // baseline windows' mean latencies, a ring once full
	pos   int
	sort  []time.Duration // scratch for the quartile
	base  time.Duration

	grows   int           // windows of growth running
	cuts    int           // latency cuts running
	cutFrom float64       // the limit before the first of them
	cutLat  time.Duration // the highest mean latency since
}

func (a *watertightAlg) Name() string { return "watertight" }

func (a *watertightAlg) Update(w Window) float64 {
	lim := float64(w.Limit)
	if w.Samples == 0 {
		if w.Drops > 0 {
			a.cuts, a.grows = 0, 0
			return lim * a.o.Backoff
		}
		return lim
	}
	m := w.MeanLatency
	if len(a.means) == 0 || float64(m) < fasterBy*float64(a.base) {
		a.relearn(m)
	}
	alpha := max(1, a.o.Alpha*lim)
	beta := max(2, a.o.Beta*lim)
	queue := lim * (1 - float64(a.base)/float64(m))
	// Traffic held well below the estimated capacity (lim - queue) cannot
	// have queued at the dependency: the window's latency is its own.
	// So is a window that, after one already said there was no queue,
	// shows at most a short one (the limit is climbing from below
	// capacity: what it shows is the noise of a window's mean, which a
	// baseline fed only the windows that looked fastest would learn low),
	// and so is a window of the warm-up.
	if float64(w.InFlight) <= lim-queue-alpha || ((a.grows > 0 || len(a.means) < warmPush) && queue <= beta) {
		a.push(m)
	}
	if w.Drops*100 > w.Samples+w.Drops || (w.MinDeadline > 0 && m > w.MinDeadline/2) {
		a.cuts, a.grows = 0, 0
		return lim * a.o.Backoff
	}
	if queue <= beta {
		a.cuts = 0
	}
	if queue >= alpha {
		a.grows = 0
	}
	switch {
	case queue < alpha:
		if w.Refused*pressedBy > w.Samples || w.Waiting > 0 || float64(w.InFlight) >= lim-alpha {
			// The traffic presses on the limit: grow by the queue we
			// tolerate. Not faster on a run of such windows: at capacity
			// a run of them is the noise, and a run of growing steps
			// overshoots (at 40 calls, Alpha grows 2.5% a window: from 20
			// to 400 in two minutes of one-second windows).
			a.grows++
			return lim + alpha
		}
		a.grows = 0
	case queue > beta:
		a.cuts++
		if a.cuts == 1 {
			a.cutFrom, a.cutLat = lim, m
		}
		a.cutLat = max(a.cutLat, m)
		if a.cuts >= cutRuns && lim <= cutShrink*a.cutFrom && float64(m) >= cutStay*float64(a.cutLat) {
			// Cutting does not bring the latency down: it is not queueing.
			a.relearn(m)
			a.cuts = 0
			return lim
		}
		// Capacity is about lim - queue: aim a short queue above it, half way.
		target := lim - queue + beta
		return (lim + target) / 2
	}
	return lim
}

// relearn restarts the baseline from one window's mean latency.
func (a *watertightAlg) relearn(m time.Duration) {
	a.means, a.pos = a.means[:0], 0
	a.push(m)
}

func (a *watertightAlg) push(d time.Duration) {
	if len(a.means) < cap(a.means) {
		a.means = append(a.means, d)
	} else {
		a.means[a.pos] = d
		a.pos = (a.pos + 1) % len(a.means)
	}
	a.sort = append(a.sort[:0], a.means...)
	slices.Sort(a.sort)
	if len(a.sort) < warmWindows {
		var sum time.Duration
		for _, d := range a.sort {
			sum += d
		}
		a.base = sum / time.Duration(len(a.sort))
		return
	}
	a.base = a.sort[(len(a.sort)-1)/4]
}
