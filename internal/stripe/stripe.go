// Package stripe provides a counter for hot paths that many goroutines bump
// at once: adds spread over cache-line-padded cells, so they rarely contend.
package stripe

import (
	"sync/atomic"
	"unsafe"
)

const (
	cellBits = 3
	cells    = 1 << cellBits
)

// mult is the multiplier of cellOf under the zero seed; see cellOf.
const mult = 0x99FF79B97F4A7C15

// seedStep is what a re-seed adds to Counter.seed: twice the golden ratio in
// 64-bit fixed point, an even number, so that mult plus the seed stays odd.
const seedStep = 0x3C6EF372FE94F82A

// firstReseed is the number of failed compare-and-swaps after which a cell
// first re-seeds its counter; it re-seeds again at every power of two above
// (16, 32, 64...). See Counter.Add.
const firstReseed = 8

// The words below are plain integers read and written with the sync/atomic
// functions, not atomic.Uint64 values: the inliner counts the methods of
// those as extra cost, which would cost Add its inlining. The zero-length
// arrays of atomic.Uint64 give the structs the 8-byte alignment that 64-bit
// atomics need on 32-bit platforms.

type cell struct {
	_      [0]atomic.Uint64
	n      uint64    // atomic
	misses uint32    // atomic: failed compare-and-swaps on n
	_      [116]byte // keep each cell on its own cache line, whatever the alignment
}

// Counter is a counter whose Add is cheap under contention and whose Load is
// an approximate-in-time but exact-in-total sum. Adds may be of any value
// (adding ^uint64(0) subtracts one); the total wraps around modulo 2^64. The
// zero value is zero and ready to use; a Counter must not be copied after
// first use.
type Counter struct {
	_    [0]atomic.Uint64
	seed uint64    // atomic: added to mult in cellOf; changed by a re-seed
	_    [120]byte // seed is read by every Add: keep it off the cells' lines
	c    [cells]cell
}

// Add adds n.
//
// The cell is chosen from the address of a variable on the caller's stack:
// goroutine stacks are separate blocks, so goroutines running at once on
// different cores usually pick different cells, for the price of a multiply
// (math/rand/v2 costs about 13 ns here, more than the contention it would
// avoid), and a goroutine keeps its cell, whose cache line stays in its
// core's cache. Goroutines started together get adjacent stacks, which
// cellOf keeps apart.
//
// Two goroutines whose stacks happen to map to one cell would share it for
// as long as their stacks stay where they are (adds then cost three to four
// times as much). That is seen as it happens: the add is a load and a
// compare-and-swap, which fails only when another core wrote the cell in
// between (then the add is made with an atomic add). On the 8th failure of a
// cell, and on every power of two after that, the cell re-seeds the counter:
// every goroutine's cell is picked anew, under another multiplier, and two
// goroutines that shared a cell get different ones with probability 7/8.
// This is LongAdder's re-probing on contention, with one probe for all
// goroutines, since a goroutine has no state of its own to keep one in; the
// doubling keeps re-seeds rare when more goroutines add at once than there
// are cells, so that some must share. A re-seed moves no count: Load sums
// the same cells.
func (c *Counter) Add(n uint64) {
	var probe byte
	s := atomic.LoadUint64(&c.seed)
	x := &c.c[uint64(uintptr(unsafe.Pointer(&probe))>>11)*(mult+s)>>(64-cellBits)] // cellOf, written out to keep Add inlinable
	if v := atomic.LoadUint64(&x.n); !atomic.CompareAndSwapUint64(&x.n, v, v+n) {
		atomic.AddUint64(&x.n, n)
		if m := atomic.AddUint32(&x.misses, 1); m&(m-1) == 0 && m >= firstReseed {
			atomic.CompareAndSwapUint64(&c.seed, s, s+seedStep)
		}
	}
}

// cellOf returns the cell for a stack address under a seed. Stacks are
// power-of-two-sized blocks of at least 2 KiB, so the address is taken in
// 2 KiB units, multiplied by mult plus the seed (an odd number), and the
// cell is the product's top bits. mult, the multiplier of the zero seed, is
// an odd constant whose multiples by 1, 2, 3, 4, 6, 8, 12, 16, 32 and 64 all
// fall between 1/8 and 7/8 of 2^64: then any four adjacent stacks of 2, 4 or
// 8 KiB, and any two adjacent stacks of up to 128 KiB, get different cells;
// and consecutive stacks of one size spread evenly over the cells. (The
// golden-ratio constant fails the first: adjacent 16 KiB stacks could share
// a cell.) Another seed gives another multiplier, under which two blocks
// that shared a cell share one again about as often as any two blocks do.
func cellOf(addr uintptr, seed uint64) uint64 {
	return Hash(addr, seed) >> (64 - cellBits)
}

// Load returns the sum of all adds that happened before it.
func (c *Counter) Load() uint64 {
	var s uint64
	for i := range c.c {
		s += atomic.LoadUint64(&c.c[i].n)
	}
	return s
}

// SeedStep is what a re-seed adds to a seed given to Hash (Counter's own
// re-seed adds the same): the next multiplier, under which blocks that
// shared a cell share one again only by chance.
const SeedStep = seedStep

// Hash returns the 64-bit product whose top bits pick a cell for a stack
// address under a seed, as Counter.Add does: with 1<<bits cells, the cell is
// Hash(addr, seed) >> (64 - bits). It is for other striped structures (a
// striped balance, say) that want Counter's spreading of goroutine stacks,
// with a seed of their own that they re-seed by adding SeedStep. See cellOf
// for the choice of multiplier.
func Hash(addr uintptr, seed uint64) uint64 {
	return uint64(addr>>11) * (mult + seed)
}
