package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/internal/stripe"
)

// Defaults used for zero fields of Config.
const (
	DefaultInitialLimit  = 20
	DefaultMinLimit      = 1
	DefaultMaxLimit      = 1000
	DefaultWindowSamples = 10
	DefaultMinWindow     = time.Second
)

// ErrLimited is returned when the limit is reached and the caller may not
// wait (or waited Config.MaxWait in vain). It is a saturation, so a breaker
// outside does not count it as a failure of the dependency, and a
// rejection, so no retry retries it. A named Limiter returns an error that
// wraps it and names the limiter.
var ErrLimited = watertight.NewSaturation("limit: concurrency limit reached")

// Config configures a Limiter. The zero value is valid.
type Config struct {
	// Name labels the limiter in errors, events and snapshots.
	Name string
	// Algorithm builds the limiter's algorithm (each Limiter gets its own:
	// an Algorithm keeps state). Nil means NewDefault, watertight's own.
	Algorithm func() Algorithm
	// InitialLimit is the limit before the first window has been judged.
	// Zero means DefaultInitialLimit (20), clamped to [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit. Zero means DefaultMinLimit (1)
	// and DefaultMaxLimit (1000). MinLimit must be at least 1 and at most
	// MaxLimit; MaxLimit at most bulkhead.MaxConcurrentLimit.
	MinLimit, MaxLimit int
	// MaxWait is how long a caller waits for a permit when the limit is
	// reached: zero means no wait (ErrLimited at once), negative until the
	// caller's context ends, positive at most that long. Waiting callers are
	// served in QueueOrder, from a waiting room of MaxWaiters (see
	// bulkhead.Config, whose meanings these are).
	MaxWait time.Duration
	// MaxWaiters bounds the waiting room (bulkhead.Config.MaxWaiters).
	MaxWaiters int
	// QueueOrder is the order waiters are served in (bulkhead.Config.QueueOrder).
	QueueOrder bulkhead.QueueOrder
	// WindowSamples is how many calls (measured or dropped) a window
	// holds at least before it is judged. Zero means DefaultWindowSamples
	// (10); must not be negative.
	WindowSamples int
	// MinWindow is how long a window lasts at least (after WindowSamples
	// calls), so that the limit moves at a pace the latency can follow at
	// any rate. Zero means DefaultMinWindow (1s); negative means no minimum
	// (a window is judged after WindowSamples calls), and then the clock is
	// never read to close a window.
	MinWindow time.Duration
	// Clock, if not nil, is the limiter's clock: the time since some fixed
	// instant. It is read once per window (and by Enter and Exit, to
	// measure latency). For simulations on virtual time; nil means the
	// monotonic clock. A limiter with a Clock also judges its windows at
	// the same calls on every run (its window counters are not striped
	// over cores, which would make the calls that look at the window depend
	// on where goroutine stacks lie), so a seeded simulation repeats.
	Clock func() time.Duration
	// Listener, if not nil, receives an EventLimitChanged whenever a window
	// changes the limit (Reason the algorithm's Name, Code its code:
	// CodeAIMD, CodeVegas, CodeGradient2, CodeWatertight or CodeCustom;
	// Delay the window's mean
	// latency, Permits the new limit), and the inner bulkhead's events
	// (Source "bulkhead", Name this Name): rejections at the limit as
	// EventBulkheadFull, and, per call, EventAcquired and EventReleased.
	Listener watertight.Listener
}

// resolve fills defaults and validates.
func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("limit: Config.%s %s, got %v", field, rule, got)
	}
	if c.MinLimit < 0 {
		return c, bad("MinLimit", "must be >= 1 (0 means 1)", c.MinLimit)
	}
	if c.MinLimit == 0 {
		c.MinLimit = DefaultMinLimit
	}
	if c.MaxLimit < 0 || c.MaxLimit > bulkhead.MaxConcurrentLimit {
		return c, bad("MaxLimit", fmt.Sprintf("must be in [1, %d] (0 means %d)", bulkhead.MaxConcurrentLimit, DefaultMaxLimit), c.MaxLimit)
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(DefaultMaxLimit, c.MinLimit)
	}
	if c.MinLimit > c.MaxLimit {
		return c, fmt.Errorf("limit: Config.MinLimit must be <= MaxLimit (%d), got %d", c.MaxLimit, c.MinLimit)
	}
	if c.InitialLimit < 0 {
		return c, bad("InitialLimit", "must be >= 0 (0 means 20)", c.InitialLimit)
	}
	if c.InitialLimit == 0 {
		c.InitialLimit = DefaultInitialLimit
	}
	c.InitialLimit = min(max(c.InitialLimit, c.MinLimit), c.MaxLimit)
	if c.WindowSamples < 0 {
		return c, bad("WindowSamples", "must be >= 0 (0 means 10)", c.WindowSamples)
	}
	if c.WindowSamples == 0 {
		c.WindowSamples = DefaultWindowSamples
	}
	if c.MinWindow == 0 {
		c.MinWindow = DefaultMinWindow
	}
	if c.Algorithm == nil {
		c.Algorithm = func() Algorithm { return NewDefault(DefaultOptions{}) }
	}
	return c, nil
}

// Limiter is an adaptive concurrency limit: a semaphore bulkhead whose
// number of permits its Algorithm moves, window by window, from the
// latencies and drops of the calls it admits. Acquire (or TryAcquire) takes
// a permit; the Permit's Done, Drop or Ignore gives it back and says what
// the call measured. As a watertight.Policy it measures latency itself and
// classifies the call's error (see Exit).
//
// Taking and giving back a permit costs what the bulkhead's do, plus a few
// atomic adds to the current window; nothing allocates, no lock is taken
// and the clock is not read, except once per window and by Enter and Exit.
type Limiter struct {
	name  string
	cfg   Config // as New resolved it: Clock and Listener are read from here
	set   atomic.Pointer[settings]
	alg   atomic.Pointer[Algorithm]
	bh    *bulkhead.Bulkhead // nil for a Controller
	gate  Gate               // what the limit is applied to: bh, or a Controller's
	epoch time.Time
	limit atomic.Int64
	win   atomic.Pointer[window]

	upd          sync.Mutex    // serialises the algorithm's Update
	cellMask     uint64        // windowCells-1, or 0 with a Clock: see newLimiter
	lastRejected atomic.Uint64 // the bulkhead's Rejected when the last window was judged
	applying     atomic.Bool
	dirty        atomic.Bool // the limit changed since the gate was last told
	changes      atomic.Uint64
	windows      atomic.Uint64
	last         atomic.Pointer[Window]
	errLim       error
}

// window accumulates one window's measurements. A full window is swapped
// for a fresh one by the call that judges it; late adds to the old one are
// lost, which a statistic can afford.
//
// Calls from different cores add to different cells (picked from the
// address of a variable on the caller's stack, as stripe.Counter does), so
// that they do not pass one cache line back and forth; the extremes live
// on a line of their own, written only when a call beats them. A call
// looks at the total only when its cell's count reaches a multiple of a
// power of two near next/cells: about cells checks per window, whatever the
// rate.
type window struct {
	_      [64]byte
	minLat atomic.Int64
	maxLat atomic.Int64
	minDl  atomic.Int64
	_      [40]byte
	next   atomic.Int64  // total events from which the window may be judged
	mask   atomic.Int64  // a cell looks at the total when its events&mask == 0
	start  time.Duration // the clock when the window began
	_      [40]byte
	cells  [windowCells]cell
}

// windowCells is the number of cells of a window: a power of two.
const windowCells = 8

type cell struct {
	events atomic.Int64 // samples + drops
	drops  atomic.Int64
	sumLat atomic.Int64
	_      [40]byte
}

// newWindow returns a window that began at start and may be judged from
// next events on.
func newWindow(start time.Duration, next int64) *window {
	w := &window{start: start}
	w.setNext(next)
	w.minLat.Store(math.MaxInt64)
	w.minDl.Store(math.MaxInt64)
	return w
}

// setNext moves next, and the cells' look-up interval with it.
func (w *window) setNext(next int64) {
	w.next.Store(next)
	step := max(next/windowCells, 1)
	w.mask.Store(int64(1)<<(bits.Len64(uint64(step))-1) - 1)
}

// totals sums the cells.
func (w *window) totals() (events, drops, sumLat int64) {
	for i := range w.cells {
		c := &w.cells[i]
		events += c.events.Load()
		drops += c.drops.Load()
		sumLat += c.sumLat.Load()
	}
	return
}

// New returns a Limiter for cfg, or an error naming the first invalid field.
func New(cfg Config) (*Limiter, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	bh, err := bulkhead.New(bulkhead.Config{
		Name: c.Name, MaxConcurrent: c.InitialLimit, MaxWait: c.MaxWait,
		MaxWaiters: c.MaxWaiters, QueueOrder: c.QueueOrder, Listener: c.Listener,
	})
	if err != nil {
		// The bulkhead's rules are the limiter's: say them in its name.
		return nil, errors.New("limit: " + strings.TrimPrefix(err.Error(), "bulkhead: "))
	}
	l, err := newLimiter(c, bulkheadGate{bh})
	if err != nil {
		return nil, err
	}
	l.bh = bh
	return l, nil
}

// newLimiter builds the limiter's controlling half for gate g.
func newLimiter(c Config, g Gate) (*Limiter, error) {
	alg, err := buildAlgorithm(c.Algorithm)
	if err != nil {
		return nil, err
	}
	l := &Limiter{name: c.Name, cfg: c, gate: g, epoch: time.Now(), cellMask: windowCells - 1}
	if c.Clock != nil {
		// A simulation: one cell, so that its windows close at the same
		// calls on every run (which cell a call adds to depends on where
		// its goroutine's stack happens to be).
		l.cellMask = 0
	}
	l.alg.Store(&alg)
	l.set.Store(&settings{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, WindowSamples: c.WindowSamples, MinWindow: c.MinWindow})
	l.errLim = ErrLimited
	if c.Name != "" {
		l.errLim = &namedError{name: c.Name, err: ErrLimited}
	}
	l.limit.Store(int64(c.InitialLimit))
	l.win.Store(newWindow(l.now(), int64(c.WindowSamples)))
	return l, nil
}

// buildAlgorithm calls an Algorithm constructor; the options constructors
// (NewAIMD, NewVegas, NewGradient2) panic on invalid options, which New
// and Reconfigure turn into their error.
func buildAlgorithm(f func() Algorithm) (a Algorithm, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("limit: Config.Algorithm: %v", r)
		}
	}()
	if a = f(); a == nil {
		return nil, errors.New("limit: Config.Algorithm returned nil")
	}
	return a, nil
}

type namedError struct {
	name string
	err  error
}

func (e *namedError) Error() string { return e.err.Error() + " (" + e.name + ")" }
func (e *namedError) Unwrap() error { return e.err }

func (l *Limiter) now() time.Duration {
	if l.cfg.Clock != nil {
		return l.cfg.Clock()
	}
	return time.Since(l.epoch)
}

// Name returns Config.Name.
func (l *Limiter) Name() string { return l.name }

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Permit is one admitted call. Exactly one of Done, Drop or Ignore must be
// called when the call ends. The zero Permit does nothing.
type Permit struct {
	l *Limiter
}

// Acquire takes a permit, waiting as Config.MaxWait says. It fails with
// ErrLimited (a saturation) when the limit is reached and the caller may not
// wait longer, or with its context's error, marked watertight.Ignored, when
// ctx ends first (as the bulkhead's Acquire does).
func (l *Limiter) Acquire(ctx context.Context) (Permit, error) {
	if err := l.bh.Acquire(ctx); err != nil {
		return Permit{}, l.translate(err)
	}
	return Permit{l: l}, nil
}

// TryAcquire takes a permit if one is free and nobody waits for one.
func (l *Limiter) TryAcquire() (Permit, bool) {
	if !l.bh.TryAcquire() {
		return Permit{}, false
	}
	return Permit{l: l}, true
}

// translate turns the bulkhead's ErrFull into ErrLimited.
func (l *Limiter) translate(err error) error {
	if errors.Is(err, bulkhead.ErrFull) {
		return l.errLim
	}
	return err
}

// Done ends a call that was measured: latency is how long it took, whether
// it succeeded or failed for a reason of its own (a 404 says as much about
// the dependency's speed as a 200).
func (p Permit) Done(latency time.Duration) {
	if p.l != nil {
		p.l.sample(int64(latency), 0) // before the release: the window's InFlight counts this call
		p.l.bh.Release()
	}
}

// Drop ends a call that signals overload: it timed out, the dependency
// refused it as overloaded, or its deadline ran out inside it.
func (p Permit) Drop() {
	if p.l != nil {
		p.l.sample(-1, 0)
		p.l.bh.Release()
	}
}

// Ignore ends a call that says nothing about the dependency (the caller
// gave up, or the call never reached it).
func (p Permit) Ignore() {
	if p.l != nil {
		p.l.bh.Release()
	}
}

// sample adds one measurement (lat < 0: a drop) to the current window, and
// judges the window when it is full. dl is the time the call had left
// before its deadline when admitted (0: unknown).
func (l *Limiter) sample(lat int64, dl int64) {
	w := l.win.Load()
	var probe byte
	c := &w.cells[stripe.Hash(uintptr(unsafe.Pointer(&probe)), 0)>>(64-3)&l.cellMask]
	if lat >= 0 {
		c.sumLat.Add(lat)
		if lat < w.minLat.Load() {
			casMin(&w.minLat, lat)
		}
		if lat > w.maxLat.Load() {
			casMax(&w.maxLat, lat)
		}
		if dl > 0 && dl < w.minDl.Load() {
			casMin(&w.minDl, dl)
		}
	} else {
		c.drops.Add(1)
	}
	if c.events.Add(1)&w.mask.Load() == 0 {
		l.judge(w)
	}
}

func casMin(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v >= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

func casMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// judge looks at window w, whose cell a call has just brought to a multiple
// of w.step events: once the window holds next events it is judged, unless
// it is younger than MinWindow — then next moves on by a quarter of what it
// holds (at least WindowSamples), so that the clock is read a few dozen
// times per window at most, whatever the rate, and the window overshoots
// MinWindow by at most about a quarter. A judged window is replaced by a
// fresh one (expecting about as many events) and handed to the algorithm.
func (l *Limiter) judge(w *window) {
	events, drops, sumLat := w.totals()
	next := w.next.Load()
	if events < next {
		return
	}
	now := l.now()
	set := l.set.Load()
	if set.MinWindow > 0 && now-w.start < set.MinWindow {
		if w.next.Load() == next { // another caller may have moved it already
			w.setNext(events + max(int64(set.WindowSamples), events/4))
		}
		return
	}
	expect := int64(set.WindowSamples)
	if set.MinWindow > 0 {
		expect = max(expect, events*3/4)
	}
	if !l.win.CompareAndSwap(w, newWindow(now, expect)) {
		return
	}
	inFlight, waiting := l.gate.Load()
	var refused int
	if l.bh != nil {
		r := l.bh.Snapshot().Rejected
		refused = int(r - l.lastRejected.Swap(r))
	}
	cur := int(l.limit.Load())
	out := Window{
		Limit: cur, InFlight: inFlight, Waiting: waiting, Refused: refused,
		Drops: int(drops), Samples: int(events - drops),
	}
	if out.Samples > 0 {
		out.MinLatency = time.Duration(w.minLat.Load())
		out.MaxLatency = time.Duration(w.maxLat.Load())
		out.MeanLatency = time.Duration(sumLat / int64(out.Samples))
	}
	if dl := w.minDl.Load(); dl != math.MaxInt64 {
		out.MinDeadline = time.Duration(dl)
	}
	l.upd.Lock()
	alg := *l.alg.Load()
	want := alg.Update(out)
	set = l.set.Load() // Reconfigure may have moved the bounds meanwhile
	n := cur
	if !math.IsNaN(want) {
		n = int(math.Round(min(max(want, float64(set.MinLimit)), float64(set.MaxLimit))))
	}
	l.windows.Add(1)
	l.last.Store(&out)
	changed := n != int(l.limit.Load())
	if changed {
		l.limit.Store(int64(n))
		l.changes.Add(1)
	}
	l.upd.Unlock()
	if changed {
		l.apply()
	}
	if lis := l.cfg.Listener; changed && lis != nil {
		watertight.Emit(lis, watertight.Event{
			Kind: watertight.EventLimitChanged, Source: source, Name: l.name,
			Reason: alg.Name(), Delay: out.MeanLatency, Permits: n, Code: algCode(alg),
		})
	}
}

// apply tells the gate the current limit, with no lock held: one goroutine
// at a time applies, and it goes on while the limit changes under it, so
// the gate ends with the latest limit whatever the interleaving (a gate that
// calls back into the limiter only marks the limit dirty for the applier).
func (l *Limiter) apply() {
	l.dirty.Store(true)
	for l.dirty.Load() {
		if !l.applying.CompareAndSwap(false, true) {
			return // the goroutine applying will see dirty
		}
		for l.dirty.Swap(false) {
			l.gate.SetLimit(int(l.limit.Load()))
		}
		l.applying.Store(false)
	}
}

// Gate is what a Controller moves the limit of: an admission queue, a
// pool, any gate of the caller's own that admits calls up to a limit.
type Gate interface {
	// SetLimit applies a new limit: calls already admitted keep their
	// places (a lower limit admits nobody new until in-flight drops below
	// it). It is called with no lock of the Controller held, from one
	// goroutine at a time, and always ends with the latest limit.
	SetLimit(n int)
	// Load returns the calls holding a place and the calls waiting for one.
	Load() (inFlight, waiting int)
}

// bulkheadGate is a Limiter's own gate.
type bulkheadGate struct{ b *bulkhead.Bulkhead }

func (g bulkheadGate) SetLimit(n int) { _ = g.b.SetMaxConcurrent(n) } // within [1, MaxConcurrentLimit]: checked by resolve

func (g bulkheadGate) Load() (int, int) {
	s := g.b.Snapshot()
	return s.Active, s.Waiting
}

// Controller is the deciding half of a Limiter, for a gate of the caller's
// own: it takes the calls' measurements (Sample, Drop), judges them window
// by window with its Algorithm, and applies the limit to the Gate. The
// limit bounds, window settings, Algorithm, Clock and Listener of Config
// apply; MaxWait, MaxWaiters and QueueOrder are the gate's business and are
// ignored. Its methods cost what a Limiter's Done and Drop add to the
// bulkhead's.
type Controller struct{ l *Limiter }

// NewController returns a Controller for cfg that applies its limit to g,
// starting with cfg's InitialLimit (applied before it returns).
func NewController(cfg Config, g Gate) (*Controller, error) {
	if g == nil {
		return nil, errors.New("limit: NewController needs a Gate, got nil")
	}
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	l, err := newLimiter(c, g)
	if err != nil {
		return nil, err
	}
	l.apply()
	return &Controller{l: l}, nil
}

// Sample records a call that was measured: it took latency. left, if
// positive, is the time the call had before its deadline when it was
// admitted (see Window.MinDeadline); zero if unknown.
func (c *Controller) Sample(latency, left time.Duration) {
	c.l.sample(max(int64(latency), 0), int64(left))
}

// Drop records a call that signalled overload (see Permit.Drop).
func (c *Controller) Drop() { c.l.sample(-1, 0) }

// Limit returns the current limit.
func (c *Controller) Limit() int { return c.l.Limit() }

// Snapshot returns the controller's state (InFlight and Waiting from the
// gate; Rejected and Acquired are the gate's business and read zero).
func (c *Controller) Snapshot() Snapshot { return c.l.Snapshot() }

// Reconfigure applies cfg as Limiter.Reconfigure does, but for the gate's
// settings (MaxWait, MaxWaiters, QueueOrder), which are ignored.
func (c *Controller) Reconfigure(cfg Config) error { return c.l.Reconfigure(cfg) }

// Reconfigure applies cfg to the limiter while it is in use, keeping the
// permits in flight and the waiters: cfg is validated as New does (an
// invalid one is an error naming the field, and changes nothing); the
// bounds apply at once (the current limit is moved inside them), MaxWait
// and MaxWaiters as the bulkhead's Reconfigure applies them, the window
// settings from the next window. A non-nil cfg.Algorithm replaces the
// algorithm, whose state starts anew from the current limit; a nil one keeps
// the algorithm and its state (unlike New, where nil means NewDefault).
// Name, InitialLimit, QueueOrder, Clock and Listener are fixed by New.
func (l *Limiter) Reconfigure(cfg Config) error {
	keep := cfg.Algorithm == nil
	c, err := cfg.resolve()
	if err != nil {
		return err
	}
	var alg Algorithm
	if !keep {
		if alg, err = buildAlgorithm(c.Algorithm); err != nil {
			return err
		}
	}
	l.upd.Lock()
	cur := int(l.limit.Load())
	n := min(max(cur, c.MinLimit), c.MaxLimit)
	if l.bh != nil {
		// Name, QueueOrder and Listener are ignored by the bulkhead's
		// Reconfigure, as they are here.
		if err := l.bh.Reconfigure(bulkhead.Config{MaxConcurrent: n, MaxWait: c.MaxWait, MaxWaiters: c.MaxWaiters}); err != nil {
			l.upd.Unlock()
			return errors.New("limit: " + strings.TrimPrefix(err.Error(), "bulkhead: "))
		}
	}
	if alg != nil {
		l.alg.Store(&alg)
	}
	l.set.Store(&settings{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, WindowSamples: c.WindowSamples, MinWindow: c.MinWindow})
	if n != cur {
		l.limit.Store(int64(n))
		l.changes.Add(1)
	}
	l.upd.Unlock()
	if n != cur && l.bh == nil {
		l.apply()
	}
	return nil
}

// settings are what Reconfigure may change.
type settings struct {
	MinLimit, MaxLimit int
	WindowSamples      int
	MinWindow          time.Duration
}

// source is the Source of the limiter's own events.
const source = "limit"

// Enter implements watertight.Policy: it acquires a permit and notes when,
// so that Exit can measure the call.
func (l *Limiter) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	if err := l.bh.Acquire(ctx); err != nil {
		return ctx, watertight.Ticket{}, l.translate(err)
	}
	now := l.now()
	t := watertight.Ticket{Start: int64(now) + 1}
	if dl, ok := ctx.Deadline(); ok {
		t.Seq = uint64(max(time.Until(dl), 1))
	}
	return ctx, t, nil
}

// Exit implements watertight.Policy: it gives the permit back and records
// the call: a drop if err says the dependency is overloaded or the call ran
// out of time (watertight.IsOverloaded, a saturation further in,
// context.DeadlineExceeded), nothing if the call says nothing about the
// dependency (watertight.Classify's Ignored: the caller cancelled, a
// rejection further in), and its latency otherwise.
func (l *Limiter) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	defer l.bh.Release() // after the sample: the window's InFlight counts this call
	if t.Start == 0 {
		return err
	}
	switch {
	case err == nil:
	case watertight.IsOverloaded(err) || watertight.IsSaturation(err) || errors.Is(err, context.DeadlineExceeded):
		l.sample(-1, 0)
		return err
	case watertight.Classify(ctx, err) == watertight.Ignored:
		return err
	}
	l.sample(int64(l.now())-(t.Start-1), int64(t.Seq))
	return err
}

// Snapshot is a Limiter's state at one moment.
type Snapshot struct {
	// Name is Config.Name; Algorithm the algorithm's name.
	Name, Algorithm string
	// Limit is the current limit, InFlight the permits held, Waiting the
	// callers queued.
	Limit, InFlight, Waiting int
	// Rejected counts the calls refused at the limit since New; Acquired
	// the calls admitted.
	Rejected, Acquired uint64
	// Windows counts the windows judged, Changes those that moved the limit.
	Windows, Changes uint64
	// Last is the last window judged (zero before the first).
	Last Window
}

// Snapshot returns the limiter's state. It takes no lock.
func (l *Limiter) Snapshot() Snapshot {
	s := Snapshot{
		Name: l.name, Algorithm: (*l.alg.Load()).Name(), Limit: int(l.limit.Load()),
		Windows: l.windows.Load(), Changes: l.changes.Load(),
	}
	if l.bh != nil {
		b := l.bh.Snapshot()
		s.InFlight, s.Waiting, s.Rejected, s.Acquired = b.Active, b.Waiting, b.Rejected, b.Acquired
	} else {
		s.InFlight, s.Waiting = l.gate.Load()
	}
	if w := l.last.Load(); w != nil {
		s.Last = *w
	}
	return s
}
