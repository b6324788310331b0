package watertightsql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertightsql"
)

// safeErr is pgx's kind of error for a failure before anything was sent.
type safeErr struct{ safe bool }

func (e safeErr) Error() string     { return "fake: failed before sending" }
func (e safeErr) SafeToRetry() bool { return e.safe }

func pg(code string) error { return fmt.Errorf("query: %w", &pgError{code: code}) }

func TestSQLState(t *testing.T) {
	if got := watertightsql.SQLState(pg("40001")); got != "40001" {
		t.Errorf("SQLState of a wrapped error = %q", got)
	}
	if got := watertightsql.SQLState(errors.New("plain")); got != "" {
		t.Errorf("SQLState of a plain error = %q", got)
	}
	if got := watertightsql.SQLState(nil); got != "" {
		t.Errorf("SQLState(nil) = %q", got)
	}
}

func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{driver.ErrBadConn, true},
		{fmt.Errorf("exec: %w", driver.ErrBadConn), true},
		{pg("40001"), true},
		{pg("40P01"), true},
		{pg("08006"), true},
		{pg("08001"), true},
		{pg("08P01"), true},
		{pg("57P01"), true},
		{pg("57P02"), true},
		{pg("57P03"), true},
		{pg("53300"), true},
		{pg("57014"), false}, // query_canceled: a statement timeout
		{pg("23505"), false},
		{pg("42601"), false},
		{pg("55P03"), false}, // lock_not_available
		{pg("40002"), false}, // integrity constraint violation at commit
		{pg("53200"), false}, // out of memory: not for a retry
		{safeErr{true}, true},
		{safeErr{false}, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("%w: %w", context.DeadlineExceeded, safeErr{true}), false},
		{retry.MarkPermanent(pg("40001")), false},
		{retry.MarkTransient(errors.New("mine")), true},
		{bulkhead.ErrFull, false},
		{circuit.ErrOpen, false},
		{deadline.ErrTooShort, false},
		{syscall.ECONNREFUSED, false},
		{errors.New("unknown"), false},
	} {
		if got := watertightsql.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestTransientSQLState(t *testing.T) {
	for code, want := range map[string]bool{
		"40001": true, "40P01": true, "08000": true, "08003": true, "57P01": true, "57P02": true,
		"57P03": true, "53300": true, "": false, "08": false, "57P04": false, "00000": false, "XX000": false,
	} {
		if got := watertightsql.TransientSQLState(code); got != want {
			t.Errorf("TransientSQLState(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want watertight.Outcome
	}{
		{bg, nil, watertight.Success},
		{bg, sql.ErrNoRows, watertight.Success},
		{bg, fmt.Errorf("scan: %w", sql.ErrNoRows), watertight.Success},
		{bg, sql.ErrTxDone, watertight.Ignored},
		{bg, pg("42601"), watertight.Ignored},
		{bg, pg("23505"), watertight.Ignored},
		{bg, pg("40001"), watertight.Ignored},
		{bg, pg("40P01"), watertight.Ignored},
		{bg, pg("08006"), watertight.Failure},
		{bg, pg("53300"), watertight.Failure},
		{bg, pg("53200"), watertight.Failure},
		{bg, pg("57P01"), watertight.Failure},
		{bg, pg("57014"), watertight.Failure}, // the server's statement_timeout
		{canceled, pg("57014"), watertight.Ignored},
		{bg, pg("58030"), watertight.Failure},
		{bg, pg("XX000"), watertight.Failure},
		{bg, watertight.Mark(pg("08006"), watertight.Ignored), watertight.Ignored},
		{bg, driver.ErrBadConn, watertight.Failure},
		{bg, syscall.ECONNREFUSED, watertight.Failure},
		{bg, context.DeadlineExceeded, watertight.Failure},
		{canceled, context.Canceled, watertight.Ignored},
		{bg, bulkhead.ErrFull, watertight.Saturated},
		{bg, circuit.ErrOpen, watertight.Ignored},
		{bg, deadline.ErrTooShort, watertight.Ignored},
	} {
		if got := watertightsql.Classify(c.ctx, c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
