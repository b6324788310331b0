package fallback_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight/fallback"
)

//go:noinline
func work(context.Context) (int, error) { return 1, nil }

var errBench = errors.New("down")

//go:noinline
func broken(context.Context) (int, error) { return 0, errBench }

// BenchmarkSuccess is the success path: the function called directly, through
// a chain without a cache, and through a chain that records into a stale
// cache (one key per goroutine, so the shards' locks are rarely shared).
func BenchmarkSuccess(b *testing.B) {
	ctx := context.Background()
	plain := mustChain(b, fallback.Config{}, fallback.Default(0))
	cache := mustCache[int](b, fallback.CacheConfig{})
	stale := mustChain(b, fallback.Config{}, fallback.Stale(cache), fallback.Default(0))
	for _, tc := range []struct {
		name string
		run  func(key string) (int, error)
	}{
		{"direct", func(string) (int, error) { return work(ctx) }},
		{"chain", func(key string) (int, error) { return plain.Do(ctx, key, work) }},
		{"chain+stale", func(key string) (int, error) { return stale.Do(ctx, key, work) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.run("k"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var g atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := "k" + strconv.FormatInt(g.Add(1), 10)
				for pb.Next() {
					if _, err := tc.run(key); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkFallbackUsed is the failure path: a stale value served, and a
// default.
func BenchmarkFallbackUsed(b *testing.B) {
	ctx := context.Background()
	cache := mustCache[int](b, fallback.CacheConfig{})
	cache.Put("k", 1)
	stale := mustChain(b, fallback.Config{}, fallback.Stale(cache))
	def := mustChain(b, fallback.Config{}, fallback.Default(1))
	for _, tc := range []struct {
		name  string
		chain *fallback.Chain[int]
	}{{"stale", stale}, {"default", def}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if v, err := tc.chain.Do(ctx, "k", broken); v != 1 || err != nil {
						b.Error(v, err)
						return
					}
				}
			})
		})
	}
}
