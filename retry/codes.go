package retry

// The codes of the package's events (watertight.Event.Code and Event.Code):
// stable, machine-readable reasons for metric labels, dashboards and alerts.
// They keep their meaning across versions; the words for people are in the
// watertight.Event's Reason.
const (
	// CodeNotIdempotent: EventRetrySkipped, the call was not marked
	// idempotent (ErrNotIdempotent).
	CodeNotIdempotent = "not_idempotent"
	// CodeNoTime: EventRetrySkipped, the wait would leave less than
	// MinAttemptTime before the deadline (ErrNoTime).
	CodeNoTime = "no_time"
	// CodeNoBudget: EventRetrySkipped, the retry budget refused the retry
	// (ErrNoBudget).
	CodeNoBudget = "no_budget"
	// CodeNoConcurrency: EventRetrySkipped, the concurrent-retry budget
	// had no slot free (ErrNoConcurrency).
	CodeNoConcurrency = "no_concurrency"
	// CodeRetryAfterTooLong: EventRetrySkipped, the server asked for a
	// wait longer than MaxRetryAfter (ErrRetryAfterTooLong).
	CodeRetryAfterTooLong = "retry_after_too_long"
	// CodeMaxAttempts: EventRetryExhausted, the last of MaxAttempts
	// attempts failed.
	CodeMaxAttempts = "max_attempts"
)

// stopCode is the code of a stop reason.
func stopCode(reason uint64) string {
	switch reason {
	case stopExhausted:
		return CodeMaxAttempts
	case stopNotIdempotent:
		return CodeNotIdempotent
	case stopNoTime:
		return CodeNoTime
	case stopNoBudget:
		return CodeNoBudget
	case stopNoConcurrency:
		return CodeNoConcurrency
	case stopRetryAfter:
		return CodeRetryAfterTooLong
	}
	return ""
}
