package watertightkafka

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog enforces LaneConfig.AttemptTimeout without a timer per record:
// a clock ticks every `every`; an attempt publishes a new attempt number as
// it starts, and a tick that finds the same attempt under way for the
// run's limit cancels its context. An attempt's context thus ends between
// AttemptTimeout and AttemptTimeout + every after it started (every is the
// smallest lane timeout over watchdogSlices), at the cost of one atomic
// store and two loads per record.
type watchdog struct {
	tick  atomic.Int64
	every time.Duration

	mu      sync.Mutex // guards runs, timer, stopped and the runs' seen fields
	runs    map[*run]struct{}
	timer   *time.Timer
	stopped bool
}

// watchdogSlices is how many ticks the smallest attempt timeout lasts.
const watchdogSlices = 8

// run is an attempt clock: the context a task's handler calls get, and the
// number of the attempt under way. A partition keeps its idle runs for its
// next tasks (see partition.enter), so a task costs no new context.
type run struct {
	parent context.Context
	limit  atomic.Int64 // ticks an attempt may last, set by the task that holds it
	// attempt is the number of the attempt last started, shifted left by
	// one; the low bit is set when the watchdog cancelled it. Only the
	// task that holds the run stores it; seq is that task's counter.
	attempt atomic.Uint64
	seq     uint64

	// seen and seenAt are the watchdog's: the attempt word it last saw
	// and the tick it first saw it at.
	seen   uint64
	seenAt int64

	mu     sync.Mutex // guards cancel against the watchdog
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// newWatchdog returns the watchdog for the smallest positive timeout, or nil
// when no lane has one.
func newWatchdog(smallest time.Duration) *watchdog {
	if smallest <= 0 {
		return nil
	}
	return &watchdog{every: max(smallest/watchdogSlices, time.Millisecond), runs: map[*run]struct{}{}}
}

// start arms the clock.
func (w *watchdog) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil && !w.stopped {
		w.timer = time.AfterFunc(w.every, w.check)
	}
}

// stop disarms the clock for good.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// check is a tick: it cancels the attempts that have lasted their limit. A
// run between attempts (or between tasks) looks like an attempt that lasts:
// its context is cancelled too, which nothing sees, and the next attempt
// takes a new one.
func (w *watchdog) check() {
	now := w.tick.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for r := range w.runs {
		a := r.attempt.Load()
		switch {
		case a&1 != 0:
		case a != r.seen:
			r.seen, r.seenAt = a, now
		case now-r.seenAt >= r.limit.Load() && r.attempt.CompareAndSwap(a, a|1):
			// The swap fails if a new attempt started meanwhile.
			r.mu.Lock()
			r.cancel(ErrAttemptTimeout)
			r.mu.Unlock()
		}
	}
	if !w.stopped {
		w.timer.Reset(w.every)
	}
}

// begin makes and registers an attempt clock whose contexts derive from
// parent.
func (w *watchdog) begin(parent context.Context) *run {
	r := &run{parent: parent}
	r.ctx, r.cancel = context.WithCancelCause(parent)
	w.mu.Lock()
	w.runs[r] = struct{}{}
	w.mu.Unlock()
	return r
}

// end unregisters an attempt clock for good.
func (w *watchdog) end(r *run) {
	w.mu.Lock()
	delete(w.runs, r)
	w.mu.Unlock()
	r.mu.Lock()
	r.cancel(nil)
	r.mu.Unlock()
}

// ticks returns the limit, in ticks, of attempts that may last timeout. An
// attempt is first seen at the tick after it started and cancelled limit
// ticks later: between limit and limit+1 ticks after it started.
func (w *watchdog) ticks(timeout time.Duration) int64 {
	return int64((timeout + w.every - 1) / w.every)
}

// attempt starts an attempt and returns its context. The attempt may last
// r.limit ticks, which the task set when it took r.
func (w *watchdog) attempt(r *run) context.Context {
	r.seq++
	r.attempt.Store(r.seq << 1)
	if r.ctx.Err() != nil {
		// Cancelled while idle, or abandoned (then the new context is
		// cancelled too, as the handler must see).
		r.renew()
	}
	return r.ctx
}

// done ends an attempt and reports whether the watchdog cancelled it.
func (w *watchdog) done(r *run) (timedOut bool) {
	return r.ctx.Err() != nil && context.Cause(r.ctx) == ErrAttemptTimeout
}

// renew gives the run a new context.
func (r *run) renew() {
	r.mu.Lock()
	r.cancel(nil)
	r.ctx, r.cancel = context.WithCancelCause(r.parent)
	r.mu.Unlock()
}

// timeoutError is the error of an attempt the watchdog cancelled: transient
// for the retry policy, a failure for a breaker, and errors.Is
// ErrAttemptTimeout. It does not unwrap to the handler's error, which is
// most likely the context's cancellation (an outcome breakers ignore).
type timeoutError struct{ err error }

func (e *timeoutError) Error() string {
	if e.err == nil {
		return ErrAttemptTimeout.Error()
	}
	return ErrAttemptTimeout.Error() + ": " + e.err.Error()
}

// Is reports whether target is ErrAttemptTimeout.
func (e *timeoutError) Is(target error) bool { return target == ErrAttemptTimeout }

// Transient marks it worth retrying (retry.IsTransient).
func (e *timeoutError) Transient() bool { return true }

// Timeout marks it a timeout, as net.Error does.
func (e *timeoutError) Timeout() bool { return true }
