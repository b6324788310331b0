package watertightkafka

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// benchConsumer is a Consumer without a client, enough to run records
// through a lane's protections: the hot path of every record.
func benchConsumer(b *testing.B, lc LaneConfig) (*Consumer, *lane, *partition) {
	b.Helper()
	var n atomic.Int64
	cfg, err := Config{Group: "g", Topics: []string{"t"}, DefaultLane: lc,
		Handler: func(context.Context, *kgo.Record) error { n.Add(1); return nil }}.resolve()
	if err != nil {
		b.Fatal(err)
	}
	c := &Consumer{cfg: cfg, wd: newWatchdog(cfg.smallestAttemptTimeout())}
	l, err := c.newLane("t")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.pool.Shutdown(context.Background()) })
	return c, l, newPartition(context.Background(), tp{"t", 0})
}

// BenchmarkProcess is one record through a lane with the default
// protections (retry policy and budget, the attempt timeout's watchdog),
// its handler succeeding: the per-record cost of the consumer.
func BenchmarkProcess(b *testing.B) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"default", 0}, {"no-timeout", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			c, l, p := benchConsumer(b, LaneConfig{AttemptTimeout: tc.timeout})
			var wd *watchdog
			if l.cfg.AttemptTimeout > 0 {
				wd = c.wd
			}
			rn, _ := p.enter(wd)
			if rn != nil {
				rn.limit.Store(l.timeoutTicks)
			}
			r := &kgo.Record{Topic: "t"}
			b.ReportAllocs()
			for b.Loop() {
				if o, _ := c.process(l, p, r, rn); o != processedOK {
					b.Fatal(o)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		c, l, p := benchConsumer(b, LaneConfig{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			rn, _ := p.enter(c.wd)
			rn.limit.Store(l.timeoutTicks)
			r := &kgo.Record{Topic: "t"}
			for pb.Next() {
				if o, _ := c.process(l, p, r, rn); o != processedOK {
					b.Fatal(o)
				}
			}
		})
	})
}

// BenchmarkTracker is a batch of 16 records dispatched, finished and
// passed by the commit position.
func BenchmarkTracker(b *testing.B) {
	recs := make([]*kgo.Record, 16)
	for i := range recs {
		recs[i] = &kgo.Record{Offset: int64(i)}
	}
	tr := newTracker()
	b.ReportAllocs()
	for b.Loop() {
		bt := &batch{recs: recs}
		tr.push(bt)
		for i := range recs {
			bt.finished.Store(int32(i + 1))
		}
		if _, _, ok := tr.committable(); !ok {
			b.Fatal("nothing committable")
		}
	}
}
