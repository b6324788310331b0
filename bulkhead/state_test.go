package bulkhead

import "testing"

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
