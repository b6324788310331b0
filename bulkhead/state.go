package bulkhead

import (
	"sync/atomic"

	"github.com/watertight-go/watertight/internal/stripe"
)

// The permits are striped over cells, one per 128-byte block, so that
// goroutines running at once on different cores take and give back permits
// on cache lines of their own. With one state word for the whole bulkhead,
// every Acquire (load and compare-and-swap) and every Release (add) wrote one
// line that travelled between the cores on almost every call: on a 2-core VM,
// TryAcquire plus Release cost ~35 ns per call from two goroutines against
// ~16 ns from one, and retry → breaker → bulkhead in a pipeline ~46-52 ns.
// Striped, the same calls cost ~9 ns from two goroutines (x/sync's semaphore
// ~47 ns) and ~17 ns from one (a Release is now a load and a
// compare-and-swap rather than an add), the pipeline ~24 ns; a refusal
// costs ~4.5 ns from two goroutines (~4 ns before). (go test -bench in bench/
// and in this package, -cpu 1,2.) A bulkhead holds up to 8 cells: at most
// 1 KiB.
//
// A bulkhead of MaxConcurrent n has k cells, k the largest power of two at
// most min(maxCells, n). Cell i may hold at most share_i permits: n/k, plus
// one for the first n%k cells, so the shares sum to n and no more than n
// permits are ever held. Active is the sum of the cells. Every cell is below
// its share exactly when fewer than n permits are held, so a permit is free
// exactly when some cell has room: an acquirer that finds its own cell full
// looks at the others, and only when all of them are full is the bulkhead
// full. Then it sets the bulkhead's full hint, and later acquirers whose own
// cell is full refuse without a scan until a Release clears it (see
// tryOthers for why no free permit stays hidden); without the hint a refusal
// from two goroutines costs ~8 ns, ~15 ns from one.
//
// The cell of a goroutine is picked from the address of a variable on its
// stack and the bulkhead's seed, as stripe.Counter picks its cells (see
// stripe.Hash): goroutines running at once usually get different cells, and
// a goroutine keeps its cell. When two share one, compare-and-swaps on it
// fail; on the 8th failure of a cell and every power of two after, the seed
// moves on (stripe.SeedStep) and every goroutine's cell is picked anew. A
// re-seed moves no permit: a Release gives back a permit to its own cell if
// that cell holds one, and otherwise to any cell that does. The sum is what
// counts, and a cell never goes below zero. A Ticket from Enter carries the
// cell the permit came from, so Exit needs no hash.
//
// Each cell's state word counts the permits held in that cell and the fast
// acquisitions made there. Counting acquisitions in a counter of their own
// would add an atomic add to every Acquire, as much again as the rest of the
// fast path; instead the fast path counts them in the same word as the
// permits, with the same CAS:
//
//	bits 63..24: fast acquisitions in this cell, modulo 2^40
//	bits 23..0:  permits held in this cell, at most its share
//
// A permit taken adds acquiredOne+1, a permit given back subtracts 1 (by a
// compare-and-swap that never takes the low field below zero).
//
// The 40-bit count wraps after 2^40 fast acquisitions (hours at full speed).
// To give an exact 64-bit total, each cell's wraps counts how many times the
// count's top bit (bit 39 of the field) has flipped: the acquirer whose CAS
// flips it adds one to wraps just after. A reader loads wraps first, then
// the word: wraps is then either up to date or one flip behind, and the
// parity of wraps against the field's top bit says which (acquiredTotal).
// This holds as long as no acquirer lags 2^39 acquisitions between its CAS
// and its wraps.Add. Snapshot sums the cells' totals.
//
// Acquisitions of permits handed to waiters are counted apart, in
// acquiredSlow, once the waiter keeps the permit: the hand-over itself adds
// only 1 to a cell, so a wait cancelled at that moment is not counted as
// acquired. So are those of AcquireN for n > 1, whose permits are gathered
// one by one (1 each) and counted once.
const (
	activeBits  = 24
	activeMask  = 1<<activeBits - 1
	acquiredOne = 1 << activeBits // one fast acquisition in a state word
	fieldTopBit = 39              // top bit of the 40-bit acquisition count
	belowTop    = 1<<fieldTopBit - 1
)

// maxCells is the most cells a bulkhead has. Eight spread the goroutines of
// a machine of a few cores with few collisions; more would make the scan of
// a full bulkhead and Snapshot longer.
const maxCells = 8

// firstReseed is the number of failed compare-and-swaps on a cell after
// which it first re-seeds the bulkhead; it re-seeds again at every power of
// two above.
const firstReseed = 8

// cell is one stripe of the permits, alone on its 128-byte block (two cache
// lines: the adjacent-line prefetcher pairs them).
type cell struct {
	state  atomic.Uint64 // permits held (low bits) and fast acquisitions (high bits)
	wraps  atomic.Uint64 // flips of the acquisition count's top bit
	share  atomic.Uint64 // most permits the cell may hold; changed only under mu
	misses atomic.Uint32 // failed compare-and-swaps on state
	_      [100]byte
}

// newCells returns the cells of a bulkhead of n permits, n > 0, and the
// shift that turns a stripe.Hash into a cell index.
func newCells(n uint64) ([]cell, uint) {
	k, bits := uint64(1), uint(0)
	for k*2 <= min(maxCells, n) {
		k *= 2
		bits++
	}
	cells := make([]cell, k)
	for i := range cells {
		cells[i].share.Store(evenShare(n, k, uint64(i)))
	}
	return cells, 64 - bits // a shift by 64 gives 0: one cell
}

// evenShare is the share of cell i of k in the even layout of n permits:
// n/k, plus one for the first n%k cells.
func evenShare(n, k, i uint64) uint64 {
	if i < n%k {
		return n/k + 1
	}
	return n / k
}

// index returns the cell of the goroutine whose stack holds addr under seed.
// It may be out of range only for the zero Bulkhead, which has no cells.
func (b *Bulkhead) index(addr uintptr, seed uint64) uint64 {
	return stripe.Hash(addr, seed) >> b.shift
}

// missed counts a failed compare-and-swap on c, and re-seeds on the
// firstReseed-th and every power of two after. seed is the seed the caller
// picked c under: of several goroutines that see the same collision, one
// moves the seed on.
func (b *Bulkhead) missed(c *cell, seed uint64) {
	if len(b.cells) == 1 {
		return // nowhere to move to
	}
	if m := c.misses.Add(1); m >= firstReseed && m&(m-1) == 0 {
		b.seed.CompareAndSwap(seed, seed+stripe.SeedStep)
	}
}

// crossesWrapBit reports whether adding one acquisition to the state word s
// flips the top bit of the acquisition count.
func crossesWrapBit(s uint64) bool { return (s>>activeBits+1)&belowTop == 0 }

// acquiredTotal returns the number of fast acquisitions from a cell's wraps
// counter and state word, wraps having been loaded first.
func acquiredTotal(wraps, s uint64) uint64 {
	field := s >> activeBits
	flips := wraps
	if flips&1 != field>>fieldTopBit { // wraps lags the flip the field shows
		flips++
	}
	return flips<<fieldTopBit | field&belowTop
}

// Live resizing (SetMaxConcurrent). The number of cells is fixed by New; a
// resize changes the shares. Lowering never takes a permit back, so right
// after it a cell may hold more permits than its new share (it is over),
// and shares summing to the new limit no longer bound what is held: a cell
// below its share could grant while the over cells keep the total at the
// limit. What the shares must keep is the bound
//
//	Σ max(active_i, share_i) <= MaxConcurrent
//
// (a grant in cell i needs active_i < share_i, so after it the total is at
// most that sum). shares picks shares that keep it, as close to the even
// layout as the permits held allow: the excess of the over cells is cut
// from the shares of the cells with room. When even that cannot make room
// (more permits held than the new limit: debt = held - limit), each cell's
// share is its holding minus the debt, at least zero: a cell can then grant
// only after giving back more than the debt, and however the cells give
// back, no grant takes the total above the limit.
//
// Any layout other than the even one is pending: the bulkhead's hint word
// says so, and every Release that sees it takes the mutex and computes the
// shares again (rebalanceLocked), so that permits given back by an over
// cell become room elsewhere, and the layout returns to the even one once
// no cell is over. Without a resize the layout is always even and Release
// pays nothing more than the load of the hint it already made.
//
// A share is lowered while acquirers run: one that loaded the old share may
// still grant against it. So every lowering is followed by a bump of the
// cell's state word (an acquisition counted in bumps, which Snapshot
// subtracts): an acquirer's compare-and-swap that comes after the bump
// loaded the state after it, and the share after that, so it sees the new
// share; one that came before is counted in the holdings read after the
// bump. rebalanceLocked lowers, bumps and reads again until no share needs
// lowering; raising needs no bump, since an acquirer that read the lower
// share takes less than the new one allows.

// Bits of Bulkhead.fullHint.
const (
	hintFull    = 1 // every cell was found full: see tryOthers
	hintPending = 2 // the shares are not the even layout: see shares
)

// shares sets d to the shares of a bulkhead of n permits whose cells hold
// a, and reports whether they are pending (not the even layout, or a cell
// holds more than its even share). len(d) == len(a) > 0.
func shares(n uint64, a, d []uint64) bool {
	k := uint64(len(a))
	var held uint64
	for _, x := range a {
		held += x
	}
	pending := false
	if held >= n {
		debt := held - n
		for j, x := range a {
			d[j] = x - min(x, debt)
			e := evenShare(n, k, uint64(j))
			pending = pending || d[j] != e || x > e
		}
		return pending
	}
	var excess uint64
	for j, x := range a {
		d[j] = evenShare(n, k, uint64(j))
		if x > d[j] {
			excess += x - d[j]
		}
	}
	pending = excess > 0
	for j, x := range a {
		if excess == 0 {
			break
		}
		if x < d[j] {
			cut := min(excess, d[j]-x)
			d[j] -= cut
			excess -= cut
		}
	}
	return pending
}

// rebalanceLocked sets the cells' shares for the current limit (see
// shares), lowering first and raising last. b.mu is held; the caller hands
// any room made to waiters.
func (b *Bulkhead) rebalanceLocked() {
	n := b.max.Load()
	k := len(b.cells)
	var a, d [maxCells]uint64
	for {
		for j := range b.cells {
			a[j] = b.cells[j].state.Load() & activeMask
		}
		pending := shares(n, a[:k], d[:k])
		lowered := false
		for j := range b.cells {
			if c := &b.cells[j]; d[j] < c.share.Load() {
				c.share.Store(d[j])
				b.bump(c)
				lowered = true
			}
		}
		if lowered {
			continue // read the holdings again: see above
		}
		for j := range b.cells {
			b.cells[j].share.Store(d[j])
		}
		// Room may have been made without a Release: a full hint set before
		// would hide it (see tryOthers).
		b.fullHint.And(^uint32(hintFull))
		if !pending {
			b.fullHint.And(^uint32(hintPending))
			return
		}
		if b.fullHint.Load()&hintPending != 0 {
			return // every Release since it was set comes here after us
		}
		b.fullHint.Or(hintPending)
		// A Release that loaded the hint before it was set gave back its
		// permit before the loads below: compute again if one did.
		again := false
		for j := range b.cells {
			again = again || b.cells[j].state.Load()&activeMask < a[j]
		}
		if !again {
			return
		}
	}
}

// bump changes c's state word without changing the permits it holds: it
// counts one acquisition, which Snapshot takes off again (bumps is added to
// first, so that a Snapshot never counts a bump as an acquisition; it may
// count one acquisition fewer for a moment). b.mu is held.
func (b *Bulkhead) bump(c *cell) {
	b.bumps.Add(1)
	for {
		s := c.state.Load()
		if c.state.CompareAndSwap(s, s+acquiredOne) {
			if crossesWrapBit(s) {
				c.wraps.Add(1)
			}
			return
		}
	}
}
