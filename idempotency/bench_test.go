package idempotency_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

func BenchmarkNewKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = idempotency.NewKey()
	}
}

func BenchmarkParseKey(b *testing.B) {
	v := `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := idempotency.ParseKey(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint1KiB(b *testing.B) {
	body := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = idempotency.Fingerprint("POST", "/v1/charges", body)
	}
}

// A first request: claim a fresh key and complete it with a 256-byte body.
func BenchmarkMemoryStoreClaimComplete(b *testing.B) {
	s, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: 10000})
	rec := idempotency.Record{Status: 200, Body: make([]byte, 256), Created: time.Now()}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := strconv.Itoa(i)
		i++
		c, err := s.Claim(bg, k, "fp", time.Minute, time.Hour)
		if err != nil || c.State != idempotency.Claimed {
			b.Fatal(c, err)
		}
		if err := s.Complete(bg, k, c.Token, rec, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// A retry: replay a stored 256-byte result.
func BenchmarkMemoryStoreReplay(b *testing.B) {
	s, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	c, _ := s.Claim(bg, "k", "fp", time.Minute, time.Hour)
	_ = s.Complete(bg, "k", c.Token, idempotency.Record{Status: 200, Body: make([]byte, 256)}, time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := s.Claim(bg, "k", "fp", time.Minute, time.Hour); c.State != idempotency.Completed {
			b.Fatal(c.State)
		}
	}
}

func BenchmarkMemoryStoreClaimCompleteParallel(b *testing.B) {
	s, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: 10000})
	rec := idempotency.Record{Status: 200, Body: make([]byte, 256)}
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := fmt.Sprint(n.Add(1))
			c, err := s.Claim(bg, k, "fp", time.Minute, time.Hour)
			if err != nil || c.State != idempotency.Claimed {
				b.Fatal(c, err)
			}
			if err := s.Complete(bg, k, c.Token, rec, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	})
}
