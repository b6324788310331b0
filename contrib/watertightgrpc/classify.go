package watertightgrpc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
)

// ClassifyCode returns how an answer with status code c counts for a
// circuit breaker and whether it is worth retrying, before the pushback
// trailer and the caller's own deadline are taken into account:
//
//   - OK: Success, not transient;
//   - UNAVAILABLE: Failure, transient;
//   - DEADLINE_EXCEEDED: Failure, transient (the interceptors make it not
//     transient when it is the caller's own deadline that passed);
//   - RESOURCE_EXHAUSTED: Failure, not transient (the interceptors make it
//     transient when the server sent a non-negative pushback: it asks to be
//     retried after a delay; without one it may be a quota that a retry will
//     not change);
//   - UNKNOWN, INTERNAL, DATA_LOSS: Failure, not transient;
//   - CANCELLED, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     PERMISSION_DENIED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE,
//     UNIMPLEMENTED, UNAUTHENTICATED: Ignored (the caller's own errors, or a
//     conflict, which say nothing about the server's health), not
//     transient;
//   - any other code: Failure, not transient.
//
// A negative or malformed grpc-retry-pushback-ms makes any code not
// transient, and the error then carries the overloaded signal.
func ClassifyCode(c codes.Code) (o watertight.Outcome, transient bool) {
	switch c {
	case codes.OK:
		return watertight.Success, false
	case codes.Unavailable, codes.DeadlineExceeded:
		return watertight.Failure, true
	case codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.FailedPrecondition, codes.Aborted, codes.OutOfRange,
		codes.Unimplemented, codes.Unauthenticated:
		return watertight.Ignored, false
	}
	return watertight.Failure, false
}

// attemptError is the error of an attempt that ended with a non-OK status.
// It keeps the status (GRPCStatus, so that status.Code and status.FromError
// see through the errors that wrap it) and tells the protections how it
// counts: Outcome for a breaker (watertight.Classify), Transient for a retry
// policy (retry.IsTransient), Overloaded for watertight.IsOverloaded.
type attemptError struct {
	err        error // the invoker's error, which has the status
	st         *status.Status
	outcome    watertight.Outcome
	transient  bool
	overloaded bool
}

func (e *attemptError) Error() string {
	if e.overloaded {
		return e.err.Error() + " (overloaded, do not retry)"
	}
	return e.err.Error()
}

func (e *attemptError) Unwrap() error               { return e.err }
func (e *attemptError) GRPCStatus() *status.Status  { return e.st }
func (e *attemptError) Outcome() watertight.Outcome { return e.outcome }
func (e *attemptError) Transient() bool             { return e.transient }
func (e *attemptError) Overloaded() bool            { return e.overloaded }
func (e *attemptError) Is(target error) bool {
	return e.overloaded && target == watertight.ErrOverloaded
}

// classifyAttempt turns the error of one attempt into what the protections
// read. own says whether the attempt's own context had ended (the caller's
// deadline, less the margin, or the caller's cancellation): then a
// DEADLINE_EXCEEDED or CANCELLED is not worth retrying. trailer is the
// attempt's trailer, for the pushback. An error without a gRPC status (from
// another interceptor further in) is returned as it is.
func classifyAttempt(err error, trailer metadata.MD, own bool) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	code := st.Code()
	o, transient := ClassifyCode(code)
	if own && (code == codes.DeadlineExceeded || code == codes.Canceled) {
		transient = false
	}
	ae := &attemptError{err: err, st: st, outcome: o, transient: transient}
	vs := trailer[MetadataPushback]
	if len(vs) == 0 {
		return ae
	}
	d, again := ParsePushback(vs[0])
	switch {
	case !again:
		ae.transient, ae.overloaded = false, true
	case transient || code == codes.ResourceExhausted:
		ae.transient = true
		return retry.After(ae, d)
	}
	return ae
}

// rejectionError gives a rejection by one of the client's own protections
// (an open breaker, a full bulkhead, a deadline too short to start) a gRPC
// status, so that the caller's status.Code sees UNAVAILABLE,
// RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED rather than UNKNOWN. It unwraps to
// the rejection: watertight.IsRejection and errors.Is(err, circuit.ErrOpen)
// hold.
type rejectionError struct {
	err error
	st  *status.Status
}

func (e *rejectionError) Error() string              { return e.err.Error() }
func (e *rejectionError) Unwrap() error              { return e.err }
func (e *rejectionError) GRPCStatus() *status.Status { return e.st }

// rejectionCode is the status code of a rejection: DEADLINE_EXCEEDED for a
// deadline too short, RESOURCE_EXHAUSTED for a saturation (a full
// bulkhead), UNAVAILABLE for the others (an open breaker).
func rejectionCode(err error) codes.Code {
	switch {
	case errors.Is(err, deadline.ErrTooShort):
		return codes.DeadlineExceeded
	case watertight.IsSaturation(err):
		return codes.ResourceExhausted
	}
	return codes.Unavailable
}

// withContextStatus gives a context error that has no gRPC status (a
// caller that gave up inside the client's protections) the status grpc-go
// gives a call whose context ends: CANCELLED or DEADLINE_EXCEEDED. The
// result unwraps to err, so its classification (watertight.Ignored for a
// bulkhead's) and errors.Is hold. Other errors are returned as they are.
func withContextStatus(err error) error {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st := status.FromContextError(err)
	return &rejectionError{err: err, st: status.New(st.Code(), err.Error())}
}

// hasStatus reports whether err or an error it wraps has a gRPC status.
func hasStatus(err error) bool {
	var gs interface{ GRPCStatus() *status.Status }
	return errors.As(err, &gs) && gs.GRPCStatus() != nil
}

// withStatus returns err with a gRPC status when it is a rejection without
// one (see rejectionError), else err itself.
func withStatus(err error) error {
	if err == nil || hasStatus(err) || !watertight.IsRejection(err) {
		return err
	}
	return &rejectionError{err: err, st: status.New(rejectionCode(err), err.Error())}
}
