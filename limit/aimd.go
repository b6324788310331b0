package limit

import (
	"fmt"
	"time"
)

// AIMDOptions tunes NewAIMD. The zero value is the default of Netflix's
// AIMDLimit.Builder.
type AIMDOptions struct {
	// BackoffRatio scales the limit down after a window with a drop (or
	// whose mean latency is above Timeout); the result is truncated to a
	// whole number, as Netflix's (int) cast does. It must be in [0.5, 1)
	// (Netflix's rule); zero means 0.9.
	BackoffRatio float64
	// Timeout is the latency above which a window counts as a drop: Netflix
	// compares it with the window's aggregated RTT, which its WindowedLimit
	// makes the window's average, so here it is Window.MeanLatency. Zero
	// means 5s (Netflix's DEFAULT_TIMEOUT); negative means no timeout rule
	// (only drops back off).
	Timeout time.Duration
}

// Defaults of AIMDOptions' zero fields.
const (
	defaultAIMDBackoff = 0.9
	defaultAIMDTimeout = 5 * time.Second
)

// NewAIMD returns a port of Netflix concurrency-limits' AIMDLimit
// (additive increase, multiplicative decrease), named "aimd". After a
// window with a drop, or whose mean latency is above Timeout, the limit
// becomes limit × BackoffRatio (truncated); otherwise, if the traffic used
// at least half of the limit (2 × InFlight ≥ Limit), it grows by one;
// otherwise it stays.
//
// The limits are the Limiter's: Netflix's initialLimit 20 is
// Config.InitialLimit (whose default is also 20), its minLimit 20
// Config.MinLimit (default 1) and its maxLimit 200 Config.MaxLimit (default
// 1000); set Config{MinLimit: 20, MaxLimit: 200} for Netflix's bounds.
//
// Failure modes: AIMD sees loss, not latency. Until calls fail or the mean
// latency passes Timeout (5s by default) it keeps adding a permit per
// window, so the dependency's queue, and its latency, grow to the timeout
// before the limit moves; then it saws between that point and 90% of it.
// Growth is slow (one permit per window, about one a second). Netflix's
// in-flight count is the window's largest; Window.InFlight is the count
// when the window closed, so a bursty window may read as not using the
// limit and not grow it.
//
// NewDefault is watertight's own algorithm, not one of Netflix's: it keeps
// AIMD's backoff on drops and adds a latency signal.
//
// NewAIMD panics if BackoffRatio is outside [0.5, 1) and not zero.
func NewAIMD(o AIMDOptions) Algorithm {
	if o.BackoffRatio == 0 {
		o.BackoffRatio = defaultAIMDBackoff
	}
	if !(o.BackoffRatio >= 0.5 && o.BackoffRatio < 1) {
		panic(fmt.Sprintf("limit: AIMDOptions.BackoffRatio must be in [0.5, 1) (0 means %v), got %v", defaultAIMDBackoff, o.BackoffRatio))
	}
	if o.Timeout == 0 {
		o.Timeout = defaultAIMDTimeout
	}
	return &aimd{o: o}
}

// aimd keeps no state: Netflix's AIMDLimit works on the integer limit it
// last returned, which is Window.Limit.
type aimd struct{ o AIMDOptions }

func (a *aimd) Name() string { return "aimd" }

// Update is AIMDLimit._update(startTime, rtt, inflight, didDrop), with rtt
// the window's mean latency, inflight its in-flight count and didDrop any
// drop, as WindowedLimit hands them over.
func (a *aimd) Update(w Window) float64 {
	lim := w.Limit
	timedOut := a.o.Timeout > 0 && w.Samples > 0 && w.MeanLatency > a.o.Timeout
	switch {
	case w.Drops > 0 || timedOut:
		lim = int(float64(lim) * a.o.BackoffRatio)
	case 2*w.InFlight >= lim:
		lim++
	}
	return float64(lim)
}
