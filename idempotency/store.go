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
	// Unknown: the key was claimed and its operation may have run, but no
	// result was stored — the claim's lock TTL passed before Complete or
	// Release (the process died, or the store failed while the result was
	// being saved). The key is not handed to a new execution: it stays
	// Unknown until the ttl given to Claim has passed since the claim.
	// Adapters answer it with an error that says the request may have been
	// applied and that the caller must check before sending it again with a
	// new key.
	Unknown
	// Forgotten: a result was stored for the key but the store dropped it
	// before its TTL to make room (MemoryStore's eviction), keeping only the
	// fact that the key ran. The key is not run again; adapters answer that
	// the key is too old to be replayed.
	Forgotten
)

// String returns "claimed", "in_flight", "completed", "unknown" or
// "forgotten".
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case InFlight:
		return "in_flight"
	case Completed:
		return "completed"
	case Unknown:
		return "unknown"
	case Forgotten:
		return "forgotten"
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
	// key (InFlight, Unknown and Completed), for the mismatch check.
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
	// Claim looks key up and, when it is free, claims it for a new
	// execution of the request with fingerprint fp. The claim's lock lasts
	// lockTTL: if it is neither completed nor released by then (the
	// process died, the store failed while the result was saved), the key
	// becomes Unknown — the operation may have run — and is answered so,
	// never claimed again, until ttl has passed since the claim (ttl is the
	// result TTL, at least lockTTL). A key is free again only when it was
	// never claimed, was released, or its ttl is over.
	Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (Claim, error)
	// Complete stores rec as the result for key, kept for ttl, if token
	// still owns the claim; otherwise it returns ErrNotOwner and stores
	// nothing.
	Complete(ctx context.Context, key, token string, rec Record, ttl time.Duration) error
	// Release gives the claim up without a result, so the next request
	// with the key runs. Callers release only a claim whose operation is
	// known not to have done anything that must not be done twice (it was
	// refused before it started); once the operation may have run, its key
	// is completed or left to become Unknown, never released. It returns
	// ErrNotOwner if token no longer owns the claim.
	Release(ctx context.Context, key, token string) error
}

// ErrNotOwner is returned by Store.Complete and Store.Release when the
// token no longer owns the key's claim: the claim expired and was taken
// over, or was already completed or released.
var ErrNotOwner = errors.New("idempotency: claim is no longer owned by this token")
