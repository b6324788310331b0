package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/watertight-go/watertight"
)

// IsTransient is the default classification: it reports whether err is a
// failure worth retrying.
//
// Never retried: nil; a rejection (watertight.IsRejection: open breaker, full
// bulkhead, exhausted budget); the "overloaded, don't retry" signal
// (watertight.IsOverloaded), which also covers a lower layer's
// ExhaustedError; a lower layer's SkippedError (that layer decided not to
// retry, and a layer above must not undo it); a cancellation
// (context.Canceled).
//
// Retried: an error marked with After or MarkTransient (MarkPermanent says
// no, whatever it wraps — the outermost mark wins); a timeout
// (context.DeadlineExceeded — the policy itself stops when the caller's own
// context has ended, so this is an attempt's timeout — or a net.Error whose
// Timeout() is true); a refused, reset or aborted connection, an unreachable
// host or network, a broken pipe; a connection closed mid-answer
// (io.ErrUnexpectedEOF).
//
// Anything else is taken as permanent and not retried.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if watertight.IsRejection(err) || watertight.IsOverloaded(err) || errors.Is(err, context.Canceled) {
		return false
	}
	// A lower layer's retry policy already decided on this call: retry in
	// one layer only.
	var skipped *SkippedError
	if errors.As(err, &skipped) {
		return false
	}
	var m interface{ Transient() bool }
	if errors.As(err, &m) {
		return m.Transient()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range transientErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

var transientErrnos = []error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE, syscall.ETIMEDOUT,
}

// RetryAfter returns the wait a server asked for, carried by err or an
// error it wraps (see After): any error with a method
// RetryAfter() time.Duration counts.
func RetryAfter(err error) (time.Duration, bool) {
	var ra interface{ RetryAfter() time.Duration }
	if err == nil || !errors.As(err, &ra) {
		return 0, false
	}
	return max(ra.RetryAfter(), 0), true
}
