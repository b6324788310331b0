package fallback

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/watertight-go/watertight"
)

// Kind says which alternative answered a call.
type Kind uint8

// The kinds of answer, from best to worst for the user.
const (
	// KindPrimary: the protected function itself answered (with a value or
	// with an error the chain did not replace).
	KindPrimary Kind = iota
	// KindStale: a last-known-good value, no older than the cache's MaxStale.
	KindStale
	// KindDefault: a fixed, sensible default value.
	KindDefault
	// KindReduced: a reduced feature, another function that does less.
	KindReduced
	// KindDeferred: the work was handed to a queue to be done later; the
	// value is the step's placeholder answer.
	KindDeferred
	// KindError: a clear, fast error in place of the primary's.
	KindError
)

var kindNames = [...]string{
	KindPrimary:  "primary",
	KindStale:    "stale",
	KindDefault:  "default",
	KindReduced:  "reduced",
	KindDeferred: "defer",
	KindError:    "error",
}

// String returns the kind's lower-case name: "primary", "stale", "default",
// "reduced", "defer" or "error". It is also the default name of a step of
// that kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Step is one alternative in a Chain. Build steps with Stale, Default,
// Reduced, Defer and Error, and narrow them with When and Named. A Step is a
// small value; its methods return modified copies.
type Step[T any] struct {
	kind    Kind
	name    string
	when    func(error) bool
	cache   *LastKnownGood[T]
	value   T
	reduced func(ctx context.Context, key string, err error) (T, error)
	enqueue func(ctx context.Context, key string, err error) error
	err     error
}

// Stale returns a step that answers with the last value the primary returned
// for the call's key, if cache holds one no older than its MaxStale. A chain
// records every success of the primary into the caches of its Stale steps, so
// the cache fills itself. On a miss the chain goes on to the next step.
func Stale[T any](cache *LastKnownGood[T]) Step[T] {
	return Step[T]{kind: KindStale, name: KindStale.String(), cache: cache}
}

// Default returns a step that always answers v: an empty list, a generic
// recommendation, a feature flag's safe value.
func Default[T any](v T) Step[T] {
	return Step[T]{kind: KindDefault, name: KindDefault.String(), value: v}
}

// Reduced returns a step that calls f, a reduced feature: something simpler
// that answers without the failed dependency (popular items instead of
// personalised ones, a local estimate instead of a remote quote). f gets the
// caller's context, the call's key and the primary's error. When f fails,
// the chain goes on to the next step.
func Reduced[T any](f func(ctx context.Context, key string, err error) (T, error)) Step[T] {
	return Step[T]{kind: KindReduced, name: KindReduced.String(), reduced: f}
}

// Defer returns a step that hands the work to enqueue, to be done later (an
// outbox table, a queue), and answers placeholder ("accepted, you will get
// an e-mail"). enqueue gets the caller's context, the call's key and the
// primary's error. When enqueue fails, the chain goes on to the next step.
func Defer[T any](enqueue func(ctx context.Context, key string, err error) error, placeholder T) Step[T] {
	return Step[T]{kind: KindDeferred, name: KindDeferred.String(), enqueue: enqueue, value: placeholder}
}

// Error returns a step that ends the chain with a clear, fast error: err,
// wrapped together with the primary's error so that errors.Is matches both.
// Its message is err's message followed by the primary's
// ("catalog unavailable, try again shortly: connection refused").
func Error[T any](err error) Step[T] {
	return Step[T]{kind: KindError, name: KindError.String(), err: err}
}

// When returns a copy of the step that applies only to primary errors for
// which pred reports true, such as OnRejection or OnTimeout. A step without
// When applies to every error the chain handles (see Config.Handles).
func (s Step[T]) When(pred func(err error) bool) Step[T] {
	s.when = pred
	return s
}

// Named returns a copy of the step with the given name, which events report
// as their Reason and Result.Step carries. The default name is the kind's
// (Kind.String).
func (s Step[T]) Named(name string) Step[T] {
	s.name = name
	return s
}

// Kind returns the step's kind.
func (s Step[T]) Kind() Kind { return s.kind }

// Name returns the step's name.
func (s Step[T]) Name() string { return s.name }

// OnRejection reports whether err is a rejection by a protection (an open
// breaker, a full bulkhead, an exhausted budget: watertight.IsRejection).
// Use it with Step.When for alternatives that suit a dependency that is known
// to be unavailable.
func OnRejection(err error) bool { return watertight.IsRejection(err) }

// OnTimeout reports whether err is a timeout: errors.Is(err,
// context.DeadlineExceeded), which holds for the timeout package's errors.
func OnTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// OnOverload reports whether err says the dependency is overloaded: the
// "overloaded, don't retry" signal (watertight.IsOverloaded) or a saturation
// rejection (watertight.IsSaturation).
func OnOverload(err error) bool {
	return watertight.IsOverloaded(err) || watertight.IsSaturation(err)
}

// Or returns a predicate that reports whether any of preds does.
func Or(preds ...func(error) bool) func(error) bool {
	return func(err error) bool {
		for _, p := range preds {
			if p(err) {
				return true
			}
		}
		return false
	}
}

// DefaultHandles is the rule a Chain uses when Config.Handles is nil: it
// handles every error except one that is marked as the caller's own (an error
// with a method Outcome() watertight.Outcome returning watertight.Ignored,
// such as an HTTP 404 or 400 from the HTTP adapter, or watertight.Mark(err,
// watertight.Ignored)). A stale or default value is the wrong answer to a
// request that is wrong or asks for something that is gone. Rejections are
// always handled, though they classify as Ignored: an open breaker is
// exactly when a fallback is needed.
func DefaultHandles(err error) bool {
	if watertight.IsRejection(err) {
		return true
	}
	var m interface{ Outcome() watertight.Outcome }
	if errors.As(err, &m) && m.Outcome() == watertight.Ignored {
		return false
	}
	return true
}

// Config configures a Chain. The zero value is valid.
type Config struct {
	// Name labels the chain in events. It may be empty.
	Name string
	// Handles decides which errors of the primary the chain may replace at
	// all; the steps' When narrows it further. If nil, DefaultHandles. Even
	// when it says yes, the chain never replaces an error once the caller's
	// own context is done (see Chain.Do).
	Handles func(err error) bool
	// Listener receives an EventFallbackUsed each time a step answers. If
	// nil, no events.
	Listener watertight.Listener
}

// DefaultConfig returns the configuration New uses for zero fields: no
// name, DefaultHandles, no listener.
func DefaultConfig() Config { return Config{Handles: DefaultHandles} }

// Chain is a list of alternatives tried in order, best first, when the
// primary function fails. Build it with New; it is immutable and safe for
// concurrent use. A nil *Chain calls the function and returns what it
// returns.
type Chain[T any] struct {
	name     string
	handles  func(error) bool
	listener watertight.Listener
	steps    []Step[T]
	caches   []*LastKnownGood[T] // the distinct caches of the Stale steps
}

// New returns a Chain that tries steps in the order given, or an error that
// names the first invalid step and its rule: a Stale step needs a cache, a
// Reduced step a function, a Defer step an enqueue function, an Error step
// an error, and no step may follow one that always answers (a Default or an
// Error step without When), since it could never run.
func New[T any](cfg Config, steps ...Step[T]) (*Chain[T], error) {
	c := &Chain[T]{name: cfg.Name, handles: cfg.Handles, listener: cfg.Listener}
	if c.handles == nil {
		c.handles = DefaultHandles
	}
	final := -1
	for i, s := range steps {
		where := fmt.Sprintf("fallback: step %d (%s)", i+1, s.name)
		if final >= 0 {
			return nil, fmt.Errorf("%s follows step %d (%s), which always answers: it could never run", where, final+1, steps[final].name)
		}
		switch s.kind {
		case KindStale:
			if s.cache == nil {
				return nil, fmt.Errorf("%s: Stale needs a non-nil cache", where)
			}
			seen := false
			for _, c := range c.caches {
				seen = seen || c == s.cache
			}
			if !seen {
				c.caches = append(c.caches, s.cache)
			}
		case KindDefault:
		case KindReduced:
			if s.reduced == nil {
				return nil, fmt.Errorf("%s: Reduced needs a non-nil function", where)
			}
		case KindDeferred:
			if s.enqueue == nil {
				return nil, fmt.Errorf("%s: Defer needs a non-nil enqueue function", where)
			}
		case KindError:
			if s.err == nil {
				return nil, fmt.Errorf("%s: Error needs a non-nil error", where)
			}
		default:
			return nil, fmt.Errorf("%s: not built with Stale, Default, Reduced, Defer or Error", where)
		}
		if s.when == nil && (s.kind == KindDefault || s.kind == KindError) {
			final = i
		}
	}
	c.steps = append([]Step[T](nil), steps...)
	return c, nil
}

// Result is a call's answer and where it came from.
type Result[T any] struct {
	// Value is the answer.
	Value T
	// Kind says who answered: KindPrimary when the function did.
	Kind Kind
	// Step is the name of the step that answered; empty when the primary
	// did.
	Step string
	// Cause is the primary's error when a step answered; nil otherwise.
	Cause error
	// Age is how old a stale value is (KindStale only).
	Age time.Duration
}

// Fallback reports whether a step answered instead of the primary.
func (r Result[T]) Fallback() bool { return r.Kind != KindPrimary }

// Do calls fn and returns its value. When fn fails, the chain tries its steps
// in order and returns the first answer; when none answers, fn's value and
// error are returned unchanged.
//
// Which errors fall back: none once the caller's context is done (ctx.Err()
// != nil) — the caller has gone or its deadline has passed, and nobody is
// left to use a substitute; none that Config.Handles refuses (by default, the
// caller's own errors); and, for each step, only those its When accepts. A
// timeout or cancellation inside the pipeline (a total timeout, a hedge
// loser) leaves the caller's context live and does fall back. Between steps
// the chain checks the caller's context again and stops when it is done.
//
// On success Do records fn's value under key in the caches of the chain's
// Stale steps (see LastKnownGood.Put for the cost) and does nothing else: no
// allocation, no clock read when the chain has no Stale step. A panic in fn
// or in a step is not recovered.
func (c *Chain[T]) Do(ctx context.Context, key string, fn func(context.Context) (T, error)) (T, error) {
	v, err := fn(ctx)
	if c == nil {
		return v, err
	}
	if err == nil {
		for _, lkg := range c.caches {
			lkg.Put(key, v)
		}
		return v, nil
	}
	r, err := c.fallback(ctx, key, v, err)
	return r.Value, err
}

// DoResult is Do that also says who answered: the Result's Kind, Step and
// Cause tell a fallback from the primary (show "prices as of 3 minutes ago"
// for a stale answer, say). It costs what Do costs.
func (c *Chain[T]) DoResult(ctx context.Context, key string, fn func(context.Context) (T, error)) (Result[T], error) {
	v, err := fn(ctx)
	if c == nil {
		return Result[T]{Value: v}, err
	}
	if err == nil {
		for _, lkg := range c.caches {
			lkg.Put(key, v)
		}
		return Result[T]{Value: v}, nil
	}
	return c.fallback(ctx, key, v, err)
}

// fallback runs the steps after the primary failed with primary (and
// returned pv).
func (c *Chain[T]) fallback(ctx context.Context, key string, pv T, primary error) (Result[T], error) {
	if ctx.Err() != nil || !c.handles(primary) {
		return Result[T]{Value: pv}, primary
	}
	for i := range c.steps {
		s := &c.steps[i]
		if s.when != nil && !s.when(primary) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r := Result[T]{Kind: s.kind, Step: s.name, Cause: primary}
		switch s.kind {
		case KindStale:
			v, age, ok := s.cache.Get(key)
			if !ok {
				continue
			}
			r.Value, r.Age = v, age
		case KindDefault:
			r.Value = s.value
		case KindReduced:
			v, err := s.reduced(ctx, key, primary)
			if err != nil {
				continue
			}
			r.Value = v
		case KindDeferred:
			if err := s.enqueue(ctx, key, primary); err != nil {
				continue
			}
			r.Value = s.value
		case KindError:
			c.emit(key, s.name, kindCodes[s.kind], primary)
			return r, &fastError{err: s.err, cause: primary}
		}
		c.emit(key, s.name, kindCodes[s.kind], primary)
		return r, nil
	}
	return Result[T]{Value: pv}, primary
}

func (c *Chain[T]) emit(key, step, code string, primary error) {
	watertight.Emit(c.listener, watertight.Event{
		Kind:   watertight.EventFallbackUsed,
		Source: "fallback",
		Name:   c.name,
		Key:    key,
		Reason: step,
		Err:    primary,
		Code:   code,
	})
}

// fastError is the error an Error step returns: the step's error, with the
// primary's as its cause.
type fastError struct {
	err, cause error
}

func (e *fastError) Error() string   { return e.err.Error() + ": " + e.cause.Error() }
func (e *fastError) Unwrap() []error { return []error{e.err, e.cause} }
