package limit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/limit"
)

// fixed is an Algorithm that returns what it is told, and records windows.
type fixed struct {
	mu   sync.Mutex
	next float64
	seen []limit.Window
}

func (f *fixed) Name() string { return "fixed" }
func (f *fixed) Update(w limit.Window) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, w)
	return f.next
}

func newLimiter(t *testing.T, cfg limit.Config) *limit.Limiter {
	t.Helper()
	l, err := limit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  limit.Config
		want string
	}{
		{limit.Config{MinLimit: -1}, "limit: Config.MinLimit must be >= 1"},
		{limit.Config{MaxLimit: -1}, "limit: Config.MaxLimit must be in [1, 8388608]"},
		{limit.Config{MaxLimit: 1 << 24}, "limit: Config.MaxLimit must be in [1, 8388608]"},
		{limit.Config{MinLimit: 10, MaxLimit: 5}, "limit: Config.MinLimit must be <= MaxLimit (5), got 10"},
		{limit.Config{InitialLimit: -3}, "limit: Config.InitialLimit must be >= 0"},
		{limit.Config{WindowSamples: -1}, "limit: Config.WindowSamples must be >= 0"},
		{limit.Config{MaxWaiters: 0, QueueOrder: 9}, "QueueOrder"},
	} {
		if _, err := limit.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	l := newLimiter(t, limit.Config{})
	if s := l.Snapshot(); s.Limit != limit.DefaultInitialLimit || s.Algorithm != "watertight" {
		t.Errorf("zero Config: %+v", s)
	}
	if l := newLimiter(t, limit.Config{InitialLimit: 5000, MaxLimit: 100}); l.Limit() != 100 {
		t.Errorf("InitialLimit above MaxLimit: %d, want 100", l.Limit())
	}
}

// The limit admits at most Limit calls; a full limiter refuses with
// ErrLimited, a saturation and a rejection, named.
func TestLimitAdmits(t *testing.T) {
	l := newLimiter(t, limit.Config{Name: "api", InitialLimit: 3, MinWindow: -1})
	var ps []limit.Permit
	for range 3 {
		p, ok := l.TryAcquire()
		if !ok {
			t.Fatal("TryAcquire below the limit failed")
		}
		ps = append(ps, p)
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire at the limit succeeded")
	}
	_, err := l.Acquire(context.Background())
	if !errors.Is(err, limit.ErrLimited) || !watertight.IsSaturation(err) || !watertight.IsRejection(err) || !strings.Contains(err.Error(), "(api)") {
		t.Fatalf("Acquire at the limit: %v", err)
	}
	ps[0].Done(time.Millisecond)
	ps[1].Drop()
	ps[2].Ignore()
	if s := l.Snapshot(); s.InFlight != 0 || s.Rejected != 2 || s.Acquired != 3 {
		t.Fatalf("snapshot %+v", s)
	}
}

// Windows close after WindowSamples calls (and MinWindow), carry what was
// measured, and the algorithm's answer, clamped, becomes the limit: the
// bulkhead inside admits that many.
func TestWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &fixed{next: 7}
		var events []watertight.Event
		var mu sync.Mutex
		l := newLimiter(t, limit.Config{
			InitialLimit: 4, MaxLimit: 6, WindowSamples: 4, MinWindow: time.Second,
			Algorithm: func() limit.Algorithm { return alg },
			Listener: watertight.ListenerFunc(func(ev watertight.Event) {
				if ev.Kind == watertight.EventLimitChanged {
					mu.Lock()
					events = append(events, ev)
					mu.Unlock()
				}
			}),
		})
		do := func(lat time.Duration) {
			p, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if lat < 0 {
				p.Drop()
				return
			}
			p.Done(lat)
		}
		do(10 * time.Millisecond)
		do(30 * time.Millisecond)
		do(-1)
		do(20 * time.Millisecond)
		if len(alg.seen) != 0 {
			t.Fatalf("a window younger than MinWindow was judged: %+v", alg.seen)
		}
		time.Sleep(time.Second)
		for range 4 {
			do(40 * time.Millisecond)
		}
		if len(alg.seen) != 1 {
			t.Fatalf("windows judged: %d, want 1", len(alg.seen))
		}
		w := alg.seen[0]
		want := limit.Window{Limit: 4, InFlight: 1, Samples: 7, Drops: 1, MinLatency: 10 * time.Millisecond, MaxLatency: 40 * time.Millisecond, MeanLatency: 220 * time.Millisecond / 7}
		if w != want {
			t.Fatalf("window\n got %+v\nwant %+v", w, want)
		}
		if l.Limit() != 6 {
			t.Fatalf("limit %d, want 6 (7 clamped to MaxLimit)", l.Limit())
		}
		var held []limit.Permit
		for range 6 {
			p, ok := l.TryAcquire()
			if !ok {
				t.Fatalf("the bulkhead admits %d, want 6", len(held))
			}
			held = append(held, p)
		}
		if _, ok := l.TryAcquire(); ok {
			t.Fatal("a 7th permit")
		}
		for _, p := range held {
			p.Ignore()
		}
		if len(events) != 1 || events[0].Permits != 6 || events[0].Reason != "fixed" || events[0].Source != "limit" {
			t.Fatalf("events %+v", events)
		}
		if s := l.Snapshot(); s.Windows != 1 || s.Changes != 1 || s.Last != want {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

// As a Policy, the limiter measures each call itself (on the clock it is
// given), counts a timeout or an overload answer as a drop, and says
// nothing for a call the caller cancelled.
func TestPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &fixed{next: 10}
		l := newLimiter(t, limit.Config{WindowSamples: 3, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }})
		p := watertight.MustNew(l)
		call := func(d time.Duration, err error) {
			_, _ = watertight.Do(context.Background(), p, func(context.Context) (int, error) {
				time.Sleep(d)
				return 0, err
			})
		}
		call(5*time.Millisecond, nil)
		call(time.Millisecond, context.Canceled) // ignored
		call(15*time.Millisecond, errors.New("404"))
		call(time.Millisecond, context.DeadlineExceeded) // a drop
		if len(alg.seen) != 1 {
			t.Fatalf("windows %d", len(alg.seen))
		}
		if w := alg.seen[0]; w.Samples != 2 || w.Drops != 1 || w.MinLatency != 5*time.Millisecond || w.MaxLatency != 15*time.Millisecond {
			t.Fatalf("window %+v", w)
		}
	})
}

// No permit is lost under many goroutines with cancellations, and in-flight
// never exceeds the limit at admission.
func TestHammer(t *testing.T) {
	l := newLimiter(t, limit.Config{InitialLimit: 8, MinLimit: 4, MaxLimit: 16, WindowSamples: 50, MinWindow: -1, MaxWait: -1})
	var inflight, over atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%7 == 0 {
					cancel()
				}
				p, err := l.Acquire(ctx)
				cancel()
				if err != nil {
					continue
				}
				if n := inflight.Add(1); n > 16 {
					over.Add(1)
				}
				inflight.Add(-1)
				switch i % 3 {
				case 0:
					p.Done(time.Duration(i) * time.Microsecond)
				case 1:
					p.Drop()
				default:
					p.Ignore()
				}
			}
		}()
	}
	wg.Wait()
	s := l.Snapshot()
	if s.InFlight != 0 || s.Waiting != 0 || over.Load() != 0 {
		t.Fatalf("after the hammer: %+v, %d admissions above MaxLimit", s, over.Load())
	}
	if s.Limit < 4 || s.Limit > 16 {
		t.Fatalf("limit %d outside [4, 16]", s.Limit)
	}
}

// Reconfigure keeps the permits in flight and the algorithm (unless given a
// new one), moves the limit inside new bounds at once, and refuses a bad
// configuration whole.
func TestReconfigure(t *testing.T) {
	alg := &fixed{next: 50}
	l := newLimiter(t, limit.Config{InitialLimit: 10, MaxLimit: 100, WindowSamples: 2, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }})
	held, _ := l.TryAcquire()
	if err := l.Reconfigure(limit.Config{MinLimit: 1, MaxLimit: 4, WindowSamples: 2, MinWindow: -1}); err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Limit != 4 || s.InFlight != 1 || s.Algorithm != "fixed" {
		t.Fatalf("after lowering MaxLimit: %+v", s)
	}
	for range 2 {
		p, _ := l.TryAcquire()
		p.Done(time.Millisecond)
	}
	if l.Limit() != 4 || len(alg.seen) != 1 {
		t.Fatalf("the kept algorithm's 50 clamped to the new MaxLimit: %d (windows %d)", l.Limit(), len(alg.seen))
	}
	if err := l.Reconfigure(limit.Config{MinLimit: 9, MaxLimit: 3}); err == nil || !strings.Contains(err.Error(), "MinLimit must be <= MaxLimit") {
		t.Fatalf("bad config: %v", err)
	}
	if l.Limit() != 4 {
		t.Fatalf("a refused Reconfigure changed the limit: %d", l.Limit())
	}
	if err := l.Reconfigure(limit.Config{MaxLimit: 8, Algorithm: func() limit.Algorithm { return limit.NewDefault(limit.DefaultOptions{}) }}); err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Algorithm != "watertight" || s.Limit != 4 || s.InFlight != 1 {
		t.Fatalf("a new algorithm: %+v", s)
	}
	held.Ignore()
}

// gate is a Gate of the test's own: it records every limit applied, and
// calls back into its controller when told a limit (which must not
// deadlock).
type gate struct {
	mu     sync.Mutex
	limits []int
	c      *limit.Controller
	in     int
}

func (g *gate) SetLimit(n int) {
	g.mu.Lock()
	g.limits = append(g.limits, n)
	c := g.c
	g.mu.Unlock()
	if c != nil {
		_ = c.Snapshot()
		c.Sample(time.Millisecond, 0) // may close a window: applied after this one
	}
}

func (g *gate) Load() (int, int) { return g.in, 0 }

// A Controller moves the limit of a gate of its own: the initial limit at
// once, then each change, in order, with no lock held (the gate calls back).
func TestController(t *testing.T) {
	alg := &fixed{next: 12}
	g := &gate{in: 5}
	c, err := limit.NewController(limit.Config{InitialLimit: 8, MaxLimit: 50, WindowSamples: 3, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }}, g)
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.c = c
	g.mu.Unlock()
	c.Sample(2*time.Millisecond, 0)
	c.Sample(4*time.Millisecond, time.Second)
	c.Drop()
	if c.Limit() != 12 {
		t.Fatalf("limit %d, want 12", c.Limit())
	}
	g.mu.Lock()
	got := append([]int(nil), g.limits...)
	g.mu.Unlock()
	if len(got) != 2 || got[0] != 8 || got[1] != 12 {
		t.Fatalf("limits applied %v, want [8 12]", got)
	}
	if w := alg.seen[0]; w.InFlight != 5 || w.Samples != 2 || w.Drops != 1 || w.MinDeadline != time.Second {
		t.Fatalf("window %+v", w)
	}
	if s := c.Snapshot(); s.InFlight != 5 || s.Limit != 12 {
		t.Fatalf("snapshot %+v", s)
	}
	if err := c.Reconfigure(limit.Config{MaxLimit: 10, WindowSamples: 3, MinWindow: -1}); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	last := g.limits[len(g.limits)-1]
	g.mu.Unlock()
	if c.Limit() != 10 || last != 10 {
		t.Fatalf("after lowering MaxLimit: limit %d, gate %d", c.Limit(), last)
	}
	if _, err := limit.NewController(limit.Config{}, nil); err == nil {
		t.Fatal("a nil gate was accepted")
	}
}

// However the changes interleave, the gate ends with the latest limit.
func TestControllerApplyRace(t *testing.T) {
	var n atomic.Int64
	alg := limit.Algorithm(&counting{n: &n})
	g := &gate{}
	c, err := limit.NewController(limit.Config{InitialLimit: 1, MaxLimit: 1 << 20, WindowSamples: 1, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }}, g)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				c.Sample(time.Microsecond, 0)
			}
		}()
	}
	wg.Wait()
	g.mu.Lock()
	last := g.limits[len(g.limits)-1]
	g.mu.Unlock()
	if last != c.Limit() {
		t.Fatalf("the gate ended with %d, the controller's limit is %d", last, c.Limit())
	}
}

// counting returns a new limit every window.
type counting struct{ n *atomic.Int64 }

func (counting) Name() string { return "counting" }
func (a *counting) Update(limit.Window) float64 {
	return float64(a.n.Add(1) + 1)
}

// Invalid algorithm options are New's error, not a panic.
func TestAlgorithmOptionsError(t *testing.T) {
	_, err := limit.New(limit.Config{Algorithm: func() limit.Algorithm { return limit.NewVegas(limit.VegasOptions{Smoothing: 3}) }})
	if err == nil || !strings.Contains(err.Error(), "limit: Config.Algorithm: limit: VegasOptions.Smoothing must be in (0, 1]") {
		t.Fatalf("New: %v", err)
	}
}

// Ten thousand goroutines at once, a third of them cancelled while they
// wait, the limit moving under them: no permit is lost or made, and
// nothing is held or waiting at the end.
func TestTenThousandGoroutines(t *testing.T) {
	var n atomic.Int64
	l := newLimiter(t, limit.Config{
		InitialLimit: 16, MinLimit: 4, MaxLimit: 64, WindowSamples: 20, MinWindow: -1, MaxWait: -1,
		Algorithm: func() limit.Algorithm { return &counting{n: &n} },
	})
	var held, over atomic.Int64
	var wg sync.WaitGroup
	for g := range 10000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if g%3 == 0 {
				go cancel() // cancelled while it waits, or before
			}
			p, err := l.Acquire(ctx)
			if err != nil {
				return
			}
			if h := held.Add(1); h > 64 {
				over.Add(1)
			}
			held.Add(-1)
			if g%2 == 0 {
				p.Done(time.Microsecond)
			} else {
				p.Drop()
			}
		}()
	}
	wg.Wait()
	s := l.Snapshot()
	if s.InFlight != 0 || s.Waiting != 0 || over.Load() != 0 || s.Limit < 4 || s.Limit > 64 {
		t.Fatalf("after 10k goroutines: %+v, %d admissions above MaxLimit", s, over.Load())
	}
	if s.Acquired == 0 || s.Windows == 0 {
		t.Fatalf("nothing measured: %+v", s)
	}
}

// A window counts the calls the limit refused while it was open.
func TestWindowRefused(t *testing.T) {
	alg := &fixed{next: 1}
	l := newLimiter(t, limit.Config{InitialLimit: 1, MaxLimit: 1, WindowSamples: 1, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }})
	p, _ := l.TryAcquire()
	for range 3 {
		if _, ok := l.TryAcquire(); ok {
			t.Fatal("admitted above the limit")
		}
	}
	p.Done(time.Millisecond)
	p, _ = l.TryAcquire()
	p.Done(time.Millisecond)
	if len(alg.seen) != 2 || alg.seen[0].Refused != 3 || alg.seen[1].Refused != 0 {
		t.Fatalf("windows %+v, want 3 refused in the first and none in the second", alg.seen)
	}
}
