package bench

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// overheadBlock is the number of calls in one block of measureOverhead: at
// about 0.1 ms of wall time per loopback call (base-ns/call), a block takes
// a few milliseconds, short enough that the machine's state (clock speed,
// other processes, the garbage collector's cycle) rarely changes between two
// neighbouring blocks.
const overheadBlock = 64

// measureOverhead measures how much longer a call through wrapped takes than
// one through base, on a noisy machine. Side-by-side sub-benchmarks run
// seconds apart, and on a shared 2-core VM two runs of the same loopback
// benchmark differ by 5–15%, more than the few percent to be measured. Here
// the two alternate in blocks of overheadBlock calls (each block from
// GOMAXPROCS goroutines at once, as b.RunParallel would), in groups of four
// blocks in the order base, wrapped, wrapped, base, and each group gives one
// ratio: the wrapped blocks' time over the base blocks'. The ABBA order
// cancels what going first or second does to a block, and any drift that is
// linear over the group. It reports:
//
//   - overhead-%: the median of the per-group ratios, less 1, in percent;
//   - q1-% and q3-%: the quartiles of the same, for the spread;
//   - base-ns/call and wrapped-ns/call: each side's total time over its calls.
//
// One op is one call through each (ns/op is the sum of both), and allocs/op
// counts both calls' allocations.
func measureOverhead(b *testing.B, base, wrapped func() error) {
	b.Helper()
	g := runtime.GOMAXPROCS(0)
	var failed atomic.Int64
	var firstErr atomic.Value
	run := func(call func() error) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range g {
			n := overheadBlock / g
			if i < overheadBlock%g {
				n++
			}
			wg.Go(func() {
				for range n {
					if err := call(); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprint(err))
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	groups := max(1, (b.N+2*overheadBlock-1)/(2*overheadBlock))
	ratios := make([]float64, 0, groups)
	var baseTotal, wrappedTotal time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range groups {
		tb := run(base)
		tw := run(wrapped)
		tw += run(wrapped)
		tb += run(base)
		baseTotal += tb
		wrappedTotal += tw
		ratios = append(ratios, float64(tw)/float64(tb))
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d calls failed, the first with: %v", n, firstErr.Load())
	}
	slices.Sort(ratios)
	q := func(p float64) float64 { return (ratios[int(p*float64(len(ratios)-1)+0.5)] - 1) * 100 }
	b.ReportMetric(q(0.5), "overhead-%")
	b.ReportMetric(q(0.25), "q1-%")
	b.ReportMetric(q(0.75), "q3-%")
	calls := float64(groups * 2 * overheadBlock)
	b.ReportMetric(float64(baseTotal.Nanoseconds())/calls, "base-ns/call")
	b.ReportMetric(float64(wrappedTotal.Nanoseconds())/calls, "wrapped-ns/call")
}
