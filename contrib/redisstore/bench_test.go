package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// BenchmarkClaimComplete is the path of a first request: claim a fresh key,
// then complete it (two round trips to the Redis of WATERTIGHT_REDIS_ADDR).
func BenchmarkClaimComplete(b *testing.B) {
	s := newStore(b, sharedClient(b))
	ctx := context.Background()
	rec := sampleRecord("fp")
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprint("k", n.Add(1))
			c, err := s.Claim(ctx, key, "fp", time.Minute, time.Hour)
			if err != nil || c.State != idempotency.Claimed {
				b.Fatalf("%+v %v", c, err)
			}
			if err := s.Complete(ctx, key, c.Token, rec, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReplay is the path of a retry: one Claim that finds the stored
// record and decodes it.
func BenchmarkReplay(b *testing.B) {
	s := newStore(b, sharedClient(b))
	ctx := context.Background()
	c, err := s.Claim(ctx, "k", "fp", time.Minute, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, "k", c.Token, sampleRecord("fp"), time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := s.Claim(ctx, "k", "fp", time.Minute, time.Hour)
			if err != nil || c.State != idempotency.Completed {
				b.Fatalf("%+v %v", c, err)
			}
		}
	})
}
