package bulkhead

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/stripe"
)

// TestAcquiredTotalAcrossWraps drives the state word's acquisition count
// across its top-bit flips and its wrap, with the wraps counter both up to
// date and one flip behind (an acquirer between its CAS and its wraps.Add),
// and checks that the 64-bit total read back is exact.
func TestAcquiredTotalAcrossWraps(t *testing.T) {
	const active = 7 // permits held do not disturb the count
	for _, start := range []uint64{0, 1<<39 - 3, 1<<40 - 3, 3<<39 - 3, 5<<40 - 3} {
		total := start
		wraps := start >> fieldTopBit // the counter as acquirers keep it
		s := (total<<activeBits)&^activeMask | active
		for range 6 {
			lagging := crossesWrapBit(s)
			s += acquiredOne // one fast acquisition: the CAS
			total++
			if lagging {
				// Between the CAS and wraps.Add: a reader sees the old
				// wraps and the new word.
				if got := acquiredTotal(wraps, s); got != total {
					t.Fatalf("start %#x: lagging read = %#x, want %#x", start, got, total)
				}
				wraps++
			}
			if got := acquiredTotal(wraps, s); got != total {
				t.Fatalf("start %#x: read = %#x, want %#x", start, got, total)
			}
			if s&activeMask != active {
				t.Fatalf("the count spilled into the permits: %#x", s)
			}
		}
	}
}

func TestReleaseWithoutAcquireKeepsCount(t *testing.T) {
	b := newBulkhead(Config{MaxConcurrent: 2})
	b.TryAcquire()
	b.Release()
	func() {
		defer func() { _ = recover() }()
		b.Release()
	}()
	if s := b.Snapshot(); s.Acquired != 1 || s.Active != 0 {
		t.Fatalf("after a bad Release: %+v, want Acquired 1, Active 0", s)
	}
}

// TestCellShares checks the striping: a power-of-two number of cells, at
// most maxCells and at most MaxConcurrent, whose shares differ by at most
// one and sum to MaxConcurrent.
func TestCellShares(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 25, 1000, 1001, MaxConcurrentLimit} {
		b := newBulkhead(Config{MaxConcurrent: n})
		k := len(b.cells)
		if k&(k-1) != 0 || k > maxCells || k > n || (2*k <= min(maxCells, n)) {
			t.Fatalf("MaxConcurrent %d: %d cells", n, k)
		}
		var sum uint64
		for i := range b.cells {
			c := &b.cells[i]
			if c.share.Load() < uint64(n/k) || c.share.Load() > uint64(n/k+1) {
				t.Fatalf("MaxConcurrent %d: cell %d has share %d", n, i, c.share.Load())
			}
			sum += c.share.Load()
		}
		if sum != uint64(n) {
			t.Fatalf("MaxConcurrent %d: shares sum to %d", n, sum)
		}
		for range 100 { // every goroutine stack maps to a cell
			var probe [3000]byte
			if i := b.index(uintptr(unsafe.Pointer(&probe[len(probe)-1])), b.seed.Load()); i >= uint64(k) {
				t.Fatalf("MaxConcurrent %d: index %d of %d cells", n, i, k)
			}
			b.seed.Add(stripe.SeedStep)
		}
	}
	if s := unsafe.Sizeof(cell{}); s != 128 {
		t.Fatalf("a cell takes %d bytes, want 128", s)
	}
}

// cellCounts returns the permits held in each cell.
func cellCounts(b *Bulkhead) []uint64 {
	n := make([]uint64, len(b.cells))
	for i := range b.cells {
		n[i] = b.cells[i].state.Load() & activeMask
	}
	return n
}

// TestReleaseFromAnotherCell takes a permit in each cell in turn and gives it
// back with a plain Release, from a goroutine whose own cell is, for all but
// at most one of them, another: the permit must come back whatever the cell.
func TestReleaseFromAnotherCell(t *testing.T) {
	for _, n := range []int{8, 16, 13} {
		b := newBulkhead(Config{MaxConcurrent: n})
		for j := range b.cells {
			for range b.cells[j].share.Load() {
				if !b.take(j, acquiredOne+1) {
					t.Fatalf("could not take a permit in cell %d", j)
				}
			}
			for range b.cells[j].share.Load() {
				b.Release()
			}
			if s := b.Snapshot(); s.Active != 0 || s.Available != n {
				t.Fatalf("MaxConcurrent %d, cell %d: after the Releases %+v (cells %v)", n, j, s, cellCounts(b))
			}
		}
		// Exit with the ticket of a cell that another Release has emptied.
		_, tk, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b.release(tk.Seq - 1) // as a plain Release of another goroutine may
		if !b.TryAcquire() {
			t.Fatal("TryAcquire failed on an empty bulkhead")
		}
		if err := b.Exit(context.Background(), tk, nil); err != nil {
			t.Fatal(err)
		}
		if s := b.Snapshot(); s.Active != 0 || s.Acquired != uint64(n)+2 {
			t.Fatalf("MaxConcurrent %d: after Exit %+v (cells %v), want Active 0, Acquired %d", n, s, cellCounts(b), n+2)
		}
	}
}

// TestReleaseWithoutAcquirePanicsInEveryCell checks that a Release or Exit
// with no permit held panics whatever cell it starts from, changes nothing,
// and leaves the mutex free.
func TestReleaseWithoutAcquirePanicsInEveryCell(t *testing.T) {
	b := newBulkhead(Config{MaxConcurrent: 8, MaxWait: -1})
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Release without Acquire") {
				t.Fatalf("%s: recover() = %v, want a panic about Release without Acquire", what, r)
			}
			if !b.mu.TryLock() {
				t.Fatalf("%s: the panic left the mutex locked", what)
			}
			b.mu.Unlock()
		}()
		f()
	}
	mustPanic("Release on a new bulkhead", b.Release)
	for j := range b.cells {
		if !b.take(j, acquiredOne+1) {
			t.Fatalf("could not take a permit in cell %d", j)
		}
		b.Release()
		mustPanic(fmt.Sprintf("Release after a permit of cell %d came back", j), b.Release)
		mustPanic(fmt.Sprintf("Exit with a ticket of cell %d", j), func() {
			_ = b.Exit(context.Background(), watertight.Ticket{Seq: uint64(j) + 1}, nil)
		})
	}
	mustPanic("Exit with a ticket of no cell", func() {
		_ = b.Exit(context.Background(), watertight.Ticket{Seq: 100}, nil)
	})
	if s := b.Snapshot(); s.Active != 0 || s.Acquired != 8 {
		t.Fatalf("after the bad Releases: %+v, want Active 0, Acquired 8", s)
	}
	var zero Bulkhead
	mustPanicZero := func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("Release on the zero Bulkhead did not panic")
			}
		}()
		zero.Release()
	}
	mustPanicZero()
}

// TestFullHintNeverHidesFreePermit fills a bulkhead of eight cells, lets a
// refusal set the full hint, gives a permit back in each cell in turn and
// checks that it can be taken again at once.
func TestFullHintNeverHidesFreePermit(t *testing.T) {
	b := newBulkhead(Config{MaxConcurrent: 8})
	for range 8 {
		if !b.TryAcquire() {
			t.Fatalf("TryAcquire failed with cells %v", cellCounts(b))
		}
	}
	for j := range b.cells {
		if b.TryAcquire() {
			t.Fatalf("TryAcquire succeeded in a full bulkhead (cells %v)", cellCounts(b))
		}
		if b.fullHint.Load() == 0 {
			t.Fatal("a refusal in a full bulkhead of many cells did not set the full hint")
		}
		b.release(uint64(j)) // given back in cell j, which may not be the caller's
		if b.fullHint.Load() != 0 {
			t.Fatal("a Release did not clear the full hint")
		}
		if !b.TryAcquire() {
			t.Fatalf("TryAcquire failed with a permit free in cell %d (cells %v)", j, cellCounts(b))
		}
	}

	// The race that the second scan of tryOthers closes: a releaser gives
	// its permit back in the acquirer's own cell after the acquirer found it
	// full, and loads the hint before the acquirer sets it. The acquirer's
	// scan of the other cells finds them full; it sets the hint and must
	// still find the permit.
	for i := range b.cells {
		b.fullHint.Store(0)
		if !b.dec(&b.cells[i]) { // the releaser, whose load of the hint saw 0
			t.Fatalf("cell %d held no permit", i)
		}
		if got := b.tryOthers(i); got != i {
			t.Fatalf("tryOthers(%d) = %d with a permit free in cell %d", i, got, i)
		}
		if b.fullHint.Load() != 0 {
			t.Fatal("the full hint stayed set after a permit was found")
		}
	}
	for range 8 {
		b.Release()
	}
	checkIdle(t, b)
}

func checkIdle(t *testing.T, b *Bulkhead) {
	t.Helper()
	if s := b.Snapshot(); s.Active != 0 || s.Waiting != 0 || !b.idle() {
		t.Fatalf("not idle: %+v (cells %v)", s, cellCounts(b))
	}
}

// TestNoHiddenPermitWhenQuiet runs goroutines that take and give back
// permits of a bulkhead of eight cells, holding some at the end of each
// round; once they are all parked, a permit must be free to every caller
// exactly when fewer than MaxConcurrent are held. It would fail if the full
// hint could stay set over a free permit, or a scan miss a cell.
func TestNoHiddenPermitWhenQuiet(t *testing.T) {
	const (
		n       = 8
		workers = 6
		rounds  = 300
	)
	b := newBulkhead(Config{MaxConcurrent: n})
	var (
		start   [workers]chan struct{}
		parked  = make(chan int, workers)
		release [workers]chan struct{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		start[w], release[w] = make(chan struct{}), make(chan struct{})
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				<-start[w]
				held := 0
				for range 50 {
					if rng.IntN(2) == 0 && b.TryAcquire() {
						held++
					} else if held > 0 {
						b.Release()
						held--
					}
				}
				parked <- held
				<-release[w]
				for ; held > 0; held-- {
					b.Release()
				}
				parked <- 0
			}
		})
	}
	for r := range rounds {
		for w := range workers {
			start[w] <- struct{}{}
		}
		total := 0
		for range workers {
			total += <-parked
		}
		if s := b.Snapshot(); s.Active != total {
			t.Fatalf("round %d: Active %d, workers hold %d", r, s.Active, total)
		}
		// Try from goroutines of their own, whose cells differ.
		for range 4 {
			got := make(chan bool)
			go func() {
				ok := b.TryAcquire()
				if ok {
					b.Release()
				}
				got <- ok
			}()
			if ok := <-got; ok != (total < n) {
				t.Fatalf("round %d: TryAcquire = %v with %d of %d held (cells %v, hint %d)",
					r, ok, total, n, cellCounts(b), b.fullHint.Load())
			}
		}
		for w := range workers {
			release[w] <- struct{}{}
		}
		for range workers {
			<-parked
		}
		checkIdle(t, b)
	}
	wg.Wait()
}
