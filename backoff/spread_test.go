package backoff

import (
	"testing"
	"time"
)

func TestSpreadBounds(t *testing.T) {
	d := 10 * time.Second
	for _, frac := range []float64{0.1, 0.5, 1, 3} {
		f := min(frac, 1)
		lo, hi := time.Duration(float64(d)*(1-f)), time.Duration(float64(d)*(1+f))
		seenLow, seenHigh := false, false
		for range 2000 {
			got := Spread(d, frac)
			if got < lo || got > hi {
				t.Fatalf("Spread(%v, %v) = %v, outside [%v, %v]", d, frac, got, lo, hi)
			}
			seenLow = seenLow || got < d-time.Duration(float64(d)*f/2)
			seenHigh = seenHigh || got > d+time.Duration(float64(d)*f/2)
			up := SpreadUp(d, frac)
			if up < d || up > hi {
				t.Fatalf("SpreadUp(%v, %v) = %v, outside [%v, %v]", d, frac, up, d, hi)
			}
		}
		if !seenLow || !seenHigh {
			t.Errorf("Spread(%v, %v) over 2000 draws never reached both outer quarters: not spread", d, frac)
		}
	}
}

func TestSpreadEdges(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		frac float64
	}{{0, 0.5}, {-time.Second, 0.5}, {time.Second, 0}, {time.Second, -1}} {
		if got := Spread(c.d, c.frac); got != c.d {
			t.Errorf("Spread(%v, %v) = %v, want it unchanged", c.d, c.frac, got)
		}
		if got := SpreadUp(c.d, c.frac); got != c.d {
			t.Errorf("SpreadUp(%v, %v) = %v, want it unchanged", c.d, c.frac, got)
		}
	}
	if got := spread(time.Second, 0.2, func() float64 { return 0 }); got != 800*time.Millisecond {
		t.Errorf("spread at r=0: %v, want 800ms", got)
	}
	if got := spread(time.Second, 0.2, func() float64 { return 0.5 }); got != time.Second {
		t.Errorf("spread at r=0.5: %v, want 1s", got)
	}
}

func BenchmarkSpread(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = Spread(time.Second, 0.1)
		}
	})
}
