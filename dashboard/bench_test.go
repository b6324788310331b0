package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
)

// fleet200 watches 200 protections in the mix of a large service: 80
// breakers (5 open), 60 bulkheads (some busy), 10 worker pools, 10 retry
// budgets, 10 hedge policies, 20 adaptive limiters and 10 balancers of 3
// hosts; with 20 series of shed calls and 50 state changes.
func fleet200(tb testing.TB, d *Dashboard) (cleanup func()) {
	set := d.Sources()
	var undo []func()
	for i := range 80 {
		b := must(circuit.New(circuit.Config{Name: fmt.Sprintf("dep-%02d", i), Listener: d}))
		if i%16 == 0 {
			b.ForceOpen()
		}
		set.AddBreaker(b)
	}
	for i := range 60 {
		bh := must(bulkhead.New(bulkhead.Config{Name: fmt.Sprintf("route-%02d", i), MaxConcurrent: 20}))
		if i%3 == 0 {
			bh.AcquireN(context.Background(), 7)
		}
		set.AddBulkhead(bh)
	}
	for i := range 10 {
		p := must(bulkhead.NewPool(bulkhead.PoolConfig{Name: fmt.Sprintf("pool-%d", i), Workers: 2}))
		undo = append(undo, func() { p.Shutdown(context.Background()) })
		set.AddPool(p)
	}
	for i := range 10 {
		set.AddBudget(fmt.Sprintf("retries-%d", i), must(budget.New(budget.Config{})))
		set.AddHedge(must(hedge.New(hedge.Config{Name: fmt.Sprintf("hedge-%d", i), Delay: time.Millisecond})))
		set.AddBalancer(must(balance.New(balance.Config{Name: fmt.Sprintf("upstream-%d", i), Hosts: []string{"a:1", "b:1", "c:1"}})))
	}
	for i := range 20 {
		set.AddLimiter(must(limit.New(limit.Config{Name: fmt.Sprintf("limit-%02d", i)})))
	}
	if n := len(newSampler(d).sample(time.Now(), 0).Rows); n != 200 {
		tb.Fatalf("%d rows, want 200", n)
	}
	d.viewers.Store(1)
	for i := range 20 {
		for range i + 1 {
			d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: fmt.Sprintf("route-%02d", i), Code: "route_full"})
		}
	}
	for i := range 50 {
		d.OnEvent(watertight.Event{Kind: watertight.EventStateChange, Source: "balance", Name: "upstream-0", Key: "a:1", From: "active", To: []string{"ejected", "active"}[i%2]})
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}

// BenchmarkTick200 is one sample of 200 protections with one page open:
// every snapshot read, the frame built, encoded and handed to the page. At
// one sample a second (DefaultInterval), its ns/op is the share of a core
// the open dashboard costs, reported as %core@1Hz.
func BenchmarkTick200(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	defer fleet200(b, d)()
	st := &stream{ch: make(chan []byte, 1)}
	run := &samplerRun{stop: make(chan struct{})}
	d.mu.Lock()
	d.subs[st] = struct{}{}
	d.run = run
	d.mu.Unlock()
	s := newSampler(d)
	now := time.Now()
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.tick(run, s, now.Add(time.Duration(i)*time.Second))
		size = len(<-st.ch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e9*100, "%core@1Hz")
	b.ReportMetric(float64(size), "B/frame")
	d.mu.Lock()
	delete(d.subs, st)
	d.run = nil
	d.mu.Unlock()
}

// BenchmarkPageOpen is what a page opening costs: its first event, with
// five minutes of history of 200 protections.
func BenchmarkPageOpen(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	defer fleet200(b, d)()
	s := newSampler(d)
	now := time.Now()
	for i := range 300 {
		at := now.Add(time.Duration(i) * time.Second)
		d.hist.add(at, s.sample(at, 0), d.cfg.History)
	}
	d.run = &samplerRun{stop: make(chan struct{})} // as if a page were open: no sampler started
	var size int
	b.ReportAllocs()
	for b.Loop() {
		st := &stream{ch: make(chan []byte, 1)}
		first, err := d.subscribe(st)
		if err != nil {
			b.Fatal(err)
		}
		size = len(first)
		d.mu.Lock()
		delete(d.subs, st)
		d.mu.Unlock()
		d.streams.Done()
	}
	b.ReportMetric(float64(size), "B/first-event")
	d.mu.Lock()
	d.run = nil
	d.mu.Unlock()
}

var benchEvent = watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Code: "open"}

// BenchmarkOnEventNoPage is the listener's cost on a hot path (a
// rejection) with no page open: one atomic load.
func BenchmarkOnEventNoPage(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	b.ReportAllocs()
	for b.Loop() {
		d.OnEvent(benchEvent)
	}
}

func BenchmarkOnEventNoPageParallel(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.OnEvent(benchEvent)
		}
	})
}

// BenchmarkOnEventPage is the same with a page open: the event is counted
// by its code.
func BenchmarkOnEventPage(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	d.viewers.Store(1)
	b.ReportAllocs()
	for b.Loop() {
		d.OnEvent(benchEvent)
	}
}

func BenchmarkOnEventPageParallel(b *testing.B) {
	d := must(New(Config{}))
	defer d.Close()
	d.viewers.Store(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.OnEvent(benchEvent)
		}
	})
}
