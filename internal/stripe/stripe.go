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
// goroutine stacks are separate blocks, so goroutines running at once on
// different cores usually pick different cells, for the price of a multiply
// (math/rand/v2 costs about 13 ns here, more than the contention it would
// avoid). Goroutines started together get adjacent stacks, which cellOf
// keeps apart. Two goroutines whose stacks happen to map to one cell share it
// for as long as their stacks stay where they are: the price of picking
// without per-add randomness.
func (c *Counter) Add(n uint64) {
	var probe byte
	c.c[cellOf(uintptr(unsafe.Pointer(&probe)))].n.Add(n)
}

// cellOf returns the cell for a stack address. Stacks are power-of-two-sized
// blocks of at least 2 KiB, so the address is taken in 2 KiB units and
// multiplied by an odd constant whose multiples by 1, 2, 3, 4, 6, 8, 12, 16,
// 32 and 64 all fall between 1/8 and 7/8 of 2^64: then any four adjacent
// stacks of 2, 4 or 8 KiB, and any two adjacent stacks of up to 128 KiB, get
// different cells; and consecutive stacks of one size spread evenly over the
// cells. (The golden-ratio constant fails the first: adjacent 16 KiB stacks
// could share a cell.)
func cellOf(addr uintptr) uint64 {
	return uint64(addr>>11) * 0x99FF79B97F4A7C15 >> (64 - cellBits)
}

// Load returns the sum of all adds that happened before it.
func (c *Counter) Load() uint64 {
	var s uint64
	for i := range c.c {
		s += c.c[i].n.Load()
	}
	return s
}
