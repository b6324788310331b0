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
	// budget (Config.Budget) refused.
	ErrNoBudget = errors.New("retry: not retried: retry budget exhausted")
	// ErrNoConcurrency is the reason of a SkippedError for a retry the
	// concurrent-retry budget (Config.Concurrency) refused: too many retries
	// were in flight.
	ErrNoConcurrency = errors.New("retry: not retried: retry concurrency budget exhausted (too many retries in flight)")
	// ErrRetryAfterTooLong matches (errors.Is) a RetryAfterError, and is the
	// Reason of its Skipped event: the server asked for a wait longer than
	// Config.MaxRetryAfter.
	ErrRetryAfterTooLong = errors.New("retry: not retried: the server asked to wait longer than Config.MaxRetryAfter")
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
// but was not retried further, with the reason: ErrNotIdempotent, ErrNoTime,
// ErrNoBudget or ErrNoConcurrency. errors.Is matches both the reason and the
// call's error. A SkippedError for ErrNoBudget or ErrNoConcurrency (a
// budget's refusal) matches budget.ErrExhausted, is a rejection and carries
// the "overloaded, don't retry" signal: the dependency is failing for many
// callers at once.
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

// Rejection reports whether the retry was refused by a budget (Config.Budget
// or Config.Concurrency): a protection's refusal, recognised by
// watertight.IsRejection.
func (e *SkippedError) Rejection() bool { return e.byBudget() }

// Is reports whether a retry refused by a budget is matched against
// budget.ErrExhausted.
func (e *SkippedError) Is(target error) bool {
	return target == budget.ErrExhausted && e.byBudget()
}

// Overloaded reports whether the retry was refused by a budget.
func (e *SkippedError) Overloaded() bool { return e.byBudget() }

// byBudget reports whether a budget refused the retry.
func (e *SkippedError) byBudget() bool {
	return e.Reason == ErrNoBudget || e.Reason == ErrNoConcurrency
}

// RetryAfterError is the error of a call whose attempt failed with a
// retryable error that carried a server's requested wait (After: an HTTP
// Retry-After, a gRPC pushback) longer than Config.MaxRetryAfter: the
// policy returned at once rather than sleep that long, or retry sooner than
// asked. The caller decides: wait Wait and call again, fail, or fall back.
// It matches ErrRetryAfterTooLong and unwraps to the attempt's error (for
// HTTP, a *watertighthttp.StatusError, which holds the response). It
// carries the "overloaded, don't retry" signal (watertight.IsOverloaded):
// the server asked its callers to stay away, so no layer above should
// retry sooner. It is not a rejection.
type RetryAfterError struct {
	// Attempts is the number of attempts made.
	Attempts int
	// Wait is the wait the server asked for.
	Wait time.Duration
	// Max is the policy's Config.MaxRetryAfter, which Wait exceeds.
	Max time.Duration
	// Err is the last attempt's error.
	Err error
}

// Error gives the requested wait, the cap and the last error, for example
// "retry: the server asked to wait 24h0m0s, more than MaxRetryAfter 5s
// (after 1 attempt): watertighthttp: HTTP 503 Service Unavailable".
func (e *RetryAfterError) Error() string {
	n := "attempts"
	if e.Attempts == 1 {
		n = "attempt"
	}
	return fmt.Sprintf("retry: the server asked to wait %v, more than MaxRetryAfter %v (after %d %s): %s", e.Wait, e.Max, e.Attempts, n, errString(e.Err))
}

// Unwrap returns the last attempt's error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRetryAfterTooLong.
func (e *RetryAfterError) Is(target error) bool { return target == ErrRetryAfterTooLong }

// Overloaded reports true: the server asked its callers to wait, so no layer
// above should retry sooner (see watertight.IsOverloaded).
func (e *RetryAfterError) Overloaded() bool { return true }

// RetryAfter returns Wait, so that RetryAfter(err) reads it back.
func (e *RetryAfterError) RetryAfter() time.Duration { return e.Wait }

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
