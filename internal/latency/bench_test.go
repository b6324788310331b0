package latency

import (
	"testing"
	"time"
)

func BenchmarkRecord(b *testing.B) {
	tr := mustNew(b, Config{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr.Record(time.Duration(i&1023) * time.Microsecond)
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	tr := mustNew(b, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tr.Record(time.Duration(i&1023) * time.Microsecond)
			i++
		}
	})
}

// BenchmarkRecordAt is Record without the clock read.
func BenchmarkRecordAt(b *testing.B) {
	tr := mustNew(b, Config{})
	now := tr.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr.RecordAt(now, time.Duration(i&1023)*time.Microsecond)
	}
}

func BenchmarkQuantile(b *testing.B) {
	tr := mustNew(b, Config{})
	for i := range 10000 {
		tr.Record(time.Duration(i) * time.Microsecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.Quantile(0.95)
	}
}
