package watertightgrpc

import (
	"errors"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// The codes of the events this package emits (watertight.Event.Code) that
// no other package defines: stable, machine-readable reasons for metric
// labels, dashboards and alerts. The server's shed requests and bad input
// carry watertighthttp's codes (CodeRouteFull "route_full" for a method at
// its limit, CodeDisplaced, CodeQueueGaveUp, CodeClientLimit,
// CodeClientOverflow, CodeDeadline, CodeUnknownCriticality), idempotency
// events package idempotency's, retry events package retry's, and a client
// rejection by a breaker or a registry the code of circuit or bulkhead.
const (
	// CodeBulkheadFull: EventRejected from the client, the key's bulkhead
	// refused the call (bulkhead.ErrFull).
	CodeBulkheadFull = "bulkhead_full"
	// CodeDeadlineTooShort: EventRejected from the client, less time was
	// left than the margin deadline takes (deadline.ErrTooShort).
	CodeDeadlineTooShort = "deadline_too_short"
	// CodeRejected: EventRejected from the client, a rejection of another
	// kind (an error of the caller's own that watertight.IsRejection
	// recognises).
	CodeRejected = "rejected"
	// CodeFingerprintFailed: EventRejected from the idempotency
	// interceptor, the request could not be fingerprinted.
	CodeFingerprintFailed = "fingerprint_failed"
	// CodeReplayFailed: EventRejected from the idempotency interceptor, the
	// stored result could not be decoded to be replayed.
	CodeReplayFailed = "replay_failed"
)

// rejectCode is the code of a rejection err that the client's own
// protections gave (see client.reject).
func rejectCode(err error) string {
	switch {
	case errors.Is(err, circuit.ErrOpen):
		return circuit.CodeOpen
	case errors.Is(err, circuit.ErrHalfOpen):
		return circuit.CodeHalfOpenFull
	case errors.Is(err, circuit.ErrTooManyKeys):
		return circuit.CodeTooManyKeys
	case errors.Is(err, bulkhead.ErrFull):
		return CodeBulkheadFull
	case errors.Is(err, bulkhead.ErrTooManyKeys):
		return bulkhead.CodeTooManyKeys
	case errors.Is(err, retry.ErrNoBudget):
		return retry.CodeNoBudget
	case errors.Is(err, retry.ErrNoConcurrency):
		return retry.CodeNoConcurrency
	case errors.Is(err, deadline.ErrTooShort):
		return CodeDeadlineTooShort
	}
	return CodeRejected
}

// shedCode is the code of a request the server shed with err, one of the
// errors guard sheds with.
func shedCode(err error) string {
	switch {
	case errors.Is(err, ErrDisplaced):
		return watertighthttp.CodeDisplaced
	case errors.Is(err, ErrQueueGaveUp):
		return watertighthttp.CodeQueueGaveUp
	case errors.Is(err, ErrMethodFull):
		return watertighthttp.CodeRouteFull
	case errors.Is(err, ErrClientLimit):
		return watertighthttp.CodeClientLimit
	case errors.Is(err, ErrClientOverflow):
		return watertighthttp.CodeClientOverflow
	}
	return watertighthttp.CodeDeadline // the other reason: the deadline propagator's Check
}
