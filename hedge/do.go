package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/latency"
	"github.com/watertight-go/watertight/retry"
)

// Do calls fn and, if it has not answered within the policy's delay, calls
// it again — a hedge — while the first attempt goes on, up to
// Config.MaxHedges extra attempts, one delay apart; the first success is the
// answer. attempt is 1 for the first call, 2 for the first hedge and so on:
// a caller with several replicas sends each attempt to a different one.
//
// A failure does not end the call while another attempt is still running;
// when every attempt that was sent has failed, Do returns the last failure
// (no further hedge is sent once all have failed: a hedge is not a retry).
// An attempt that fails before the delay is the call's answer at once.
//
// When an attempt succeeds, the others are cancelled at once: their context
// ends with ErrLost as its cause (context.Cause), so a function that honours
// its context returns promptly. Do returns as soon as it has the answer;
// a losing hedge finishes in the background, in its own goroutine, which
// ends when its function returns — there is no goroutine of Do's left over
// once every function has returned. The first attempt runs in the caller's
// goroutine: when a hedge wins, Do returns once the first attempt's
// function has noticed its cancellation and returned, so a function that
// ignores its context gains nothing from hedging.
//
// Every attempt's context is cancelled when Do is done with it: see
// DeferCancel for results that need their context after Do returns.
//
// A hedge is sent only for a call that is safe to repeat (Config.Idempotent,
// or a context marked with retry.Idempotent or retry.WithIdempotencyKey), and
// only while the dependency is not overloaded: the budget grants it, the
// breaker is closed, the bulkhead has room and no attempt said "overloaded"
// (see Config). If the caller's context ends while Do waits for hedges,
// Do returns context.Cause(ctx) at once.
//
// A panic in the first attempt propagates to the caller after the hedges
// are cancelled; a panic in a hedge, which runs in a goroutine of its own,
// crashes the program, as in any goroutine.
//
// A nil Policy calls fn(ctx, 1) once.
func Do[T any](ctx context.Context, p *Policy, fn func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return DoDiscard(ctx, p, fn, nil)
}

// DoDiscard is Do for results that hold resources, such as an HTTP response
// with an open body: discard, if not nil, is called with every result that
// Do does not return — successes that lost the race, failures that a later
// one replaced, the results of attempts still running when Do gave up — so
// that it can release them. It may be called after Do has returned, from
// another goroutine.
func DoDiscard[T any](ctx context.Context, p *Policy, fn func(ctx context.Context, attempt int) (T, error), discard func(T, error)) (T, error) {
	if p == nil {
		return fn(ctx, 1)
	}
	p.calls.Add(1)
	if p.off {
		return fn(ctx, 1)
	}
	if !p.cfg.Idempotent && !retry.IsIdempotent(ctx) {
		p.notIdem.Add(1)
		return fn(ctx, 1)
	}
	p.cfg.Budget.Deposit()
	c := &call[T]{p: p, fn: fn, discard: discard, delay: p.cold}
	c.a1.parent, c.a1.n, c.a1.running = ctx, 1, true
	if p.tr != nil {
		now := int64(p.tr.Now())
		c.a1.start = now
		c.delay = p.delay(now)
	}
	c.hook.f = c
	tm := p.getTimer()
	c.tm = tm
	tm.target.Store(&c.hook)
	c.arm = c.delay
	if p.tr != nil {
		c.arm = p.armFor(c.delay)
	}
	tm.t.Reset(c.arm)
	returned := false
	defer func() {
		if !returned {
			c.abandon()
		}
	}()
	v, err := fn(&c.a1, 1)
	returned = true
	if tm.t.Stop() && !c.fired.Load() {
		// The first attempt answered before the delay: no hedge was sent
		// and none will be. The common case.
		p.putTimer(tm)
		if err == nil && p.tr != nil {
			p.tr.RecordSince(latency.Stamp(c.a1.start))
		}
		c.a1.releaseUnlessDeferred()
		return v, err
	}
	return c.settle(v, err)
}

// call is one hedged call. The fields above mu are set before the first
// attempt starts and read-only after; s is guarded by mu. The state a call
// needs only once a hedge is due lives in s, allocated then, so that the
// common call allocates only the call itself.
type call[T any] struct {
	a1      attempt // the first attempt, run by the caller; a1.parent is the caller's context
	p       *Policy
	fn      func(context.Context, int) (T, error)
	discard func(T, error)
	delay   time.Duration // the delay between hedges
	arm     time.Duration // what the timer is armed for: delay less its usual lateness
	tm      *hedgeTimer
	hook    hook
	fired   atomic.Bool // the timer's function started

	mu sync.Mutex
	s  *state[T]
}

// state is a call's state once a hedge was due.
type state[T any] struct {
	over    bool        // decided: no more hedges; late results are dropped
	sawOver bool        // an attempt carried the overloaded signal
	slots   int         // hedges due so far, sent or suppressed
	sent    int         // hedges sent
	pending int         // hedges running
	hedges  []*attempt  // hedges sent
	next    *time.Timer // the timer of the hedges after the first
	done    chan struct{}
	winner  *attempt // the attempt that won, if any
	win     T
	last    *attempt // the attempt of the last failure, kept until it is returned or replaced
	lastV   T
	lastErr error
}

// state returns the call's state, allocating it. Call with mu held.
func (c *call[T]) state() *state[T] {
	if c.s == nil {
		c.s = &state[T]{}
	}
	return c.s
}

// fire runs in the timer's goroutine when a hedge is due: it sends it (and
// runs it, in this goroutine) or suppresses it, and arms the timer for the
// next one.
func (c *call[T]) fire() {
	c.fired.Store(true)
	p := c.p
	c.mu.Lock()
	s := c.state()
	if s.over || c.a1.parent.Err() != nil {
		c.mu.Unlock()
		return
	}
	s.slots++
	n := s.slots + 1
	wait := time.Duration(s.slots) * c.delay
	var stamp int64 // tracker time, when there is a tracker
	if p.tr != nil {
		stamp = int64(p.tr.Now())
		if s.slots == 1 {
			p.noteLate(time.Duration(stamp - c.a1.start - int64(c.arm)))
		}
	}
	r := p.suppress(s.sawOver)
	var h *attempt
	if r == noReason {
		h = &attempt{parent: c.a1.parent, n: int32(n), running: true}
		h.start = stamp
		s.hedges = append(s.hedges, h)
		s.pending++
		s.sent++
		if s.done == nil {
			s.done = make(chan struct{})
		}
	}
	if s.slots < p.maxHedges {
		// Not c.tm: Do stops it when attempt 1 returns, to tell whether a
		// hedge is due.
		if s.next == nil {
			s.next = time.AfterFunc(c.arm, c.fire)
		} else {
			s.next.Reset(c.arm)
		}
	}
	first := s.sent == 1 && h != nil
	c.mu.Unlock()
	if h == nil {
		p.suppressed[r].Add(1)
		p.emit(watertight.EventHedgeSuppressed, n, wait, r)
		return
	}
	p.sent.Add(1)
	if first {
		p.hedged.Add(1)
	}
	p.emit(watertight.EventHedgeSent, n, wait, noReason)
	c.run(h)
}

// run runs hedge h and reports its result.
func (c *call[T]) run(h *attempt) {
	v, err := c.fn(h, int(h.n))
	c.mu.Lock()
	s := c.s
	s.pending--
	h.running = false
	if s.over {
		c.mu.Unlock()
		c.drop(h, v, err)
		return
	}
	if err == nil {
		s.winner, s.win = h, v
		d := c.decideLocked(ErrLost)
		c.mu.Unlock()
		c.record(h)
		c.p.won.Add(1)
		c.p.emit(watertight.EventHedgeWon, int(h.n), 0, noReason)
		c.after(&d)
		return
	}
	prev, prevV, prevErr := c.failLocked(h, v, err)
	var d decision[T]
	decided := s.pending == 0 && !c.a1.running // every attempt sent has failed
	if decided {
		d = c.decideLocked(nil)
	}
	c.mu.Unlock()
	if prev != nil {
		c.drop(prev, prevV, prevErr)
	}
	if decided {
		c.after(&d)
	}
}

// settle is the end of Do once a hedge was due: attempt 1 returned v, err.
func (c *call[T]) settle(v T, err error) (T, error) {
	a1 := &c.a1
	c.mu.Lock()
	s := c.state()
	a1.running = false
	if s.over { // a hedge won while attempt 1 ran: only a win decides a call before attempt 1 returns
		w, win := s.winner, s.win
		c.mu.Unlock()
		c.drop(a1, v, err)
		w.releaseUnlessDeferred()
		return win, nil
	}
	if err == nil {
		s.winner, s.win = a1, v
		d := c.decideLocked(ErrLost)
		c.mu.Unlock()
		c.record(a1)
		c.after(&d)
		a1.releaseUnlessDeferred()
		return v, nil
	}
	prev, prevV, prevErr := c.failLocked(a1, v, err)
	if s.pending == 0 {
		s.last = nil // returned now
		d := c.decideLocked(nil)
		c.mu.Unlock()
		if prev != nil {
			c.drop(prev, prevV, prevErr)
		}
		c.after(&d)
		a1.releaseUnlessDeferred()
		return v, err
	}
	done := s.done
	c.mu.Unlock()
	if prev != nil {
		c.drop(prev, prevV, prevErr)
	}
	select {
	case <-done:
	case <-a1.parent.Done():
	}
	c.mu.Lock()
	if !s.over { // the caller's context ended first: give up
		cause := context.Cause(a1.parent)
		d := c.decideLocked(cause)
		last, lastV, lastErr := s.last, s.lastV, s.lastErr
		s.last = nil
		c.mu.Unlock()
		c.after(&d)
		if last != nil {
			c.drop(last, lastV, lastErr)
		}
		var zero T
		return zero, cause
	}
	w, win := s.winner, s.win
	last, lastV, lastErr := s.last, s.lastV, s.lastErr
	s.last = nil
	c.mu.Unlock()
	if w != nil {
		w.releaseUnlessDeferred()
		return win, nil
	}
	// Every attempt failed: the call was decided with a last failure.
	last.releaseUnlessDeferred()
	return lastV, lastErr
}

// abandon ends the call when attempt 1's function panicked.
func (c *call[T]) abandon() {
	c.mu.Lock()
	s := c.state()
	c.a1.running = false
	var d decision[T]
	decided := !s.over
	if decided {
		d = c.decideLocked(nil)
	}
	w, win := s.winner, s.win
	last, lastV, lastErr := s.last, s.lastV, s.lastErr
	s.winner, s.last = nil, nil
	c.mu.Unlock()
	if decided {
		c.after(&d)
	} else if w != nil && w != &c.a1 {
		c.drop(w, win, nil)
	}
	if last != nil && last != &c.a1 {
		c.drop(last, lastV, lastErr)
	}
	c.a1.release()
}

// failLocked notes a failed attempt: it becomes the last failure, and the
// one it replaces is returned, to be dropped after unlocking.
func (c *call[T]) failLocked(a *attempt, v T, err error) (prev *attempt, prevV T, prevErr error) {
	s := c.s
	if watertight.IsOverloaded(err) {
		s.sawOver = true
		c.p.overloaded()
	}
	prev, prevV, prevErr = s.last, s.lastV, s.lastErr
	s.last, s.lastV, s.lastErr = a, v, err
	return prev, prevV, prevErr
}

// decision is what deciding a call leaves to do after unlocking.
type decision[T any] struct {
	losers [MaxMaxHedges + 1]*attempt
	n      int
	cause  error
	drop   *attempt // the last failure, when a success replaced it
	dropV  T
	dropE  error
	done   chan struct{}
	next   *time.Timer
}

// decideLocked ends the call: no more hedges, and every attempt still
// running is a loser, to be cancelled with cause. A winner, if set,
// replaces the last failure.
func (c *call[T]) decideLocked(cause error) decision[T] {
	s := c.s
	s.over = true
	d := decision[T]{cause: cause, done: s.done, next: s.next}
	if c.a1.running {
		d.losers[d.n] = &c.a1
		d.n++
	}
	for _, h := range s.hedges {
		if h.running {
			d.losers[d.n] = h
			d.n++
		}
	}
	if s.winner != nil && s.last != nil {
		d.drop, d.dropV, d.dropE = s.last, s.lastV, s.lastErr
		s.last = nil
	}
	return d
}

// after does what a decision left to do: stop the timer, cancel the
// losers (recording how long they ran, a lower bound of their latency, when
// they lost to a winner), drop the replaced failure and wake the caller.
func (c *call[T]) after(d *decision[T]) {
	c.tm.t.Stop()
	if d.next != nil {
		d.next.Stop()
	}
	if tr := c.p.tr; tr != nil && d.n > 0 && d.cause == ErrLost {
		now := tr.Now()
		for _, a := range d.losers[:d.n] {
			tr.RecordAt(now, time.Duration(int64(now)-a.start))
		}
	}
	for _, a := range d.losers[:d.n] {
		a.stop(d.cause)
	}
	if d.drop != nil {
		c.drop(d.drop, d.dropV, d.dropE)
	}
	if d.done != nil {
		close(d.done)
	}
}

// drop gives a result Do will not return to the discard function and ends
// the attempt's context.
func (c *call[T]) drop(a *attempt, v T, err error) {
	if c.discard != nil {
		c.discard(v, err)
	}
	a.release()
}

// record adds a successful attempt's latency to the tracker.
func (c *call[T]) record(a *attempt) {
	if tr := c.p.tr; tr != nil {
		tr.RecordSince(latency.Stamp(a.start))
	}
}
