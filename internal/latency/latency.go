package latency

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults used for zero fields of Config.
const (
	DefaultWindow = 10 * time.Second
	DefaultSlices = 5
)

// MaxSlices is the largest Config.Slices.
const MaxSlices = 64

// MaxDuration is the largest latency a Tracker tells apart: longer ones
// (about 18 minutes and more) are counted as MaxDuration.
const MaxDuration = time.Duration(1<<maxBits - 1)

// Histogram layout: values below 2·sub nanoseconds get a bucket each; above,
// each power of two [2^k, 2^(k+1)) is split into sub buckets of equal width.
const (
	maxBits    = 40
	subBits    = 4
	sub        = 1 << subBits                    // buckets per power of two
	numBuckets = (maxBits-subBits-1)*sub + 2*sub // bucketOf(MaxDuration) + 1
)

// Config configures a Tracker. The zero value is valid: a ten-second window
// in five slices.
type Config struct {
	// Window is how far back the tracker looks. Zero means DefaultWindow
	// (10s); negative is an error.
	Window time.Duration
	// Slices is the number of slices the window is cut into. The tracker
	// forgets a slice at a time, so a quantile covers between
	// Window·(Slices−1)/Slices and Window of history. Zero means
	// DefaultSlices (5); it must be in [1, MaxSlices], and Window/Slices
	// must be at least a microsecond.
	Slices int
}

// DefaultConfig returns the configuration zero fields resolve to.
func DefaultConfig() Config { return Config{Window: DefaultWindow, Slices: DefaultSlices} }

func (c Config) resolve() (Config, error) {
	if c.Window < 0 {
		return c, fmt.Errorf("latency: Config.Window must be >= 0 (0 means %v), got %v", DefaultWindow, c.Window)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Slices < 0 || c.Slices > MaxSlices {
		return c, fmt.Errorf("latency: Config.Slices must be in [0, %d] (0 means %d), got %d", MaxSlices, DefaultSlices, c.Slices)
	}
	if c.Slices == 0 {
		c.Slices = DefaultSlices
	}
	if c.Window/time.Duration(c.Slices) < time.Microsecond {
		return c, fmt.Errorf("latency: Config.Window/Config.Slices must be at least 1µs, got %v/%d", c.Window, c.Slices)
	}
	return c, nil
}

// slice is the histogram of one period of the ring.
type slice struct {
	period atomic.Int64 // the period the counts belong to; empty: math.MinInt64
	counts [numBuckets]atomic.Uint64
}

// Tracker records latencies and reports quantiles of the recent ones. Build
// it with New; it is safe for concurrent use. The zero Tracker is not
// usable.
//
// Under concurrent use the answers are approximate in time, not in value: a
// Quantile that runs while Records land sees some of them and not others,
// and a Record that raced with the clearing of its slice may be lost or
// counted in the next period.
type Tracker struct {
	epoch   time.Time
	sliceNs int64
	n       int64
	slices  []slice
	mu      sync.Mutex // serialises clearing a slice
	cfg     Config
}

// New returns a Tracker for cfg, or an error naming the invalid field.
func New(cfg Config) (*Tracker, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	t := &Tracker{
		epoch:   time.Now(),
		sliceNs: int64(c.Window) / int64(c.Slices),
		n:       int64(c.Slices),
		slices:  make([]slice, c.Slices),
		cfg:     c,
	}
	for i := range t.slices {
		t.slices[i].period.Store(math.MinInt64)
	}
	return t, nil
}

// Config returns the tracker's configuration, defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// Stamp is an instant on a Tracker's clock: monotonic nanoseconds since the
// tracker was built. Taking one costs half of time.Now.
type Stamp int64

// Now returns the current instant on the tracker's clock.
func (t *Tracker) Now() Stamp { return Stamp(time.Since(t.epoch)) }

// Record adds one latency, d. A negative d counts as zero, one above
// MaxDuration as MaxDuration. It reads the clock once, to find the slice.
func (t *Tracker) Record(d time.Duration) { t.RecordAt(t.Now(), d) }

// RecordSince records the time from start to now and returns it: one clock
// read for both the latency and the slice.
func (t *Tracker) RecordSince(start Stamp) time.Duration {
	now := t.Now()
	d := time.Duration(now - start)
	t.RecordAt(now, d)
	return d
}

// RecordAt records d as observed at the instant now (of Now). A Record for
// an instant older than the window is dropped.
func (t *Tracker) RecordAt(now Stamp, d time.Duration) {
	p := int64(now) / t.sliceNs
	s := &t.slices[p%t.n]
	if sp := s.period.Load(); sp != p {
		if sp > p {
			return // a latecomer: its slice already holds a later period
		}
		t.rotate(s, p)
	}
	s.counts[bucketOf(d)].Add(1)
}

// rotate clears s for period p, unless another Record did it first.
func (t *Tracker) rotate(s *slice, p int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.period.Load() >= p {
		return
	}
	for i := range s.counts {
		if s.counts[i].Load() != 0 {
			s.counts[i].Store(0)
		}
	}
	s.period.Store(p)
}

// live returns the slices whose period is within the window at now.
func (t *Tracker) live(now Stamp, dst *[MaxSlices]*slice) []*slice {
	p := int64(now) / t.sliceNs
	out := dst[:0]
	for i := range t.slices {
		s := &t.slices[i]
		if sp := s.period.Load(); sp > p-t.n && sp <= p {
			out = append(out, s)
		}
	}
	return out
}

// Span returns how much time the window covers at the instant now: the
// whole Window less the unstarted part of the current slice, or the time
// since the tracker was built when that is shorter. Count() / Span() is the
// rate of the recorded latencies.
func (t *Tracker) Span(now Stamp) time.Duration {
	span := (t.n-1)*t.sliceNs + int64(now)%t.sliceNs
	return time.Duration(min(span, max(int64(now), 0)))
}

// Count returns the number of latencies recorded in the window.
func (t *Tracker) Count() uint64 {
	var buf [MaxSlices]*slice
	var n uint64
	for _, s := range t.live(t.Now(), &buf) {
		for i := range s.counts {
			n += s.counts[i].Load()
		}
	}
	return n
}

// Quantile returns the q-quantile of the latencies recorded in the window
// (q = 0.95 for the p95), within 1/32 of the exact value (the sample of rank
// ⌈q·n⌉ among the n recorded): the middle of the bucket that holds it. It
// returns 0 when nothing was recorded. q is clamped to [0, 1]; 0 gives the
// smallest latency and 1 the largest.
func (t *Tracker) Quantile(q float64) time.Duration {
	d, _ := t.QuantileCount(q)
	return d
}

// QuantileCount returns Quantile(q) and Count() from one pass over the
// buckets.
func (t *Tracker) QuantileCount(q float64) (time.Duration, uint64) {
	var buf [MaxSlices]*slice
	live := t.live(t.Now(), &buf)
	var sums [numBuckets]uint64
	var n uint64
	for _, s := range live {
		for i := range s.counts {
			c := s.counts[i].Load()
			sums[i] += c
			n += c
		}
	}
	if n == 0 {
		return 0, 0
	}
	rank := rankOf(q, n)
	var cum uint64
	for i, c := range sums {
		cum += c
		if cum >= rank {
			return middle(i), n
		}
	}
	// The counts moved under us: report the largest non-empty bucket.
	for i := numBuckets - 1; i >= 0; i-- {
		if sums[i] != 0 {
			return middle(i), n
		}
	}
	return 0, n
}

// rankOf returns the 1-based rank of the q-quantile among n samples:
// ⌈q·n⌉, at least 1 and at most n.
func rankOf(q float64, n uint64) uint64 {
	if !(q > 0) { // also NaN
		return 1
	}
	if q >= 1 {
		return n
	}
	r := uint64(math.Ceil(q * float64(n)))
	return min(max(r, 1), n)
}

// bucketOf returns the bucket of a latency.
func bucketOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	v := uint64(min(d, MaxDuration))
	if v < 2*sub {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // >= 1
	return e*sub + int(v>>e)
}

// bounds returns the smallest value of bucket i and its width.
func bounds(i int) (lo, width uint64) {
	if i < 2*sub {
		return uint64(i), 1
	}
	e := i/sub - 1
	m := uint64(i%sub + sub)
	return m << e, 1 << e
}

// middle returns the latency reported for bucket i: the middle of its
// values, within half a width (1/32 of the bucket's lower bound) of any.
func middle(i int) time.Duration {
	lo, w := bounds(i)
	return time.Duration(lo + (w-1)/2)
}
