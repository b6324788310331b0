package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/stripe"
)

// Errors. Each is a rejection (watertight.IsRejection holds), so no retry
// retries it; the saturation ones also satisfy watertight.IsSaturation, so a
// breaker configured to do so can count them as a signal of their own. A
// bulkhead or pool with a Name returns an error that wraps the sentinel and
// names it ("bulkhead: payments: full"): compare with errors.Is.
var (
	// ErrFull is returned by a semaphore Bulkhead that has no permit to
	// give: at once when Config.MaxWait is zero, after MaxWait otherwise.
	ErrFull = watertight.NewSaturation("bulkhead: full")
	// ErrQueueFull is returned by Pool.Submit and Call, at once, when every
	// worker is busy and the queue is full.
	ErrQueueFull = watertight.NewSaturation("bulkhead: queue full")
	// ErrQueueTimeout is the error of a pool task that waited longer than
	// PoolConfig.MaxQueueWait in the queue and was dropped without running.
	ErrQueueTimeout = watertight.NewSaturation("bulkhead: task waited longer than MaxQueueWait in the queue and was not run")
	// ErrClosed is returned by Pool.Submit and Call after Shutdown, and is
	// the error of queued tasks that Shutdown dropped.
	ErrClosed = watertight.NewRejection("bulkhead: pool closed")
	// ErrTooManyKeys is returned by Registry.Get when it holds
	// RegistryConfig.MaxKeys bulkheads and none of them is idle.
	ErrTooManyKeys = watertight.NewRejection("bulkhead: too many keys")
)

// DefaultMaxConcurrent is the permit count used when Config.MaxConcurrent is
// zero.
const DefaultMaxConcurrent = 25

// MaxConcurrentLimit is the largest Config.MaxConcurrent New accepts.
const MaxConcurrentLimit = 1 << 23

// Config configures a semaphore Bulkhead.
type Config struct {
	// Name labels the bulkhead's errors and its Snapshot. It may be empty.
	Name string
	// MaxConcurrent is how many callers may hold a permit at once. Zero
	// means DefaultMaxConcurrent; a negative value, or one above
	// MaxConcurrentLimit, is an error.
	MaxConcurrent int
	// MaxWait is how long Acquire waits for a permit when none is free.
	// Zero means no wait: Acquire fails with ErrFull at once. A negative
	// value means wait until the caller's context ends. A positive value
	// waits at most that long, then fails with ErrFull. Waiters are served
	// first come, first served.
	MaxWait time.Duration
	// Listener, if not nil, receives an EventBulkheadFull for every
	// Acquire that fails and every TryAcquire that returns false, with
	// Source "bulkhead", Name this Name (in a Registry: the registry's
	// Name, and Key the bulkhead's key), Err the error Acquire returns
	// (ErrFull, alone or with the context's error) and Reason in words. It
	// is called in the caller's goroutine, with no lock held, on the
	// rejection path: it should return quickly (see watertight.Listener).
	// If nil, no events are built.
	Listener watertight.Listener
}

// DefaultConfig returns the configuration New uses for zero fields: 25
// permits and no waiting.
func DefaultConfig() Config { return Config{MaxConcurrent: DefaultMaxConcurrent} }

func (cfg Config) validate(typ string) error {
	if cfg.MaxConcurrent < 0 {
		return fmt.Errorf("bulkhead: %s.MaxConcurrent must be >= 0 (0 means %d), got %d", typ, DefaultMaxConcurrent, cfg.MaxConcurrent)
	}
	if cfg.MaxConcurrent > MaxConcurrentLimit {
		return fmt.Errorf("bulkhead: %s.MaxConcurrent must be <= %d, got %d", typ, MaxConcurrentLimit, cfg.MaxConcurrent)
	}
	return nil
}

// Bulkhead is a semaphore bulkhead: it bounds how many calls run at once
// through it, so that one slow dependency cannot take every goroutine,
// connection or thread of the caller. A call takes a permit with Acquire (or
// TryAcquire) and gives it back with Release; as a watertight.Policy it does
// so in Enter and Exit.
//
// Taking and giving back a permit when nobody waits costs a few atomic
// operations and no allocation; only a caller that must wait takes a mutex
// and joins a first-come, first-served queue.
//
// A Bulkhead is safe for concurrent use. Build it with New: the zero value
// has no permits, so every Acquire fails with ErrFull.
type Bulkhead struct {
	// Read-mostly fields, read on every call.
	waiting atomic.Int64 // callers in the queue; changed only under mu
	max     uint64
	maxWait time.Duration
	errFull error    // ErrFull, labelled with the name
	_       [64]byte // whatever the allocation's alignment, state shares no line with the above

	// Written by every Acquire and Release: a cache line of its own, so that
	// reading the fields above never misses because another core just
	// changed it.
	state atomic.Uint64 // permits held (low bits) and fast acquisitions (high bits): see state.go
	_     [64]byte

	rejected     stripe.Counter
	wraps        atomic.Uint64 // see state.go
	acquiredSlow atomic.Uint64 // permits handed to waiters that kept them
	canceled     atomic.Uint64

	name     string
	listener watertight.Listener
	evName   string // Name of the events: Config.Name, or the registry's Name
	evKey    string // Key of the events: the registry key
	mu       sync.Mutex
	head     *waiter // FIFO queue of waiters, oldest first
	tail     *waiter
}

// waiter is one caller queued for a permit. All fields are guarded by
// Bulkhead.mu; ready is closed when the waiter is granted a permit.
type waiter struct {
	next, prev *waiter
	ready      chan struct{}
	granted    bool
}

// New returns a Bulkhead for cfg. It fails, naming the field and the rule,
// when cfg is invalid.
func New(cfg Config) (*Bulkhead, error) {
	if err := cfg.validate("Config"); err != nil {
		return nil, err
	}
	return newBulkhead(cfg), nil
}

// newBulkhead builds a bulkhead from a validated config.
func newBulkhead(cfg Config) *Bulkhead {
	n := cfg.MaxConcurrent
	if n == 0 {
		n = DefaultMaxConcurrent
	}
	return &Bulkhead{
		max:      uint64(n),
		maxWait:  cfg.MaxWait,
		name:     cfg.Name,
		listener: cfg.Listener,
		evName:   cfg.Name,
		errFull:  label(cfg.Name, ErrFull),
	}
}

// Reasons of the bulkhead's EventBulkheadFull events.
const (
	reasonNoWait   = "no permit free"
	reasonTimedOut = "no permit free within MaxWait"
	reasonStopped  = "the caller stopped waiting for a permit"
)

// fullEvent sends an EventBulkheadFull to the listener, if any, and returns
// err. No lock is held.
func (b *Bulkhead) fullEvent(err error, reason string) error {
	if b.listener != nil {
		b.emitFull(err, reason)
	}
	return err
}

// emitFull is kept out of line so that the rejection paths of a bulkhead
// without a listener stay as small as they were.
//
//go:noinline
func (b *Bulkhead) emitFull(err error, reason string) {
	watertight.Emit(b.listener, watertight.Event{
		Kind: watertight.EventBulkheadFull, Source: source, Name: b.evName, Key: b.evKey, Reason: reason, Err: err,
	})
}

// source is the Source of the package's events.
const source = "bulkhead"

// Acquire takes a permit. When none is free it fails with ErrFull at once if
// Config.MaxWait is zero; otherwise it queues behind earlier waiters and
// waits until a permit is handed to it, MaxWait runs out (ErrFull) or ctx
// ends: then the error matches both ErrFull and ctx's error (or its cause
// when that says more) with errors.Is, and is a saturation, so that a breaker
// outside never counts a caller's give-up in a full bulkhead as a failure of
// the dependency. A failed Acquire leaves the bulkhead as it found it. When a
// permit is free, Acquire takes it without looking at ctx.
//
// Every successful Acquire must be followed by exactly one Release.
func (b *Bulkhead) Acquire(ctx context.Context) error {
	if b.tryFast() {
		return nil
	}
	if b.maxWait == 0 {
		b.rejected.Add(1)
		return b.fullEvent(b.full(), reasonNoWait)
	}
	return b.wait(ctx)
}

// TryAcquire takes a permit if one is free and nobody is queued for one, and
// reports whether it did. It never waits. A false result counts as a
// rejection in the Snapshot.
func (b *Bulkhead) TryAcquire() bool {
	if b.tryFast() {
		return true
	}
	b.rejected.Add(1)
	if b.listener != nil {
		b.emitFull(b.full(), reasonNoWait)
	}
	return false
}

// tryFast takes a free permit when nobody is queued: checking waiting first
// keeps newcomers from overtaking queued waiters.
func (b *Bulkhead) tryFast() bool {
	if b.waiting.Load() != 0 {
		return false
	}
	for {
		s := b.state.Load()
		if s&activeMask >= b.max {
			return false
		}
		// One CAS takes the permit and counts the acquisition.
		if b.state.CompareAndSwap(s, s+acquiredOne+1) {
			if crossesWrapBit(s) {
				b.wraps.Add(1)
			}
			return true
		}
	}
}

// Release gives back a permit taken by Acquire or TryAcquire, handing it to
// the oldest waiter if there is one. It panics when no permit is held; a
// Release without Acquire that comes while others hold permits cannot be told
// apart from theirs and steals one of them.
func (b *Bulkhead) Release() {
	if b.state.Add(^uint64(0))&activeMask == activeMask { // the permit count went below zero
		b.state.Add(1)
		panic("bulkhead: Release without Acquire")
	}
	// The lost wakeup, and why it cannot happen. A releaser (here) counts
	// its permit back and then loads waiting; a waiter (wait), under
	// mu, adds itself to waiting and then, in handoffLocked, loads the
	// permit count. Go's atomics are sequentially consistent, so these four
	// operations happen in one order that both sides agree on. Either the
	// releaser's load of waiting comes after the waiter's increment and sees
	// it: the releaser then takes mu, which it gets only after the waiter
	// has queued (both of the waiter's steps run under mu), and hands the
	// permit over. Or it comes before: then the waiter's load of the permit
	// count comes after the releaser gave its permit back and sees it free,
	// and the waiter hands it to the front of the queue, possibly itself.
	// Both may happen; the CAS in handoffLocked and mu make sure the permit
	// is given once. A waiter whose wait is cut short gives back under mu
	// any permit it was handed, then hands it on (giveUp).
	if b.waiting.Load() != 0 {
		b.releaseSlow()
	}
}

// releaseSlow hands free permits to waiters.
func (b *Bulkhead) releaseSlow() {
	b.mu.Lock()
	b.handoffLocked()
	b.mu.Unlock()
}

// wait queues for a permit when none could be taken at once and MaxWait is
// not zero.
func (b *Bulkhead) wait(ctx context.Context) error {
	done := ctx.Done()
	if done != nil {
		select {
		case <-done:
			// The context ended before the call: fail even if a permit
			// has become free since, as x/sync's semaphore does.
			b.canceled.Add(1)
			return b.fullEvent(b.stopped(ctx), reasonStopped)
		default:
		}
	}

	w := &waiter{ready: make(chan struct{})}
	b.mu.Lock()
	b.waiting.Add(1) // before handoffLocked loads the permit count: see Release
	b.pushLocked(w)
	b.handoffLocked() // a permit freed since the fast path failed goes to the front
	if w.granted {
		b.mu.Unlock()
		b.acquiredSlow.Add(1)
		return nil
	}
	b.mu.Unlock()

	var expired <-chan time.Time
	if b.maxWait > 0 {
		t := time.NewTimer(b.maxWait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.ready:
		// Granted. If ctx ended as well, prefer failing, and pass the
		// permit on.
		if done != nil {
			select {
			case <-done:
				b.canceled.Add(1)
				b.Release()
				return b.fullEvent(b.stopped(ctx), reasonStopped)
			default:
			}
		}
		b.acquiredSlow.Add(1)
		return nil
	case <-done:
		b.giveUp(w)
		b.canceled.Add(1)
		return b.fullEvent(b.stopped(ctx), reasonStopped)
	case <-expired:
		b.giveUp(w)
		b.rejected.Add(1)
		return b.fullEvent(b.full(), reasonTimedOut)
	}
}

// stopped is the error of a wait for a permit that ctx cut short: the
// bulkhead was full for as long as the caller would wait, so the error is
// ErrFull (a saturation: a breaker outside does not count it as a failure of
// the dependency) wrapped together with ctx's error, so that
// errors.Is(err, context.DeadlineExceeded) and the like hold too.
func (b *Bulkhead) stopped(ctx context.Context) error {
	return &stoppedError{full: b.full(), ctx: ctxErr(ctx)}
}

type stoppedError struct{ full, ctx error }

func (e *stoppedError) Error() string {
	return e.full.Error() + " (stopped waiting: " + e.ctx.Error() + ")"
}
func (e *stoppedError) Unwrap() []error { return []error{e.full, e.ctx} }

// full returns ErrFull, labelled with the name if there is one.
func (b *Bulkhead) full() error {
	if b.errFull == nil { // zero Bulkhead
		return ErrFull
	}
	return b.errFull
}

// giveUp leaves the queue after a wait was cut short. If the permit was
// handed over at the moment the waiter gave up, it is passed on, so that the
// failed Acquire leaves the bulkhead unchanged.
func (b *Bulkhead) giveUp(w *waiter) {
	b.mu.Lock()
	if w.granted {
		b.state.Add(^uint64(0)) // give the permit back: it was never Acquire's
	} else {
		b.removeLocked(w)
		b.waiting.Add(-1)
	}
	// Hand free permits on: the one we were given, or one that a releaser
	// left for us as the front waiter. Harmless when there is none.
	b.handoffLocked()
	b.mu.Unlock()
}

// handoffLocked grants free permits to waiters, oldest first. b.mu is held.
func (b *Bulkhead) handoffLocked() {
	for w := b.head; w != nil; w = b.head {
		s := b.state.Load()
		if s&activeMask >= b.max {
			return
		}
		// The permit only: the acquisition is counted by the waiter if it
		// keeps it (acquiredSlow), so a cancelled wait counts as cancelled.
		if !b.state.CompareAndSwap(s, s+1) {
			continue // a caller that read waiting == 0 before we queued took it; look again
		}
		b.removeLocked(w)
		b.waiting.Add(-1)
		w.granted = true
		close(w.ready)
	}
}

func (b *Bulkhead) pushLocked(w *waiter) {
	w.prev = b.tail
	if b.tail != nil {
		b.tail.next = w
	} else {
		b.head = w
	}
	b.tail = w
}

func (b *Bulkhead) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		b.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		b.tail = w.prev
	}
	w.next, w.prev = nil, nil
}

// Snapshot is a point-in-time view of a Bulkhead. Its fields are read one by
// one without a lock, so under load they may not add up exactly.
type Snapshot struct {
	// Name is Config.Name (for a Registry, the key).
	Name string
	// MaxConcurrent is the number of permits.
	MaxConcurrent int
	// Active is the number of permits held.
	Active int
	// Waiting is the number of callers queued for a permit.
	Waiting int
	// Available is MaxConcurrent - Active, never below zero.
	Available int
	// Rejected counts, since New, the calls refused with ErrFull and the
	// TryAcquire calls that returned false.
	Rejected uint64
	// Acquired counts, since New, the permits taken.
	Acquired uint64
	// Canceled counts, since New, the Acquire calls that failed because
	// their context ended first. Acquired + Rejected + Canceled is the
	// number of finished Acquire and TryAcquire calls.
	Canceled uint64
}

// Snapshot returns the bulkhead's current state and totals.
func (b *Bulkhead) Snapshot() Snapshot {
	wraps := b.wraps.Load() // before state: see acquiredTotal
	s := b.state.Load()
	active := int(s & activeMask)
	avail := int(b.max) - active
	if avail < 0 {
		avail = 0
	}
	return Snapshot{
		Name:          b.name,
		MaxConcurrent: int(b.max),
		Active:        active,
		Waiting:       int(b.waiting.Load()),
		Available:     avail,
		Rejected:      b.rejected.Load(),
		Acquired:      acquiredTotal(wraps, s) + b.acquiredSlow.Load(),
		Canceled:      b.canceled.Load(),
	}
}

// idle reports whether nobody holds or waits for a permit.
func (b *Bulkhead) idle() bool { return b.state.Load()&activeMask == 0 && b.waiting.Load() == 0 }

// Enter is Acquire in the form of a watertight.Policy: it returns ctx
// unchanged and an empty ticket, or Acquire's error.
func (b *Bulkhead) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	if err := b.Acquire(ctx); err != nil {
		return ctx, watertight.Ticket{}, err
	}
	return ctx, watertight.Ticket{}, nil
}

// Exit is Release in the form of a watertight.Policy: it returns err
// unchanged.
func (b *Bulkhead) Exit(_ context.Context, _ watertight.Ticket, err error) error {
	b.Release()
	return err
}

// HoldsResource reports true: a bulkhead's ticket holds a permit, which
// watertight.DoDetached keeps until abandoned work really ends.
func (b *Bulkhead) HoldsResource() bool { return true }

// namedError labels a sentinel with the name of the bulkhead or pool that
// returned it. It is built once, so rejecting does not allocate.
type namedError struct {
	msg string
	err error
}

func (e *namedError) Error() string { return e.msg }
func (e *namedError) Unwrap() error { return e.err }

// label returns sentinel itself when name is empty, otherwise an error that
// wraps it and reads "bulkhead: <name>: <rest of the sentinel's text>".
func label(name string, sentinel error) error {
	if name == "" {
		return sentinel
	}
	return &namedError{
		msg: "bulkhead: " + name + ": " + strings.TrimPrefix(sentinel.Error(), "bulkhead: "),
		err: sentinel,
	}
}

// ctxErr is the error for a wait that ctx cut short: ctx.Err(), or its cause
// when that says more. The result always satisfies errors.Is(err, ctx.Err()).
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	cause := context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	if errors.Is(cause, err) {
		return cause
	}
	return fmt.Errorf("%w: %w", err, cause)
}
