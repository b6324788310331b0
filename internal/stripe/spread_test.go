package stripe

import (
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
					seen[cellOf(base+j*tc.stack+off)] = true
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
				c := cellOf(addr)
				if c >= cells {
					t.Fatalf("cellOf(%#x) = %d, out of range", addr, c)
				}
				if cellOf(addr+2047) != c {
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
