package bench

// Differential tests for the bulkhead rows of docs/migrating.md: the Go
// peers (x/sync's semaphore, failsafe-go's bulkhead, hystrix-go's
// MaxConcurrentRequests) and the mapped watertight bulkhead.Bulkhead are
// driven through the same fixed and seeded random sequences of acquisitions,
// releases, cancellations and waits, and after every step each caller must
// be in the same state on both sides: waiting, granted, refused (full),
// ended by its context, or released. Since a step is one release (or one
// tick), comparing the callers after each step checks which waiters are
// served and in which order.
//
// x/sync and failsafe-go run in a testing/synctest bubble (their waits and
// timers use the bubble's clock, as watertight's do); hystrix-go never waits
// for a ticket, and keeps goroutines of its own, so it runs outside one.
//
// Run: cd bench && go test -race -run Migrat .

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	"go.uber.org/goleak"
	"golang.org/x/sync/semaphore"

	"github.com/watertight-go/watertight/bulkhead"
)

// semSubject is one semaphore under test, peer or watertight.
type semSubject interface {
	// acquire takes n permits, waiting as the subject waits, and returns
	// the outcome: "granted", "full", "ctx" (the context ended first),
	// "toomany" or "invalid".
	acquire(ctx context.Context, n int) string
	// try takes n permits if it can without waiting.
	try(n int) bool
	release(n int)
}

// wtSem adapts a watertight bulkhead.
type wtSem struct{ b *bulkhead.Bulkhead }

func newWTSem(t *testing.T, cfg bulkhead.Config) *wtSem {
	t.Helper()
	b, err := bulkhead.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &wtSem{b}
}

func (w *wtSem) acquire(ctx context.Context, n int) string {
	return wtOutcome(w.b.AcquireN(ctx, n))
}

func wtOutcome(err error) string {
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, bulkhead.ErrFull):
		return "full"
	case errors.Is(err, bulkhead.ErrTooMany):
		return "toomany"
	case errors.Is(err, bulkhead.ErrInvalidN):
		return "invalid"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	}
	return "error: " + err.Error()
}

func (w *wtSem) try(n int) bool { return w.b.TryAcquireN(n) }
func (w *wtSem) release(n int)  { w.b.ReleaseN(n) }

// xsem adapts x/sync's weighted semaphore.
type xsem struct{ s *semaphore.Weighted }

func (x *xsem) acquire(ctx context.Context, n int) string {
	if err := x.s.Acquire(ctx, int64(n)); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "ctx"
		}
		return "error: " + err.Error()
	}
	return "granted"
}

func (x *xsem) try(n int) bool { return x.s.TryAcquire(int64(n)) }
func (x *xsem) release(n int)  { x.s.Release(int64(n)) }

// fsSem adapts a failsafe-go bulkhead (one permit per call). maxWait < 0
// uses AcquirePermit (wait until the context ends), else
// AcquirePermitWithMaxWait, which is what an execution through failsafe-go
// calls with the builder's WithMaxWaitTime (0 unless set).
type fsSem struct {
	b       fsbulkhead.Bulkhead[any]
	maxWait time.Duration
}

func (f *fsSem) acquire(ctx context.Context, n int) string {
	if n != 1 {
		panic("failsafe-go takes one permit at a time")
	}
	var err error
	if f.maxWait < 0 {
		err = f.b.AcquirePermit(ctx)
	} else {
		err = f.b.AcquirePermitWithMaxWait(ctx, f.maxWait)
	}
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, fsbulkhead.ErrFull):
		return "full"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	}
	return "error: " + err.Error()
}

func (f *fsSem) try(n int) bool {
	if n != 1 {
		panic("failsafe-go takes one permit at a time")
	}
	return f.b.TryAcquirePermit()
}

func (f *fsSem) release(int) { f.b.ReleasePermit() }

// A semaphore sequence is a list of steps separated by spaces:
//
//	aN     a new caller acquires N permits (Acquire; it may wait)
//	aN@K   the same, with a context that ends K and a half ticks later
//	aN!    the same, with a context already cancelled
//	tN     a new caller tries for N permits (TryAcquire)
//	r      the oldest holder gives its permits back
//	c      the oldest waiter's context is cancelled
//	.      one tick passes
//
// The half tick keeps a context's end, and a MaxWait of K and a half ticks,
// off the instants when permits are given back (the tests use ticks of 1s,
// and fewer than 500 callers).

// semCaller is one caller, on both sides.
type semCaller struct {
	n      int
	cancel context.CancelFunc
	state  [2]string // peer, watertight
}

// driveSem runs seq through peer and w, inside a synctest bubble, and
// reports whether they agreed at every step.
func driveSem(t *testing.T, seq string, tick time.Duration, peer, w semSubject) bool {
	t.Helper()
	var mu sync.Mutex
	var callers []*semCaller
	subjects := [2]semSubject{peer, w}
	set := func(c *semCaller, side int, s string) {
		mu.Lock()
		c.state[side] = s
		mu.Unlock()
	}
	var wg sync.WaitGroup
	defer func() {
		// Let everyone go: cancel the waiters, then give back what is held.
		for _, c := range callers {
			c.cancel()
		}
		synctest.Wait()
		wg.Wait()
		for _, c := range callers {
			for side := range 2 {
				if c.state[side] == "granted" {
					subjects[side].release(c.n)
				}
			}
		}
	}()
	for i, step := range strings.Fields(seq) {
		switch op := step[0]; op {
		case '.':
			time.Sleep(tick)
		case 'r', 'c':
			want := map[byte]string{'r': "granted", 'c': "waiting"}[op]
			mu.Lock()
			var c *semCaller
			for _, x := range callers {
				if x.state[0] == want && x.state[1] == want {
					c = x
					break
				}
			}
			mu.Unlock()
			if c == nil {
				continue // nobody to release or cancel: a no-op on both sides
			}
			if op == 'c' {
				c.cancel()
				break
			}
			for side := range 2 {
				subjects[side].release(c.n)
				set(c, side, "released")
			}
		case 'a', 't':
			spec := step[1:]
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			switch {
			case strings.HasSuffix(spec, "!"):
				spec = strings.TrimSuffix(spec, "!")
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			case strings.Contains(spec, "@"):
				var k int
				spec, k = cutInt(t, spec)
				// Plus a millisecond per caller, so that no two
				// contexts end at once: when a waiter that gives up lets
				// the one behind it through at the instant that one's own
				// context ends, which wins is up to the order the timers
				// fire in, on either side.
				ctx, cancel = context.WithTimeout(ctx, time.Duration(k)*tick+tick/2+time.Duration(len(callers))*time.Millisecond)
			default:
				ctx, cancel = context.WithCancel(ctx)
			}
			n, err := strconv.Atoi(spec)
			if err != nil {
				t.Fatalf("bad step %q", step)
			}
			c := &semCaller{n: n, cancel: cancel, state: [2]string{"waiting", "waiting"}}
			mu.Lock()
			callers = append(callers, c)
			mu.Unlock()
			for side := range 2 {
				if op == 't' {
					s := "full"
					if subjects[side].try(n) {
						s = "granted"
					}
					set(c, side, s)
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					set(c, side, subjects[side].acquire(ctx, n))
				}()
				// Each side's caller settles (granted, refused, or parked
				// in the queue) before the next side's starts, so both
				// queues see the callers in the same order.
				synctest.Wait()
			}
		default:
			t.Fatalf("bad step %q", step)
		}
		synctest.Wait()
		mu.Lock()
		for j, c := range callers {
			if c.state[0] != c.state[1] {
				t.Errorf("%q after step %d (%s): caller %d (n=%d): peer %s, watertight %s", seq, i, step, j, c.n, c.state[0], c.state[1])
				mu.Unlock()
				return false
			}
		}
		mu.Unlock()
	}
	return true
}

// cutInt splits "N@K" into "N" and K.
func cutInt(t *testing.T, s string) (string, int) {
	a, b, _ := strings.Cut(s, "@")
	k, err := strconv.Atoi(b)
	if err != nil {
		t.Fatalf("bad step %q", s)
	}
	return a, k
}

// randomSemSeqs returns n sequences of size steps for a semaphore of
// limit permits, from a fixed seed. maxN bounds the permits a caller asks
// for; try and deadline say whether tN and aN@K steps are drawn.
func randomSemSeqs(seed uint64, n, size, maxN int, try, deadline bool) []string {
	r := rand.New(rand.NewPCG(seed, 23))
	seqs := make([]string, n)
	for i := range seqs {
		var steps []string
		for range size {
			k := 1 + r.IntN(maxN)
			switch x := r.IntN(10); {
			case x < 4:
				if deadline && r.IntN(3) == 0 {
					steps = append(steps, fmt.Sprintf("a%d@%d", k, r.IntN(4)))
				} else {
					steps = append(steps, fmt.Sprintf("a%d", k))
				}
			case x < 5 && try:
				steps = append(steps, fmt.Sprintf("t%d", k))
			case x < 8:
				steps = append(steps, "r")
			case x < 9:
				steps = append(steps, "c")
			default:
				steps = append(steps, ".")
			}
		}
		seqs[i] = strings.Join(steps, " ")
	}
	return seqs
}

// semDifferential runs fixed and random sequences, each through a fresh
// pair made inside a bubble.
func semDifferential(t *testing.T, fixed, random []string, pair func(t *testing.T) (peer, w semSubject)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, seqs := range [][]string{fixed, random} {
		for _, seq := range seqs {
			ok := true
			synctest.Test(t, func(t *testing.T) {
				peer, w := pair(t)
				ok = driveSem(t, seq, time.Second, peer, w)
			})
			if !ok {
				return
			}
		}
	}
}

// x/sync's semaphore.NewWeighted(size) with Acquire(ctx, n), TryAcquire(n)
// and Release(n) is a Bulkhead with MaxConcurrent: size, MaxWait: -1 (wait
// until the context ends) and MaxWaiters: -1 (no bound), with AcquireN,
// TryAcquireN and ReleaseN: both serve waiters strictly first come, first
// served (a large waiter at the head is not overtaken), both refuse a
// TryAcquire while anyone waits, both fail a context that ended before the
// call even with permits free, and both pass on the permits of a waiter that
// gives up.
func TestMigratingXSyncSemaphore(t *testing.T) {
	fixed := []string{
		"a1 a1 a1 a1 r r r",     // FIFO, one permit each
		"a2 a3 a1 r r r r",      // the 3 at the head blocks the 1 behind it
		"a3 a2 r a1 r r",        // a newcomer waits behind the head, though 1 is free
		"a3 t1 r t1",            // TryAcquire with a free permit, refused while the head waits
		"a3 a2 c r",             // the head gives up: the next is served from what is free
		"a2 a3 a2 c r r",        // the head gives up while permits are free: they pass on
		"a2 a1@1 . . a1 r r",    // a deadline ends a wait
		"a1!",                   // a context already done: fails with permits free
		"a3 a1! r",              // and while others wait
		"a3 a3 a1 a1 r r . r r", //
		"t3 t1 r t1 t3",         //
	}
	random := randomSemSeqs(1, 200, 40, 3, true, true)
	semDifferential(t, fixed, random, func(t *testing.T) (semSubject, semSubject) {
		return &xsem{semaphore.NewWeighted(3)}, newWTSem(t, bulkhead.Config{MaxConcurrent: 3, MaxWait: -1, MaxWaiters: -1})
	})
	// Other sizes, with requests of up to the size.
	for size := 1; size <= 5; size++ {
		random := randomSemSeqs(uint64(100+size), 60, 40, size, true, true)
		semDifferential(t, nil, random, func(t *testing.T) (semSubject, semSubject) {
			return &xsem{semaphore.NewWeighted(int64(size))}, newWTSem(t, bulkhead.Config{MaxConcurrent: size, MaxWait: -1, MaxWaiters: -1})
		})
	}
}

// Where x/sync and watertight differ: a request for more permits than the
// size blocks x/sync's Acquire until its context ends ("Don't make other
// Acquire calls block on one that's doomed to fail"), and fails at once with
// ErrTooMany here; a request for 0 permits is granted by x/sync (and given
// back by Release(0)) and refused with ErrInvalidN here (n < 0 panics
// there). Both leave the other callers alone.
func TestMigratingXSyncTooManyDiffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		x := &xsem{semaphore.NewWeighted(2)}
		w := newWTSem(t, bulkhead.Config{MaxConcurrent: 2, MaxWait: -1, MaxWaiters: -1})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		res := make(chan string, 1)
		start := time.Now()
		go func() { res <- x.acquire(ctx, 3) }()
		synctest.Wait()
		if len(res) != 0 {
			t.Fatalf("x/sync Acquire(3) of 2 returned %q at once, want it to block", <-res)
		}
		if !x.try(2) {
			t.Fatal("x/sync: a doomed Acquire(3) blocks the others")
		}
		x.release(2)
		if got := w.acquire(ctx, 3); got != "toomany" {
			t.Fatalf("watertight AcquireN(3) of 2 = %q, want toomany at once", got)
		}
		synctest.Wait()
		if len(res) != 0 {
			t.Fatalf("x/sync Acquire(3) returned %q before its context ended", <-res)
		}
		if got := <-res; got != "ctx" || time.Since(start) != time.Second {
			t.Fatalf("x/sync Acquire(3) of 2 = %q after %v, want ctx after 1s", got, time.Since(start))
		}
		if got := x.acquire(t.Context(), 0); got != "granted" {
			t.Fatalf("x/sync Acquire(0) = %q", got)
		}
		x.release(0)
		if got := w.acquire(t.Context(), 0); got != "invalid" {
			t.Fatalf("watertight AcquireN(0) = %q, want invalid", got)
		}
	})
}

// failsafe-go's bulkhead.NewBuilder[R](k).Build() (no WithMaxWaitTime: an
// execution that finds it full fails with ErrFull at once) is a Bulkhead
// with MaxConcurrent: k and MaxWait: 0; TryAcquirePermit is TryAcquire.
// failsafe-go's semaphore is a buffered channel, whose blocked senders Go
// serves in order: first come, first served, as watertight's queue.
func TestMigratingFailsafeBulkhead(t *testing.T) {
	fixed := []string{"a1 a1 a1 r a1 a1", "t1 t1 a1 r t1 t1 r r t1"}
	random := randomSemSeqs(2, 200, 40, 1, true, false)
	semDifferential(t, fixed, random, func(t *testing.T) (semSubject, semSubject) {
		return &fsSem{fsbulkhead.NewBuilder[any](2).Build(), 0}, newWTSem(t, bulkhead.Config{MaxConcurrent: 2})
	})
}

// WithMaxWaitTime(d) is MaxWait: d with MaxWaiters: -1 (failsafe-go does not
// bound its waiters); AcquirePermit (no wait limit) is MaxWait: -1.
func TestMigratingFailsafeBulkheadMaxWait(t *testing.T) {
	fixed := []string{
		"a1 a1 a1 a1 . r . r",     // the first waiter is served, the second times out at 1.5 ticks
		"a1 a1 a1 a1 r r",         // both served in order
		"a1 a1 a1 a1 c r",         // a cancelled waiter leaves the queue
		"a1 a1 a1 . a1 . r . . r", //
		"a1 a1 a1 t1 r t1",        // TryAcquire is refused while a caller waits
	}
	random := randomSemSeqs(3, 200, 40, 1, true, true)
	for _, d := range []time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond} {
		semDifferential(t, fixed, random, func(t *testing.T) (semSubject, semSubject) {
			fb := fsbulkhead.NewBuilder[any](2).WithMaxWaitTime(d).Build()
			return &fsSem{fb, d}, newWTSem(t, bulkhead.Config{MaxConcurrent: 2, MaxWait: d, MaxWaiters: -1})
		})
	}
	semDifferential(t, fixed, random, func(t *testing.T) (semSubject, semSubject) {
		return &fsSem{fsbulkhead.NewBuilder[any](2).Build(), -1}, newWTSem(t, bulkhead.Config{MaxConcurrent: 2, MaxWait: -1, MaxWaiters: -1})
	})
}

// Where failsafe-go differs: its acquisition is a select between the
// context and the channel, so with a context already done and a permit free
// it picks one at random; watertight (as x/sync) always fails with the
// context's error. failsafe-go's maxConcurrency 0 is a bulkhead with no
// permits; watertight's MaxConcurrent 0 means 25.
func TestMigratingFailsafeBulkheadDoneContextDiffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	granted := 0
	for range 200 {
		f := &fsSem{fsbulkhead.NewBuilder[any](1).Build(), 0}
		if f.acquire(ctx, 1) == "granted" {
			granted++
		}
	}
	if granted == 0 || granted == 200 {
		t.Errorf("failsafe-go granted %d of 200 acquisitions with a done context; want some, not all", granted)
	}
	w := newWTSem(t, bulkhead.Config{MaxConcurrent: 1})
	for range 200 {
		if got := w.acquire(ctx, 1); got != "ctx" {
			t.Fatalf("watertight with a done context: %q, want ctx", got)
		}
	}
	if fsbulkhead.NewBuilder[any](0).Build().TryAcquirePermit() {
		t.Error("failsafe-go maxConcurrency 0 granted a permit")
	}
	if b := newWTSem(t, bulkhead.Config{}); b.b.Snapshot().MaxConcurrent != 25 {
		t.Errorf("watertight MaxConcurrent 0 gives %d permits, want 25", b.b.Snapshot().MaxConcurrent)
	}
}

// hystrixPool adapts hystrix-go's executor pool (MaxConcurrentRequests),
// driven through hystrix.Go: a granted command runs until released; a
// refused one fails at once with ErrMaxConcurrency. Its circuit is told
// never to open, so only the pool decides.
type hystrixPool struct {
	t       *testing.T
	name    string
	mu      sync.Mutex
	holders []hystrixHolder // in the order they were granted
}

type hystrixHolder struct {
	release chan struct{}
	errc    chan error
}

var errHystrixReleased = errors.New("released")

func newHystrixPool(t *testing.T, maxConcurrent int, timeout time.Duration) *hystrixPool {
	t.Helper()
	name := fmt.Sprintf("watertight-migrating-bulkhead-%s-%d", t.Name(), hystrixSeq)
	hystrixSeq++
	hystrix.ConfigureCommand(name, hystrix.CommandConfig{
		MaxConcurrentRequests:  maxConcurrent,
		Timeout:                int(timeout / time.Millisecond),
		RequestVolumeThreshold: 1 << 30, // the circuit never opens
		ErrorPercentThreshold:  100,
	})
	if _, _, err := hystrix.GetCircuit(name); err != nil {
		t.Fatal(err)
	}
	return &hystrixPool{t: t, name: name}
}

// acquire reports whether a new command got a ticket, and keeps it running
// if it did.
func (h *hystrixPool) acquire() bool {
	started := make(chan struct{})
	release := make(chan struct{})
	errc := hystrix.Go(h.name, func() error {
		close(started)
		<-release
		return errHystrixReleased
	}, nil)
	select {
	case <-started:
		h.mu.Lock()
		h.holders = append(h.holders, hystrixHolder{release, errc})
		h.mu.Unlock()
		return true
	case err := <-errc:
		if !errors.Is(err, hystrix.ErrMaxConcurrency) {
			h.t.Fatalf("hystrix-go: %v, want ErrMaxConcurrency", err)
		}
		return false
	}
}

// releaseOldest ends the oldest running command and waits until its ticket
// is back (hystrix-go returns it before it reports the error).
func (h *hystrixPool) releaseOldest() {
	h.mu.Lock()
	c := h.holders[0]
	h.holders = h.holders[1:]
	h.mu.Unlock()
	close(c.release)
	if err := <-c.errc; !errors.Is(err, errHystrixReleased) {
		h.t.Fatalf("hystrix-go: %v, want the command's own error", err)
	}
}

func (h *hystrixPool) releaseAll() {
	for len(h.holders) > 0 {
		h.releaseOldest()
	}
}

// driveHystrix runs seq ('a' acquire, 'r' release the oldest) through
// hystrix-go and the mapped watertight bulkhead.
func driveHystrix(t *testing.T, seq string, h *hystrixPool, w *bulkhead.Bulkhead) bool {
	t.Helper()
	held := 0
	defer func() {
		h.releaseAll()
		if held > 0 {
			w.ReleaseN(held)
		}
	}()
	for i, c := range seq {
		switch c {
		case 'a':
			pok := h.acquire()
			wok := w.Acquire(t.Context()) == nil
			if pok != wok {
				t.Errorf("%q step %d: hystrix-go granted=%v, watertight granted=%v", seq, i, pok, wok)
				return false
			}
			if wok {
				held++
			}
		case 'r':
			if held == 0 {
				continue
			}
			h.releaseOldest()
			w.Release()
			held--
		}
	}
	return true
}

// hystrix-go's MaxConcurrentRequests: k (default 10) is a Bulkhead with
// MaxConcurrent: k and MaxWait: 0: a command that finds every ticket taken
// fails at once (ErrMaxConcurrency, watertight's ErrFull), and a ticket
// given back is free at once. hystrix-go never queues.
func TestMigratingHystrixMaxConcurrentRequests(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	fixed := []string{"aaar", "aaaraa", "araarrraaaa"}
	random := randomSeqs(4, 100, 40, "aaar")
	for _, k := range []int{1, 2, 3} {
		// One circuit per size, reused: every sequence gives back all its
		// tickets, and each circuit leaves two goroutines behind for good,
		// which would slow hystrixSettle down for the breaker tests.
		h := newHystrixPool(t, k, time.Hour)
		for _, seq := range append(fixed, random...) {
			w, err := bulkhead.New(bulkhead.Config{MaxConcurrent: k})
			if err != nil {
				t.Fatal(err)
			}
			if !driveHystrix(t, seq, h, w) {
				return
			}
		}
	}
	// The default: MaxConcurrentRequests 0 means 10 (DefaultMaxConcurrent),
	// watertight's MaxConcurrent 0 means 25: write 10.
	h := newHystrixPool(t, 0, time.Hour)
	w, err := bulkhead.New(bulkhead.Config{MaxConcurrent: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !driveHystrix(t, strings.Repeat("a", 12)+"r"+"aa", h, w) {
		return
	}
	if hystrix.DefaultMaxConcurrent != 10 {
		t.Errorf("hystrix.DefaultMaxConcurrent = %d, want 10", hystrix.DefaultMaxConcurrent)
	}
}

// Where hystrix-go differs: a command that outlives its Timeout gives its
// ticket back at the timeout, while its function still runs, so
// MaxConcurrentRequests bounds the commands inside their timeout, not the
// goroutines running them. A watertight permit is held until Release (put
// the attempt timeout inside the bulkhead; a function that ignores its
// context keeps its permit, or use bulkhead.Pool / watertight.DoDetached).
func TestMigratingHystrixTimeoutFreesTicketDiffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	h := newHystrixPool(t, 1, time.Millisecond)
	if !h.acquire() {
		t.Fatal("hystrix-go refused the first command")
	}
	c := h.holders[0]
	if err := <-c.errc; !errors.Is(err, hystrix.ErrTimeout) {
		t.Fatalf("hystrix-go: %v, want ErrTimeout", err)
	}
	// The first command's function still runs; its ticket is back.
	h.holders = h.holders[1:]
	if !h.acquire() {
		t.Error("hystrix-go refused a command after the first timed out, its function still running")
	}
	close(c.release)
	h.releaseAll()

	w, err := bulkhead.New(bulkhead.Config{MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.Acquire(t.Context()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("watertight: %v while the first holder runs, want ErrFull", err)
	}
	w.Release()
}
