package circuit

import (
	"math/bits"
	"sync/atomic"
)

// Outcome codes kept in a window slot: bit flags, 0 is a fast success.
const (
	codeFail uint32 = 1 << iota
	codeSlow
	codeSat
)

// counts is what a window holds.
type counts struct {
	calls, fails, slows, sats int64
}

// window is the sliding window of one closed (or metrics-only) generation of
// a breaker. A new one is made at every such state change, so outcomes of an
// earlier generation can never land in it.
type window struct {
	// Read-mostly: set when the window is made, read by every call.
	gen   uint64
	slots []atomic.Uint32
	n     uint64   // len(slots)
	m     uint64   // fast modulo constant for n
	_     [64]byte // whatever the allocation's alignment, pos shares no line with the above

	// Count-based: a ring of outcome slots. pos is bumped by every call but
	// a success into a full ring of successes (see addCount), so it has a
	// cache line of its own (a read of gen or slots must not miss because
	// another core just bumped pos); the running totals change only when a
	// slot's outcome changes, so a success reads the totals and a slot and
	// writes nothing but pos, and nothing at all once the ring is full of
	// successes.
	pos   atomic.Uint64
	_     [64]byte
	fails atomic.Int64
	slows atomic.Int64
	sats  atomic.Int64
	// streak counts the failures in a row, in either kind of window, when
	// a rule needs it (settings.streak). It shares the totals' line: a
	// success reads that line anyway, and writes streak only to end a
	// streak, as rarely as the totals change.
	streak atomic.Int64

	// Time-based: buckets rotated lazily by the calls that land in them.
	buckets []bucket
	width   int64 // bucket span in nanoseconds
	origin  int64 // the breaker's clock when the window began
}

type bucket struct {
	epoch atomic.Int64 // which bucket-span since origin the counts belong to
	calls atomic.Int64
	fails atomic.Int64
	slows atomic.Int64
	sats  atomic.Int64
	_     [24]byte
}

func newWindow(c *Config, gen uint64, now int64) *window {
	w := &window{gen: gen}
	if c.WindowType == TimeBased {
		w.buckets = make([]bucket, c.WindowBuckets)
		for i := range w.buckets {
			w.buckets[i].epoch.Store(-1)
		}
		w.width = int64(c.WindowDuration) / int64(c.WindowBuckets)
		w.origin = now
		return w
	}
	w.slots = make([]atomic.Uint32, c.WindowSize)
	w.n = uint64(c.WindowSize)
	w.m = ^uint64(0)/w.n + 1
	return w
}

// mod returns i % n by Lemire's fast modulo (a multiply instead of a divide).
func (w *window) mod(i uint32) uint64 {
	hi, _ := bits.Mul64(w.m*uint64(i), w.n)
	return hi
}

// addCount records one outcome in a count window. It returns the window's
// counts and true when the outcome could have made a rate reach its
// threshold: a failure or slow call, or the call that brings the window to
// minCalls. Any other success returns false without reading the totals: in a
// count window it replaces an older outcome, so no rate can rise.
//
// A success that lands in a full window of successes writes nothing at all.
// Such a ring reads the same whichever way it is turned, so whether pos moves
// on cannot change which outcomes the window holds, now or after any later
// call: the next failure overwrites some success either way, and is evicted
// n calls later either way. Skipping the bump takes the one write that every
// call made off the success path: in steady health the window is read-only,
// and the cores calling through one breaker no longer pass pos's cache line
// back and forth (BenchmarkPipeline in bench/). The totals are loaded first,
// so a window holding failures pays one load of a read-mostly line, not a
// load of pos before its bump. A success racing with a failure that has
// swapped its slot but not yet counted it is simply ordered before it.
func (w *window) addCount(code uint32, minCalls uint64) (counts, bool) {
	if code == 0 && w.fails.Load()|w.slows.Load()|w.sats.Load() == 0 && w.pos.Load() >= w.n {
		return counts{}, false
	}
	i := w.pos.Add(1) - 1
	s := &w.slots[w.mod(uint32(i))]
	if s.Load() != code {
		old := s.Swap(code)
		w.adjust(old, code)
	}
	if code == 0 && i+1 != minCalls {
		return counts{}, false
	}
	return w.countTotals(), true
}

func (w *window) adjust(old, code uint32) {
	diff := old ^ code
	if diff&codeFail != 0 {
		w.fails.Add(delta(code & codeFail))
	}
	if diff&codeSlow != 0 {
		w.slows.Add(delta(code & codeSlow))
	}
	if diff&codeSat != 0 {
		w.sats.Add(delta(code & codeSat))
	}
}

func delta(bitSet uint32) int64 {
	if bitSet != 0 {
		return 1
	}
	return -1
}

func (w *window) countTotals() counts {
	calls := w.pos.Load()
	if calls > w.n {
		calls = w.n
	}
	return counts{calls: int64(calls), fails: w.fails.Load(), slows: w.slows.Load(), sats: w.sats.Load()}
}

// addTime records one outcome that ended at now in a time window and returns
// the window's counts.
func (w *window) addTime(now int64, code uint32) (counts, bool) {
	e := (now - w.origin) / w.width
	b := &w.buckets[e%int64(len(w.buckets))]
	if cur := b.epoch.Load(); cur != e {
		// The bucket holds an older span: the first caller to claim it
		// clears it. A call racing with the clearing may be lost; the
		// window is a statistic, not a ledger.
		if cur < e && b.epoch.CompareAndSwap(cur, e) {
			b.calls.Store(0)
			b.fails.Store(0)
			b.slows.Store(0)
			b.sats.Store(0)
		}
	}
	b.calls.Add(1)
	if code&codeFail != 0 {
		b.fails.Add(1)
	}
	if code&codeSlow != 0 {
		b.slows.Add(1)
	}
	if code&codeSat != 0 {
		b.sats.Add(1)
	}
	// Every outcome is evaluated: in a time window, older successes slide
	// out as time passes, so a rate can rise on a success too.
	return w.timeTotals(e), true
}

// timeTotals sums the buckets of the spans (e-len, e].
func (w *window) timeTotals(e int64) counts {
	var c counts
	lo := e - int64(len(w.buckets))
	for i := range w.buckets {
		b := &w.buckets[i]
		if ep := b.epoch.Load(); ep > lo && ep <= e {
			c.calls += b.calls.Load()
			c.fails += b.fails.Load()
			c.slows += b.slows.Load()
			c.sats += b.sats.Load()
		}
	}
	return c
}

// totals returns the window's counts at now.
func (w *window) totals(now int64) counts {
	if w.buckets != nil {
		return w.timeTotals((now - w.origin) / w.width)
	}
	return w.countTotals()
}
