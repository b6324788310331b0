package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/watertight-go/watertight"
)

// DefaultWorkers is the number of workers used when PoolConfig.Workers is
// zero.
const DefaultWorkers = 10

// DefaultQueueSize is the queue capacity used when PoolConfig.QueueSize is
// zero.
const DefaultQueueSize = 100

// PoolConfig configures a worker-pool bulkhead.
type PoolConfig struct {
	// Name labels the pool's errors and its PoolSnapshot. It may be empty.
	Name string
	// Workers is the number of worker goroutines, hence the most tasks
	// that run at once. Zero means DefaultWorkers; a negative value is an
	// error.
	Workers int
	// QueueSize is how many accepted tasks may wait for a worker. Zero
	// means DefaultQueueSize; a negative value means no queue: a task is
	// accepted only when a worker is idle.
	QueueSize int
	// MaxQueueWait is how long a task may wait in the queue: one that
	// waited longer is dropped, not run, with ErrQueueTimeout. Zero means
	// no limit other than the task's context; a negative value is an error.
	MaxQueueWait time.Duration
	// OnDrop, if not nil, is called once for each accepted task that is
	// dropped without running, with the reason: ErrQueueTimeout, the
	// task's context error, or ErrClosed for tasks queued at Shutdown. It
	// is never called with a lock held, and may run on a worker, on the
	// goroutine of Call or Shutdown, or on one that calls Submit. If nil,
	// drops are only counted.
	OnDrop func(err error)
	// OnPanic, if not nil, is called on the worker for each task that
	// panicked; the worker recovers and goes on with the next task. If nil,
	// panics are only counted (and Call returns them as its error).
	OnPanic func(err *PanicError)
	// Listener, if not nil, receives the pool's events, with Source
	// "bulkhead" and Name this Name: EventBulkheadFull when a task is
	// refused because the queue is full (Err ErrQueueFull), EventRejected
	// when it is refused after Shutdown (Err ErrClosed), and EventDropped
	// for each accepted task dropped without running (Err as for OnDrop,
	// after which it is called). It is never called with a lock held, and
	// runs on the goroutines OnDrop runs on; it should return quickly (see
	// watertight.Listener). If nil, no events are built.
	Listener watertight.Listener
}

// DefaultPoolConfig returns the configuration NewPool uses for zero fields:
// 10 workers, a queue of 100 and no queue-wait limit.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{Workers: DefaultWorkers, QueueSize: DefaultQueueSize}
}

func (cfg PoolConfig) validate() error {
	if cfg.Workers < 0 {
		return fmt.Errorf("bulkhead: PoolConfig.Workers must be >= 0 (0 means %d), got %d", DefaultWorkers, cfg.Workers)
	}
	if cfg.MaxQueueWait < 0 {
		return fmt.Errorf("bulkhead: PoolConfig.MaxQueueWait must be >= 0 (0 means no limit), got %v", cfg.MaxQueueWait)
	}
	return nil
}

// PanicError is the error Call returns, and OnPanic receives, when a task
// panicked. The worker that ran it recovered and lives on.
type PanicError struct {
	// Value is the value the task panicked with; nil when the task called
	// runtime.Goexit instead.
	Value any
	// Stack is the panicking goroutine's stack, from the recovery point.
	Stack []byte
}

// Error reads "bulkhead: task panicked: <value>".
func (e *PanicError) Error() string {
	if e.Value == nil {
		return "bulkhead: task called runtime.Goexit"
	}
	return fmt.Sprintf("bulkhead: task panicked: %v", e.Value)
}

// Pool is a worker-pool bulkhead: a fixed set of worker goroutines runs the
// tasks submitted to it, with a bounded queue in front. At most Workers
// tasks run at once however many callers submit; when the queue is full,
// Submit refuses at once with ErrQueueFull. Unlike a semaphore Bulkhead, the
// task does not run on the caller's goroutine, so a caller can stop waiting
// (Call returns when its context ends) while the task keeps its worker until
// it returns: the limit still holds.
//
// A Pool is safe for concurrent use. Build it with NewPool and stop it with
// Shutdown. The zero value has no workers and refuses every task with
// ErrQueueFull.
type Pool struct {
	name         string
	workers      int
	qcap         int // 0 when there is no queue
	maxQueueWait time.Duration
	onDrop       func(error)
	onPanic      func(*PanicError)
	listener     watertight.Listener

	errQueueFull    error
	errQueueTimeout error
	errClosed       error

	exited chan struct{} // closed when the last worker has exited

	mu     sync.Mutex
	closed bool
	head   *job // queue, oldest first
	tail   *job
	qlen   int
	idle   []*worker // idle workers, most recently idle last
	live   int       // worker goroutines not yet exited
	busy   int       // tasks handed to a worker and not finished

	rejected, dropped, completed, panicked uint64
}

// worker is one worker goroutine's mailbox: Submit hands a task directly to
// an idle worker through it; Shutdown closes it to let an idle worker exit.
type worker struct {
	wake chan *job // buffered 1
}

// job is one accepted task. next, prev and queued are guarded by Pool.mu.
type job struct {
	next, prev *job
	queued     bool
	ctx        context.Context
	fn         func(context.Context)
	enq        time.Time // when it was queued; set only with MaxQueueWait
	res        completer // Call's result; nil for Submit
	dropErr    error     // why pruneLocked dropped it
}

// completer receives the end of a task submitted by Call: nil after the task
// ran (the result is already stored), or why it did not run or finish.
type completer interface {
	complete(err error)
}

// NewPool returns a Pool for cfg and starts its workers. It fails, naming the
// field and the rule, when cfg is invalid.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	workers := cfg.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	qcap := cfg.QueueSize
	switch {
	case qcap == 0:
		qcap = DefaultQueueSize
	case qcap < 0:
		qcap = 0
	}
	p := &Pool{
		name:            cfg.Name,
		workers:         workers,
		qcap:            qcap,
		maxQueueWait:    cfg.MaxQueueWait,
		onDrop:          cfg.OnDrop,
		onPanic:         cfg.OnPanic,
		listener:        cfg.Listener,
		errQueueFull:    label(cfg.Name, ErrQueueFull),
		errQueueTimeout: label(cfg.Name, ErrQueueTimeout),
		errClosed:       label(cfg.Name, ErrClosed),
		exited:          make(chan struct{}),
		live:            workers,
		idle:            make([]*worker, 0, workers),
	}
	for range workers {
		go p.loop(&worker{wake: make(chan *job, 1)}, false)
	}
	return p, nil
}

// Submit hands task to the pool and returns at once: nil when the task was
// accepted (it runs on a worker, with ctx, unless it is dropped),
// ErrQueueFull when every worker is busy and the queue is full, ErrClosed
// after Shutdown. An accepted task whose ctx is done, or that waited longer
// than MaxQueueWait, before a worker takes it is dropped without running
// (see PoolConfig.OnDrop). A task that panics is recovered on its worker
// (see PoolConfig.OnPanic).
func (p *Pool) Submit(ctx context.Context, task func(ctx context.Context)) error {
	if task == nil {
		panic("bulkhead: Submit with a nil task")
	}
	_, err := p.submit(&job{ctx: ctx, fn: task})
	return err
}

// submit accepts j or refuses it; queued reports whether j went to the queue
// rather than straight to an idle worker.
func (p *Pool) submit(j *job) (queued bool, err error) {
	if p.exited == nil { // zero Pool
		return false, ErrQueueFull
	}
	var now time.Time
	if p.maxQueueWait > 0 {
		now = time.Now()
	}
	var stale *job // expired tasks pruned from the front of a full queue
	p.mu.Lock()
	if p.closed {
		p.rejected++
		p.mu.Unlock()
		p.event(watertight.EventRejected, p.errClosed, "the pool is shut down", CodeClosed)
		return false, p.errClosed
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy++
		p.mu.Unlock()
		w.wake <- j // never blocks: w was idle, its mailbox is empty and only we own it now
		return false, nil
	}
	if p.qlen >= p.qcap && p.qcap > 0 {
		stale = p.pruneLocked(now)
	}
	if p.qlen >= p.qcap {
		p.rejected++
		p.mu.Unlock()
		p.dropAll(stale)
		p.event(watertight.EventBulkheadFull, p.errQueueFull, "every worker busy and the queue full", CodeQueueFull)
		return false, p.errQueueFull
	}
	j.enq = now
	p.pushLocked(j)
	p.mu.Unlock()
	p.dropAll(stale)
	return true, nil
}

// pruneLocked removes, from the front of the queue, tasks that would be
// dropped anyway (context done or waited too long) so that they make room;
// it stops at the first live task. It returns them, linked by next, each
// with its dropErr, to be reported after unlocking. p.mu is held.
func (p *Pool) pruneLocked(now time.Time) *job {
	var first, last *job
	for j := p.head; j != nil; j = p.head {
		err := p.dropReason(j, now)
		if err == nil {
			break
		}
		p.removeLocked(j)
		j.dropErr = err
		p.dropped++
		if last == nil {
			first = j
		} else {
			last.next = j
		}
		last = j
	}
	return first
}

// dropReason says why j must not run, or nil if it may. now is used only
// with MaxQueueWait.
func (p *Pool) dropReason(j *job, now time.Time) error {
	if j.ctx.Err() != nil {
		return gaveUp(j.ctx)
	}
	if !j.enq.IsZero() && now.Sub(j.enq) > p.maxQueueWait {
		return p.errQueueTimeout
	}
	return nil
}

// dropAll reports the drops of a list of jobs linked by next, each with its
// dropErr. No lock is held.
func (p *Pool) dropAll(j *job) {
	for j != nil {
		next := j.next
		j.next = nil
		p.reportDrop(j, j.dropErr)
		j = next
	}
}

// reportDrop tells the task's Call and OnDrop that j will not run. No lock
// is held.
func (p *Pool) reportDrop(j *job, err error) {
	if j.res != nil {
		j.res.complete(err)
	}
	if p.onDrop != nil {
		p.onDrop(err)
	}
	p.event(watertight.EventDropped, err, reasonDropped, p.dropCode(err))
}

// reasonDropped is the Reason of the pool's EventDropped events.
const reasonDropped = "an accepted task was dropped from the queue without running"

// event sends an event to the listener, if any. No lock is held.
func (p *Pool) event(kind watertight.EventKind, err error, reason, code string) {
	if p.listener != nil {
		watertight.Emit(p.listener, watertight.Event{Kind: kind, Source: source, Name: p.name, Reason: reason, Err: err, Code: code})
	}
}

// dropCode is the code of a task dropped with err: the pool's own errors,
// else the task's context ended (gaveUp).
func (p *Pool) dropCode(err error) string {
	switch err {
	case p.errQueueTimeout:
		return CodeQueueTimeout
	case p.errClosed:
		return CodeShutdown
	}
	return CodeContextDone
}

func (p *Pool) pushLocked(j *job) {
	j.prev = p.tail
	if p.tail != nil {
		p.tail.next = j
	} else {
		p.head = j
	}
	p.tail = j
	j.queued = true
	p.qlen++
}

func (p *Pool) removeLocked(j *job) {
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		p.head = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	} else {
		p.tail = j.prev
	}
	j.next, j.prev = nil, nil
	j.queued = false
	p.qlen--
}

// result is what a finished task leaves for the worker loop to count.
type result uint8

const (
	ranOK result = iota
	ranPanicked
	wasDropped
)

// loop is a worker goroutine: it takes tasks from the queue, or waits idle
// for one handed to it, and runs them until Shutdown. owed is set for a
// goroutine that replaces one that runtime.Goexit ended in the middle of a
// task: it counts that task first.
func (p *Pool) loop(w *worker, owed bool) {
	var j *job
	last := ranPanicked
	counted := !owed
	for {
		if j != nil {
			last = p.run(w, j)
			counted = false
		}
		p.mu.Lock()
		if !counted {
			p.busy--
			switch last {
			case ranOK:
				p.completed++
			case ranPanicked:
				p.completed++
				p.panicked++
			case wasDropped:
				p.dropped++
			}
			counted = true
		}
		if p.live > p.workers && !p.closed { // SetWorkers lowered the count
			p.exitLocked()
			p.mu.Unlock()
			return
		}
		if j = p.head; j != nil {
			p.removeLocked(j)
			p.busy++
			p.mu.Unlock()
			continue
		}
		if p.closed {
			p.exitLocked()
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		var ok bool
		// A nil job is SetWorkers waking an idle worker to exit.
		if j, ok = <-w.wake; !ok { // closed by Shutdown
			p.mu.Lock()
			p.exitLocked()
			p.mu.Unlock()
			return
		}
	}
}

// SetWorkers changes the number of workers while the pool is in use, as
// PoolConfig.Workers would set it: zero means DefaultWorkers, a negative n
// is an error. Raising starts the new workers at once, and they take the
// queued tasks, oldest first. Lowering stops no task: idle workers above n
// exit at once, busy ones when their task ends, and no queued task starts
// until fewer than n run. After Shutdown it returns ErrClosed. The queue
// keeps its size.
func (p *Pool) SetWorkers(n int) error {
	if n < 0 {
		return fmt.Errorf("bulkhead: SetWorkers: n must be >= 0 (0 means %d), got %d", DefaultWorkers, n)
	}
	if p.exited == nil {
		return errors.New("bulkhead: SetWorkers on a zero Pool, which has no workers: build it with NewPool")
	}
	if n == 0 {
		n = DefaultWorkers
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.errClosed
	}
	p.workers = n
	for ; p.live < n; p.live++ {
		go p.loop(&worker{wake: make(chan *job, 1)}, false)
	}
	// Wake idle workers above n with no task: each finds the pool over its
	// count and exits (see loop).
	for excess := p.live - n; excess > 0 && len(p.idle) > 0; excess-- {
		w := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		w.wake <- nil // never blocks: an idle worker's mailbox is empty
	}
	return nil
}

// exitLocked records that a worker goroutine exits. p.mu is held.
func (p *Pool) exitLocked() {
	p.live--
	if p.live == 0 {
		close(p.exited)
	}
}

// run runs j on its worker unless it must be dropped, and says which.
func (p *Pool) run(w *worker, j *job) (res result) {
	var now time.Time
	if !j.enq.IsZero() {
		now = time.Now()
	}
	if err := p.dropReason(j, now); err != nil {
		p.reportDrop(j, err)
		return wasDropped
	}
	normal := false
	defer func() {
		if normal {
			return
		}
		v := recover()
		pe := &PanicError{Value: v, Stack: debug.Stack()}
		if v == nil {
			// runtime.Goexit: this goroutine ends whatever we do. Keep the
			// pool's strength by starting a replacement that counts this
			// task and goes on.
			go p.loop(w, true)
		}
		if p.onPanic != nil {
			p.onPanic(pe)
		}
		if j.res != nil {
			j.res.complete(pe)
		}
		res = ranPanicked
	}()
	j.fn(j.ctx)
	normal = true
	if j.res != nil {
		j.res.complete(nil)
	}
	return ranOK
}

// Call submits fn to p and waits for its result. It returns fn's result when
// fn ran; ErrQueueFull or ErrClosed when the pool refused the task; ErrClosed
// when Shutdown dropped it from the queue; ErrQueueTimeout when it waited
// longer than MaxQueueWait in the queue (Call then returns at that moment,
// and the task never runs); a *PanicError when fn panicked; and ctx's error
// (or its cause, when that says more) as soon as ctx ends. If ctx ends before
// a worker took the task, the task never runs, and that error is marked
// watertight.Ignored: the caller gave up, which a breaker outside counts
// neither as a failure nor as a saturation (as the semaphore Bulkhead's
// Acquire does). If fn is already running, the error is ctx's as it is (a
// deadline is then a call too slow), and fn keeps its worker until it
// returns, so the pool's limit still holds while Call has returned.
func Call[T any](ctx context.Context, p *Pool, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if ctx.Err() != nil {
		return zero, gaveUp(ctx)
	}
	c := &callResult[T]{done: make(chan struct{})}
	j := &job{ctx: ctx, res: c}
	j.fn = func(ctx context.Context) { c.v, c.err = fn(ctx) }
	queued, err := p.submit(j)
	if err != nil {
		return zero, err
	}
	var expired <-chan time.Time
	if queued && p.maxQueueWait > 0 {
		t := time.NewTimer(p.maxQueueWait)
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case <-c.done:
			return c.v, c.err
		case <-ctx.Done():
			if err := gaveUp(ctx); p.cancel(j, err) {
				return zero, err
			}
			// fn runs, or has run: an error of the call, not a give-up.
			return zero, ctxErr(ctx)
		case <-expired:
			if p.cancel(j, p.errQueueTimeout) {
				return zero, p.errQueueTimeout
			}
			expired = nil // a worker took it in time: wait for the result
		}
	}
}

// cancel removes j from the queue if it is still there, counting and
// reporting the drop with err, and reports whether it did.
func (p *Pool) cancel(j *job, err error) bool {
	p.mu.Lock()
	if !j.queued {
		p.mu.Unlock()
		return false
	}
	p.removeLocked(j)
	p.dropped++
	p.mu.Unlock()
	if p.onDrop != nil {
		p.onDrop(err)
	}
	p.event(watertight.EventDropped, err, reasonDropped, p.dropCode(err))
	return true
}

// gaveUp is the error of a task whose ctx ended before it ran: ctx's error
// (see ctxErr) marked watertight.Ignored, since the caller gave up, which
// says nothing about the dependency nor about the pool's saturation (that is
// ErrQueueFull and ErrQueueTimeout).
func gaveUp(ctx context.Context) error { return watertight.Mark(ctxErr(ctx), watertight.Ignored) }

// callResult carries Call's result from the worker.
type callResult[T any] struct {
	v    T
	err  error
	done chan struct{}
}

func (c *callResult[T]) complete(err error) {
	if err != nil {
		c.err = err
	}
	close(c.done)
}

// Shutdown stops the pool: Submit and Call refuse new tasks with ErrClosed,
// queued tasks are dropped (their Calls return ErrClosed, OnDrop sees
// ErrClosed), and the workers exit once their running tasks return. Shutdown
// waits for that, or for ctx to end, in which case it returns ctx's error
// and the workers still exit as their tasks return. It may be called more
// than once, and from any goroutine; called from a task of the pool, it
// waits for that task too, so it returns only when ctx ends.
func (p *Pool) Shutdown(ctx context.Context) error {
	if p.exited == nil { // zero Pool: nothing runs
		return nil
	}
	var queued *job
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		queued = p.head // still linked by next, in queue order
		for j := queued; j != nil; j = j.next {
			j.queued = false
			j.prev = nil
			j.dropErr = p.errClosed
			p.dropped++
		}
		p.head, p.tail, p.qlen = nil, nil, 0
		for _, w := range p.idle {
			close(w.wake)
		}
		p.idle = nil
	}
	p.mu.Unlock()
	p.dropAll(queued)
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// PoolSnapshot is a point-in-time view of a Pool, taken under its lock.
type PoolSnapshot struct {
	// Name is PoolConfig.Name.
	Name string
	// Workers is the number of workers.
	Workers int
	// Busy is the number of workers running a task.
	Busy int
	// Queued is the number of tasks waiting for a worker.
	Queued int
	// QueueCapacity is the queue's size; zero when there is no queue.
	QueueCapacity int
	// Rejected counts, since NewPool, the tasks refused with ErrQueueFull
	// or ErrClosed.
	Rejected uint64
	// Dropped counts, since NewPool, the accepted tasks that were not run:
	// context done, MaxQueueWait exceeded, or queued at Shutdown.
	Dropped uint64
	// Completed counts, since NewPool, the tasks that ran to their end,
	// including those that panicked.
	Completed uint64
	// Panicked counts, since NewPool, the tasks that panicked.
	Panicked uint64
}

// Snapshot returns the pool's current state and totals.
func (p *Pool) Snapshot() PoolSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolSnapshot{
		Name:          p.name,
		Workers:       p.workers,
		Busy:          p.busy,
		Queued:        p.qlen,
		QueueCapacity: p.qcap,
		Rejected:      p.rejected,
		Dropped:       p.dropped,
		Completed:     p.completed,
		Panicked:      p.panicked,
	}
}
