package sizing

import (
	"fmt"
	"time"

	"github.com/watertight-go/watertight/internal/latency"
)

// DefaultRecorderWindow is the window a Recorder looks back over when
// NewRecorder is given zero.
const DefaultRecorderWindow = time.Minute

// Recorder watches one dependency's calls — their count and latencies over
// a sliding window — and turns them into the Observation that Suggest
// takes. Record costs one clock read and a few atomic adds, no lock and no
// allocation, so it can sit on every call (or on a sample of them). It is
// safe for concurrent use.
//
// Percentiles are those of a log-linear histogram: within about 3% of the
// exact value.
type Recorder struct {
	tr *latency.Tracker
}

// NewRecorder returns a Recorder over the last window of calls, forgotten a
// tenth at a time. Zero means DefaultRecorderWindow; it must be at least
// 10µs.
func NewRecorder(window time.Duration) (*Recorder, error) {
	if window == 0 {
		window = DefaultRecorderWindow
	}
	if window < 10*time.Microsecond {
		return nil, fmt.Errorf("sizing: the Recorder window must be at least 10µs, got %v", window)
	}
	tr, err := latency.New(latency.Config{Window: window, Slices: 10})
	if err != nil {
		return nil, fmt.Errorf("sizing: %w", err)
	}
	return &Recorder{tr: tr}, nil
}

// Record notes one call that took d.
func (r *Recorder) Record(d time.Duration) { r.tr.Record(d) }

// Observe returns what the window holds: the call rate (calls recorded per
// second of the window; the window starts when the Recorder was built), the
// p99 and p99.9 latencies, and the number of samples.
func (r *Recorder) Observe() Observation {
	now := r.tr.Now()
	p99, n := r.tr.QuantileCount(0.99)
	o := Observation{P99: p99, P999: max(r.tr.Quantile(0.999), p99), Samples: int(n)}
	if span := r.tr.Span(now); span > 0 {
		o.Rate = float64(n) / span.Seconds()
	}
	return o
}
