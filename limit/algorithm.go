package limit

import "time"

// Window is what a Limiter measured over one window of calls, handed to its
// Algorithm when the window closes.
type Window struct {
	// Limit is the limit in force during the window.
	Limit int
	// InFlight is the number of calls holding a permit when the window
	// closed: how much of the limit the traffic used (an algorithm should
	// not raise a limit the traffic does not reach).
	InFlight int
	// Waiting is the number of callers queued for a permit when the window
	// closed.
	Waiting int
	// Refused is the number of calls refused at the limit during the
	// window: a limit that refuses nobody and has nobody waiting is not
	// what holds the traffic back. A Limiter counts its own; a Controller
	// cannot see its gate's refusals, and reports zero.
	Refused int
	// Samples counts the calls that ended with a measured latency (Done);
	// Drops the calls that ended in a drop (Drop: a timeout, an overload
	// answer, a deadline that ran out in the dependency).
	Samples, Drops int
	// MinLatency, MeanLatency and MaxLatency summarise the latencies of the
	// Samples; zero when there were none.
	MinLatency, MeanLatency, MaxLatency time.Duration
	// MinDeadline is the least time any measured call of the window had
	// left before its deadline when it was admitted (zero when none had a
	// deadline or the caller did not say): an algorithm can keep queueing
	// below what callers can afford to wait.
	MinDeadline time.Duration
}

// Algorithm turns windows of measurements into a concurrency limit. A
// Limiter calls Update once per window, from one goroutine at a time, and
// clamps the result to [Config.MinLimit, Config.MaxLimit]. An Algorithm
// keeps state of its own, so each Limiter needs its own: Config.Algorithm is
// a constructor.
type Algorithm interface {
	// Name is the algorithm's name in snapshots and events ("aimd",
	// "vegas", "gradient2", "watertight").
	Name() string
	// Update returns the limit to use after window w.
	Update(w Window) float64
}
