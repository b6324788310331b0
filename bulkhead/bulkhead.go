package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// give: at once when Config.MaxWait is zero or the waiting room is
	// full (Config.MaxWaiters), after MaxWait otherwise, and to a waiter
	// evicted by a newer one (Config.QueueOrder NewestFirst).
	ErrFull = watertight.NewSaturation("bulkhead: full")
	// ErrTooMany is returned by AcquireN, at once, when n is larger than
	// MaxConcurrent, so that no number of releases could ever grant it;
	// and to a waiter for n permits when SetMaxConcurrent lowers the limit
	// below n. It is a rejection, not a saturation: the bulkhead is not
	// full, the request is too big for it.
	ErrTooMany = watertight.NewRejection("bulkhead: more permits asked for than MaxConcurrent")
	// ErrInvalidN is returned by AcquireN when n is less than 1: a count
	// of zero or below is a bug in the caller's arithmetic, which a
	// silent success would hide until the matching ReleaseN.
	ErrInvalidN = watertight.NewRejection("bulkhead: AcquireN: n must be at least 1")
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

// DefaultMaxWaiters is the size of the waiting room when Config.MaxWaiters
// is zero, unless MaxConcurrent is larger. It bounds the goroutines (and
// their stacks) that a burst can park in a bulkhead whose MaxWait lets them
// wait, and is large enough that ordinary bursts never meet it.
const DefaultMaxWaiters = 1024

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
	// in QueueOrder, first come, first served by default.
	MaxWait time.Duration
	// MaxWaiters bounds the waiting room: how many callers may wait for
	// permits at once (a waiter counts once, whatever its n). Zero means
	// DefaultMaxWaiters, or MaxConcurrent when that is larger (following
	// SetMaxConcurrent); a negative value means no bound. A newcomer that
	// finds the room full
	// fails with ErrFull at once, or, with QueueOrder NewestFirst, evicts
	// the oldest waiter, which fails with ErrFull. It matters only when
	// MaxWait is not zero.
	MaxWaiters int
	// QueueOrder is the order in which waiters are served: OldestFirst
	// (the zero value) or NewestFirst. It is fixed by New.
	QueueOrder QueueOrder
	// Listener, if not nil, receives an EventBulkheadFull for every
	// Acquire that fails because the bulkhead is full and every TryAcquire
	// that returns false, an EventRejected for an AcquireN refused with
	// ErrTooMany, and an EventAcquired and an EventReleased for every
	// permit (or every n permits) taken and given back, unless the
	// listener says it does not want those (watertight.Wants: the
	// metrics exporters and the dashboard read Snapshot instead). Events have
	// Source "bulkhead", Name this Name (in a Registry: the registry's
	// Name, and Key the bulkhead's key), Err the error Acquire returns and
	// Reason in words. An Acquire whose context ends sends none. It is
	// called in the caller's goroutine, with no lock held, on the hot
	// path: it should return quickly (see watertight.Listener). If nil,
	// no events are built.
	Listener watertight.Listener
}

// QueueOrder is the order in which a Bulkhead serves its waiters (after
// .NET's QueueProcessingOrder).
type QueueOrder uint8

const (
	// OldestFirst serves waiters first come, first served, and turns a
	// newcomer away with ErrFull when the waiting room is full. It is the
	// default.
	OldestFirst QueueOrder = iota
	// NewestFirst serves the newest waiter first, and when the waiting
	// room is full a newcomer evicts the oldest waiter, which fails with
	// ErrFull. Under overload it serves the callers most likely still to
	// be waiting for the answer, and fails those that have waited longest.
	NewestFirst
)

// String returns "oldest_first" or "newest_first".
func (o QueueOrder) String() string {
	switch o {
	case OldestFirst:
		return "oldest_first"
	case NewestFirst:
		return "newest_first"
	}
	return "queue_order(" + strconv.Itoa(int(o)) + ")"
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
	if cfg.QueueOrder > NewestFirst {
		return fmt.Errorf("bulkhead: %s.QueueOrder must be OldestFirst or NewestFirst, got %d", typ, cfg.QueueOrder)
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
// operations on a cache line that goroutines on other cores rarely touch (the
// permits are striped over per-core cells: see state.go), and no allocation;
// only a caller that must wait takes a mutex and joins the queue (served in
// Config.QueueOrder, at most Config.MaxWaiters long), and so does AcquireN
// for more than one permit.
//
// Its limit, wait and waiting room can change while it is in use
// (SetMaxConcurrent, SetMaxWait, SetMaxWaiters, Reconfigure), keeping the
// permits in flight.
//
// A Bulkhead is safe for concurrent use. Build it with New: the zero value
// has no permits, so every Acquire fails with ErrFull.
type Bulkhead struct {
	// Read-mostly fields, read on every call.
	waiting atomic.Int64  // callers in the queue; changed only under mu
	seed    atomic.Uint64 // picks the goroutines' cells; moved on by missed
	cells   []cell        // the permits, striped: see state.go
	shift   uint          // stripe.Hash >> shift is a cell index
	max     atomic.Uint64 // MaxConcurrent; changed only under mu
	maxWait atomic.Int64  // MaxWait; read when the fast path fails
	errFull error         // ErrFull, labelled with the name
	errMany error         // ErrTooMany, labelled with the name
	// perCall is read on every call, to send EventAcquired and
	// EventReleased: the listener if it wants them
	// (watertight.Wants), else nil; with none, that is one load and a
	// branch.
	perCall  watertight.Listener
	listener watertight.Listener

	// The hint word. Bit hintFull: set when an acquirer found every cell
	// full, cleared by every Release that finds it set (see tryOthers). Bit
	// hintPending: the shares are not the even layout, after a resize (see
	// state.go). Written only on those transitions, on a line of its own,
	// so that the full path reads it without reading every cell, and the
	// success path never writes it.
	_        [64]byte
	fullHint atomic.Uint32
	_        [64]byte

	rejected     stripe.Counter
	acquiredSlow atomic.Uint64 // permits handed to waiters that kept them
	canceled     atomic.Uint64
	bumps        atomic.Uint64 // acquisitions counted by resizes: see bump

	name       string
	maxWaiters atomic.Int64  // MaxWaiters as configured: 0 follows max
	lifo       bool          // QueueOrder is NewestFirst
	reserved   atomic.Int64  // permits gathered for the head waiter; changed only under mu
	evName     string        // Name of the events: Config.Name, or the registry's Name
	evKey      string        // Key of the events: the registry key
	regGen     atomic.Uint64 // the registry configuration generation it has: see Registry.Reconfigure
	mu         sync.Mutex
	head       *waiter // queue of waiters, the next to serve first
	tail       *waiter
}

// waiter is one caller queued for n permits. All fields are guarded by
// Bulkhead.mu; ready is closed when the waiter is granted its permits
// (granted) or turned away (err: evicted, or n above a lowered limit), in
// both cases after it has left the queue.
type waiter struct {
	next, prev *waiter
	ready      chan struct{}
	n          int
	granted    bool
	err        error
	cell       int // a cell that counts one of the granted permits
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
	cells, shift := newCells(uint64(n))
	b := &Bulkhead{
		cells:    cells,
		shift:    shift,
		name:     cfg.Name,
		listener: cfg.Listener,
		perCall:  perCallListener(cfg.Listener),
		evName:   cfg.Name,
		errFull:  label(cfg.Name, ErrFull),
		errMany:  label(cfg.Name, ErrTooMany),
	}
	b.max.Store(uint64(n))
	b.maxWait.Store(int64(cfg.MaxWait))
	b.maxWaiters.Store(int64(cfg.MaxWaiters))
	b.lifo = cfg.QueueOrder == NewestFirst
	return b
}

// SetMaxConcurrent changes the number of permits to n while the bulkhead is
// in use, as Config.MaxConcurrent would set it: zero means
// DefaultMaxConcurrent, and a negative n or one above MaxConcurrentLimit is
// an error that leaves the bulkhead unchanged.
//
// Raising the limit hands the new permits to queued waiters at once, in
// QueueOrder. Lowering it takes no permit back: the callers holding one keep
// it and give it back with Release as usual, and no permit is granted until
// fewer than n are held. Permits held from before count against the new
// limit either way. Waiters for more permits than the new limit fail with
// ErrTooMany.
//
// The permits stay striped over the cells New made for the first limit
// (see state.go): a bulkhead raised far above the limit it was built with
// keeps its fewer cells, which is correct but spreads contention less, and
// for a while after lowering, a Release takes the bulkhead's mutex. An
// Acquire that runs at the same time as SetMaxConcurrent is ordered before
// or after it.
func (b *Bulkhead) SetMaxConcurrent(n int) error {
	if err := (Config{MaxConcurrent: n}).validate("SetMaxConcurrent"); err != nil {
		return err
	}
	if len(b.cells) == 0 {
		return errors.New("bulkhead: SetMaxConcurrent on a zero Bulkhead, which has no permits: build it with New")
	}
	if n == 0 {
		n = DefaultMaxConcurrent
	}
	b.mu.Lock()
	b.max.Store(uint64(n))
	// The permits gathered for the head waiter go back, to be gathered
	// again under the new limit: granted from the reserve after a lowering,
	// they could take the permits held above it.
	if r := b.reserved.Load(); r > 0 {
		b.reserved.Store(0)
		b.putBackLocked(-1, int(r))
	}
	b.rebalanceLocked()
	for w := b.head; w != nil; {
		next := w.next
		if w.n > n { // could never be granted: see AcquireN
			b.turnAwayLocked(w, b.errTooMany())
		}
		w = next
	}
	b.handoffLocked()
	b.mu.Unlock()
	return nil
}

// SetMaxWaiters changes the size of the waiting room, with the meaning of
// Config.MaxWaiters (zero: DefaultMaxWaiters or MaxConcurrent, whichever is
// larger; negative: no bound).
// Waiters beyond a lowered room keep their places; newcomers find the room
// full until enough of them have left.
func (b *Bulkhead) SetMaxWaiters(n int) { b.maxWaiters.Store(int64(n)) }

// SetMaxWait changes how long Acquire waits for a permit, with the meaning
// of Config.MaxWait (zero: no wait; negative: until the caller's context
// ends). It applies to the Acquire calls that start waiting after it;
// callers already queued keep the wait they started with.
func (b *Bulkhead) SetMaxWait(d time.Duration) { b.maxWait.Store(int64(d)) }

// Reconfigure applies cfg to the bulkhead while it is in use: it validates
// cfg as New does (the error names the field and leaves the bulkhead
// unchanged), then sets MaxConcurrent as SetMaxConcurrent does, MaxWait
// as SetMaxWait does and MaxWaiters as SetMaxWaiters does. Name,
// QueueOrder and Listener are fixed by New: Reconfigure ignores them. Totals (Snapshot's Acquired, Rejected, Canceled) carry on.
func (b *Bulkhead) Reconfigure(cfg Config) error {
	if err := cfg.validate("Config"); err != nil {
		return err
	}
	if err := b.SetMaxConcurrent(cfg.MaxConcurrent); err != nil {
		return err
	}
	b.SetMaxWait(cfg.MaxWait)
	b.SetMaxWaiters(cfg.MaxWaiters)
	return nil
}

// why is the reason of a bulkhead's EventBulkheadFull or EventRejected: its
// words (whyWords) and its code (whyCodes).
type why uint8

// Reasons of the bulkhead's EventBulkheadFull and EventRejected events.
const (
	reasonNoWait why = iota
	reasonTimedOut
	reasonRoomFull
	reasonEvicted
	reasonTooMany
)

var whyWords = [...]string{
	reasonNoWait:   "no permit free",
	reasonTimedOut: "no permit free within MaxWait",
	reasonRoomFull: "no permit free and the waiting room full",
	reasonEvicted:  "evicted from the waiting room by a newer waiter",
	reasonTooMany:  "more permits asked for than MaxConcurrent",
}

var whyCodes = [...]string{
	reasonNoWait:   CodeNoPermit,
	reasonTimedOut: CodeMaxWait,
	reasonRoomFull: CodeWaitingRoomFull,
	reasonEvicted:  CodeEvicted,
	reasonTooMany:  CodeTooManyPermits,
}

// fullEvent sends an EventBulkheadFull to the listener, if any, and returns
// err. No lock is held.
func (b *Bulkhead) fullEvent(err error, reason why) error {
	if b.listener != nil {
		b.emitFull(err, reason)
	}
	return err
}

// emitFull is kept out of line so that the rejection paths of a bulkhead
// without a listener stay as small as they were.
//
//go:noinline
func (b *Bulkhead) emitFull(err error, reason why) {
	watertight.Emit(b.listener, watertight.Event{
		Kind: watertight.EventBulkheadFull, Source: source, Name: b.evName, Key: b.evKey, Reason: whyWords[reason], Err: err, Code: whyCodes[reason],
	})
}

// emitRejected sends an EventRejected for err (ErrTooMany), and returns
// err. No lock is held.
func (b *Bulkhead) emitRejected(err error) error {
	if b.listener != nil {
		watertight.Emit(b.listener, watertight.Event{
			Kind: watertight.EventRejected, Source: source, Name: b.evName, Key: b.evKey, Reason: whyWords[reasonTooMany], Err: err, Code: CodeTooManyPermits,
		})
	}
	return err
}

// emitAcquired sends an EventAcquired for n permits taken after waiting d.
// The caller has checked that there is a listener. No lock is held.
//
//go:noinline
func (b *Bulkhead) emitAcquired(n int, d time.Duration) {
	watertight.Emit(b.perCall, watertight.Event{
		Kind: watertight.EventAcquired, Source: source, Name: b.evName, Key: b.evKey, Permits: n, Delay: d,
	})
}

// emitReleased sends an EventReleased for n permits given back. The caller
// has checked that there is a listener. No lock is held.
//
//go:noinline
func (b *Bulkhead) emitReleased(n int) {
	watertight.Emit(b.perCall, watertight.Event{
		Kind: watertight.EventReleased, Source: source, Name: b.evName, Key: b.evKey, Permits: n,
	})
}

// perCallListener is l if it wants the per-call events (EventAcquired and
// EventReleased), else nil.
func perCallListener(l watertight.Listener) watertight.Listener {
	if l != nil && (watertight.Wants(l, watertight.EventAcquired) || watertight.Wants(l, watertight.EventReleased)) {
		return l
	}
	return nil
}

// source is the Source of the package's events.
const source = "bulkhead"

// Acquire takes a permit. When none is free it fails with ErrFull at once if
// Config.MaxWait is zero or the waiting room is full; otherwise it joins the
// queue and waits until a permit is handed to it, MaxWait runs out (ErrFull)
// or ctx ends.
//
// When ctx ends first, or has ended before the call (even with a permit
// free, as x/sync's semaphore does), the error is ctx's (ctx.Err(), or
// context.Cause when that says more), marked watertight.Ignored: the caller
// gave up, which says nothing about the dependency nor about the bulkhead's
// saturation, so a breaker outside counts it neither as a failure nor as a
// saturation. It is counted in Snapshot's Canceled and sends no event. A
// failed Acquire leaves the bulkhead as it found it.
//
// Every successful Acquire must be followed by exactly one Release.
func (b *Bulkhead) Acquire(ctx context.Context) error {
	// The cell is picked from the caller's stack (see state.go). Acquire,
	// TryAcquire and Release are small enough to be inlined, so that the
	// calls of one function take their addresses from its frame, and
	// usually pick one cell.
	var probe byte
	_, err := b.acquire(ctx, uintptr(unsafe.Pointer(&probe)))
	return err
}

// acquire is Acquire for the goroutine whose stack holds addr. It returns
// the cell the permit is counted in.
func (b *Bulkhead) acquire(ctx context.Context, addr uintptr) (int, error) {
	if ctx.Err() != nil {
		return -1, b.canceledErr(ctx)
	}
	if i := b.tryFast(addr); i >= 0 {
		if b.perCall != nil {
			b.emitAcquired(1, 0)
		}
		return i, nil
	}
	if b.maxWait.Load() == 0 {
		b.rejected.Add(1)
		return -1, b.fullEvent(b.full(), reasonNoWait)
	}
	return b.wait(ctx, 1)
}

// AcquireN takes n permits at once, as Acquire takes one (x/sync's
// semaphore Acquire(ctx, n)): all of them or none. A request for more
// permits than MaxConcurrent fails at once with ErrTooMany, and n < 1 with
// ErrInvalidN.
//
// Waiters are served strictly in QueueOrder: permits given back go to the
// waiter at the head of the queue until it has its n, and a newcomer, even
// for one permit, never overtakes it, so a large request is not starved by
// small ones (the price: small requests behind it wait too). One ReleaseN
// wakes every waiter it can satisfy. Every successful AcquireN must be
// followed by ReleaseN(n), or n Releases.
//
// AcquireN(ctx, 1) is Acquire. For n > 1 it takes the bulkhead's mutex and
// gathers the permits from the cells they are striped over: it costs more
// than Acquire, and while it runs a concurrent TryAcquire may find no permit
// free that a moment later is.
func (b *Bulkhead) AcquireN(ctx context.Context, n int) error {
	if n == 1 {
		var probe byte // see Acquire
		_, err := b.acquire(ctx, uintptr(unsafe.Pointer(&probe)))
		return err
	}
	return b.acquireMany(ctx, n)
}

// acquireMany is AcquireN for n != 1.
func (b *Bulkhead) acquireMany(ctx context.Context, n int) error {
	if n < 1 {
		return ErrInvalidN
	}
	if ctx.Err() != nil {
		return b.canceledErr(ctx)
	}
	if uint64(n) > b.max.Load() {
		b.rejected.Add(1)
		return b.emitRejected(b.errTooMany())
	}
	if _, ok := b.gather(n); ok {
		b.acquiredSlow.Add(1)
		if b.perCall != nil {
			b.emitAcquired(n, 0)
		}
		return nil
	}
	if b.maxWait.Load() == 0 {
		b.rejected.Add(1)
		return b.fullEvent(b.full(), reasonNoWait)
	}
	_, err := b.wait(ctx, n)
	return err
}

// TryAcquireN takes n permits if n are free and nobody is queued, and
// reports whether it did. It never waits. TryAcquireN(1) is TryAcquire; for
// n > 1 it costs what AcquireN does. A false result counts as a rejection in
// the Snapshot, except for n < 1, which is always false and counts nothing
// (AcquireN says why: ErrInvalidN).
func (b *Bulkhead) TryAcquireN(n int) bool {
	if n == 1 {
		var probe byte // see Acquire
		return b.tryAcquire(uintptr(unsafe.Pointer(&probe)))
	}
	if n < 1 {
		return false
	}
	if uint64(n) > b.max.Load() {
		b.rejected.Add(1)
		_ = b.emitRejected(b.errTooMany())
		return false
	}
	if _, ok := b.gather(n); ok {
		b.acquiredSlow.Add(1)
		if b.perCall != nil {
			b.emitAcquired(n, 0)
		}
		return true
	}
	b.rejected.Add(1)
	if b.listener != nil {
		b.emitFull(b.full(), reasonNoWait)
	}
	return false
}

// gather takes n permits from the cells when nobody is queued, all or none,
// and returns a cell that counts one of them.
func (b *Bulkhead) gather(n int) (int, bool) {
	if b.waiting.Load() != 0 {
		return -1, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting.Load() != 0 { // changed only under mu
		return -1, false
	}
	// Most refusals are seen here, without taking a permit that a
	// concurrent TryAcquire could have had.
	var free uint64
	for j := range b.cells {
		c := &b.cells[j]
		if a, sh := c.state.Load()&activeMask, c.share.Load(); a < sh {
			free += sh - a
		}
	}
	if free < uint64(n) {
		return -1, false
	}
	last := -1
	for got := 0; got < n; got++ {
		j := b.takeOneLocked()
		if j < 0 { // taken by the fast path since: give them back
			b.putBackLocked(last, got)
			return -1, false
		}
		last = j
	}
	return last, true
}

// takeOneLocked takes one permit (not an acquisition) from any cell with
// room, and returns the cell, or -1. b.mu is held.
func (b *Bulkhead) takeOneLocked() int {
	for j := range b.cells {
		if b.take(j, 1) {
			return j
		}
	}
	return -1
}

// putBackLocked gives back k permits held by the bulkhead itself (gathered
// for a waiter, or granted to one that did not keep them), from cell i
// first (i may be -1) and then from any cell that holds one. b.mu is held;
// the caller hands the room made to waiters. With mu held no permit goes to
// a waiter, so k permits are held while this runs.
func (b *Bulkhead) putBackLocked(i, k int) {
	for ; k > 0; k-- {
		if i < 0 || !b.dec(&b.cells[i]) {
			j := 0
			for j < len(b.cells) && !b.dec(&b.cells[j]) {
				j++
			}
			// If no cell holds one, a Release without Acquire has
			// already taken it back.
			if j == len(b.cells) && !b.releaseAnyLocked() {
				break
			}
		}
	}
	if b.fullHint.Load()&hintFull != 0 { // a permit is free: see tryOthers
		b.fullHint.And(^uint32(hintFull))
	}
	if b.fullHint.Load()&hintPending != 0 { // see hinted
		b.rebalanceLocked()
	}
}

// TryAcquire takes a permit if one is free and nobody is queued for one, and
// reports whether it did. It never waits, and does not look at any context.
// A false result counts as a rejection in the Snapshot.
func (b *Bulkhead) TryAcquire() bool {
	var probe byte // see Acquire
	return b.tryAcquire(uintptr(unsafe.Pointer(&probe)))
}

// tryAcquire is TryAcquire for the goroutine whose stack holds addr.
func (b *Bulkhead) tryAcquire(addr uintptr) bool {
	if b.tryFast(addr) >= 0 {
		if b.perCall != nil {
			b.emitAcquired(1, 0)
		}
		return true
	}
	b.rejected.Add(1)
	if b.listener != nil {
		b.emitFull(b.full(), reasonNoWait)
	}
	return false
}

// tryFast takes a free permit when nobody is queued, and returns the cell it
// is counted in, or -1. Checking waiting first keeps newcomers from
// overtaking queued waiters. It tries the cell of the goroutine whose stack
// holds addr, then, unless the full hint is set, the others.
func (b *Bulkhead) tryFast(addr uintptr) int {
	if b.waiting.Load() != 0 {
		return -1
	}
	seed := b.seed.Load()
	i := b.index(addr, seed)
	if i >= uint64(len(b.cells)) { // the zero Bulkhead
		return -1
	}
	c := &b.cells[i]
	for {
		s := c.state.Load()
		if s&activeMask >= c.share.Load() {
			break
		}
		// One CAS takes the permit and counts the acquisition.
		if c.state.CompareAndSwap(s, s+acquiredOne+1) {
			if crossesWrapBit(s) {
				c.wraps.Add(1)
			}
			return int(i)
		}
		b.missed(c, seed)
	}
	if len(b.cells) == 1 || b.fullHint.Load()&hintFull != 0 {
		return -1
	}
	return b.tryOthers(int(i))
}

// tryOthers takes a permit in a cell other than i, which was full. When
// every cell is full it sets the full hint, so that the next acquirers whose
// cell is full reject without a scan, and then looks at every cell once more.
//
// Why the hint never hides a free permit for longer than the race of the
// calls that made it. A releaser gives back its permit in a cell and then
// loads the hint, clearing it if set; here the hint is stored and then every
// cell loaded. Go's atomics are sequentially consistent: either the
// releaser's load comes after the store and it clears the hint, or it comes
// before, and then so does its permit's return, which the second scan sees
// (unless another acquirer has taken the permit since). If the second scan
// finds room, the hint is cleared, since other permits may have come back
// unseen as well.
//
//go:noinline
func (b *Bulkhead) tryOthers(i int) int {
	mask := len(b.cells) - 1
	for j := 1; j <= mask; j++ {
		if b.take((i+j)&mask, acquiredOne+1) {
			return (i + j) & mask
		}
	}
	b.fullHint.Or(hintFull)
	for j := range b.cells {
		if c := &b.cells[j]; c.state.Load()&activeMask < c.share.Load() {
			b.fullHint.And(^uint32(hintFull))
			if b.take(j, acquiredOne+1) {
				return j
			}
		}
	}
	return -1
}

// take adds add (a permit, and an acquisition or not) to cell j if it has
// room, and reports whether it did.
func (b *Bulkhead) take(j int, add uint64) bool {
	c := &b.cells[j]
	for {
		s := c.state.Load()
		if s&activeMask >= c.share.Load() {
			return false
		}
		if c.state.CompareAndSwap(s, s+add) {
			if add != 1 && crossesWrapBit(s) {
				c.wraps.Add(1)
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
	var probe byte // see Acquire
	b.releaseAt(uintptr(unsafe.Pointer(&probe)))
}

// ReleaseN gives back n permits taken by AcquireN or TryAcquireN (or by n
// Acquires), handing them to waiters in QueueOrder: one ReleaseN wakes every
// waiter it can satisfy. ReleaseN(1) is Release. It panics when n < 1, or
// when fewer than n permits are held (having given back those that were).
func (b *Bulkhead) ReleaseN(n int) {
	var probe byte // see Acquire
	addr := uintptr(unsafe.Pointer(&probe))
	if n == 1 {
		b.releaseAt(addr)
		return
	}
	if n < 1 {
		panic("bulkhead: ReleaseN: n must be at least 1")
	}
	b.releaseMany(b.index(addr, b.seed.Load()), n)
	if b.perCall != nil {
		b.emitReleased(n)
	}
}

// releaseAt is Release for the goroutine whose stack holds addr.
func (b *Bulkhead) releaseAt(addr uintptr) {
	b.release(b.index(addr, b.seed.Load()))
	if b.perCall != nil {
		b.emitReleased(1)
	}
}

// releaseMany gives back n permits, from cell i where it holds them (i may
// be out of range), else from any cell that does, and then hands them to
// waiters with one lock.
func (b *Bulkhead) releaseMany(i uint64, n int) {
	for range n {
		if i >= uint64(len(b.cells)) || !b.dec(&b.cells[i]) {
			b.releaseElsewhere(int(i & (maxCells - 1)))
		}
	}
	if h := b.fullHint.Load(); h != 0 { // see release
		b.hinted(h)
	}
	if b.waiting.Load() != 0 {
		b.releaseSlow()
	}
}

// release gives back a permit, from cell i if it holds one (i may be out of
// range), else from any cell that does.
func (b *Bulkhead) release(i uint64) {
	if i >= uint64(len(b.cells)) || !b.dec(&b.cells[i]) {
		b.releaseElsewhere(int(i & (maxCells - 1)))
	}
	if h := b.fullHint.Load(); h != 0 { // a permit is free: see tryOthers
		b.hinted(h)
	}
	// The lost wakeup, and why it cannot happen. A releaser (here) gives
	// its permit back to a cell and then loads waiting; a waiter (wait),
	// under mu, adds itself to waiting and then, in handoffLocked, loads
	// the cells one by one. Go's atomics are sequentially consistent, so
	// these operations happen in one order that both sides agree on. Either
	// the releaser's load of waiting comes after the waiter's increment and
	// sees it: the releaser then takes mu, which it gets only after the
	// waiter has queued (both of the waiter's steps run under mu), and hands
	// the permit over. Or it comes before: then the waiter's load of the
	// releaser's cell comes after the releaser gave its permit back and sees
	// it free, and the waiter hands it to the front of the queue, possibly
	// itself. Both may happen; the CAS in handoffLocked and mu make sure the
	// permit is given once. A waiter whose wait is cut short gives back
	// under mu any permit it was handed, then hands it on (giveUp).
	if b.waiting.Load() != 0 {
		b.releaseSlow()
	}
}

// hinted clears the full hint and, when the shares are pending after a
// resize, computes them again and hands any room made to waiters (see
// state.go). h is the hint word the releaser loaded.
//
//go:noinline
func (b *Bulkhead) hinted(h uint32) {
	if h&hintFull != 0 {
		b.fullHint.And(^uint32(hintFull))
	}
	if h&hintPending != 0 {
		b.mu.Lock()
		b.rebalanceLocked()
		b.handoffLocked()
		b.mu.Unlock()
	}
}

// dec takes one permit out of c if it holds one, and reports whether it
// did. A cell never goes below zero.
func (b *Bulkhead) dec(c *cell) bool {
	for {
		s := c.state.Load()
		if s&activeMask == 0 {
			return false
		}
		if c.state.CompareAndSwap(s, s-1) {
			return true
		}
		b.missed(c, b.seed.Load())
	}
}

// releaseElsewhere gives back a permit from the cells after i, i last (it
// held none, or is not a cell), and panics when no permit is held at all.
//
//go:noinline
func (b *Bulkhead) releaseElsewhere(i int) {
	mask := len(b.cells) - 1
	for j := 1; j <= len(b.cells); j++ {
		if b.dec(&b.cells[(i+j)&mask]) {
			return
		}
	}
	b.mu.Lock()
	ok := b.releaseAnyLocked()
	b.mu.Unlock()
	if !ok {
		panic("bulkhead: Release without Acquire")
	}
}

// releaseAnyLocked gives back a permit from any cell, and reports false when
// no permit is held. b.mu is held.
//
// A scan of the cells that finds them all empty does not show that no permit
// is held: while it runs, permits may move from cells not yet scanned to
// cells already scanned (a Release from one cell, an acquisition in
// another). So it reads the cells twice: with mu held no permit is handed to
// a waiter, and the other changes of a state word (an acquisition adds to
// its count, a Release subtracts a permit) never bring it back to a value it
// had, so two equal reads of every cell show values they all held at once,
// between the two reads.
func (b *Bulkhead) releaseAnyLocked() bool {
	var first [maxCells]uint64
	for {
		for j := range b.cells {
			if b.dec(&b.cells[j]) {
				return true
			}
		}
		for j := range b.cells {
			first[j] = b.cells[j].state.Load()
		}
		same, held := true, uint64(0)
		for j := range b.cells {
			s := b.cells[j].state.Load()
			same = same && s == first[j]
			held += s & activeMask
		}
		if same && held == 0 {
			return false
		}
	}
}

// releaseSlow hands free permits to waiters.
func (b *Bulkhead) releaseSlow() {
	b.mu.Lock()
	b.handoffLocked()
	b.mu.Unlock()
}

// wait queues for n permits when they could not be taken at once and
// MaxWait is not zero. It returns a cell that counts one of them.
func (b *Bulkhead) wait(ctx context.Context, n int) (int, error) {
	var start time.Time
	if b.listener != nil {
		start = time.Now()
	}
	w := &waiter{ready: make(chan struct{}), n: n}
	b.mu.Lock()
	if uint64(n) > b.max.Load() { // lowered since AcquireN looked: see SetMaxConcurrent
		b.mu.Unlock()
		b.rejected.Add(1)
		return -1, b.emitRejected(b.errTooMany())
	}
	if room := b.roomLocked(); room >= 0 && b.waiting.Load() >= room {
		if !b.lifo || b.tail == nil {
			b.mu.Unlock()
			b.rejected.Add(1)
			return -1, b.fullEvent(b.full(), reasonRoomFull)
		}
		b.turnAwayLocked(b.tail, b.full()) // the oldest: see pushLocked
	}
	b.waiting.Add(1) // before handoffLocked loads the cells: see Release
	b.pushLocked(w)
	b.handoffLocked() // permits freed since the fast path failed go to the head
	if w.granted {
		b.mu.Unlock()
		return b.granted(w, start), nil
	}
	b.mu.Unlock()

	var expired <-chan time.Time
	if d := time.Duration(b.maxWait.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.ready:
		if w.err != nil { // turned away (w.err was written before ready was closed)
			return -1, b.turnedAway(w)
		}
		// Granted. If ctx ended as well, prefer failing, and pass the
		// permits on.
		if ctx.Err() != nil {
			b.releaseMany(uint64(w.cell), w.n)
			return -1, b.canceledErr(ctx)
		}
		return b.granted(w, start), nil
	case <-ctx.Done():
		if !b.giveUp(w) {
			return -1, b.turnedAway(w)
		}
		return -1, b.canceledErr(ctx)
	case <-expired:
		if !b.giveUp(w) {
			return -1, b.turnedAway(w)
		}
		b.rejected.Add(1)
		return -1, b.fullEvent(b.full(), reasonTimedOut)
	}
}

// granted counts a waiter's grant and sends its EventAcquired, and returns
// the cell. start is when it began to wait, if there is a listener.
func (b *Bulkhead) granted(w *waiter, start time.Time) int {
	b.acquiredSlow.Add(1)
	if b.perCall != nil {
		b.emitAcquired(w.n, time.Since(start))
	}
	return w.cell
}

// turnedAway counts and reports a waiter turned away by the bulkhead
// (evicted, or asking for more than a lowered limit) and returns its error.
func (b *Bulkhead) turnedAway(w *waiter) error {
	b.rejected.Add(1)
	if errors.Is(w.err, ErrTooMany) {
		return b.emitRejected(w.err)
	}
	return b.fullEvent(w.err, reasonEvicted)
}

// roomLocked returns the size of the waiting room, or -1 for no bound.
// b.mu is held.
func (b *Bulkhead) roomLocked() int64 {
	switch n := b.maxWaiters.Load(); {
	case n < 0:
		return -1
	case n == 0:
		return max(DefaultMaxWaiters, int64(b.max.Load()))
	default:
		return n
	}
}

// turnAwayLocked removes w from the queue and wakes it with err. b.mu is
// held; the caller hands on any permits gathered for it (handoffLocked).
func (b *Bulkhead) turnAwayLocked(w *waiter, err error) {
	b.removeLocked(w)
	b.waiting.Add(-1)
	w.err = err
	close(w.ready)
}

// canceledErr counts and returns the error of an Acquire whose ctx ended
// before it got its permits: ctx's error marked Ignored (see Acquire).
func (b *Bulkhead) canceledErr(ctx context.Context) error {
	b.canceled.Add(1)
	return watertight.Mark(ctxErr(ctx), watertight.Ignored)
}

// full returns ErrFull, labelled with the name if there is one.
func (b *Bulkhead) full() error {
	if b.errFull == nil { // zero Bulkhead
		return ErrFull
	}
	return b.errFull
}

// errTooMany returns ErrTooMany, labelled with the name if there is one.
func (b *Bulkhead) errTooMany() error {
	if b.errMany == nil { // zero Bulkhead
		return ErrTooMany
	}
	return b.errMany
}

// giveUp leaves the queue after a wait was cut short, and reports false if
// the bulkhead had turned the waiter away already (w.err says why). If the
// permits were handed over at the moment the waiter gave up, they are passed
// on, so that the failed Acquire leaves the bulkhead unchanged.
func (b *Bulkhead) giveUp(w *waiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case w.granted:
		// Give the permits back: they were never Acquire's.
		b.putBackLocked(w.cell, w.n)
	case w.err != nil:
		return false
	default:
		b.removeLocked(w)
		b.waiting.Add(-1)
		if b.fullHint.Load()&hintPending != 0 { // see hinted
			b.rebalanceLocked()
		}
	}
	// Hand free permits on: the ones we were given or gathered, or one
	// that a releaser left for us at the head. Harmless when there is none.
	b.handoffLocked()
	return true
}

// handoffLocked grants free permits to waiters, the head of the queue
// first. The head's permits are gathered one by one into reserved: a head
// that waits for n keeps those it has until it has them all, and nobody
// behind it (nor a newcomer: waiting is not zero) gets one meanwhile. When
// the queue is empty, the permits reserved are given back. b.mu is held.
func (b *Bulkhead) handoffLocked() {
	for w := b.head; w != nil; w = b.head {
		last := -1
		// The permits only: the acquisition is counted by the waiter if it
		// keeps them (acquiredSlow), so a cancelled wait counts as
		// cancelled. A cell without room may be one whose permit a caller
		// that read waiting == 0 before we queued took: the next is looked
		// at.
		for b.reserved.Load() < int64(w.n) {
			j := b.takeOneLocked()
			if j < 0 {
				return
			}
			b.reserved.Add(1)
			last = j
		}
		b.reserved.Add(-int64(w.n))
		b.removeLocked(w)
		b.waiting.Add(-1)
		w.granted = true
		w.cell = max(last, 0) // any cell: a Release finds the permits
		close(w.ready)
	}
	if r := b.reserved.Load(); r > 0 { // gathered for waiters that left
		b.reserved.Store(0)
		b.putBackLocked(-1, int(r))
	}
}

// pushLocked adds w to the queue: at the back (OldestFirst) or at the head
// (NewestFirst). Either way the tail is the oldest waiter when the order is
// NewestFirst.
func (b *Bulkhead) pushLocked(w *waiter) {
	if b.lifo {
		w.next = b.head
		if b.head != nil {
			b.head.prev = w
		} else {
			b.tail = w
		}
		b.head = w
		return
	}
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
	// Reserved is the number of permits gathered for the waiter at the
	// head of the queue, which waits for more (AcquireN): they are held by
	// nobody yet, and counted in neither Active nor Available.
	Reserved int
	// Available is MaxConcurrent - Active - Reserved, never below zero.
	Available int
	// Rejected counts, since New, the calls refused with ErrFull and the
	// TryAcquire calls that returned false.
	Rejected uint64
	// Acquired counts, since New, the calls that took permits (an
	// AcquireN counts once, whatever its n).
	Acquired uint64
	// Canceled counts, since New, the Acquire calls that failed because
	// their context ended first. Acquired + Rejected + Canceled is the
	// number of finished Acquire, AcquireN, TryAcquire and TryAcquireN
	// calls (not counting those refused with ErrInvalidN).
	Canceled uint64
}

// Snapshot returns the bulkhead's current state and totals.
func (b *Bulkhead) Snapshot() Snapshot {
	var active, acquired uint64
	for i := range b.cells {
		c := &b.cells[i]
		wraps := c.wraps.Load() // before state: see acquiredTotal
		s := c.state.Load()
		active += s & activeMask
		acquired += acquiredTotal(wraps, s)
	}
	acquired -= min(acquired, b.bumps.Load()) // after the states: see bump
	reserved := min(uint64(max(b.reserved.Load(), 0)), active)
	maxc := b.max.Load()
	avail := int(maxc) - int(active)
	if avail < 0 {
		avail = 0
	}
	active -= reserved
	return Snapshot{
		Name:          b.name,
		MaxConcurrent: int(maxc),
		Active:        int(active),
		Waiting:       int(b.waiting.Load()),
		Reserved:      int(reserved),
		Available:     avail,
		Rejected:      b.rejected.Load(),
		Acquired:      acquired + b.acquiredSlow.Load(),
		Canceled:      b.canceled.Load(),
	}
}

// idle reports whether nobody holds or waits for a permit.
func (b *Bulkhead) idle() bool {
	for i := range b.cells {
		if b.cells[i].state.Load()&activeMask != 0 {
			return false
		}
	}
	return b.waiting.Load() == 0
}

// Enter is Acquire in the form of a watertight.Policy: it returns ctx
// unchanged and a ticket whose Seq says which cell the permit is counted in,
// so that Exit gives it back there; or Acquire's error.
func (b *Bulkhead) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	var probe byte // see Acquire
	i, err := b.acquire(ctx, uintptr(unsafe.Pointer(&probe)))
	if err != nil {
		return ctx, watertight.Ticket{}, err
	}
	return ctx, watertight.Ticket{Seq: uint64(i) + 1}, nil
}

// Exit is Release in the form of a watertight.Policy: it returns err
// unchanged.
func (b *Bulkhead) Exit(_ context.Context, t watertight.Ticket, err error) error {
	if t.Seq == 0 { // not a ticket of Enter: give back as Release does
		b.Release()
		return err
	}
	b.release(t.Seq - 1)
	if b.perCall != nil {
		b.emitReleased(1)
	}
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
