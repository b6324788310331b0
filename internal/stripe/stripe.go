// Package stripe provides a counter for hot paths that many goroutines bump
// at once: adds spread over cache-line-padded cells, so they rarely contend.
package stripe

import (
	"sync/atomic"
	"unsafe"
)

const cells = 8 // a power of two

type cell struct {
	n atomic.Uint64
	_ [120]byte // keep each cell on its own cache line, whatever the alignment
}

// Counter is a monotonic counter whose Add is cheap under contention and
// whose Load is an approximate-in-time but exact-in-total sum. The zero value
// is zero and ready to use; a Counter must not be copied after first use.
type Counter struct {
	c [cells]cell
}

// Add adds n.
//
// The cell is chosen from the address of a variable on the caller's stack:
// goroutine stacks are separate, power-of-two-sized blocks, so goroutines
// running at once on different cores almost always pick different cells,
// for the price of a shift (math/rand/v2 costs about 13 ns here, more than
// the contention it would avoid).
func (c *Counter) Add(n uint64) {
	var probe byte
	i := uintptr(unsafe.Pointer(&probe)) >> 13 // stacks start at 8 KiB
	c.c[(i^i>>3)&(cells-1)].n.Add(n)
}

// Load returns the sum of all adds that happened before it.
func (c *Counter) Load() uint64 {
	var s uint64
	for i := range c.c {
		s += c.c[i].n.Load()
	}
	return s
}
