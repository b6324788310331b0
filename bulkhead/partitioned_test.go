package bulkhead_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

func mustPartitioned(t testing.TB, cfg bulkhead.PartitionedConfig) *bulkhead.Partitioned {
	t.Helper()
	p, err := bulkhead.NewPartitioned(cfg)
	if err != nil {
		t.Fatalf("NewPartitioned(%+v): %v", cfg, err)
	}
	return p
}

// tiers is the shape at a small scale: 8 permits, premium weight 3
// (6 guaranteed), free weight 1 (2 guaranteed), unknown names in free.
func tiers(reserve float64, maxWait time.Duration) bulkhead.PartitionedConfig {
	return bulkhead.PartitionedConfig{
		Name:          "api",
		MaxConcurrent: 8,
		Partitions:    []bulkhead.PartitionConfig{{Name: "premium", Weight: 3}, {Name: "free", Weight: 1}},
		Default:       "free",
		Reserve:       reserve,
		MaxWait:       maxWait,
	}
}

const (
	premium = 0
	free    = 1
)

func TestPartitionedConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  bulkhead.PartitionedConfig
		want string
	}{
		{bulkhead.PartitionedConfig{MaxConcurrent: -1}, "PartitionedConfig.MaxConcurrent must be in [0, 8388608]"},
		{bulkhead.PartitionedConfig{MaxConcurrent: bulkhead.MaxConcurrentLimit + 1}, "PartitionedConfig.MaxConcurrent must be in"},
		{bulkhead.PartitionedConfig{Reserve: 1.5}, "PartitionedConfig.Reserve must be at most 1"},
		{bulkhead.PartitionedConfig{Reserve: math.NaN()}, "PartitionedConfig.Reserve must be at most 1"},
		{bulkhead.PartitionedConfig{Partitions: []bulkhead.PartitionConfig{{Name: ""}}}, "PartitionedConfig.Partitions[0].Name must not be empty"},
		{bulkhead.PartitionedConfig{Partitions: []bulkhead.PartitionConfig{{Name: "a"}, {Name: "a"}}}, `PartitionedConfig.Partitions[1].Name "a" is given twice`},
		{bulkhead.PartitionedConfig{Partitions: []bulkhead.PartitionConfig{{Name: "a", Weight: -1}}}, "PartitionedConfig.Partitions[0].Weight must be in [0, 1048576]"},
		{bulkhead.PartitionedConfig{Partitions: []bulkhead.PartitionConfig{{Name: "a", Weight: math.Inf(1)}}}, "PartitionedConfig.Partitions[0].Weight must be in"},
		{bulkhead.PartitionedConfig{DefaultWeight: math.NaN()}, "PartitionedConfig.DefaultWeight must be in"},
		{bulkhead.PartitionedConfig{Default: "a", DefaultWeight: 2, Partitions: []bulkhead.PartitionConfig{{Name: "a"}}}, "PartitionedConfig.DefaultWeight must be 0 when Default"},
		{bulkhead.PartitionedConfig{MaxConcurrent: 2, Partitions: []bulkhead.PartitionConfig{{Name: "a"}, {Name: "b"}}}, "PartitionedConfig.MaxConcurrent (2) must be at least the number of partitions, the default one included (3)"},
	} {
		_, err := bulkhead.NewPartitioned(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPartitioned(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	// Valid edge cases.
	for _, cfg := range []bulkhead.PartitionedConfig{
		{},                 // only the default partition, 25 permits
		{MaxConcurrent: 1}, // one partition of one
		{Reserve: -3},      // no reserve
		{Reserve: 1},       // no lending
		{Default: "a", MaxConcurrent: 2, Partitions: []bulkhead.PartitionConfig{{Name: "a"}, {Name: "b"}}}, // the default is listed
	} {
		if _, err := bulkhead.NewPartitioned(cfg); err != nil {
			t.Errorf("NewPartitioned(%+v) = %v", cfg, err)
		}
	}
}

func TestPartitionedNames(t *testing.T) {
	p := mustPartitioned(t, bulkhead.PartitionedConfig{MaxConcurrent: 3, Reserve: -1, Partitions: []bulkhead.PartitionConfig{{Name: "gold"}, {Name: "silver"}}})
	if p.Partitions() != 3 || p.PartitionName(2) != bulkhead.DefaultPartitionName || p.PartitionName(3) != "" || p.PartitionName(-1) != "" {
		t.Fatalf("Partitions %d, names %q %q %q", p.Partitions(), p.PartitionName(0), p.PartitionName(1), p.PartitionName(2))
	}
	for name, want := range map[string]int{"gold": 0, "silver": 1, "default": 2, "bronze": 2, "": 2} {
		if got := p.Index(name); got != want {
			t.Errorf("Index(%q) = %d, want %d", name, got, want)
		}
		if i, ok := p.Lookup(name); i != want || ok != (name == "gold" || name == "silver" || name == "default") {
			t.Errorf("Lookup(%q) = %d, %v", name, i, ok)
		}
	}
	// A name no partition has never makes one: client input is bounded.
	for _, name := range []string{"x", "y", "z"} {
		i, err := p.AcquireName(context.Background(), name)
		if err != nil || i != 2 {
			t.Fatalf("AcquireName(%q) = %d, %v", name, i, err)
		}
		defer p.Release(i)
	}
	if s := p.Snapshot(); len(s.Partitions) != 3 || s.Partitions[2].Active != 3 {
		t.Fatalf("Snapshot %+v", s)
	}
	if i, ok := p.TryAcquireName("gold"); i != 0 || ok {
		t.Fatalf("TryAcquireName(gold) with every permit held = %d, %v", i, ok)
	}
}

func TestPartitionedBadIndex(t *testing.T) {
	p := mustPartitioned(t, bulkhead.PartitionedConfig{})
	for _, i := range []int{-1, 1, 100} {
		if err := p.Acquire(context.Background(), i); !errors.Is(err, bulkhead.ErrNoPartition) || !watertight.IsRejection(err) {
			t.Errorf("Acquire(%d) = %v", i, err)
		}
		if p.TryAcquire(i) {
			t.Errorf("TryAcquire(%d) = true", i)
		}
	}
	mustPanic(t, "Release(5)", func() { p.Release(5) })
	mustPanic(t, "Release without Acquire", func() { p.Release(0) })

	var zero bulkhead.Partitioned
	if err := zero.Acquire(context.Background(), zero.Index("x")); !errors.Is(err, bulkhead.ErrNoPartition) {
		t.Errorf("zero Partitioned: Acquire = %v", err)
	}
	if err := zero.Reconfigure(bulkhead.PartitionedConfig{}); err == nil {
		t.Error("zero Partitioned: Reconfigure succeeded")
	}
	if s := zero.Snapshot(); s.MaxConcurrent != 0 || len(s.Partitions) != 0 {
		t.Errorf("zero Partitioned: Snapshot %+v", s)
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// A refusal names the bulkhead and the partition, wraps ErrFull, and is a
// rejection and a saturation.
func TestPartitionedErrors(t *testing.T) {
	p := mustPartitioned(t, tiers(1, 0)) // no lending
	for range 2 {
		if !p.TryAcquire(free) {
			t.Fatal("free refused within its guarantee")
		}
	}
	err := p.Acquire(context.Background(), free)
	if err == nil || err.Error() != "bulkhead: api: free: full" || !errors.Is(err, bulkhead.ErrFull) ||
		!watertight.IsRejection(err) || !watertight.IsSaturation(err) {
		t.Fatalf("Acquire over the share with no lending = %v", err)
	}
	q := mustPartitioned(t, bulkhead.PartitionedConfig{MaxConcurrent: 1, Partitions: []bulkhead.PartitionConfig{{Name: "only"}}, Default: "only"})
	_ = q.TryAcquire(0)
	if err := q.Acquire(context.Background(), 0); err == nil || err.Error() != "bulkhead: only: full" {
		t.Fatalf("unnamed bulkhead: %v", err)
	}
}

// Rule 3b: with the default reserve (half the unused guarantees), a
// borrower leaves room for half of an idle partition's guarantee, which
// that partition then gets at once.
func TestPartitionedReserveKeepsRoom(t *testing.T) {
	p := mustPartitioned(t, tiers(0, 0))
	n := 0
	for p.TryAcquire(free) {
		n++
	}
	// premium idle: 6 unused, a reserve of 3; free holds 8 - 3 = 5.
	if n != 5 {
		t.Fatalf("free took %d permits beside an idle premium, want 5 (8 less a reserve of ⌈0.5 × 6⌉)", n)
	}
	for i := range 3 {
		if !p.TryAcquire(premium) {
			t.Fatalf("premium's call %d, coming back, waited for a permit kept in reserve", i+1)
		}
	}
	s := p.Snapshot()
	if s.Partitions[free].Borrowed != 3 || s.Partitions[premium].Borrowed != 0 || s.Available != 0 || s.Borrowed != 3 {
		t.Fatalf("Snapshot %+v", s)
	}
	// No reserve: free takes all; no lending: free keeps to its 2.
	for _, tc := range []struct {
		reserve float64
		want    int
	}{{-1, 8}, {1, 2}, {0.25, 6}, {0.75, 3}} {
		p := mustPartitioned(t, tiers(tc.reserve, 0))
		n := 0
		for p.TryAcquire(free) {
			n++
		}
		if n != tc.want {
			t.Errorf("reserve %v: free took %d beside an idle premium, want %d", tc.reserve, n, tc.want)
		}
	}
}

// Rule 3a: a permit given back while a partition below its guarantee
// waits goes to it, before a borrower that has waited longer.
func TestPartitionedReleaseGoesUnderGuaranteeFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPartitioned(t, tiers(-1, -1)) // lend everything, wait forever
		for range 8 {
			if !p.TryAcquire(free) {
				t.Fatal("free refused with permits free")
			}
		}
		ctx := context.Background()
		got := make(chan int, 3)
		waitIn := func(tier int) {
			go func() {
				if err := p.Acquire(ctx, tier); err != nil {
					t.Error(err)
				}
				got <- tier
			}()
			synctest.Wait()
		}
		waitIn(free)    // a borrower, first in time
		waitIn(premium) // below its guarantee
		waitIn(premium)
		p.Release(free)
		synctest.Wait()
		if tier := <-got; tier != premium {
			t.Fatalf("the permit went to %d, want premium", tier)
		}
		p.Release(free)
		synctest.Wait()
		if tier := <-got; tier != premium {
			t.Fatalf("the second permit went to %d, want premium", tier)
		}
		p.Release(free) // premium holds 2 of its 6: still below; nobody of it waits
		synctest.Wait()
		if tier := <-got; tier != free {
			t.Fatalf("the third permit went to %d, want free", tier)
		}
		s := p.Snapshot()
		if s.Partitions[premium].Active != 2 || s.Partitions[free].Active != 6 || s.Waiting != 0 {
			t.Fatalf("Snapshot %+v", s)
		}
		for range 2 {
			p.Release(premium)
		}
		for range 6 {
			p.Release(free)
		}
	})
}

// Rule 4: a wait that runs out is ErrFull; a cancelled one is the context's
// error and leaves nothing behind; a full queue refuses at once.
func TestPartitionedWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := tiers(1, 50*time.Millisecond)
		cfg.Partitions[free].MaxWaiters = 1
		p := mustPartitioned(t, cfg)
		ctx := context.Background()
		for range 2 {
			_ = p.TryAcquire(free)
		}
		start := time.Now()
		if err := p.Acquire(ctx, free); !errors.Is(err, bulkhead.ErrFull) || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("Acquire over the share = %v after %v, want ErrFull after MaxWait", err, time.Since(start))
		}
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- p.Acquire(cctx, free) }()
		synctest.Wait()
		if err := p.Acquire(ctx, free); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Acquire with the queue full = %v", err)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) || watertight.Classify(cctx, err) != watertight.Ignored {
			t.Fatalf("cancelled wait = %v", err)
		}
		s := p.Snapshot().Partitions[free]
		if s.Active != 2 || s.Waiting != 0 || s.Rejected != 2 || s.Canceled != 1 || s.Acquired != 2 {
			t.Fatalf("free: %+v", s)
		}
		// NoWait in one partition, whatever the default.
		cfg = tiers(1, time.Hour)
		cfg.Partitions[free].MaxWait = bulkhead.NoWait
		q := mustPartitioned(t, cfg)
		for range 2 {
			_ = q.TryAcquire(free)
		}
		start = time.Now()
		if err := q.Acquire(ctx, free); !errors.Is(err, bulkhead.ErrFull) || time.Since(start) != 0 {
			t.Fatalf("NoWait: %v after %v", err, time.Since(start))
		}
	})
}

// A permit handed to a waiter whose context ends at that moment is passed
// on, not lost (x/sync's semaphore's rule).
func TestPartitionedCancelRacesGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPartitioned(t, tiers(1, -1))
		for range 2 {
			_ = p.TryAcquire(free)
		}
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { first <- p.Acquire(ctx, free) }()
		synctest.Wait()
		second := make(chan error, 1)
		go func() { second <- p.Acquire(context.Background(), free) }()
		synctest.Wait()
		cancel()        // the first gives up ...
		p.Release(free) // ... while its permit may be handed to it
		// Whichever it sees first, the permit or the end of its context,
		// it fails with the context's error and passes the permit on.
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled waiter: %v", err)
		}
		if err := <-second; err != nil {
			t.Fatalf("the second waiter: %v", err)
		}
		s := p.Snapshot().Partitions[free]
		if s.Active != 2 || s.Waiting != 0 {
			t.Fatalf("free: %+v", s)
		}
		p.Release(free)
		p.Release(free)
	})
}

// Rule 1 under real concurrency: goroutines of every partition acquire,
// wait, give up and release at once; the permits held never exceed the
// cap, and nothing is left held or queued.
func TestPartitionedCapUnderContention(t *testing.T) {
	for _, reserve := range []float64{-1, 0, 1} {
		cfg := bulkhead.PartitionedConfig{
			MaxConcurrent: 7,
			Partitions:    []bulkhead.PartitionConfig{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}, {Name: "c", Weight: 2, MaxWait: bulkhead.NoWait}},
			Reserve:       reserve,
			MaxWait:       time.Millisecond,
		}
		p := mustPartitioned(t, cfg)
		var inFlight, peak atomic.Int64
		var granted atomic.Int64
		var wg sync.WaitGroup
		workers := 4 * runtime.GOMAXPROCS(0)
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tier := g % p.Partitions()
				for k := range 300 {
					ctx := context.Background()
					var cancel context.CancelFunc = func() {}
					if k%7 == 0 {
						ctx, cancel = context.WithCancel(ctx)
						cancel() // sometimes done already
					}
					if p.Acquire(ctx, tier) == nil {
						recordPeak(&peak, inFlight.Add(1))
						granted.Add(1)
						runtime.Gosched()
						inFlight.Add(-1)
						p.Release(tier)
					}
					cancel()
					if k == 150 && g == 0 {
						cfg.MaxConcurrent = 5
						if err := p.Reconfigure(cfg); err != nil {
							t.Error(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		s := p.Snapshot()
		if peak.Load() > 7 || s.Active != 0 || s.Waiting != 0 || s.Available != 5 || granted.Load() == 0 {
			t.Fatalf("reserve %v: peak %d of 7, granted %d, Snapshot %+v", reserve, peak.Load(), granted.Load(), s)
		}
		if s.Acquired != uint64(granted.Load()) {
			t.Fatalf("reserve %v: Acquired %d, granted %d", reserve, s.Acquired, granted.Load())
		}
	}
}

func TestPartitionedReconfigure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := tiers(1, -1)
		p := mustPartitioned(t, cfg)
		for range 2 {
			_ = p.TryAcquire(free)
		}
		done := make(chan error, 1)
		go func() { done <- p.Acquire(context.Background(), free) }()
		synctest.Wait()
		// Weights 1:1 of 8: free's guarantee grows to 4, and the waiter gets
		// a permit at once.
		cfg.Partitions[premium].Weight = 1
		if err := p.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s := p.Snapshot()
		if s.Partitions[free].Guaranteed != 4 || s.Partitions[free].Active != 3 {
			t.Fatalf("after Reconfigure: %+v", s)
		}
		// Lowering the cap below what is held takes nothing back, and
		// grants nothing until enough come back.
		cfg.MaxConcurrent = 2
		if err := p.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		if p.TryAcquire(premium) {
			t.Fatal("a permit granted above the lowered cap")
		}
		for range 3 {
			p.Release(free)
		}
		if !p.TryAcquire(premium) || p.Snapshot().MaxConcurrent != 2 {
			t.Fatalf("after the releases: %+v", p.Snapshot())
		}
		p.Release(premium)
		for _, bad := range []bulkhead.PartitionedConfig{
			{MaxConcurrent: 8, Partitions: []bulkhead.PartitionConfig{{Name: "premium"}, {Name: "gold"}}, Default: "free"},
			{MaxConcurrent: 8, Partitions: []bulkhead.PartitionConfig{{Name: "free"}, {Name: "premium"}}, Default: "free"},
			{MaxConcurrent: 8, Partitions: []bulkhead.PartitionConfig{{Name: "premium"}, {Name: "free"}}},
			{MaxConcurrent: -1, Partitions: cfg.Partitions, Default: "free"},
		} {
			if err := p.Reconfigure(bad); err == nil {
				t.Errorf("Reconfigure(%+v) succeeded", bad)
			}
		}
		if s := p.Snapshot(); s.MaxConcurrent != 2 {
			t.Fatalf("a failed Reconfigure changed the bulkhead: %+v", s)
		}
	})
}

// wantsRefusals is a listener that declines the per-call events, and
// counts the events it is sent.
type wantsRefusals struct{ n atomic.Int64 }

func (w *wantsRefusals) OnEvent(watertight.Event) { w.n.Add(1) }

func (*wantsRefusals) Wants(k watertight.EventKind) bool {
	return k != watertight.EventAcquired && k != watertight.EventReleased
}

func TestPartitionedEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		rec := &codeRecorder{}
		cfg := tiers(1, time.Second)
		cfg.Partitions[free].MaxWaiters = 1
		cfg.Partitions[premium].MaxWait = bulkhead.NoWait
		cfg.Listener = rec
		p := mustPartitioned(t, cfg)
		for range 2 {
			_ = p.TryAcquire(free)
		}
		for range 6 {
			_ = p.TryAcquire(premium)
		}
		_ = p.TryAcquire(free)      // over its share: over_share
		_ = p.Acquire(ctx, premium) // at its share, no lending: over_share
		done := make(chan error)
		go func() { done <- p.Acquire(ctx, free) }() // waits a second
		synctest.Wait()
		_ = p.Acquire(ctx, free) // the queue is full
		<-done
		rec.expect(t, "bulkhead_full:"+bulkhead.CodeOverShare, "bulkhead_full:"+bulkhead.CodeOverShare,
			"bulkhead_full:"+bulkhead.CodeWaitingRoomFull, "bulkhead_full:"+bulkhead.CodeMaxWait)

		// Below its guarantee with every permit lent out: no_permit.
		cfg = tiers(-1, 0)
		var mu sync.Mutex
		var events []watertight.Event
		cfg.Listener = watertight.ListenerFunc(func(e watertight.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})
		q := mustPartitioned(t, cfg)
		for range 8 {
			_ = q.TryAcquire(free)
		}
		_ = q.Acquire(ctx, premium)
		q.Release(free)
		mu.Lock()
		defer mu.Unlock()
		if len(events) != 10 {
			t.Fatalf("%d events, want 8 acquired, 1 refusal, 1 released: %+v", len(events), events)
		}
		e := events[8]
		if e.Kind != watertight.EventBulkheadFull || e.Code != bulkhead.CodeNoPermit || e.Source != "bulkhead" || e.Name != "api" || e.Key != "premium" ||
			!errors.Is(e.Err, bulkhead.ErrFull) || e.Reason == "" {
			t.Fatalf("refusal event %+v", e)
		}
		if a, r := events[0], events[9]; a.Kind != watertight.EventAcquired || a.Key != "free" || a.Permits != 1 ||
			r.Kind != watertight.EventReleased || r.Key != "free" || r.Permits != 1 {
			t.Fatalf("per-call events %+v, %+v", a, r)
		}

		// A listener that declines the per-call events gets only refusals.
		w := &wantsRefusals{}
		cfg.Listener = w
		r := mustPartitioned(t, cfg)
		_ = r.TryAcquire(premium)
		r.Release(premium)
		if n := w.n.Load(); n != 0 {
			t.Fatalf("a listener that declines per-call events got %d", n)
		}
		for range 8 {
			_ = r.TryAcquire(free)
		}
		_ = r.TryAcquire(premium)
		if n := w.n.Load(); n != 1 {
			t.Fatalf("a listener that declines per-call events got %d events for one refusal", n)
		}
		for range 8 {
			r.Release(free)
		}
	})
}

// A waiter granted a permit reports how long it waited, to a listener that
// wants per-call events.
func TestPartitionedAcquiredDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delay atomic.Int64
		cfg := tiers(1, -1)
		cfg.Listener = watertight.ListenerFunc(func(e watertight.Event) {
			if e.Kind == watertight.EventAcquired && e.Delay > 0 {
				delay.Store(int64(e.Delay))
			}
		})
		p := mustPartitioned(t, cfg)
		_ = p.TryAcquire(free)
		_ = p.TryAcquire(free)
		done := make(chan error)
		go func() { done <- p.Acquire(context.Background(), free) }()
		synctest.Wait()
		time.Sleep(30 * time.Millisecond)
		p.Release(free)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if time.Duration(delay.Load()) != 30*time.Millisecond {
			t.Fatalf("Delay %v, want 30ms", time.Duration(delay.Load()))
		}
		p.Release(free)
		p.Release(free)
	})
}
