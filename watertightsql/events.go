package watertightsql

import (
	"errors"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/retry"
)

// The codes of the DB's events (watertight.Event.Code): stable,
// machine-readable reasons for metric labels, dashboards and alerts. An
// EventStateChange of the breaker carries the circuit package's code of the
// change instead (circuit.CodeFailureRate, circuit.CodeTimer...).
const (
	// CodeShareFull: EventBulkheadFull, a statement found its key's share
	// full and waited Config.MaxWait (or until its deadline) in vain.
	CodeShareFull = "share_full"
	// CodeUnknownKey: EventRejected, a statement's key has no share and
	// Config.DefaultShare refuses such keys (ErrUnknownKey).
	CodeUnknownKey = "unknown_key"
	// CodeDeadlineTooShort: EventRejected, a statement's deadline left less
	// than Config.MinQueryTime (deadline.ErrTooShort).
	CodeDeadlineTooShort = "deadline_too_short"
	// CodeBreakerOpen: EventRejected, the breaker is open
	// (circuit.ErrOpen).
	CodeBreakerOpen = "breaker_open"
	// CodeBreakerHalfOpenFull: EventRejected, the breaker is half-open with
	// every trial in flight (circuit.ErrHalfOpen).
	CodeBreakerHalfOpenFull = "breaker_half_open_full"
	// CodeRetryScheduled: EventRetryScheduled, a transient error of an
	// idempotent statement will be retried after Delay.
	CodeRetryScheduled = "retry_scheduled"
	// CodeRetryExhausted: EventRetryExhausted, every attempt failed with a
	// transient error (retry.ErrExhausted).
	CodeRetryExhausted = "retry_exhausted"
	// CodeNotIdempotent: EventRetrySkipped, a transient error was not
	// retried because the statement is not marked idempotent
	// (retry.ErrNotIdempotent).
	CodeNotIdempotent = "not_idempotent"
	// CodeNoTime: EventRetrySkipped, the wait before another attempt would
	// have left less than Retry.MinAttemptTime (retry.ErrNoTime).
	CodeNoTime = "no_time"
	// CodeNoBudget: EventRetrySkipped, the retry budget refused the retry
	// (retry.ErrNoBudget, retry.ErrNoConcurrency).
	CodeNoBudget = "no_budget"
)

// emit sends one of the DB's events, if it has a listener.
func (d *DB) emit(kind watertight.EventKind, code, key, reason string, err error) {
	if d.listener == nil {
		return
	}
	watertight.Emit(d.listener, watertight.Event{
		Kind: kind, Source: Source, Name: d.name, Key: key, Reason: reason, Err: err, Code: code,
	})
}

// emitRetryEnd reports why a statement that failed was not retried further,
// from the error the retry policy's Exit returned.
func (d *DB) emitRetryEnd(key string, err error) {
	if d.listener == nil {
		return
	}
	var ex *retry.ExhaustedError
	if errors.As(err, &ex) {
		watertight.Emit(d.listener, watertight.Event{
			Kind: watertight.EventRetryExhausted, Source: Source, Name: d.name, Key: key,
			Attempt: ex.Attempts, Err: ex.Last, Code: CodeRetryExhausted, Reason: "every attempt failed",
		})
		return
	}
	var sk *retry.SkippedError
	if !errors.As(err, &sk) {
		return // not worth a retry: nothing to say
	}
	code := CodeNoBudget
	switch sk.Reason {
	case retry.ErrNotIdempotent:
		code = CodeNotIdempotent
	case retry.ErrNoTime:
		code = CodeNoTime
	}
	watertight.Emit(d.listener, watertight.Event{
		Kind: watertight.EventRetrySkipped, Source: Source, Name: d.name, Key: key,
		Attempt: sk.Attempts, Err: sk.Err, Code: code, Reason: sk.Reason.Error(),
	})
}
