package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// ClaimState says what Store.Claim found for a key.
type ClaimState uint8

const (
	// Claimed: the key was free (or its previous claim had expired) and now
	// belongs to the caller, who must run the operation and then call
	// Complete or Release with Claim.Token.
	Claimed ClaimState = iota + 1
	// InFlight: another execution holds the key and has not finished.
	InFlight
	// Completed: a result is stored for the key; Claim.Record holds it.
	Completed
)

// String returns "claimed", "in_flight" or "completed".
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case InFlight:
		return "in_flight"
	case Completed:
		return "completed"
	}
	return "unknown"
}

// Record is a stored result: the response that is replayed for every later
// request with the same key.
type Record struct {
	// Fingerprint identifies the request that produced the record (method,
	// path and body digest); a later request with the same key and another
	// fingerprint is refused.
	Fingerprint string
	// Status is the HTTP status code (or another protocol's code).
	Status int
	// Header holds the response headers to replay.
	Header http.Header
	// Body is the response body.
	Body []byte
	// Created is when the result was stored.
	Created time.Time
}

// Size is the number of bytes the record occupies for the purpose of store
// limits: body, header names and values, and the fingerprint.
func (r *Record) Size() int {
	n := len(r.Body) + len(r.Fingerprint)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// Claim is the answer of Store.Claim.
type Claim struct {
	// State says what was found.
	State ClaimState
	// Token is the fencing token of a new claim (State Claimed): Complete
	// and Release succeed only with it, so an owner whose claim expired
	// (and was taken over) cannot overwrite the new owner's result.
	Token string
	// Fingerprint is the fingerprint of the request that holds or held the
	// key (InFlight and Completed), for the mismatch check.
	Fingerprint string
	// Record is the stored result (State Completed).
	Record *Record
}

// Store keeps idempotency keys, their claims and their results. Keys reach
// a Store already scoped to their caller (see watertighthttp.IdempotencyConfig.Scope), so a Store
// never needs to know who is asking. Implementations must be safe for
// concurrent use, and every operation must be atomic with respect to the
// others — across processes, for a shared store such as Redis.
type Store interface {
	// Claim looks key up and, when it is free or its claim has expired,
	// claims it for a new execution of the request with fingerprint fp.
	// The claim expires after lockTTL unless completed or released first,
	// so a process that dies while holding it does not hold it forever.
	Claim(ctx context.Context, key, fp string, lockTTL time.Duration) (Claim, error)
	// Complete stores rec as the result for key, kept for ttl, if token
	// still owns the claim; otherwise it returns ErrNotOwner and stores
	// nothing.
	Complete(ctx context.Context, key, token string, rec Record, ttl time.Duration) error
	// Release gives the claim up without a result (the operation failed in
	// a way that is safe to retry, or its result could not be stored), so
	// the next request with the key runs. It returns ErrNotOwner if token
	// no longer owns the claim.
	Release(ctx context.Context, key, token string) error
}

// ErrNotOwner is returned by Store.Complete and Store.Release when the
// token no longer owns the key's claim: the claim expired and was taken
// over, or was already completed or released.
var ErrNotOwner = errors.New("idempotency: claim is no longer owned by this token")
