package watertightsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/watertight-go/watertight"
)

// SQLState returns the SQLSTATE code err carries: that of the first error in
// its chain with a method SQLState() string (pgx's *pgconn.PgError has one),
// or "" when none does. The interface keeps this package free of any
// driver.
func SQLState(err error) string {
	if err == nil {
		return ""
	}
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// TransientSQLState reports whether a SQLSTATE code says that the same
// statement may well succeed if it is run again:
//
//   - 40001 serialization_failure and 40P01 deadlock_detected: the
//     transaction lost a race with another and was rolled back;
//   - class 08, connection exceptions (08000, 08003, 08006, 08001, 08004...):
//     the connection failed;
//   - 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now:
//     the server is restarting, or its administrator ended the session;
//   - 53300 too_many_connections: the server has no connection slot free
//     for now.
//
// Anything else (a syntax error, a constraint violation, a lock timeout, a
// statement timeout...) is taken as permanent.
func TransientSQLState(code string) bool {
	switch code {
	case "40001", "40P01", "57P01", "57P02", "57P03", "53300":
		return true
	}
	return len(code) == 5 && code[0] == '0' && code[1] == '8'
}

// IsTransient is the default retry classification (Config.Retry.Retryable):
// it reports whether err is worth another attempt of the same statement.
// Only statements marked idempotent are retried whatever it says (see
// Config.Retry).
//
// Transient: an error marked with retry.MarkTransient (retry.MarkPermanent
// says no, whatever it wraps); driver.ErrBadConn, which a driver returns
// only when nothing was sent (database/sql has already retried it on other
// connections before it reaches this far); an error whose SQLSTATE
// (SQLState) TransientSQLState accepts; and an error with a method
// SafeToRetry() bool that returns true (pgx's errors for failures before
// anything was sent).
//
// Never transient: nil, a rejection (watertight.IsRejection: a full share,
// an open breaker, a deadline too short), a cancellation or a deadline
// (context.Canceled, context.DeadlineExceeded: a statement that ran out of
// time is not retried, as running it again would only add load), and any
// other error.
func IsTransient(err error) bool {
	if err == nil || watertight.IsRejection(err) {
		return false
	}
	var m interface{ Transient() bool }
	if errors.As(err, &m) {
		return m.Transient()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if code := SQLState(err); code != "" {
		return TransientSQLState(code)
	}
	var s interface{ SafeToRetry() bool }
	return errors.As(err, &s) && s.SafeToRetry()
}

// Classify is the default classification of a statement's outcome for the
// breaker (Config.Breaker.Classify). The breaker watches the database
// server, not the callers' statements, so only errors that say the server
// or the connection to it is in trouble count as failures:
//
//   - nil and sql.ErrNoRows are a Success;
//   - an error marked with watertight.Mark counts as marked;
//   - sql.ErrTxDone (a transaction used after its end) is Ignored: the
//     caller's mistake;
//   - an error with a SQLSTATE (SQLState) is a Failure when its class says
//     the server is in trouble: 08 (connection exception), 53 (insufficient
//     resources), 57 (operator intervention: shutdown, a statement cancelled
//     by the server's statement_timeout), 58 (system error), XX (internal
//     error), unless the caller cancelled the statement (Ignored); any
//     other SQLSTATE is Ignored: the server answered, and a syntax error,
//     a constraint violation or a serialization failure says nothing about
//     its health;
//   - anything else as watertight.Classify says: a rejection is Ignored (a
//     full share is Saturated), a cancellation by the caller is Ignored,
//     and any other error, a deadline included, is a Failure (a broken
//     connection, a refused dial, a statement that ran out of time).
//
// Errors database/sql makes itself about the caller's arguments (an
// unsupported argument type) fall in the last case and count as failures:
// mark them with watertight.Mark(err, watertight.Ignored), or wrap Classify,
// if a program can make many of them.
func Classify(ctx context.Context, err error) watertight.Outcome {
	if err == nil || errors.Is(err, sql.ErrNoRows) {
		return watertight.Success
	}
	var m interface{ Outcome() watertight.Outcome }
	if errors.As(err, &m) {
		return m.Outcome()
	}
	if errors.Is(err, sql.ErrTxDone) {
		return watertight.Ignored
	}
	if code := SQLState(err); code != "" && !watertight.IsRejection(err) {
		if !serverTrouble(code) {
			return watertight.Ignored
		}
		if errors.Is(err, context.Canceled) || (ctx != nil && errors.Is(ctx.Err(), context.Canceled)) {
			return watertight.Ignored
		}
		return watertight.Failure
	}
	return watertight.Classify(ctx, err)
}

// serverTrouble reports whether a SQLSTATE's class says that the server, or
// the connection to it, is in trouble.
func serverTrouble(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "53", "57", "58", "XX":
		return true
	}
	return false
}
