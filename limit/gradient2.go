package limit

import "fmt"

// Gradient2Options tunes NewGradient2. The zero value is the default of
// Netflix's Gradient2Limit.Builder.
type Gradient2Options struct {
	// Smoothing weighs the new limit against the old one:
	// (1 − Smoothing)·old + Smoothing·new. It must be in (0, 1]; zero
	// means 0.2.
	Smoothing float64
	// RTTTolerance is how much the window's latency may exceed the
	// long-term latency before the limit shrinks: 1.5 tolerates 50% more.
	// It must be at least 1 (Netflix's rule); zero means 1.5.
	RTTTolerance float64
	// LongWindow is the span, in windows, of the exponential average that
	// is the long-term latency: each window weighs 2/(LongWindow+1) (after
	// a warm-up of 10 windows averaged plainly). Zero means 600; it must
	// not be negative.
	LongWindow int
	// QueueSize is how many calls the limit may grow by per window (before
	// smoothing) while the latency is within tolerance, as a function of
	// the limit (truncated). If nil, 4.
	QueueSize func(limit int) int
}

// Defaults of Gradient2Options' zero fields.
const (
	defaultGradient2Smoothing = 0.2
	defaultGradient2Tolerance = 1.5
	defaultGradient2Long      = 600
	defaultGradient2Queue     = 4
	gradient2Warmup           = 10 // ExpAvgMeasurement's warmupWindow
)

// NewGradient2 returns a port of Netflix concurrency-limits'
// Gradient2Limit, named "gradient2". Each window it adds the window's mean
// latency (short) to an exponential average over LongWindow windows
// (long), and, unless the traffic used less than half the limit, sets
//
//	gradient = max(0.5, min(1, RTTTolerance × long / short))
//	limit    = (1 − Smoothing)·limit + Smoothing·(gradient·limit + QueueSize(limit))
//
// so the limit grows by QueueSize × Smoothing per window while the latency
// stays within tolerance of the long-term one, and shrinks, by at most half
// per window before smoothing, when it does not. When long is more than
// twice short (the end of a long overload) the average is cut by 5% per
// window to catch up. The limit is kept as a fraction between windows and
// applied truncated, as Netflix does; a window whose Limit differs from it
// (the Limiter clamped it) restarts it from Limit. Windows without a
// measured latency change nothing: Gradient2 ignores drops.
//
// The limits are the Limiter's: Netflix's initialLimit 20 is
// Config.InitialLimit (default 20), its minLimit 20 Config.MinLimit
// (default 1) and its maxConcurrency 200 Config.MaxLimit (default 1000);
// set Config{MinLimit: 20, MaxLimit: 200} for Netflix's bounds.
//
// Failure modes: the long-term latency is an average, not a minimum, so
// during a long incident it drifts up towards the incident's latency (half
// way in about 200 windows at LongWindow 600); once it is within
// RTTTolerance of it the gradient is 1 again and the limit grows by
// QueueSize·Smoothing per window while the dependency is still slow.
// failsafe-go#127 reports this drift in failsafe-go's adaptive limiter,
// which descends from Gradient2. The tolerance itself lets latency rise 50%
// with no decrease, and under a modest overload the QueueSize term can
// outweigh the gradient (Netflix concurrency-limits#134). Gradient2 never
// reacts to drops or timeouts, and does not lower a limit the traffic
// uses less than half of. Netflix's in-flight count is the window's
// largest; Window.InFlight is the count when the window closed.
//
// NewDefault is watertight's own algorithm, not one of Netflix's: its
// baseline is a windowed minimum, which does not drift, and it acts on
// drops.
//
// NewGradient2 panics if Smoothing is outside (0, 1], RTTTolerance below
// 1 or LongWindow negative (zero meaning the default for each).
func NewGradient2(o Gradient2Options) Algorithm {
	if o.Smoothing == 0 {
		o.Smoothing = defaultGradient2Smoothing
	}
	if !(o.Smoothing > 0 && o.Smoothing <= 1) {
		panic(fmt.Sprintf("limit: Gradient2Options.Smoothing must be in (0, 1] (0 means %v), got %v", defaultGradient2Smoothing, o.Smoothing))
	}
	if o.RTTTolerance == 0 {
		o.RTTTolerance = defaultGradient2Tolerance
	}
	if !(o.RTTTolerance >= 1) {
		panic(fmt.Sprintf("limit: Gradient2Options.RTTTolerance must be >= 1 (0 means %v), got %v", defaultGradient2Tolerance, o.RTTTolerance))
	}
	if o.LongWindow < 0 {
		panic(fmt.Sprintf("limit: Gradient2Options.LongWindow must be >= 0 (0 means %d), got %d", defaultGradient2Long, o.LongWindow))
	}
	if o.LongWindow == 0 {
		o.LongWindow = defaultGradient2Long
	}
	if o.QueueSize == nil {
		o.QueueSize = func(int) int { return defaultGradient2Queue }
	}
	return &gradient2{o: o, factor: 2 / (float64(o.LongWindow) + 1)}
}

type gradient2 struct {
	o      Gradient2Options
	est    estimate
	factor float64 // ExpAvgMeasurement.factor(longWindow)

	// long is ExpAvgMeasurement(longWindow, 10): the plain average of the
	// first 10 latencies, then an exponential one.
	long, sum float64
	count     int
}

func (g *gradient2) Name() string { return "gradient2" }

// add is ExpAvgMeasurement.add.
func (g *gradient2) add(rtt float64) float64 {
	if g.count < gradient2Warmup {
		g.count++
		g.sum += rtt
		g.long = g.sum / float64(g.count)
	} else {
		g.long = g.long*(1-g.factor) + rtt*g.factor
	}
	return g.long
}

// Update is Gradient2Limit._update(startTime, rtt, inflight, didDrop),
// with rtt the window's mean latency and inflight its in-flight count, as
// WindowedLimit hands them over (didDrop is unused, as in Netflix's).
func (g *gradient2) Update(w Window) float64 {
	g.est.sync(w.Limit)
	if w.Samples == 0 || w.MeanLatency <= 0 {
		return g.est.get()
	}
	est := g.est.v
	queue := float64(g.o.QueueSize(int(est)))
	short := float64(w.MeanLatency)
	long := g.add(short)
	// A long RTT well above the short one: latency is back to normal after
	// a long overload; cut the long RTT rather than wait for the average.
	if long/short > 2 {
		g.long *= 0.95
	}
	if float64(w.InFlight) < est/2 { // don't grow the limit if app-limited
		return g.est.get()
	}
	gradient := max(0.5, min(1, g.o.RTTTolerance*long/short))
	next := est*gradient + queue
	next = est*(1-g.o.Smoothing) + next*g.o.Smoothing
	g.est.v = next
	return g.est.get()
}
