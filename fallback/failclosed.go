package fallback

import (
	"context"
	"errors"
)

// ErrCheckFailed matches, with errors.Is, the error FailClosed returns when
// the check could not give an answer: the action was denied because nobody
// could say it was allowed.
var ErrCheckFailed = errors.New("fallback: check failed, denied (fail closed)")

// FailClosed asks check whether an action is allowed, for security
// decisions: authorisation, authentication, quota of a paid resource, fraud
// screening. When check answers, its answer stands. When it fails — the
// authorisation service is down, timed out, or its breaker is open — the
// answer is deny: FailClosed returns false and an error that matches both
// ErrCheckFailed and check's error. It never returns true with a non-nil
// error, whatever check returns, and it does not call check at all when ctx
// is already done.
//
// Why deny: an outage of the authorisation service must not become an
// outage of authorisation. A fail-open fallback ("allow when unsure") turns
// every way of making the check fail — overloading it, cutting the network,
// sending a request slow enough to time out — into a way in, and an
// attacker can cause those on purpose. Denying costs availability for the
// duration of the outage, which is visible and ends; allowing costs
// confidentiality or money, which is silent and permanent. Do not put a
// Chain with a Default of "allowed" in front of such a check; keep
// fallbacks for answers whose worst case is stale or incomplete, not unsafe.
//
// A panic in check is not recovered; it does not return true either.
func FailClosed(ctx context.Context, check func(context.Context) (allowed bool, err error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &checkError{err: context.Cause(ctx)}
	}
	allowed, err := check(ctx)
	if err != nil {
		return false, &checkError{err: err}
	}
	return allowed, nil
}

// checkError is FailClosed's error: ErrCheckFailed with the check's error as
// its cause.
type checkError struct{ err error }

func (e *checkError) Error() string   { return ErrCheckFailed.Error() + ": " + e.err.Error() }
func (e *checkError) Unwrap() []error { return []error{ErrCheckFailed, e.err} }
