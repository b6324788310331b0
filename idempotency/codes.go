package idempotency

// The codes of the events the adapters (watertighthttp's idempotency
// middleware, contrib/watertightgrpc's interceptor) emit for idempotency
// (watertight.Event.Code): stable, machine-readable reasons for metric
// labels, dashboards and alerts, the same for both wires. The words for
// people are in the event's Reason.
const (
	// CodeKeyMissing: EventRejected, the operation requires a key and the
	// request has none (ErrKeyMissing).
	CodeKeyMissing = "key_missing"
	// CodeInvalidKey: EventRejected, the key is malformed, too long, or
	// sent more than once (ErrInvalidKey).
	CodeInvalidKey = "invalid_key"
	// CodeRequestTooLarge: EventRejected, the request is too large to
	// fingerprint (ErrRequestTooLarge).
	CodeRequestTooLarge = "request_too_large"
	// CodeBodyUnreadable: EventRejected, the request body could not be
	// read, so it could not be fingerprinted.
	CodeBodyUnreadable = "body_unreadable"
	// CodeInFlight: EventRejected, a request with the same key is still
	// being processed (ErrInFlight).
	CodeInFlight = "in_flight"
	// CodeMismatch: EventRejected, the key was used for a different
	// request (ErrMismatch).
	CodeMismatch = "mismatch"
	// CodeOutcomeUnknown: EventRejected, the key's outcome was not
	// recorded (ErrOutcomeUnknown).
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeForgotten: EventRejected, the key's result was dropped early
	// (ErrForgotten).
	CodeForgotten = "forgotten"
	// CodeStoreUnavailable: EventRejected, the store failed and the
	// request was not run (ErrStoreUnavailable).
	CodeStoreUnavailable = "store_unavailable"
	// CodeFailOpen: EventFallbackUsed, the store failed and the request
	// ran without deduplication (FailOpen).
	CodeFailOpen = "fail_open"
	// CodeNotStored: EventStateChange claimed → unknown, the result was not
	// kept and the key answers "outcome unknown" (SavedUnknown).
	CodeNotStored = "not_stored"
	// CodeStoreFailed: EventStateChange claimed → unsaved, the store failed
	// after the handler ran (NotSaved).
	CodeStoreFailed = "store_failed"
	// CodeLockLost: EventStateChange claimed → expired, the claim's lock
	// ended before the handler finished (LockLost).
	CodeLockLost = "lock_lost"
	// CodeReleased: EventStateChange claimed → released, the handler asked
	// for the key to be released without a stored result.
	CodeReleased = "released"
)

// Code returns the code of the EventStateChange an adapter emits for s:
// CodeNotStored, CodeStoreFailed or CodeLockLost; "" for SavedResult, which
// is no event.
func (s Saved) Code() string {
	switch s {
	case SavedUnknown:
		return CodeNotStored
	case NotSaved:
		return CodeStoreFailed
	case LockLost:
		return CodeLockLost
	}
	return ""
}
