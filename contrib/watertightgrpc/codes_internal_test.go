package watertightgrpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// The errors the server sheds with, in the forms guard and acquire build
// them, have their codes.
func TestShedCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: 1 in flight and 0 queued", ErrMethodFull), watertighthttp.CodeRouteFull},
		{fmt.Errorf("%w: waited the longest time allowed in the queue", ErrMethodFull), watertighthttp.CodeRouteFull},
		{ErrDisplaced, watertighthttp.CodeDisplaced},
		{fmt.Errorf("%w: %w", ErrQueueGaveUp, context.DeadlineExceeded), watertighthttp.CodeQueueGaveUp},
		{fmt.Errorf("%w: this client already has 2 requests", ErrClientLimit), watertighthttp.CodeClientLimit},
		{fmt.Errorf("%w: the server is busy", ErrClientOverflow), watertighthttp.CodeClientOverflow},
		{deadline.ErrTooShort, watertighthttp.CodeDeadline},
		{fmt.Errorf("x: %w", deadline.ErrExpired), watertighthttp.CodeDeadline},
	} {
		if got := shedCode(c.err); got != c.code {
			t.Errorf("shedCode(%v) = %q, want %q", c.err, got, c.code)
		}
	}
}

// A rejection by the client's protections has the code of the protection.
func TestRejectCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("attempt 2: %w", circuit.ErrOpen), circuit.CodeOpen},
		{circuit.ErrHalfOpen, circuit.CodeHalfOpenFull},
		{circuit.ErrTooManyKeys, circuit.CodeTooManyKeys},
		{fmt.Errorf("bulkhead: k: %w", bulkhead.ErrFull), CodeBulkheadFull},
		{bulkhead.ErrTooManyKeys, bulkhead.CodeTooManyKeys},
		{&retry.SkippedError{Reason: retry.ErrNoBudget, Err: errors.New("unavailable")}, retry.CodeNoBudget},
		{&retry.SkippedError{Reason: retry.ErrNoConcurrency, Err: errors.New("unavailable")}, retry.CodeNoConcurrency},
		{fmt.Errorf("%w: 1ms left", deadline.ErrTooShort), CodeDeadlineTooShort},
		{watertight.NewRejection("mine: no"), CodeRejected},
	} {
		if got := rejectCode(c.err); got != c.code {
			t.Errorf("rejectCode(%v) = %q, want %q", c.err, got, c.code)
		}
	}
}
