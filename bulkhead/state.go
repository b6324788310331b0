package bulkhead

// The state word. Counting acquisitions in a counter of their own would add
// an atomic add (and, with a striped counter, a random number) to every
// Acquire, as much again as the rest of the fast path. Instead the fast path
// counts them in the same word as the permits, with the same CAS:
//
//	bits 63..24: fast acquisitions, modulo 2^40
//	bits 23..0:  permits held (Active), at most MaxConcurrentLimit
//
// A permit taken adds acquiredOne+1, a permit given back subtracts 1. A
// Release without Acquire makes the low field wrap to activeMask, which
// Release detects.
//
// The 40-bit count wraps after 2^40 fast acquisitions (hours at full speed).
// To give an exact 64-bit total, Bulkhead.wraps counts how many times the
// count's top bit (bit 39 of the field) has flipped: the acquirer whose CAS
// flips it adds one to wraps just after. A reader loads wraps first, then
// the word: wraps is then either up to date or one flip behind, and the
// parity of wraps against the field's top bit says which (acquiredTotal).
// This holds as long as no acquirer lags 2^39 acquisitions between its CAS
// and its wraps.Add.
//
// Acquisitions of permits handed to waiters are counted apart, in
// acquiredSlow, once the waiter keeps the permit: the hand-over itself adds
// only 1, so a wait cancelled at that moment is not counted as acquired.
const (
	activeBits  = 24
	activeMask  = 1<<activeBits - 1
	acquiredOne = 1 << activeBits // one fast acquisition in the state word
	fieldTopBit = 39              // top bit of the 40-bit acquisition count
	belowTop    = 1<<fieldTopBit - 1
)

// crossesWrapBit reports whether adding one acquisition to the state word s
// flips the top bit of the acquisition count.
func crossesWrapBit(s uint64) bool { return (s>>activeBits+1)&belowTop == 0 }

// acquiredTotal returns the number of fast acquisitions from the wraps
// counter and the state word, wraps having been loaded first.
func acquiredTotal(wraps, s uint64) uint64 {
	field := s >> activeBits
	flips := wraps
	if flips&1 != field>>fieldTopBit { // wraps lags the flip the field shows
		flips++
	}
	return flips<<fieldTopBit | field&belowTop
}
