package retry

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/watertight-go/watertight/budget"
)

var (
	// ErrExhausted matches (errors.Is) an ExhaustedError.
	ErrExhausted = errors.New("retry: attempts exhausted")
	// ErrNotIdempotent is the reason of a SkippedError for a transient
	// failure of a call that was not marked idempotent.
	ErrNotIdempotent = errors.New("retry: not retried: the call is not marked idempotent (Config.Idempotent, retry.Idempotent or retry.WithIdempotencyKey)")
	// ErrNoTime is the reason of a SkippedError for a retry whose wait would
	// have left less than Config.MinAttemptTime before the deadline.
	ErrNoTime = errors.New("retry: not retried: not enough time left before the deadline")
	// ErrNoBudget is the reason of a SkippedError for a retry the retry
	// budget refused.
	ErrNoBudget = errors.New("retry: not retried: retry budget exhausted")
)

// ExhaustedError is the error of a call whose every attempt failed with a
// retryable error. It matches ErrExhausted and unwraps to the last attempt's
// error. It also carries the "overloaded, don't retry" signal
// (watertight.IsOverloaded), so that layers above do not retry it again.
type ExhaustedError struct {
	// Attempts is the number of attempts made.
	Attempts int
	// Last is the last attempt's error.
	Last error
}

// Error says how many attempts failed and how the last one did.
func (e *ExhaustedError) Error() string {
	return "retry: all " + strconv.Itoa(e.Attempts) + " attempts failed: " + errString(e.Last)
}

// Unwrap returns the last attempt's error.
func (e *ExhaustedError) Unwrap() error { return e.Last }

// Is reports whether target is ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Overloaded reports true: this layer already retried, so no layer above
// should (see watertight.IsOverloaded).
func (e *ExhaustedError) Overloaded() bool { return true }

// SkippedError is the error of a call that failed with a retryable error
// but was not retried further, with the reason: ErrNotIdempotent, ErrNoTime
// or ErrNoBudget. errors.Is matches both the reason and the call's error.
// A SkippedError for ErrNoBudget carries the "overloaded, don't retry"
// signal: the dependency is failing for many callers at once.
type SkippedError struct {
	// Attempts is the number of attempts made.
	Attempts int
	// Reason says why no further attempt was made.
	Reason error
	// Err is the last attempt's error.
	Err error
}

// Error gives the reason and the last error, for example
// "retry: not retried: retry budget exhausted (after 1 attempt): connection refused".
func (e *SkippedError) Error() string {
	n := "attempts"
	if e.Attempts == 1 {
		n = "attempt"
	}
	return fmt.Sprintf("%v (after %d %s): %s", e.Reason, e.Attempts, n, errString(e.Err))
}

// Unwrap returns the reason and the last attempt's error.
func (e *SkippedError) Unwrap() []error { return []error{e.Reason, e.Err} }

// Rejection reports whether the retry was refused by the budget: a
// protection's refusal, recognised by watertight.IsRejection.
func (e *SkippedError) Rejection() bool { return e.Reason == ErrNoBudget }

// Is reports whether a retry refused by the budget is matched against
// budget.ErrExhausted.
func (e *SkippedError) Is(target error) bool {
	return e.Reason == ErrNoBudget && target == budget.ErrExhausted
}

// Overloaded reports whether the retry was refused by the budget.
func (e *SkippedError) Overloaded() bool { return e.Reason == ErrNoBudget }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// After returns err marked as transient, with the wait the server asked for
// (an HTTP Retry-After, a gRPC pushback): the policy waits d, capped by
// Config.MaxDelay, instead of its backoff. A negative d is taken as zero.
// After(nil, d) returns nil.
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &afterError{err: err, d: max(d, 0)}
}

type afterError struct {
	err error
	d   time.Duration
}

func (e *afterError) Error() string             { return e.err.Error() }
func (e *afterError) Unwrap() error             { return e.err }
func (e *afterError) RetryAfter() time.Duration { return e.d }
func (e *afterError) Transient() bool           { return true }

// MarkTransient returns err marked as transient, so that IsTransient
// accepts it; MarkPermanent marks it as not to be retried. The marks wrap
// err. A nil err stays nil.
func MarkTransient(err error) error { return mark(err, true) }

// MarkPermanent returns err marked as permanent: IsTransient refuses it,
// whatever it wraps. A nil err stays nil.
func MarkPermanent(err error) error { return mark(err, false) }

func mark(err error, transient bool) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, transient: transient}
}

type transientError struct {
	err       error
	transient bool
}

func (e *transientError) Error() string   { return e.err.Error() }
func (e *transientError) Unwrap() error   { return e.err }
func (e *transientError) Transient() bool { return e.transient }
