package stripe_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight/internal/stripe"
)

func TestZero(t *testing.T) {
	var c stripe.Counter
	if n := c.Load(); n != 0 {
		t.Errorf("zero Counter Load = %d", n)
	}
	c.Add(0)
	c.Add(3)
	c.Add(4)
	if n := c.Load(); n != 7 {
		t.Errorf("Load = %d, want 7", n)
	}
}

func TestConcurrentAddsSumExactly(t *testing.T) {
	var c stripe.Counter
	const goroutines, adds = 16, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range adds {
				c.Add(uint64(g + i%3))
			}
		})
	}
	wg.Wait()
	var want uint64
	for g := range goroutines {
		for i := range adds {
			want += uint64(g + i%3)
		}
	}
	if n := c.Load(); n != want {
		t.Errorf("Load = %d, want %d", n, want)
	}
}

// Load never goes back while adds run, and ends at the exact total.
func TestLoadMonotonic(t *testing.T) {
	var c stripe.Counter
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20000 {
				c.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		stop.Store(true)
		close(done)
	}()
	var last uint64
	for !stop.Load() {
		n := c.Load()
		if n < last {
			t.Fatalf("Load went back from %d to %d", last, n)
		}
		last = n
	}
	<-done
	if n := c.Load(); n != 80000 {
		t.Errorf("Load = %d, want 80000", n)
	}
}

func BenchmarkCounter(b *testing.B) {
	b.Run("stripe-add/parallel", func(b *testing.B) {
		b.ReportAllocs()
		var c stripe.Counter
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Add(1)
			}
		})
		if c.Load() != uint64(b.N) {
			b.Fatalf("Load = %d, want %d", c.Load(), b.N)
		}
	})
	b.Run("atomic-add/parallel", func(b *testing.B) {
		b.ReportAllocs()
		var c atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Add(1)
			}
		})
	})
	b.Run("stripe-add", func(b *testing.B) {
		b.ReportAllocs()
		var c stripe.Counter
		for b.Loop() {
			c.Add(1)
		}
	})
	b.Run("stripe-load", func(b *testing.B) {
		b.ReportAllocs()
		var c stripe.Counter
		c.Add(1)
		var s uint64
		for b.Loop() {
			s += c.Load()
		}
		_ = s
	})
}
