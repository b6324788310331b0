package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watch"
)

// fakePage is a ResponseWriter that hands what is written to the test. With
// block set, Write waits until release is closed (a page that stopped
// reading).
type fakePage struct {
	h       http.Header
	frames  chan string
	block   bool
	release chan struct{}
}

func newFakePage() *fakePage {
	return &fakePage{h: http.Header{}, frames: make(chan string, 1000), release: make(chan struct{})}
}

func (p *fakePage) Header() http.Header { return p.h }
func (p *fakePage) WriteHeader(int)     {}
func (p *fakePage) Flush()              {}
func (p *fakePage) Write(b []byte) (int, error) {
	if p.block {
		<-p.release
	}
	p.frames <- string(b)
	return len(b), nil
}

// openPage serves the event stream to a fakePage in a goroutine; cancel
// is the client going away, done is closed when the handler returned.
func openPage(d *Dashboard, p *fakePage) (cancel context.CancelFunc, done chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/events", nil).WithContext(ctx)
	done = make(chan struct{})
	go func() {
		defer close(done)
		d.ServeHTTP(p, req)
	}()
	return cancel, done
}

func ended(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// No page open: no sampler, no sample, nothing counted but state changes.
// Pages open: one sampler for all of them, once per Interval. The last page
// gone: sampling stops.
func TestSamplingOnlyWhilePagesOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set := new(watch.Set)
		d, err := New(Config{Sources: set})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := circuit.New(circuit.Config{Name: "payments", Listener: d})
		set.AddBreaker(b)

		time.Sleep(10 * time.Second) // virtual time: nothing is sampled
		d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Code: "deadline"})
		b.ForceOpen()
		if n := d.ticks.Load(); n != 0 {
			t.Fatalf("%d samples with no page open, want 0", n)
		}
		if len(d.reasons.m) != 0 {
			t.Fatal("an event was counted with no page open")
		}
		if _, seq := d.changes.since(0); seq != 1 {
			t.Fatalf("%d state changes kept, want 1 (they are kept with no page open)", seq)
		}

		p1, p2 := newFakePage(), newFakePage()
		cancel1, done1 := openPage(d, p1)
		synctest.Wait()
		cancel2, done2 := openPage(d, p2)
		synctest.Wait()
		start := d.ticks.Load()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := d.ticks.Load() - start; n != 10 {
			t.Errorf("%d samples in 10 s with two pages open, want 10 (one sampler for both)", n)
		}
		if got := len(p2.frames); got < 10 {
			t.Errorf("the second page got %d events, want at least 10", got)
		}

		cancel1()
		synctest.Wait()
		if !ended(done1) {
			t.Fatal("the stream did not end when its client went away")
		}
		cancel2()
		synctest.Wait()
		if !ended(done2) {
			t.Fatal("the second stream did not end when its client went away")
		}
		if d.run != nil || d.viewers.Load() != 0 {
			t.Fatal("the sampler still runs with no page open")
		}
		n := d.ticks.Load()
		time.Sleep(10 * time.Second)
		if d.ticks.Load() != n {
			t.Error("samples taken after the last page closed")
		}
		d.Close()
	})
}

// Close ends every open stream and the sampler.
func TestCloseEndsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := New(Config{})
		p := newFakePage()
		cancel, done := openPage(d, p)
		defer cancel()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		d.Close()
		synctest.Wait()
		if !ended(done) {
			t.Fatal("the stream did not end when the Dashboard was closed")
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/events", nil))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), ErrClosed.Error()) {
			t.Errorf("events after Close: %d %q, want 503 %q", w.Code, w.Body.String(), ErrClosed)
		}
		d.Close() // twice: fine
		if !watertight.IsRejection(ErrTooManyPages) || watertight.IsRejection(ErrClosed) {
			t.Error("ErrTooManyPages must be a rejection, ErrClosed not")
		}
	})
}

// A page that stops reading is dropped once streamBuffer frames wait for
// it, without holding up the sampler or the other pages.
func TestSlowPageDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := New(Config{})
		slow, fast := newFakePage(), newFakePage()
		slow.block = true
		cancelSlow, doneSlow := openPage(d, slow)
		defer cancelSlow()
		cancelFast, doneFast := openPage(d, fast)
		synctest.Wait() // slow is stuck writing its first event
		time.Sleep(time.Duration(streamBuffer+2) * time.Second)
		synctest.Wait()
		d.mu.Lock()
		n := len(d.subs)
		d.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d pages subscribed, want 1: the slow one dropped", n)
		}
		if len(fast.frames) < streamBuffer+2 {
			t.Errorf("the reading page got %d events, want at least %d", len(fast.frames), streamBuffer+2)
		}
		close(slow.release) // it writes what it holds, finds its channel closed, returns
		synctest.Wait()
		if !ended(doneSlow) {
			t.Fatal("the dropped stream did not end")
		}
		cancelFast()
		synctest.Wait()
		if !ended(doneFast) || d.run != nil {
			t.Fatal("the stream or the sampler outlived the last page")
		}
		d.Close()
	})
}

// The history a page opened later starts with: the samples of the last
// Config.History, aligned per row.
func TestHistoryForLaterPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set := new(watch.Set)
		d, _ := New(Config{Sources: set, History: 5 * time.Second})
		b, _ := circuit.New(circuit.Config{Name: "payments"})
		set.AddBreaker(b)
		p := newFakePage()
		cancel, _ := openPage(d, p)
		time.Sleep(8500 * time.Millisecond)
		synctest.Wait()
		cancel()
		synctest.Wait()
		d.mu.Lock()
		recs := len(d.hist.recs)
		d.mu.Unlock()
		if recs < 5 || recs > 6 {
			t.Errorf("%d samples kept, want those of the last 5 s (5 or 6)", recs)
		}
		times, series, reasons := seriesOf(d.hist.recs)
		if len(series["circuit/payments/"]) != len(times) || len(reasons) != len(times) {
			t.Errorf("series of %d and %d values for %d times", len(series["circuit/payments/"]), len(reasons), len(times))
		}
		d.Close()
	})
}

// OnEvent with no page open is one atomic load (state changes aside); with
// pages open it counts by code, safely from many goroutines.
func TestOnEventConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := New(Config{})
		p := newFakePage()
		cancel, _ := openPage(d, p)
		synctest.Wait()
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 100 {
					d.OnEvent(watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "b", Code: []string{"open", "half_open_full"}[(g+i)%2]})
				}
			})
		}
		wg.Wait()
		var total uint64
		d.reasons.totals(func(_ reasonKey, n uint64) { total += n })
		if total != 400 {
			t.Errorf("%d events counted, want 400", total)
		}
		cancel()
		synctest.Wait()
		d.Close()
	})
}
