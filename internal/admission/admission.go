package admission

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// Errors of Queue.Acquire and Queue.AcquireWait. Each is a rejection, and
// each but ErrGaveUp a saturation (watertight.IsSaturation holds): a
// request whose context ended while it waited was given up by its caller,
// which says nothing of the server's saturation, as with the semaphore
// bulkhead (watertight.Classify: Ignored). The adapters map them to their own
// errors. ErrFull, ErrDisplaced and ErrMaxWait are returned as they are
// (compare with ==); the error of a waiter whose context ended matches
// ErrGaveUp, context.Cause of its context and the context's error (compare
// with errors.Is).
var (
	// ErrFull: maxConcurrent requests were in flight and maxQueue waiting
	// (or there is no queue), and none of the waiters had a lower
	// criticality than the newcomer's.
	ErrFull = watertight.NewSaturation("admission: at the limit")
	// ErrDisplaced: the request waited in a full queue and was removed to
	// make room for a request of higher criticality.
	ErrDisplaced = watertight.NewSaturation("admission: displaced from the queue by a request of higher criticality")
	// ErrGaveUp: the request's context ended while it waited (or before it
	// came); it was not let in.
	ErrGaveUp = watertight.NewRejection("admission: context ended while queued")
	// ErrMaxWait: the request waited the longest time allowed (the maxWait
	// of AcquireWait) and was removed from the queue.
	ErrMaxWait = watertight.NewSaturation("admission: waited the longest time allowed in the queue")
)

// Queue is the in-flight limit and wait queue of one route or method. See
// the package doc for its discipline. Use New, or Init on a Queue embedded
// in a larger struct; a Queue must not be copied once used. It is safe for
// concurrent use.
//
// Fast path: while fewer than max requests are in flight and nobody waits, a
// request enters with one CAS on active and leaves with one atomic add (and a
// load of waiting): no mutex. The mutex and the queue are only used when a
// request must wait.
//
// The lost wakeup, and why it cannot happen. A leaver (Release) gives its
// place back (active) and then loads waiting; a request that must wait
// (AcquireWait), under mu, joins the queue and stores waiting and then, in
// dispatchLocked, loads active. Go's atomics are sequentially consistent, so
// these four operations happen in one order both sides agree on. Either the
// leaver's load of waiting comes after the store and sees it: the leaver
// then takes mu, which it gets only after the waiter has queued, and
// dispatches. Or it comes before: then the waiter's load of active comes
// after the place was given back and sees it free, and the waiter dispatches
// (possibly itself). Both may happen; places are taken by CAS, never beyond
// max, and waiters are let in under mu, so each once. A fast-path request
// may take a freed place ahead of the queue (it read waiting as 0 just
// before someone queued): the queue then waits for the next release, which
// sees waiting and dispatches.
type Queue struct {
	name     string
	max      atomic.Int64 // changed by SetLimit
	maxQueue int
	queued   atomic.Pointer[func(name string)] // for tests: called when a request joins the queue
	waiting  atomic.Int64                      // len(queue); stored under mu, read by every request
	_        [64]byte                          // the words above are read by every request, written rarely

	mu    sync.Mutex
	queue []*waiter // oldest first
	_     [64]byte

	// active is last, so that a struct that embeds the Queue can put its
	// own per-request word (a Refs) right after it, on the same cache line.
	active atomic.Int64 // requests let in and not yet released; at most max
}

// waiter is a queued request. err and the closing of ready are written under
// Queue.mu; ready is closed once the waiter's fate is decided: err nil
// means it was let in (and holds a place), else it was turned away.
type waiter struct {
	ctx   context.Context
	crit  int
	ready chan struct{}
	err   error
}

// New returns a Queue named name (passed to the queued hook) that lets
// maxConcurrent requests in at once (at least 1) and keeps up to maxQueue
// waiting (0 or less: none).
func New(name string, maxConcurrent, maxQueue int) *Queue {
	q := new(Queue)
	q.Init(name, maxConcurrent, maxQueue)
	return q
}

// Init sets up a zero Queue as New does, for a Queue embedded in a larger
// struct. It must be called before the Queue is used, and only once.
func (q *Queue) Init(name string, maxConcurrent, maxQueue int) {
	q.name = name
	q.max.Store(int64(max(maxConcurrent, 1)))
	q.maxQueue = max(maxQueue, 0)
}

// Name returns the name given to New.
func (q *Queue) Name() string { return q.name }

// MaxConcurrent returns the in-flight limit.
func (q *Queue) MaxConcurrent() int { return int(q.max.Load()) }

// SetLimit changes the in-flight limit to n (at least 1) while the Queue is
// in use, as an adaptive limit (limit.Controller) moves it: raising it lets
// waiters in at once, lowering it takes no place back (nobody new is let in
// until in-flight drops below it). It is a limit.Gate with Load.
func (q *Queue) SetLimit(n int) {
	q.max.Store(int64(max(n, 1)))
	if q.waiting.Load() != 0 {
		q.mu.Lock()
		q.dispatchLocked()
		q.mu.Unlock()
	}
}

// Load returns the requests let in and not yet released, and those waiting.
func (q *Queue) Load() (inFlight, waiting int) {
	return int(q.active.Load()), int(q.waiting.Load())
}

// MaxQueue returns the queue bound.
func (q *Queue) MaxQueue() int { return q.maxQueue }

// SetQueuedHook sets, for tests, a func called (outside the lock, in the
// request's goroutine) with the Queue's name whenever a request joins the
// queue. Nil removes it.
func (q *Queue) SetQueuedHook(f func(name string)) {
	if f == nil {
		q.queued.Store(nil)
		return
	}
	q.queued.Store(&f)
}

// tryTake takes a place if fewer than max are taken.
func (q *Queue) tryTake() bool {
	for {
		n := q.active.Load()
		if n >= q.max.Load() {
			return false
		}
		if q.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// TryAcquire takes a place only if one is free at once and nobody waits; it
// never queues. On success the caller must call Release.
func (q *Queue) TryAcquire() bool {
	return q.waiting.Load() == 0 && q.tryTake()
}

// Acquire takes a place for a request of criticality crit (higher is more
// critical), waiting in the queue if need be until let in, displaced, or
// ctx ends. On success the caller must call Release. See the package's
// errors for the failures.
func (q *Queue) Acquire(ctx context.Context, crit int) error {
	return q.AcquireWait(ctx, crit, 0)
}

// AcquireWait is Acquire with a bound on the wait in the queue: a waiter
// still queued after maxWait is removed and gets ErrMaxWait. maxWait 0 or
// less means no bound.
func (q *Queue) AcquireWait(ctx context.Context, crit int, maxWait time.Duration) error {
	if ctx.Err() != nil {
		return gaveUp(ctx)
	}
	if q.waiting.Load() == 0 && q.tryTake() {
		return nil
	}
	return q.wait(ctx, crit, maxWait)
}

// wait is AcquireWait's slow path.
func (q *Queue) wait(ctx context.Context, crit int, maxWait time.Duration) error {
	q.mu.Lock()
	if len(q.queue) == 0 && q.tryTake() {
		q.mu.Unlock()
		return nil
	}
	if len(q.queue) >= q.maxQueue {
		q.dropDeadLocked()
	}
	if len(q.queue) >= q.maxQueue {
		i := q.victimLocked(crit)
		if i < 0 {
			q.mu.Unlock()
			return ErrFull
		}
		v := q.queue[i]
		q.removeAtLocked(i)
		v.err = ErrDisplaced
		close(v.ready)
	}
	w := &waiter{ctx: ctx, crit: crit, ready: make(chan struct{})}
	q.queue = append(q.queue, w)
	q.waiting.Store(int64(len(q.queue)))
	// A place may have been given back since tryTake failed, by a leaver
	// that saw no waiter: see the type's comment.
	q.dispatchLocked()
	queued := q.queued.Load()
	q.mu.Unlock()
	if queued != nil {
		(*queued)(q.name)
	}

	var expired <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	case <-expired:
	}
	q.mu.Lock()
	select {
	case <-w.ready:
		if w.err != nil { // turned away: displaced, or dropped as ctx ended
			q.mu.Unlock()
			return w.err
		}
		if ctx.Err() == nil { // let in as the wait expired: keep the place
			q.mu.Unlock()
			return nil
		}
		// Let in as ctx ended: give the place back, unused.
		q.active.Add(-1)
		q.dispatchLocked()
	default:
		q.removeLocked(w)
	}
	q.mu.Unlock()
	if ctx.Err() != nil {
		return gaveUp(ctx)
	}
	return ErrMaxWait
}

// Release gives back a place taken by Acquire, AcquireWait or TryAcquire
// and lets the next waiter in.
func (q *Queue) Release() {
	q.active.Add(-1)
	if q.waiting.Load() != 0 { // see the type's comment
		q.mu.Lock()
		q.dispatchLocked()
		q.mu.Unlock()
	}
}

// dispatchLocked lets waiters in while there is room: the highest
// criticality first; among equals, FIFO while the queue is at most half
// full, LIFO beyond. Waiters whose context has ended are dropped.
func (q *Queue) dispatchLocked() {
	for len(q.queue) > 0 {
		i := q.nextLocked()
		w := q.queue[i]
		if w.ctx.Err() != nil {
			q.removeAtLocked(i)
			w.err = gaveUp(w.ctx)
			close(w.ready)
			continue
		}
		if !q.tryTake() {
			return
		}
		q.removeAtLocked(i)
		close(w.ready)
	}
}

// nextLocked returns the index of the waiter to let in next.
func (q *Queue) nextLocked() int {
	lifo := 2*len(q.queue) > q.maxQueue
	best := -1
	for i, w := range q.queue {
		switch {
		case best < 0, w.crit > q.queue[best].crit:
			best = i
		case w.crit == q.queue[best].crit && lifo:
			best = i // later is newer
		}
	}
	return best
}

// victimLocked returns the index of the oldest waiter of the lowest
// criticality below crit, or -1 when there is none.
func (q *Queue) victimLocked(crit int) int {
	v := -1
	for i, w := range q.queue {
		if w.crit < crit && (v < 0 || w.crit < q.queue[v].crit) {
			v = i
		}
	}
	return v
}

// dropDeadLocked removes the waiters whose context has ended.
func (q *Queue) dropDeadLocked() {
	for i := 0; i < len(q.queue); {
		w := q.queue[i]
		if w.ctx.Err() == nil {
			i++
			continue
		}
		q.removeAtLocked(i)
		w.err = gaveUp(w.ctx)
		close(w.ready)
	}
}

func (q *Queue) removeLocked(w *waiter) {
	for i, x := range q.queue {
		if x == w {
			q.removeAtLocked(i)
			return
		}
	}
}

func (q *Queue) removeAtLocked(i int) {
	copy(q.queue[i:], q.queue[i+1:])
	q.queue[len(q.queue)-1] = nil
	q.queue = q.queue[:len(q.queue)-1]
	q.waiting.Store(int64(len(q.queue)))
}

// gaveUp returns the error of a request whose ctx ended.
func gaveUp(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	e := &GaveUpError{Cause: cause}
	if err := ctx.Err(); err != nil && err != cause {
		e.Err = err
	}
	return e
}

// GaveUpError is the error of a request whose context ended before it was
// let in. It matches ErrGaveUp, Cause and Err.
type GaveUpError struct {
	Cause error // context.Cause of the request's context
	Err   error // the context's error when it differs from Cause, else nil
}

func (e *GaveUpError) Error() string { return ErrGaveUp.Error() + ": " + e.Cause.Error() }

// Unwrap returns ErrGaveUp, Cause and, if not nil, Err.
func (e *GaveUpError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrGaveUp, e.Cause, e.Err}
	}
	return []error{ErrGaveUp, e.Cause}
}

// evicted is the count of an evicted Refs: so negative that adding a count
// of holders to it leaves it negative.
const evicted = math.MinInt64 / 2

// Refs counts the holders of a value kept in a table that evicts idle
// values (a Queue per route). A holder counts itself with Ref before it
// uses the value and with Put when done; the table evicts a value only when
// Evict succeeds, that is when nobody holds it, after which Ref fails for
// good. So a key never has two values in use at once: a caller whose Ref
// fails looks the key up again. The zero Refs has no holder.
type Refs struct{ n atomic.Int64 }

// Ref counts one more holder, unless the value was evicted: one atomic
// add. A failed Ref needs no Put.
func (r *Refs) Ref() bool { return r.n.Add(1) > 0 }

// Put lets go of a hold taken by Ref.
func (r *Refs) Put() { r.n.Add(-1) }

// Evict marks the value evicted if nobody holds it, and reports whether it
// did.
func (r *Refs) Evict() bool { return r.n.CompareAndSwap(0, evicted) }

// Load returns the count of holders: negative once evicted.
func (r *Refs) Load() int64 { return r.n.Load() }
