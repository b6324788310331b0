package watertight

import (
	"context"
	"errors"
	"strconv"
)

// Outcome is how one call counts for the protections that observe it, such as
// a circuit breaker's failure rate. The zero value is Success.
type Outcome uint8

const (
	// Success is a call that did what was asked.
	Success Outcome = iota
	// Failure is a call that failed because of the dependency: it counts
	// toward the failure rate.
	Failure
	// Ignored is a call that says nothing about the dependency's health: the
	// caller's own error (an HTTP 4xx, an invalid argument), a cancellation
	// by the caller, or a rejection by a protection. It is not counted.
	Ignored
	// Saturated is a rejection by a saturated resource in front of the
	// dependency (a full bulkhead). Breakers count it only when configured
	// to, and then as a signal of its own, separate from Failure.
	Saturated
)

// String returns the outcome's name in lower case ("success", "failure",
// "ignored", "saturated").
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignored:
		return "ignored"
	case Saturated:
		return "saturated"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Classifier decides how a call's error counts. ctx is the context the call
// ran under; err is what it returned. Protections that take a Classifier use
// Classify when it is nil.
type Classifier func(ctx context.Context, err error) Outcome

// Classify is the default classification:
//
//   - a nil error is Success;
//   - an error that implements Outcome() Outcome (see Mark) is what it says;
//   - a saturation rejection (IsSaturation) is Saturated, any other rejection
//     is Ignored;
//   - a cancellation (ctx cancelled, or an error that is context.Canceled)
//     is Ignored: the caller gave up, which says nothing about the dependency;
//   - anything else, including context.DeadlineExceeded, is Failure: the call
//     failed or was too slow for the time it was given.
func Classify(ctx context.Context, err error) Outcome {
	if err == nil {
		return Success
	}
	var m interface{ Outcome() Outcome }
	if errors.As(err, &m) {
		return m.Outcome()
	}
	var r interface{ Rejection() bool }
	if errors.As(err, &r) && r.Rejection() {
		if IsSaturation(err) {
			return Saturated
		}
		return Ignored
	}
	if errors.Is(err, context.Canceled) || (ctx != nil && errors.Is(ctx.Err(), context.Canceled)) {
		return Ignored
	}
	return Failure
}

// Mark returns err marked with the outcome o, so that Classify counts it as o:
// for example Mark(err, Ignored) for an error that is the caller's fault. The
// result wraps err (errors.Is and errors.As see through it). Mark(nil, o)
// returns nil.
func Mark(err error, o Outcome) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, outcome: o}
}

type marked struct {
	err     error
	outcome Outcome
}

func (m *marked) Error() string    { return m.err.Error() }
func (m *marked) Unwrap() error    { return m.err }
func (m *marked) Outcome() Outcome { return m.outcome }
