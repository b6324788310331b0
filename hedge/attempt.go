package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attempt is one attempt of a hedged call, and the context.Context that the
// attempt's function gets.
//
// The context is built lazily: until somebody asks for its Done channel (or
// a cause), it answers from its parent, and cancelling it only sets a state.
// The common hedged call — the first attempt answers before the delay, with
// a function that never waits on its context — so costs no context
// allocation at all; a function that does wait (any network call) pays for
// one context.WithCancelCause, as it would without the lazy start.
type attempt struct {
	parent   context.Context
	state    atomic.Uint32 // stLazy, stLive or stDead
	deferred atomic.Bool   // DeferCancel was called
	running  bool          // owned by the call, under its mutex
	n        int32         // attempt number, 1 for the first
	mu       sync.Mutex    // serialises materialising
	real     *realCtx      // set once, before state becomes stLive
	start    int64         // tracker stamp of the start (percentile mode)
}

// realCtx is an attempt's context once somebody needed it.
type realCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// The states of an attempt's context.
const (
	stLazy uint32 = iota // answers from the parent; not cancelled
	stLive               // real is set
	stDead               // released before being materialised
)

// attemptKey is the context key under which an attempt finds itself.
type attemptKey struct{}

// materialize returns the real context, building it if needed.
func (a *attempt) materialize() context.Context {
	if a.state.Load() == stLive {
		return a.real.ctx
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.Load() == stLive {
		return a.real.ctx
	}
	ctx, cancel := context.WithCancelCause(a.parent)
	a.real = &realCtx{ctx: ctx, cancel: cancel}
	// release takes no lock: if it ran (or runs now), the attempt is over.
	if !a.state.CompareAndSwap(stLazy, stLive) {
		cancel(nil)
		a.state.Store(stLive)
	}
	return ctx
}

// stop cancels the attempt's context with cause (nil: context.Canceled).
// It materialises the context, so that context.Cause reports cause.
func (a *attempt) stop(cause error) {
	a.materialize()
	a.real.cancel(cause)
}

// release ends the attempt's context once Do is done with it. On the common
// path (never materialised) it is one compare-and-swap.
func (a *attempt) release() {
	if a.state.CompareAndSwap(stLazy, stDead) {
		return
	}
	if a.state.Load() == stLive {
		a.real.cancel(nil)
	}
}

// releaseUnlessDeferred releases a unless its function called DeferCancel.
func (a *attempt) releaseUnlessDeferred() {
	if !a.deferred.Load() {
		a.release()
	}
}

// Deadline implements context.Context: the parent's deadline.
func (a *attempt) Deadline() (time.Time, bool) { return a.parent.Deadline() }

// Done implements context.Context.
func (a *attempt) Done() <-chan struct{} { return a.materialize().Done() }

// Err implements context.Context.
func (a *attempt) Err() error {
	switch a.state.Load() {
	case stLive:
		return a.real.ctx.Err()
	case stDead:
		return context.Canceled
	}
	return a.parent.Err()
}

// Value implements context.Context. Once the attempt is cancelled, the
// lookup goes through the real context, so that context.Cause sees the
// attempt's cause.
func (a *attempt) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return a
	}
	if a.state.Load() == stLazy {
		return a.parent.Value(key)
	}
	return a.materialize().Value(key)
}

// String describes the context, as the context package's own do.
func (a *attempt) String() string { return "hedge.attempt" }

// DeferCancel, called by a hedged function with the context Do gave it,
// keeps that context alive after Do returns the attempt's result, until the
// returned function is called. Use it when the result needs its context
// after the call — an HTTP response whose body is read later: call the
// function when done with the result (on closing the body).
//
// By default Do cancels the context of every attempt when it is done with
// it: losers at once, with ErrLost as the cause; the attempt whose result
// or error Do returns, as Do returns. DeferCancel changes only the latter: a
// deferred attempt that loses is still cancelled, with ErrLost, and its
// result is passed to the discard function of DoDiscard, which must release
// it. The returned function may be called more than once; calling it for an
// attempt already cancelled does nothing. For a context that Do did not
// give, DeferCancel does nothing and returns a function that does nothing.
func DeferCancel(ctx context.Context) (cancel func()) {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		return func() {}
	}
	a.deferred.Store(true)
	return a.release
}
