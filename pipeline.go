package watertight

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Policy is one protection in a Pipeline, in the two-step form that costs no
// allocation: Enter before the protected call, Exit after it.
//
// Enter decides whether the call may go ahead. It returns the context the rest
// of the pipeline runs under (ctx itself, or one derived from it, as a timeout
// does), a Ticket that Exit gets back, and a non-nil error to refuse the call
// (a rejection, see NewRejection). When Enter refuses, Exit is not called for
// that policy.
//
// Exit is called exactly once for each Enter that returned a nil error, with
// the context Enter returned, the Ticket it returned and the error the rest of
// the pipeline produced (nil on success). It returns the error to pass further
// out: err itself, or an error that explains it better (a timeout turns a bare
// context.DeadlineExceeded into its own error). Exit runs even when the
// protected function panics, with an error for which errors.Is(err, ErrPanicked)
// holds; the panic then goes on.
//
// Policies are shared by every call through them and must be safe for
// concurrent use.
type Policy interface {
	Enter(ctx context.Context) (context.Context, Ticket, error)
	Exit(ctx context.Context, t Ticket, err error) error
}

// Ticket carries what a Policy needs between its Enter and its Exit for one
// call. It is a plain value so that the pipeline stores it without allocating;
// the fields mean whatever the policy that issued the ticket says they mean.
type Ticket struct {
	// Seq is free for the policy: a circuit breaker keeps its generation here.
	Seq uint64
	// Start is free for the policy: a breaker that measures slow calls keeps
	// the call's start here, in nanoseconds on a monotonic clock of its own
	// (time.Since of a fixed instant costs half of time.Now).
	Start int64
	// Cancel is free for the policy: a timeout keeps its cancel function here.
	Cancel context.CancelFunc
}

// Resource is implemented by a Policy whose Ticket stands for something held
// while the call runs, such as a bulkhead permit. When a detaching policy (see
// Detacher) returns before the work it started has ended, DoDetached calls the
// Exit of every Resource outside it only when that work really ends, so that
// abandoned work keeps counting against the limit it is holding.
type Resource interface {
	Policy
	// HoldsResource reports whether the policy's tickets hold a resource.
	HoldsResource() bool
}

// Detacher is implemented by a Policy after which DoDetached runs the rest of
// the pipeline in a goroutine of its own and returns as soon as the context the
// policy's Enter returned is done, abandoning work that ignores its context. A
// timeout configured to abandon is one.
type Detacher interface {
	Policy
	// Detaches reports whether calls are detached after this policy.
	Detaches() bool
}

// Repeater is implemented by a Policy that may run the rest of the pipeline
// again after it failed: a retry. After each run of the rest that ends with a
// non-nil error, Do calls Again with that error and the Ticket (first the
// one Enter returned, then the one the previous Again returned: Again updates
// it to count attempts, say). Again returns the updated Ticket, whether to
// run again and how long to wait first. Do waits under
// the context Enter returned; if that context ends during the wait, Do stops
// repeating. Either way Exit is called once, after the last run, with the
// last run's error (and the Ticket as Again left it), and decides what to
// return: the policy may wrap the error to say why it stopped.
//
// The rest of the pipeline is entered afresh on each run, so a breaker or
// bulkhead inside the repeater sees every attempt. Do reads whether a policy
// repeats once, in New.
type Repeater interface {
	Policy
	Again(ctx context.Context, t Ticket, err error) (next Ticket, wait time.Duration, again bool)
}

// ErrPanicked is the error that Exit sees when the protected function
// panicked. The panic itself is not recovered: it goes on after the policies
// have exited.
var ErrPanicked = errors.New("watertight: the protected function panicked")

// ErrNeedsDetached is returned by Do, before anything runs, when the pipeline
// holds a detaching policy: such a pipeline runs through DoDetached, which
// may leave the function running in a goroutine after it returns.
var ErrNeedsDetached = errors.New("watertight: the pipeline detaches abandoned calls (a timeout with Abandon set): call DoDetached instead of Do")

const (
	flagResource uint8 = 1 << iota
	flagDetach
	flagRepeat
)

type frame struct {
	ctx context.Context
	t   Ticket
}

// Pipeline composes policies in the order given, outermost first. The zero
// value and a nil *Pipeline are valid and empty: the function is called
// directly. A Pipeline is immutable and safe for concurrent use.
type Pipeline struct {
	policies []Policy
	flags    []uint8
	detaches bool
}

// New returns a Pipeline of the given policies, outermost first. Nil
// interface values are skipped, so optional protections can be passed as
// untyped nil, and so are nil pointers of types whose nil is a disabled
// policy (NilDisabled). Any other policy that is a nil pointer (or another
// nil value of a type that implements Policy) is refused with an error that
// names its position and type: it is almost always the result of a constructor whose
// error was discarded (br, _ := circuit.New(badConfig)), and calling through
// it would panic. The standard order (see the package documentation) is
//
//	New(totalTimeout, retry, breaker, bulkhead, attemptTimeout)
func New(policies ...Policy) (*Pipeline, error) {
	p := &Pipeline{}
	for i, pol := range policies {
		if pol == nil {
			continue
		}
		if isNilValue(pol) {
			if _, ok := pol.(NilDisabled); ok {
				continue // a nil that does nothing, by its type's contract
			}
			return nil, fmt.Errorf("watertight: New: policy %d of %d (%T) is nil: its constructor most likely returned an error that was not checked; check that error, or pass an untyped nil to leave the protection out", i+1, len(policies), pol)
		}
		var f uint8
		if r, ok := pol.(Resource); ok && r.HoldsResource() {
			f |= flagResource
		}
		if d, ok := pol.(Detacher); ok && d.Detaches() {
			f |= flagDetach
			p.detaches = true
		}
		if _, ok := pol.(Repeater); ok {
			f |= flagRepeat
		}
		p.policies = append(p.policies, pol)
		p.flags = append(p.flags, f)
	}
	return p, nil
}

// NilDisabled is implemented by a Policy type whose nil pointer is a valid
// policy that does nothing, by contract (a nil *budget.Throttler is a
// disabled throttler): New skips such a nil instead of refusing it. The
// method is never called; its presence is the contract.
type NilDisabled interface {
	Policy
	// NilDisabled marks the type; it does nothing.
	NilDisabled()
}

// MustNew is New for pipelines whose policies cannot be nil (built just
// before, with their errors checked): it panics, with New's message, where
// New returns an error.
func MustNew(policies ...Policy) *Pipeline {
	p, err := New(policies...)
	if err != nil {
		panic(err)
	}
	return p
}

// isNilValue reports whether pol holds a nil pointer, map, slice, channel or
// function: a typed nil, which the interface comparison with nil misses.
func isNilValue(pol Policy) bool {
	v := reflect.ValueOf(pol)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Len returns the number of policies in the pipeline.
func (p *Pipeline) Len() int {
	if p == nil {
		return 0
	}
	return len(p.policies)
}

// Run calls fn through the pipeline; see Do.
func (p *Pipeline) Run(ctx context.Context, fn func(context.Context) error) error {
	_, err := Do(ctx, p, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	return err
}

// Do calls fn through the pipeline p and returns its result. Each policy's
// Enter runs outermost first; if one refuses, Do returns its error at once
// without calling fn, after exiting the policies already entered. Otherwise fn
// runs in the caller's goroutine under the context the innermost policy gave,
// and the policies exit innermost first, each seeing (and possibly replacing)
// the error. On the success path Do allocates nothing (the policies may: a
// timeout's context does) and does not keep fn after it returns.
//
// A nil or empty p calls fn directly. A pipeline holding a detaching policy
// returns ErrNeedsDetached without running anything: use DoDetached.
func Do[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, error) {
	if p == nil || len(p.policies) == 0 {
		return fn(ctx)
	}
	if p.detaches {
		var zero T
		return zero, ErrNeedsDetached
	}
	return step(ctx, p, 0, fn)
}

// step runs policy i around the rest of the pipeline. Recursion keeps each
// policy's context and ticket in registers and on its own small frame, which
// measured about a third faster than a loop over an array of frames that had
// to be cleared on every call.
func step[T any](ctx context.Context, p *Pipeline, i int, fn func(context.Context) (T, error)) (v T, err error) {
	pol := p.policies[i]
	c, t, err := pol.Enter(ctx)
	if err != nil {
		return v, err
	}
	ended := false
	defer func() {
		if !ended { // fn panicked: exit with ErrPanicked; the panic goes on.
			pol.Exit(c, t, ErrPanicked)
		}
	}()
	if i+1 == len(p.policies) {
		v, err = fn(c)
	} else {
		v, err = step(c, p, i+1, fn)
	}
	if err != nil && p.flags[i]&flagRepeat != 0 {
		v, err = repeat(c, p, i, &t, err, fn)
	}
	ended = true
	return v, pol.Exit(c, t, err)
}

// repeat runs the rest of the pipeline after the repeating policy i again,
// after a first run failed with err, until a run succeeds or the policy's
// Again says stop. (The first run is step's own, which keeps the success
// path one call shorter.) It keeps *t as Again left it, so that the Exit of
// step's deferred panic path sees the Ticket of the attempt that panicked.
func repeat[T any](ctx context.Context, p *Pipeline, i int, t *Ticket, err error, fn func(context.Context) (T, error)) (v T, _ error) {
	rep := p.policies[i].(Repeater)
	for {
		var wait time.Duration
		var again bool
		*t, wait, again = rep.Again(ctx, *t, err)
		if !again || !sleep(ctx, wait) {
			return v, err
		}
		if i+1 == len(p.policies) {
			v, err = fn(ctx)
		} else {
			v, err = step(ctx, p, i+1, fn)
		}
		if err == nil {
			return v, nil
		}
	}
}

// sleep waits for d under ctx and reports whether it waited the whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unwind exits policies [from, to) innermost first.
func (p *Pipeline) unwind(frames []frame, from, to int, err error) error {
	for i := to - 1; i >= from; i-- {
		err = p.policies[i].Exit(frames[i].ctx, frames[i].t, err)
	}
	return err
}

// DoDetached is Do for pipelines that hold a detaching policy (a timeout with
// Abandon set, for functions that ignore their context). After such a policy
// the rest of the pipeline and fn run in a goroutine of their own; when the
// context the policy's Enter returned is done first, DoDetached returns at
// once with that policy's error and leaves the work running. Resource
// policies outside it (bulkheads) keep their permits until the abandoned work
// really ends, so abandoned calls still count against the limit: isolation
// holds, at the price of permits that stay held by work nobody waits for.
// Other policies outside it (a circuit breaker) see the timeout at once.
// This holds through nested detaching policies too (a total and an attempt
// timeout that both abandon): a permit outside any of them is released only
// when fn has returned.
//
// When fn panics while DoDetached waits for it, the policies exit with
// ErrPanicked as in Do and the panic goes on in the caller's goroutine, with
// the value fn panicked with (the stack trace is that of the re-panic). When fn
// panics after DoDetached has returned, nobody is left to recover it: the held
// resources are released with ErrPanicked and the panic goes on in the
// detached goroutine, where it ends the program like any goroutine's panic.
// A detached fn that calls runtime.Goexit ends the call with ErrPanicked.
//
// Cost, per call through a detaching policy: one goroutine, one channel and a
// result record on the heap, and fn's closure escapes to the heap. A pipeline
// without a detaching policy runs as Do does, except that fn's closure still
// escapes (one allocation when it captures variables): call Do where no
// detaching policy can be present.
func DoDetached[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, error) {
	if p == nil || !p.detaches {
		return Do(ctx, p, fn)
	}
	v, _, err := runDetached(ctx, p, 0, fn)
	return v, err
}

// work is detached work that its caller abandoned and that may still be
// running. The Exits of the Resource policies it holds wait for it: they are
// registered with then and run by end.
type work struct {
	mu    sync.Mutex
	ended bool
	err   error
	after []func(error)
}

// then runs f with the work's final error once the work has ended: at once if
// it has.
func (w *work) then(f func(error)) {
	w.mu.Lock()
	if !w.ended {
		w.after = append(w.after, f)
		w.mu.Unlock()
		return
	}
	err := w.err
	w.mu.Unlock()
	f(err)
}

// end records that the work has ended with err and runs what waited for it,
// in the order it was registered (innermost first).
func (w *work) end(err error) {
	w.mu.Lock()
	w.ended, w.err = true, err
	after := w.after
	w.after = nil
	w.mu.Unlock()
	for _, f := range after {
		f(err)
	}
}

// heldExit is the pending Exit of a Resource policy that waits for abandoned
// work.
type heldExit struct {
	pol Policy
	ctx context.Context
	t   Ticket
}

type heldExits []heldExit

// exit calls the held Exits in order; their errors have nobody to go to.
func (h heldExits) exit(err error) {
	for _, x := range h {
		x.pol.Exit(x.ctx, x.t, err)
	}
}

// detachedCall is the state shared by the caller of runDetached and the
// goroutine that runs the detached rest of the pipeline.
type detachedCall[T any] struct {
	state atomic.Int32 // callRunning, callFinished or callAbandoned
	done  chan struct{}
	// Set by the goroutine before it closes done; read by the caller after.
	v        T
	err      error
	inner    *work // non-nil: the work was abandoned further in and goes on
	panicked bool
	pv       any // what fn panicked with
	// work is this call once the caller has abandoned it.
	work work
}

const (
	callRunning int32 = iota
	callFinished
	callAbandoned
)

// run runs policies [from, n) and fn in the detached goroutine and hands the
// result to the caller, or, when the caller has abandoned the call, ends the
// call's work so that the resources the caller left held are released.
func (call *detachedCall[T]) run(ctx context.Context, p *Pipeline, from int, fn func(context.Context) (T, error)) {
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked, or called runtime.Goexit (then recover returns nil);
		// runDetached has already exited the policies it entered.
		pv := recover()
		call.err, call.panicked, call.pv = ErrPanicked, pv != nil, pv
		if call.state.CompareAndSwap(callRunning, callFinished) {
			close(call.done) // the caller exits its policies and panics again
			return
		}
		call.work.end(ErrPanicked)
		if pv != nil {
			panic(pv) // nobody waits for this call to recover it
		}
	}()
	v, inner, err := runDetached(ctx, p, from, fn)
	returned = true
	call.v, call.err, call.inner = v, err, inner
	if call.state.CompareAndSwap(callRunning, callFinished) {
		close(call.done)
		return
	}
	// Abandoned: the caller has gone. What it left held is released when the
	// work ends, which is now unless it was abandoned further in as well.
	if inner != nil {
		inner.then(call.work.end)
	} else {
		call.work.end(err)
	}
}

// runDetached runs policies [from, n) and fn, detaching after each detaching
// policy. w is non-nil when the call returned before fn did: fn is still
// running, and the Exits of Resource policies [from, n) that it holds wait for
// w to end.
func runDetached[T any](ctx context.Context, p *Pipeline, from int, fn func(context.Context) (T, error)) (v T, w *work, err error) {
	var zero T
	frames := make([]frame, len(p.policies))
	i := from
	entered := from // policies [from, entered) have been entered
	finished := false
	defer func() {
		if !finished {
			p.unwind(frames, from, entered, ErrPanicked)
		}
	}()
	for ; i < len(p.policies); i++ {
		c, t, err := p.policies[i].Enter(ctx)
		if err != nil {
			finished = true
			return zero, nil, p.unwind(frames, from, i, err)
		}
		frames[i] = frame{ctx: c, t: t}
		entered = i + 1
		ctx = c
		if p.flags[i]&flagRepeat != 0 {
			// A panic in an attempt exits the repeater too, with the
			// Ticket as its last Again left it (in frames[i].t).
			v, works, err := repeatDetached(c, p, i, &frames[i].t, fn)
			finished = true
			if len(works) > 0 {
				// Attempts abandoned further in are still running: the
				// resources outside the repeater wait for all of them.
				held, err := p.exitAbandoned(frames, from, i, err)
				w := allOf(works)
				w.then(held.exit)
				return v, w, err
			}
			return v, nil, p.unwind(frames, from, i+1, err)
		}
		if p.flags[i]&flagDetach == 0 || c.Done() == nil {
			continue
		}
		// Detach after policy i.
		call := &detachedCall[T]{done: make(chan struct{})}
		go call.run(c, p, i+1, fn)
		select {
		case <-call.done:
		case <-c.Done():
			if call.state.CompareAndSwap(callRunning, callAbandoned) {
				finished = true
				held, err := p.exitAbandoned(frames, from, i, c.Err())
				call.work.then(held.exit)
				return zero, &call.work, err
			}
			<-call.done // the work finished at the same time: use its result
		}
		finished = true
		if call.panicked {
			p.unwind(frames, from, i+1, ErrPanicked)
			panic(call.pv)
		}
		if call.inner != nil {
			held, err := p.exitAbandoned(frames, from, i, call.err)
			call.inner.then(held.exit)
			return zero, call.inner, err
		}
		return call.v, nil, p.unwind(frames, from, i+1, call.err)
	}
	v, err = fn(ctx)
	finished = true
	return v, nil, p.unwind(frames, from, len(p.policies), err)
}

// repeatDetached is repeat for DoDetached: it returns the work of the
// attempts that were abandoned further in and still run. It keeps *t as
// Again left it.
func repeatDetached[T any](ctx context.Context, p *Pipeline, i int, t *Ticket, fn func(context.Context) (T, error)) (v T, works []*work, err error) {
	rep := p.policies[i].(Repeater)
	for {
		var w *work
		if i+1 == len(p.policies) {
			v, err = fn(ctx)
		} else {
			v, w, err = runDetached(ctx, p, i+1, fn)
		}
		if w != nil {
			works = append(works, w)
		}
		if err == nil {
			return v, works, nil
		}
		var wait time.Duration
		var again bool
		*t, wait, again = rep.Again(ctx, *t, err)
		if !again || !sleep(ctx, wait) {
			return v, works, err
		}
	}
}

// allOf returns work that ends when every one of ws has ended, with the
// error of the last to end.
func allOf(ws []*work) *work {
	if len(ws) == 1 {
		return ws[0]
	}
	all := &work{}
	var left atomic.Int32
	left.Store(int32(len(ws)))
	for _, w := range ws {
		w.then(func(err error) {
			if left.Add(-1) == 0 {
				all.end(err)
			}
		})
	}
	return all
}

// exitAbandoned exits, innermost first, the detaching policy i and the
// policies in [from, i) that hold no resource, and returns the Exits of the
// Resource policies among them, innermost first, to run when the abandoned
// work ends.
func (p *Pipeline) exitAbandoned(frames []frame, from, i int, err error) (heldExits, error) {
	err = p.policies[i].Exit(frames[i].ctx, frames[i].t, err)
	var held heldExits
	for j := i - 1; j >= from; j-- {
		if p.flags[j]&flagResource != 0 {
			held = append(held, heldExit{pol: p.policies[j], ctx: frames[j].ctx, t: frames[j].t})
			continue
		}
		err = p.policies[j].Exit(frames[j].ctx, frames[j].t, err)
	}
	return held, err
}
