package bulkhead

import (
	"context"
	"errors"
	"fmt"
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
// operations on a cache line that goroutines on other cores rarely touch (the
// permits are striped over per-core cells: see state.go), and no allocation;
// only a caller that must wait takes a mutex and joins a first-come,
// first-served queue.
//
// Its limit and wait can change while it is in use (SetMaxConcurrent,
// SetMaxWait, Reconfigure), keeping the permits in flight.
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

	name     string
	listener watertight.Listener
	evName   string        // Name of the events: Config.Name, or the registry's Name
	evKey    string        // Key of the events: the registry key
	regGen   atomic.Uint64 // the registry configuration generation it has: see Registry.Reconfigure
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
	cell       int // the cell the granted permit is counted in
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
		evName:   cfg.Name,
		errFull:  label(cfg.Name, ErrFull),
	}
	b.max.Store(uint64(n))
	b.maxWait.Store(int64(cfg.MaxWait))
	return b
}

// SetMaxConcurrent changes the number of permits to n while the bulkhead is
// in use, as Config.MaxConcurrent would set it: zero means
// DefaultMaxConcurrent, and a negative n or one above MaxConcurrentLimit is
// an error that leaves the bulkhead unchanged.
//
// Raising the limit hands the new permits to queued waiters at once, oldest
// first. Lowering it takes no permit back: the callers holding one keep it
// and give it back with Release as usual, and no permit is granted until
// fewer than n are held. Permits held from before count against the new
// limit either way.
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
	b.rebalanceLocked()
	b.handoffLocked()
	b.mu.Unlock()
	return nil
}

// SetMaxWait changes how long Acquire waits for a permit, with the meaning
// of Config.MaxWait (zero: no wait; negative: until the caller's context
// ends). It applies to the Acquire calls that start waiting after it;
// callers already queued keep the wait they started with.
func (b *Bulkhead) SetMaxWait(d time.Duration) { b.maxWait.Store(int64(d)) }

// Reconfigure applies cfg to the bulkhead while it is in use: it validates
// cfg as New does (the error names the field and leaves the bulkhead
// unchanged), then sets MaxConcurrent as SetMaxConcurrent does and MaxWait
// as SetMaxWait does. Name and Listener are fixed by New: Reconfigure
// ignores them. Totals (Snapshot's Acquired, Rejected, Canceled) carry on.
func (b *Bulkhead) Reconfigure(cfg Config) error {
	if err := cfg.validate("Config"); err != nil {
		return err
	}
	if err := b.SetMaxConcurrent(cfg.MaxConcurrent); err != nil {
		return err
	}
	b.SetMaxWait(cfg.MaxWait)
	return nil
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
	if i := b.tryFast(addr); i >= 0 {
		return i, nil
	}
	if b.maxWait.Load() == 0 {
		b.rejected.Add(1)
		return -1, b.fullEvent(b.full(), reasonNoWait)
	}
	return b.wait(ctx)
}

// TryAcquire takes a permit if one is free and nobody is queued for one, and
// reports whether it did. It never waits. A false result counts as a
// rejection in the Snapshot.
func (b *Bulkhead) TryAcquire() bool {
	var probe byte // see Acquire
	return b.tryAcquire(uintptr(unsafe.Pointer(&probe)))
}

// tryAcquire is TryAcquire for the goroutine whose stack holds addr.
func (b *Bulkhead) tryAcquire(addr uintptr) bool {
	if b.tryFast(addr) >= 0 {
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

// releaseAt is Release for the goroutine whose stack holds addr.
func (b *Bulkhead) releaseAt(addr uintptr) {
	b.release(b.index(addr, b.seed.Load()))
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

// wait queues for a permit when none could be taken at once and MaxWait is
// not zero. It returns the cell the permit is counted in.
func (b *Bulkhead) wait(ctx context.Context) (int, error) {
	done := ctx.Done()
	if done != nil {
		select {
		case <-done:
			// The context ended before the call: fail even if a permit
			// has become free since, as x/sync's semaphore does.
			b.canceled.Add(1)
			return -1, b.fullEvent(b.stopped(ctx), reasonStopped)
		default:
		}
	}

	w := &waiter{ready: make(chan struct{})}
	b.mu.Lock()
	b.waiting.Add(1) // before handoffLocked loads the cells: see Release
	b.pushLocked(w)
	b.handoffLocked() // a permit freed since the fast path failed goes to the front
	if w.granted {
		b.mu.Unlock()
		b.acquiredSlow.Add(1)
		return w.cell, nil
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
		// Granted. If ctx ended as well, prefer failing, and pass the
		// permit on. (w.cell was written under mu before ready was
		// closed.)
		if done != nil {
			select {
			case <-done:
				b.canceled.Add(1)
				b.release(uint64(w.cell))
				return -1, b.fullEvent(b.stopped(ctx), reasonStopped)
			default:
			}
		}
		b.acquiredSlow.Add(1)
		return w.cell, nil
	case <-done:
		b.giveUp(w)
		b.canceled.Add(1)
		return -1, b.fullEvent(b.stopped(ctx), reasonStopped)
	case <-expired:
		b.giveUp(w)
		b.rejected.Add(1)
		return -1, b.fullEvent(b.full(), reasonTimedOut)
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
		// Give the permit back: it was never Acquire's. (If no cell holds
		// one, a Release without Acquire has already taken it back.)
		if !b.dec(&b.cells[w.cell]) {
			b.releaseAnyLocked()
		}
		if b.fullHint.Load()&hintFull != 0 {
			b.fullHint.And(^uint32(hintFull))
		}
	} else {
		b.removeLocked(w)
		b.waiting.Add(-1)
	}
	if b.fullHint.Load()&hintPending != 0 { // see hinted
		b.rebalanceLocked()
	}
	// Hand free permits on: the one we were given, or one that a releaser
	// left for us as the front waiter. Harmless when there is none.
	b.handoffLocked()
	b.mu.Unlock()
}

// handoffLocked grants free permits to waiters, oldest first. b.mu is held.
func (b *Bulkhead) handoffLocked() {
	for w := b.head; w != nil; w = b.head {
		j := 0
		// The permit only: the acquisition is counted by the waiter if it
		// keeps it (acquiredSlow), so a cancelled wait counts as cancelled.
		// A cell without room may be one whose permit a caller that read
		// waiting == 0 before we queued took: the next is looked at.
		for j < len(b.cells) && !b.take(j, 1) {
			j++
		}
		if j == len(b.cells) {
			return
		}
		b.removeLocked(w)
		b.waiting.Add(-1)
		w.granted = true
		w.cell = j
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
	var active, acquired uint64
	for i := range b.cells {
		c := &b.cells[i]
		wraps := c.wraps.Load() // before state: see acquiredTotal
		s := c.state.Load()
		active += s & activeMask
		acquired += acquiredTotal(wraps, s)
	}
	acquired -= min(acquired, b.bumps.Load()) // after the states: see bump
	maxc := b.max.Load()
	avail := int(maxc) - int(active)
	if avail < 0 {
		avail = 0
	}
	return Snapshot{
		Name:          b.name,
		MaxConcurrent: int(maxc),
		Active:        int(active),
		Waiting:       int(b.waiting.Load()),
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
