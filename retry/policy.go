package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
)

// Defaults used for zero fields of Config.
const (
	DefaultMaxAttempts   = 3
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxRetryAfter = 5 * time.Second
)

// Config configures a Policy. The zero value is valid: three attempts,
// backoff.DefaultConfig (full jitter), no budget, and only calls marked
// idempotent retried.
type Config struct {
	// Name labels the policy in events. It may be empty.
	Name string
	// MaxAttempts is the number of attempts, the first included. Zero means
	// DefaultMaxAttempts (3: two retries); 1 means no retry. Negative is an
	// error.
	MaxAttempts int
	// Backoff computes the wait before each retry. If nil,
	// backoff.New(backoff.DefaultConfig()).
	Backoff *backoff.Backoff
	// MaxDelay caps every wait, a server's Retry-After included. Zero means
	// DefaultMaxDelay (30s); negative is an error.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest wait a server may ask for (an HTTP
	// Retry-After, a gRPC pushback: see After) that the policy sleeps
	// through. A longer one is not slept through, nor cut short: the call
	// ends at once with a *RetryAfterError that carries the requested wait,
	// so that the caller decides. A wait up to MaxRetryAfter is still capped
	// by MaxDelay. Zero means DefaultMaxRetryAfter (5s); negative means any
	// wait is honoured (capped by MaxDelay).
	MaxRetryAfter time.Duration
	// Idempotent says that every call through this policy is safe to repeat.
	// If false, only calls whose context is marked with Idempotent or
	// WithIdempotencyKey are retried.
	Idempotent bool
	// MinAttemptTime is the least time an attempt must have: a retry whose
	// wait would leave less than this before the context's deadline is
	// skipped (ErrNoTime) and the last error returned at once. Zero means
	// only that no wait runs past the deadline; negative is an error.
	MinAttemptTime time.Duration
	// Retryable decides whether an error is worth retrying. If nil,
	// IsTransient. A rejection, a cancellation, the overloaded signal and a
	// lower layer's SkippedError are never retried, whatever it says.
	Retryable func(err error) bool
	// Budget, if not nil, is deposited into by every call and must grant
	// every retry: share one Budget between all the policies in front of one
	// dependency.
	Budget *budget.Budget
	// Concurrency, if not nil, is a concurrent-retry budget (Envoy's
	// retry_budget) that must grant a slot to every retry: each call counts
	// as active in it for its whole duration (Enter to Exit, its retries and
	// waits included), and each retry holds a slot from the moment it is
	// scheduled, through its wait, to the end of its attempt, on every path
	// (success, failure, panic, the context's end). A retry refused a slot is
	// skipped with ErrNoConcurrency. With Budget set too, a retry needs both:
	// the slot is asked for first and given back if the Budget refuses.
	// Share one Concurrency between all the policies in front of one
	// dependency.
	Concurrency *budget.Concurrency
	// OnEvent, if not nil, is called in the caller's goroutine for every
	// retry scheduled, every call that exhausted its attempts and every
	// retry skipped, with no lock held. It should return quickly.
	OnEvent func(Event)
	// Listener, if not nil, receives the same decisions as OnEvent, after
	// it, as watertight.Events with Source "retry" and Name this Name:
	// EventRetryScheduled (Attempt the attempts made so far, Delay the wait
	// before the next, Err the failed attempt's error), EventRetryExhausted
	// (Attempt, Err) and EventRetrySkipped (Attempt, Err, and Reason: "not
	// idempotent", "not enough time left before the deadline", "retry
	// budget exhausted" or "retry concurrency budget exhausted: too many
	// retries in flight"). It is called in the caller's goroutine, with no
	// lock held (see watertight.Listener). If nil, no events are built.
	Listener watertight.Listener
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Scheduled: a retry will run after Event.Delay.
	Scheduled EventKind = iota
	// Exhausted: the last attempt failed; the call ends with an
	// ExhaustedError.
	Exhausted
	// Skipped: a retryable failure was not retried; Event.Reason says why
	// (ErrNotIdempotent, ErrNoTime, ErrNoBudget, ErrNoConcurrency).
	Skipped
)

// String returns "scheduled", "exhausted" or "skipped".
func (k EventKind) String() string {
	switch k {
	case Scheduled:
		return "scheduled"
	case Exhausted:
		return "exhausted"
	case Skipped:
		return "skipped"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports a decision of a Policy.
type Event struct {
	// Name is the policy's Config.Name.
	Name string
	// Kind says what happened.
	Kind EventKind
	// Attempt is the number of attempts made so far.
	Attempt int
	// Delay is the wait before the next attempt (Scheduled only).
	Delay time.Duration
	// Err is the error of the attempt that failed.
	Err error
	// Reason says why a retry was skipped (Skipped only).
	Reason error
	// Code is Reason's stable code (CodeNotIdempotent, ...) for Skipped,
	// CodeMaxAttempts for Exhausted, empty for Scheduled: what an adapter
	// that turns these events into watertight.Events puts in their Code.
	Code string
}

// Policy is a retry policy: a watertight.Repeater to place in a Pipeline,
// or to use alone with Do. Build it with New; it is immutable and safe for
// concurrent use. On the success path it adds a budget deposit (one atomic
// add, if a budget is set) and, with a Concurrency, an Enter and a Leave (an
// atomic add each), and nothing else: no clock, no allocation.
type Policy struct {
	cfg  Config
	pipe *watertight.Pipeline // the policy alone, for Do
}

// New returns a Policy for cfg, or an error naming the first invalid field
// and its rule.
func New(cfg Config) (*Policy, error) {
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("retry: Config.MaxAttempts must be >= 0 (0 means %d, 1 means no retry), got %d", DefaultMaxAttempts, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("retry: Config.MaxDelay must be >= 0 (0 means %v), got %v", DefaultMaxDelay, cfg.MaxDelay)
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.MinAttemptTime < 0 {
		return nil, fmt.Errorf("retry: Config.MinAttemptTime must be >= 0, got %v", cfg.MinAttemptTime)
	}
	if cfg.Backoff == nil {
		b, err := backoff.New(backoff.DefaultConfig())
		if err != nil {
			return nil, err
		}
		cfg.Backoff = b
	}
	if cfg.Retryable == nil {
		cfg.Retryable = IsTransient
	}
	p := &Policy{cfg: cfg}
	p.pipe = watertight.MustNew(p)
	return p, nil
}

// Do calls fn under the policy alone: it is watertight.Do over a pipeline
// holding only p.
func Do[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (T, error) {
	return watertight.Do(ctx, p.pipe, fn)
}

// The Ticket a Policy issues: Seq holds the attempts made in its low 32 bits,
// the reason it stopped in the bits above them, and in its top bit
// (slotHeld) whether the attempt under way holds a slot of
// Config.Concurrency; Start holds the previous wait (for decorrelated
// jitter).
const (
	stopNone uint64 = iota
	stopExhausted
	stopNotIdempotent
	stopNoTime
	stopNoBudget
	stopRetryAfter
	stopNoConcurrency
)

const slotHeld uint64 = 1 << 63

func attempts(t watertight.Ticket) int  { return int(uint32(t.Seq)) }
func stopOf(t watertight.Ticket) uint64 { return t.Seq &^ slotHeld >> 32 }

// Enter implements watertight.Policy: it deposits one request into the
// budget, counts the call as active in the concurrent-retry budget and
// starts counting attempts.
func (p *Policy) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	p.cfg.Budget.Deposit()
	if p.cfg.Concurrency != nil { // checked here: Enter is too big to inline
		p.cfg.Concurrency.Enter()
	}
	return ctx, watertight.Ticket{Seq: 1}, nil
}

// Again implements watertight.Repeater: it decides whether the failed
// attempt is retried, and after what wait.
func (p *Policy) Again(ctx context.Context, t watertight.Ticket, err error) (watertight.Ticket, time.Duration, bool) {
	if t.Seq&slotHeld != 0 { // the retry attempt that held it has ended
		p.cfg.Concurrency.Release()
		t.Seq &^= slotHeld
	}
	if ctx.Err() != nil || !p.retryable(err) {
		return t, 0, false
	}
	n := attempts(t)
	stop := func(reason uint64) (watertight.Ticket, time.Duration, bool) {
		t.Seq = reason<<32 | uint64(uint32(n))
		p.emitStop(reason, n, err)
		return t, 0, false
	}
	if n >= p.cfg.MaxAttempts {
		if p.cfg.MaxAttempts == 1 {
			return t, 0, false // retries are off: the error goes out as it is
		}
		return stop(stopExhausted)
	}
	if !p.cfg.Idempotent && !IsIdempotent(ctx) {
		return stop(stopNotIdempotent)
	}
	wait, asked := RetryAfter(err)
	if asked && p.cfg.MaxRetryAfter >= 0 && wait > p.cfg.MaxRetryAfter {
		t.Start = int64(wait) // the requested wait, for Exit's RetryAfterError
		return stop(stopRetryAfter)
	}
	if !asked {
		wait = p.cfg.Backoff.Delay(n, time.Duration(t.Start))
	}
	wait = min(wait, p.cfg.MaxDelay)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait+p.cfg.MinAttemptTime {
		return stop(stopNoTime)
	}
	// The slot first: it can be given back if the budget refuses, a token
	// cannot.
	if !p.cfg.Concurrency.TryAcquire() {
		return stop(stopNoConcurrency)
	}
	if !p.cfg.Budget.Withdraw() {
		p.cfg.Concurrency.Release()
		return stop(stopNoBudget)
	}
	if p.cfg.OnEvent != nil {
		p.cfg.OnEvent(Event{Name: p.cfg.Name, Kind: Scheduled, Attempt: n, Delay: wait, Err: err})
	}
	if p.cfg.Listener != nil {
		watertight.Emit(p.cfg.Listener, watertight.Event{
			Kind: watertight.EventRetryScheduled, Source: source, Name: p.cfg.Name, Attempt: n, Delay: wait, Err: err,
		})
	}
	t.Seq = uint64(n + 1)
	if p.cfg.Concurrency != nil {
		t.Seq |= slotHeld // until the next Again or Exit
	}
	t.Start = int64(wait)
	return t, wait, true
}

func (p *Policy) retryable(err error) bool {
	if watertight.IsRejection(err) || watertight.IsOverloaded(err) || errors.Is(err, context.Canceled) {
		return false
	}
	var skipped *SkippedError
	if errors.As(err, &skipped) {
		return false
	}
	return p.cfg.Retryable(err)
}

func (p *Policy) emitStop(reason uint64, n int, err error) {
	if p.cfg.OnEvent != nil {
		ev := Event{Name: p.cfg.Name, Kind: Skipped, Attempt: n, Err: err, Reason: reasonErr(reason), Code: stopCode(reason)}
		if reason == stopRetryAfter {
			ev.Delay, _ = RetryAfter(err)
		}
		if reason == stopExhausted {
			ev.Kind, ev.Reason = Exhausted, nil
		}
		p.cfg.OnEvent(ev)
	}
	if p.cfg.Listener != nil {
		e := watertight.Event{Kind: watertight.EventRetrySkipped, Source: source, Name: p.cfg.Name, Attempt: n, Err: err, Reason: reasonWords(reason), Code: stopCode(reason)}
		if reason == stopRetryAfter {
			e.Delay, _ = RetryAfter(err)
		}
		if reason == stopExhausted {
			e.Kind = watertight.EventRetryExhausted
		}
		watertight.Emit(p.cfg.Listener, e)
	}
}

// source is the Source of the package's events.
const source = "retry"

// reasonWords is the Reason of an EventRetrySkipped.
func reasonWords(reason uint64) string {
	switch reason {
	case stopNotIdempotent:
		return "not idempotent"
	case stopNoTime:
		return "not enough time left before the deadline"
	case stopNoBudget:
		return "retry budget exhausted"
	case stopNoConcurrency:
		return "retry concurrency budget exhausted: too many retries in flight"
	case stopRetryAfter:
		return "the server asked to wait longer than MaxRetryAfter"
	}
	return ""
}

func reasonErr(reason uint64) error {
	switch reason {
	case stopNotIdempotent:
		return ErrNotIdempotent
	case stopNoTime:
		return ErrNoTime
	case stopNoBudget:
		return ErrNoBudget
	case stopNoConcurrency:
		return ErrNoConcurrency
	case stopRetryAfter:
		return ErrRetryAfterTooLong
	}
	return nil
}

// Exit implements watertight.Policy: it gives back the retry slot the last
// attempt held and ends the call's count as active (Config.Concurrency),
// and returns nil on success, the error as it is when it was not worth
// retrying (or the caller's context ended), an *ExhaustedError when every
// attempt failed, a *RetryAfterError when the server asked for a wait
// longer than Config.MaxRetryAfter, and a *SkippedError when a retry was
// skipped for another reason.
func (p *Policy) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if c := p.cfg.Concurrency; c != nil {
		if t.Seq&slotHeld != 0 {
			c.Release()
		}
		c.Leave()
	}
	if err == nil {
		return nil
	}
	switch r := stopOf(t); r {
	case stopNone:
		return err
	case stopExhausted:
		return &ExhaustedError{Attempts: attempts(t), Last: err}
	case stopRetryAfter:
		return &RetryAfterError{Attempts: attempts(t), Wait: time.Duration(t.Start), Max: p.cfg.MaxRetryAfter, Err: err}
	default:
		return &SkippedError{Attempts: attempts(t), Reason: reasonErr(r), Err: err}
	}
}
