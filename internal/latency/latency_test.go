package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func mustNew(t testing.TB, cfg Config) *Tracker {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: -1}, "latency: Config.Window must be >= 0"},
		{Config{Slices: -1}, "latency: Config.Slices must be in [0, 64]"},
		{Config{Slices: MaxSlices + 1}, "latency: Config.Slices must be in [0, 64]"},
		{Config{Window: time.Microsecond, Slices: 2}, "latency: Config.Window/Config.Slices must be at least 1µs"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error starting %q", tc.cfg, err, tc.want)
		}
	}
	tr := mustNew(t, Config{})
	if got := tr.Config(); got != DefaultConfig() {
		t.Errorf("Config() = %+v, want %+v", got, DefaultConfig())
	}
}

// The buckets tile the durations from 0 to MaxDuration without gaps or
// overlaps, each at most 1/16 of its lower bound wide, so that its middle is
// within 1/32 of any value in it.
func TestBuckets(t *testing.T) {
	var next uint64
	for i := range numBuckets {
		lo, w := bounds(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if i >= 2*sub && w*sub > lo {
			t.Fatalf("bucket %d: width %d > lower bound %d / %d", i, w, lo, sub)
		}
		for _, v := range []uint64{lo, lo + w/2, lo + w - 1} {
			if got := bucketOf(time.Duration(v)); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
			checkClose(t, "middle", middle(i), time.Duration(v))
		}
		next = lo + w
	}
	if next-1 != uint64(MaxDuration) {
		t.Fatalf("the last bucket ends at %d, want MaxDuration %d", next-1, MaxDuration)
	}
	if bucketOf(-5) != 0 || bucketOf(MaxDuration*4) != numBuckets-1 {
		t.Fatal("negative or overlong durations not clamped")
	}
}

// checkClose fails unless got is within 1/32 of want.
func checkClose(t testing.TB, what string, got, want time.Duration) {
	t.Helper()
	if diff := math.Abs(float64(got - want)); diff > float64(want)/32 {
		t.Fatalf("%s = %v, want %v within 1/32 (off by %.2f%%)", what, got, want, 100*diff/float64(want))
	}
}

// exact returns the sample of rank ⌈q·n⌉ among the sorted samples.
func exact(sorted []time.Duration, q float64) time.Duration {
	return sorted[rankOf(q, uint64(len(sorted)))-1]
}

func TestQuantileAgainstExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() time.Duration{
		// Log-normal around 10ms: a typical service.
		"lognormal": func() time.Duration {
			return time.Duration(float64(10*time.Millisecond) * math.Exp(0.5*rng.NormFloat64()))
		},
		// Mostly 10ms with 1% stalls of about a second: the hedging scenario.
		"stalls": func() time.Duration {
			if rng.IntN(100) == 0 {
				return time.Second + time.Duration(rng.IntN(int(100*time.Millisecond)))
			}
			return 8*time.Millisecond + time.Duration(rng.IntN(int(4*time.Millisecond)))
		},
		"uniform-small": func() time.Duration { return time.Duration(rng.IntN(1000)) },
		"spread":        func() time.Duration { return time.Duration(rng.Int64N(int64(time.Hour))) },
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			tr := mustNew(t, Config{Window: time.Hour}) // nothing expires during the test
			samples := make([]time.Duration, 20000)
			for i := range samples {
				samples[i] = gen()
				tr.Record(samples[i])
			}
			slices.Sort(samples)
			for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
				want := min(exact(samples, q), MaxDuration)
				checkClose(t, "Quantile", tr.Quantile(q), want)
			}
			if got := tr.Count(); got != uint64(len(samples)) {
				t.Errorf("Count() = %d, want %d", got, len(samples))
			}
		})
	}
}

func TestEmptyAndOddQuantiles(t *testing.T) {
	tr := mustNew(t, Config{})
	if d, n := tr.QuantileCount(0.5); d != 0 || n != 0 {
		t.Fatalf("empty tracker: QuantileCount = %v, %d; want 0, 0", d, n)
	}
	tr.Record(100 * time.Millisecond)
	tr.Record(-time.Second) // counts as 0
	for _, q := range []float64{math.NaN(), -1, 0} {
		if got := tr.Quantile(q); got != 0 {
			t.Errorf("Quantile(%v) = %v, want the smallest (0)", q, got)
		}
	}
	checkClose(t, "Quantile(2)", tr.Quantile(2), 100*time.Millisecond)
}

// A tracker forgets a slice at a time: samples stay for between
// Window·(Slices−1)/Slices and Window.
func TestRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := mustNew(t, Config{Window: 10 * time.Second, Slices: 5}) // 2s slices
		for range 10 {
			tr.Record(time.Millisecond)
		}
		time.Sleep(10*time.Second - time.Nanosecond) // still in the window
		if got := tr.Count(); got != 10 {
			t.Fatalf("after 10s-1ns: Count() = %d, want 10", got)
		}
		for range 30 {
			tr.Record(time.Second)
		}
		if got := tr.Quantile(0.5); got < 900*time.Millisecond {
			t.Fatalf("p50 with 10 fast and 30 slow samples = %v, want about 1s", got)
		}
		time.Sleep(time.Nanosecond) // t = 10s: the first slice falls out
		if got := tr.Count(); got != 30 {
			t.Fatalf("after the first slice expired: Count() = %d, want 30", got)
		}
		checkClose(t, "Quantile(0)", tr.Quantile(0), time.Second)
		tr.Record(5 * time.Millisecond) // period 5 reuses (and clears) the first slice
		if got := tr.Count(); got != 31 {
			t.Fatalf("after reuse of the first slice: Count() = %d, want 31", got)
		}
		checkClose(t, "Quantile(0)", tr.Quantile(0), 5*time.Millisecond)
		time.Sleep(10 * time.Second) // everything expired
		if got := tr.Count(); got != 0 {
			t.Fatalf("after a whole window of silence: Count() = %d, want 0", got)
		}
		if got := tr.Quantile(0.99); got != 0 {
			t.Fatalf("after a whole window of silence: Quantile = %v, want 0", got)
		}
	})
}

// A Record stamped before the period its slice now holds is dropped, not
// allowed to clear the newer data.
func TestLateRecordDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := mustNew(t, Config{Window: 4 * time.Second, Slices: 4})
		old := tr.Now()
		time.Sleep(4 * time.Second) // same slice index, four periods later
		tr.Record(time.Millisecond)
		tr.RecordAt(old, time.Hour)
		if got := tr.Count(); got != 1 {
			t.Fatalf("Count() = %d, want 1", got)
		}
		checkClose(t, "Quantile(1)", tr.Quantile(1), time.Millisecond)
	})
}

func TestRecordSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := mustNew(t, Config{})
		start := tr.Now()
		time.Sleep(40 * time.Millisecond)
		if d := tr.RecordSince(start); d != 40*time.Millisecond {
			t.Fatalf("RecordSince = %v, want 40ms", d)
		}
		checkClose(t, "Quantile(0.5)", tr.Quantile(0.5), 40*time.Millisecond)
	})
}

// Records from many goroutines, while the slices rotate and readers read,
// are all counted (run with -race).
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := mustNew(t, Config{Window: time.Hour, Slices: 60})
		const writers, each = 8, 2000
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					tr.Record(time.Duration(w*each+i) * time.Microsecond)
					if i%500 == 0 {
						time.Sleep(time.Minute) // into the next slice
					}
				}
			})
		}
		wg.Go(func() {
			for range 100 {
				tr.Quantile(0.9)
				time.Sleep(time.Second)
			}
		})
		wg.Wait()
		if got := tr.Count(); got != writers*each {
			t.Fatalf("Count() = %d, want %d", got, writers*each)
		}
	})
}

func TestRecordDoesNotAllocate(t *testing.T) {
	tr := mustNew(t, Config{})
	if n := testing.AllocsPerRun(1000, func() { tr.Record(3 * time.Millisecond) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { tr.Quantile(0.95) }); n != 0 {
		t.Fatalf("Quantile allocates %v times", n)
	}
}

func FuzzBucket(f *testing.F) {
	for _, v := range []int64{0, 1, 31, 32, 33, 1000, 1 << 20, int64(MaxDuration), math.MaxInt64, -1} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		d := time.Duration(v)
		i := bucketOf(d)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
		}
		c := min(max(d, 0), MaxDuration)
		lo, w := bounds(i)
		if uint64(c) < lo || uint64(c) >= lo+w {
			t.Fatalf("bucketOf(%d) = %d = [%d, %d), does not hold it", v, i, lo, lo+w)
		}
		if c > 0 {
			checkClose(t, "middle", middle(i), c)
		}
	})
}

// TestSpan: the window covers the time since New until it is full, then the
// whole window less the unstarted part of the current slice.
func TestSpan(t *testing.T) {
	tr, err := New(Config{Window: 10 * time.Second, Slices: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ now, want time.Duration }{
		{0, 0},
		{time.Second, time.Second},
		{7 * time.Second, 7 * time.Second},
		{9 * time.Second, 9 * time.Second},
		{11 * time.Second, 9 * time.Second}, // 4 whole slices of 2s + 1s of the fifth
		{12 * time.Second, 8 * time.Second}, // a new slice just began
		{13500 * time.Millisecond, 9500 * time.Millisecond},
	} {
		if got := tr.Span(Stamp(c.now)); got != c.want {
			t.Errorf("Span(%v) = %v, want %v", c.now, got, c.want)
		}
	}
}
