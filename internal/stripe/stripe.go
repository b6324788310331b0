// Package stripe provides a counter for hot paths that many goroutines bump
// at once: adds spread over cache-line-padded cells, so they rarely contend.
package stripe

import (
	"math/rand/v2"
	"sync/atomic"
)

const cells = 8 // a power of two

type cell struct {
	n atomic.Uint64
	_ [56]byte // keep each cell on its own cache line
}

// Counter is a monotonic counter whose Add is cheap under contention and
// whose Load is an approximate-in-time but exact-in-total sum. The zero value
// is zero and ready to use; a Counter must not be copied after first use.
type Counter struct {
	c [cells]cell
}

// Add adds n.
func (c *Counter) Add(n uint64) {
	c.c[rand.Uint32()&(cells-1)].n.Add(n)
}

// Load returns the sum of all adds that happened before it.
func (c *Counter) Load() uint64 {
	var s uint64
	for i := range c.c {
		s += c.c[i].n.Load()
	}
	return s
}
