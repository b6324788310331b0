package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	fsfallback "github.com/failsafe-go/failsafe-go/fallback"

	"github.com/watertight-go/watertight/fallback"
)

// newFallbackChain is a chain with a default value: no cache, so the success
// path records nothing.
func newFallbackChain(tb testing.TB) *fallback.Chain[int] {
	tb.Helper()
	c, err := fallback.New(fallback.Config{Name: "bench"}, fallback.Default(-1))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// newStaleChain is a chain that serves last-known-good values, then a
// default: every success is recorded into the cache.
func newStaleChain(tb testing.TB) *fallback.Chain[int] {
	tb.Helper()
	cache, err := fallback.NewLastKnownGood[int](fallback.CacheConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := fallback.New(fallback.Config{Name: "bench"}, fallback.Stale(cache), fallback.Default(-1))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkFallback is a fallback on the success path: the function
// succeeds, so this is what the fallback costs when nothing fails.
// "direct" calls the function with no fallback; "watertight" is a chain with
// a default value; "watertight-stale" a chain that also records each success
// as the last known good value (one key per goroutine); "failsafe-go" is
// failsafe-go's fallback with a result.
func BenchmarkFallback(b *testing.B) {
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		var t tally
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sum, wrong int64
			for pb.Next() {
				v, err := work(ctx)
				sum += int64(v)
				if err != nil {
					wrong++
				}
			}
			t.add(sum, wrong)
		})
		t.check(b)
	})
	b.Run("watertight", func(b *testing.B) {
		benchChain(b, ctx, newFallbackChain(b))
	})
	b.Run("watertight-stale", func(b *testing.B) {
		benchChain(b, ctx, newStaleChain(b))
	})
	b.Run("failsafe-go", func(b *testing.B) {
		benchFailsafe(b, failsafe.With[int](fsfallback.NewWithResult(-1)).WithContext(ctx))
	})
}

// benchChain measures a fallback chain on the success path, each goroutine
// with a key of its own.
func benchChain(b *testing.B, ctx context.Context, c *fallback.Chain[int]) {
	var t tally
	var g atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := "key-" + strconv.FormatInt(g.Add(1), 10)
		var sum, wrong int64
		for pb.Next() {
			v, err := c.Do(ctx, key, work)
			sum += int64(v)
			if err != nil || v != 1 {
				wrong++
			}
		}
		t.add(sum, wrong)
	})
	t.check(b)
}

// TestFallbackSanity checks what BenchmarkFallback assumes: each fallback
// passes a success through and answers -1 when the function fails.
func TestFallbackSanity(t *testing.T) {
	ctx := context.Background()
	failing := func(context.Context) (int, error) { return 0, errBoom }
	for name, c := range map[string]*fallback.Chain[int]{"watertight": newFallbackChain(t), "watertight-stale": newStaleChain(t)} {
		if v, err := c.Do(ctx, "cold", work); v != 1 || err != nil {
			t.Errorf("%s: success = %d, %v", name, v, err)
		}
		if v, err := c.Do(ctx, "other", failing); v != -1 || err != nil {
			t.Errorf("%s: failure = %d, %v; want the default -1", name, v, err)
		}
	}
	// The stale chain serves the recorded value.
	c := newStaleChain(t)
	c.Do(ctx, "k", work)
	if v, err := c.Do(ctx, "k", failing); v != 1 || err != nil {
		t.Errorf("stale: failure = %d, %v; want the recorded 1", v, err)
	}
	exec := failsafe.With[int](fsfallback.NewWithResult(-1)).WithContext(ctx)
	if v, err := exec.GetWithExecution(workExec); v != 1 || err != nil {
		t.Errorf("failsafe-go: success = %d, %v", v, err)
	}
	if v, err := exec.Get(func() (int, error) { return 0, errBoom }); v != -1 || err != nil {
		t.Errorf("failsafe-go: failure = %d, %v; want -1", v, err)
	}
}
