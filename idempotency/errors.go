package idempotency

import "github.com/watertight-go/watertight"

// Why a request was refused without running. The HTTP middleware answers
// with them (and passes them to its Listener as the Err of an
// EventRejected); each is a rejection (watertight.IsRejection holds), so
// no retry policy counts them as failures of the server. Returned errors may
// wrap them with details: compare with errors.Is.
var (
	// ErrKeyMissing: the request carries no Idempotency-Key, and its route
	// requires one (400).
	ErrKeyMissing = watertight.NewRejection("idempotency: Idempotency-Key is missing")
	// ErrInvalidKey: the Idempotency-Key could not be read: empty, too
	// long, malformed, or sent more than once (400). The middleware's error
	// wraps it and the parser's error.
	ErrInvalidKey = watertight.NewRejection("idempotency: Idempotency-Key is invalid")
	// ErrInFlight: another request with the same key is still being
	// processed (409); retry later with the same key.
	ErrInFlight = watertight.NewRejection("idempotency: a request with this Idempotency-Key is still being processed")
	// ErrMismatch: the key was first used for a different request (another
	// method, path or body) (422); nothing ran.
	ErrMismatch = watertight.NewRejection("idempotency: the Idempotency-Key was already used for a different request")
	// ErrRequestTooLarge: the request body is larger than the middleware
	// reads to fingerprint it (413); nothing ran.
	ErrRequestTooLarge = watertight.NewRejection("idempotency: request body too large to fingerprint")
	// ErrStoreUnavailable: the store failed, so the request was not run
	// (fail closed: 503); retrying with the same key is safe.
	ErrStoreUnavailable = watertight.NewRejection("idempotency: store unavailable")
	// ErrOutcomeUnknown: an earlier request with the key may have been
	// applied, and its outcome was not recorded (the claim's lock ended
	// without a result, or the result could not be kept); this request was
	// not run (500, gRPC DATA_LOSS). Sending it again with the same key
	// gets the same answer: check the resource, and send the request again
	// with a new key only if it was not applied.
	ErrOutcomeUnknown = watertight.NewRejection("idempotency: the outcome of the request with this Idempotency-Key is unknown")
	// ErrForgotten: the key's result was dropped before its TTL to make
	// room in the store; the key is too old to be replayed, and this
	// request was not run (410, gRPC FAILED_PRECONDITION).
	ErrForgotten = watertight.NewRejection("idempotency: the result of this Idempotency-Key was dropped early")
)

// ErrLockExpiring is the cause (context.Cause) of the end of the context
// the HTTP middleware gives the handler when the handler has run for nine
// tenths of the claim's lock TTL: past the lock TTL the claim expires, and a
// retry could run the operation a second time, so the handler is asked to
// stop first.
var ErrLockExpiring = watertight.NewRejection("idempotency: the claim's lock TTL is running out")
