package stripe

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// Goroutines started together get stacks next to each other: adjacent
// stacks must pick different cells. (The first stack-address picker, at
// 8 KiB granularity, put four adjacent 2 KiB stacks in one cell; the
// golden-ratio multiplier let adjacent 16 KiB stacks share one.)
func TestCellOfAdjacentStacks(t *testing.T) {
	for _, tc := range []struct {
		stack    uintptr // stack size
		adjacent int     // how many adjacent stacks must get distinct cells
	}{
		{2 << 10, 4},
		{4 << 10, 4},
		{8 << 10, 4},
		{16 << 10, 2},
		{32 << 10, 2},
		{64 << 10, 2},
		{128 << 10, 2},
	} {
		for base := uintptr(0xc000000000); base < 0xc000000000+4096*tc.stack; base += tc.stack {
			for _, off := range []uintptr{0, tc.stack / 2, tc.stack - 1} {
				seen := map[uint64]bool{}
				for j := range uintptr(tc.adjacent) {
					seen[cellOf(base+j*tc.stack+off, 0)] = true
				}
				if len(seen) != tc.adjacent {
					t.Fatalf("%d adjacent %d KiB stacks from %#x (offset %d) share cells: %d distinct",
						tc.adjacent, tc.stack>>10, base, off, len(seen))
				}
			}
		}
	}
}

// Addresses in one 2 KiB block share a cell; consecutive stacks of one size
// spread evenly over the cells.
func TestCellOfSpread(t *testing.T) {
	for _, stack := range []uintptr{2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10} {
		for _, n := range []int{256, 1 << 14} {
			var count [cells]int
			for i := range uintptr(n) {
				addr := 0xc000000000 + i*stack
				c := cellOf(addr, 0)
				if c >= cells {
					t.Fatalf("cellOf(%#x, 0) = %d, out of range", addr, c)
				}
				if cellOf(addr+2047, 0) != c {
					t.Fatalf("one 2 KiB block maps to two cells")
				}
				count[c]++
			}
			for i, k := range count {
				if want := n / cells; k < want*95/100 || k > want*105/100 {
					t.Errorf("%d stacks of %d KiB: cell %d got %d: %v", n, stack>>10, i, k, count)
				}
			}
		}
	}
}

// Each cell has a cache line of its own.
func TestCellSize(t *testing.T) {
	if size := unsafe.Sizeof(cell{}); size < 64 || size%64 != 0 {
		t.Errorf("cell size = %d, want a multiple of 64", size)
	}
}

// Under the seeds of the first re-seeds, consecutive stacks still spread
// over the cells (less evenly than under the zero seed, whose multiplier was
// picked for it); and two blocks that share a cell under one seed share one
// under the next about as often as any two blocks (1/8), whatever their
// distance, which is what a re-seed is for.
func TestCellOfSeeds(t *testing.T) {
	seed := uint64(0)
	shared, pairs := 0, 0
	for range 8 {
		seed += seedStep
		for _, stack := range []uintptr{2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10} {
			var count [cells]int
			const n = 1 << 12
			for i := range uintptr(n) {
				count[cellOf(0xc000000000+i*stack, seed)]++
			}
			for i, k := range count {
				if want := n / cells; k < want*75/100 || k > want*125/100 {
					t.Errorf("seed %#x, %d stacks of %d KiB: cell %d got %d: %v", seed, n, stack>>10, i, k, count)
				}
			}
		}
		for _, base := range []uintptr{0xc000000000, 0x7f3a12345800} {
			for d := uintptr(1); d < 1<<12; d++ {
				for _, dist := range []uintptr{d, d * 4099, d << 18} {
					a, b := base, base+dist*2048
					if cellOf(a, seed-seedStep) == cellOf(b, seed-seedStep) {
						pairs++
						if cellOf(a, seed) == cellOf(b, seed) {
							shared++
						}
					}
				}
			}
		}
	}
	if r := float64(shared) / float64(pairs); r < 0.08 || r > 0.17 {
		t.Errorf("%d of %d pairs of blocks that shared a cell share one after a re-seed (%.3f), want about 1/8", shared, pairs, r)
	}
}

// Add picks the cell cellOf picks (it writes the expression out to stay
// inlinable): the cell that gets an add is the one of the caller's stack
// block, under the counter's seed.
func TestAddUsesCellOf(t *testing.T) {
	seed := uint64(0)
	for range 32 {
		var c Counter
		c.seed = seed
		var local byte
		c.Add(1) // inlined: its probe is in this frame, next to local
		addr := uintptr(unsafe.Pointer(&local))
		got := -1
		for i := range c.c {
			if c.c[i].n == 1 {
				got = i
			}
		}
		want := map[uint64]bool{cellOf(addr, seed): true, cellOf(addr-2048, seed): true, cellOf(addr+2048, seed): true}
		if !want[uint64(got)] {
			t.Fatalf("seed %#x: the add went to cell %d, want one of %v", seed, got, want)
		}
		seed += seedStep
	}
}

// Two goroutines whose stacks share a cell re-seed the counter: the
// compare-and-swaps of their adds fail, and the 8th failure of the cell
// changes the seed. Every add is counted.
func TestCollisionReseeds(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 || runtime.NumCPU() < 2 {
		t.Skip("needs two goroutines running at once")
	}
	var c Counter
	// A seed that makes the multiplier 1: every stack below 2^75 is in cell
	// 0, so the two goroutines share it.
	const one = -(mult - 1) & (1<<64 - 1)
	c.seed = one
	const maxAdds = 1 << 26
	var total [2]uint64
	var ready atomic.Int32
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			// Start together: both goroutines are running when the adds begin.
			ready.Add(1)
			for ready.Load() < 2 {
			}
			for total[g] < maxAdds && atomic.LoadUint64(&c.seed) == one {
				c.Add(1)
				total[g]++
			}
		})
	}
	wg.Wait()
	if c.seed == one {
		t.Errorf("two goroutines sharing a cell made %d adds without a re-seed", total[0]+total[1])
	}
	if n := c.Load(); n != total[0]+total[1] {
		t.Errorf("Load = %d, want %d", n, total[0]+total[1])
	}
}
