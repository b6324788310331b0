package sizing_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/sizing"
)

// TestRecorderObserves: 200 calls a second of 10–59 ms for 30 s give a rate
// of 200/s and the percentiles of that uniform spread, within the
// histogram's resolution; the advice follows from them.
func TestRecorderObserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := sizing.NewRecorder(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 30*200; i++ {
			time.Sleep(5 * time.Millisecond)
			r.Record(time.Duration(10+i%50) * time.Millisecond)
		}
		o := r.Observe()
		if math.Abs(o.Rate-200) > 200*0.02 {
			t.Errorf("rate %.1f/s, want 200", o.Rate)
		}
		// Latencies 10..59 ms evenly: the p99 and p99.9 are 59 ms.
		if o.P99 < 57*time.Millisecond || o.P99 > 61*time.Millisecond || o.P999 < o.P99 {
			t.Errorf("p99 %v p99.9 %v, want about 59ms", o.P99, o.P999)
		}
		if o.Samples < 1800 || o.Samples > 2000 {
			t.Errorf("samples %d, want about 2000 (10 s at 200/s)", o.Samples)
		}
		a, err := sizing.Suggest(sizing.Config{}, o)
		if err != nil {
			t.Fatal(err)
		}
		if a.InFlight < 11 || a.InFlight > 12.5 || a.MaxConcurrent < 20 {
			t.Errorf("advice %+v", a)
		}

		// Quiet for longer than the window: nothing left.
		time.Sleep(11 * time.Second)
		if o := r.Observe(); o.Samples != 0 || o.Rate != 0 {
			t.Errorf("after the window: %+v", o)
		}
	})
}

func TestNewRecorderRejectsTinyWindow(t *testing.T) {
	if _, err := sizing.NewRecorder(time.Microsecond); err == nil {
		t.Fatal("a 1µs window must be refused")
	}
	r, err := sizing.NewRecorder(0)
	if err != nil || r == nil {
		t.Fatalf("zero window: %v", err)
	}
	if o := r.Observe(); o.Samples != 0 || o.Rate != 0 {
		t.Fatalf("empty recorder: %+v", o)
	}
}

func BenchmarkRecord(b *testing.B) {
	r, err := sizing.NewRecorder(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r.Record(time.Duration(i%1000) * time.Microsecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.Record(time.Duration(i%1000) * time.Microsecond)
				i++
			}
		})
	})
}
