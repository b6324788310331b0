package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// The protocol that the HTTP middleware (watertighthttp) and the gRPC
// interceptor (contrib/watertightgrpc) share: what a claim's answer means
// for a request (Resolve), and how a result is saved once the handler may
// have run (Save). Each adapter only maps the answers to its wire.
//
// The rule both keep: once the handler may have run, its key is never
// released to a new execution while the outcome is not recorded. Save stores
// the result, or, when the store refuses it, a marker that reads "outcome
// unknown"; when the store fails, the claim is left to turn Unknown at the
// end of its lock. Store.Release is called only when the handler is known to
// have done nothing (the handler's explicit word, or a refusal before it
// ran).

// HeaderOutcome is the header field of the marker record (UnknownRecord),
// and the response header (HTTP) or metadata key (gRPC, in lower case) with
// which the adapters tell a client that a key's outcome is unknown
// (OutcomeUnknown) or forgotten (OutcomeForgotten).
const HeaderOutcome = "Idempotency-Outcome"

// Values of HeaderOutcome.
const (
	// OutcomeUnknown: the request with the key may have been applied, and
	// its outcome was not recorded.
	OutcomeUnknown = "unknown"
	// OutcomeForgotten: the key's result was dropped before its TTL to
	// make room; nothing was run for this request.
	OutcomeForgotten = "forgotten"
)

// UnknownStatus is the Status of the marker record (UnknownRecord): not a
// status of HTTP nor a code of gRPC, so no adapter can mistake it for a
// result.
const UnknownStatus = -1

// UnknownRecord returns the marker stored in place of a result that the
// store refused (ErrTooLarge, ErrFull) or that the adapter would not keep
// (larger than its response limit, a handler that panicked): Status
// UnknownStatus, the header HeaderOutcome: OutcomeUnknown, no body. A
// request that finds it is answered "outcome unknown" (Resolve), never run.
func UnknownRecord(fp string) Record {
	return Record{
		Fingerprint: fp,
		Status:      UnknownStatus,
		Header:      http.Header{HeaderOutcome: {OutcomeUnknown}},
		Created:     time.Now(),
	}
}

// IsUnknownRecord reports whether rec is the marker of UnknownRecord.
func IsUnknownRecord(rec *Record) bool {
	if rec == nil || rec.Status != UnknownStatus {
		return false
	}
	v := rec.Header[HeaderOutcome]
	return len(v) == 1 && v[0] == OutcomeUnknown
}

// Action is what a request must do given its key's claim (Resolve).
type Action uint8

const (
	// Run: the request holds the claim: run the handler, then Save.
	Run Action = iota + 1
	// Replay: send the stored result (Claim.Record); nothing runs.
	Replay
	// Wait: another request with the key is running: answer "in flight"
	// (retry later with the same key), or wait and claim again.
	Wait
	// Mismatch: the key was used for a different request; nothing runs.
	Mismatch
	// AnswerUnknown: the key's earlier request may have been applied, and
	// its outcome was not recorded; nothing runs. The client must check
	// the resource before sending the request again with a new key.
	AnswerUnknown
	// AnswerForgotten: the key's result was dropped early; nothing runs.
	// The key is too old to be replayed.
	AnswerForgotten
	// Invalid: the store's answer makes no sense (completed without a
	// record, an unknown state): treat it as a store failure.
	Invalid
)

// Resolve returns what a request with fingerprint fp must do, given c,
// what Store.Claim answered for its key. A Completed claim whose record is
// the marker of UnknownRecord resolves to AnswerUnknown; a key held or held
// for another fingerprint to Mismatch (Forgotten has no fingerprint to
// compare and resolves to AnswerForgotten).
func Resolve(c Claim, fp string) Action {
	stored := c.Fingerprint
	if stored == "" && c.Record != nil {
		stored = c.Record.Fingerprint
	}
	switch c.State {
	case Claimed:
		return Run
	case Completed:
		if c.Record == nil {
			return Invalid
		}
		if stored != fp {
			return Mismatch
		}
		if IsUnknownRecord(c.Record) {
			return AnswerUnknown
		}
		return Replay
	case InFlight:
		if stored != fp {
			return Mismatch
		}
		return Wait
	case Unknown:
		if stored != "" && stored != fp {
			return Mismatch
		}
		return AnswerUnknown
	case Forgotten:
		return AnswerForgotten
	}
	return Invalid
}

// Saved says what Save did with a result.
type Saved uint8

const (
	// SavedResult: the result is stored and replayed to later requests.
	SavedResult Saved = iota + 1
	// SavedUnknown: the result was not kept — too large for the adapter,
	// or refused by the store (ErrTooLarge, ErrFull) — and the marker of
	// UnknownRecord is stored in its place: later requests are answered
	// "outcome unknown".
	SavedUnknown
	// NotSaved: the store failed (or refused even the marker): nothing is
	// stored, and the claim is left as it is, so later requests get "in
	// flight" until the claim's lock ends, then "outcome unknown" until
	// the claim's ttl.
	NotSaved
	// LockLost: the claim's lock had ended before Save (ErrNotOwner): the
	// key already reads Unknown (or, past its ttl, may have been claimed
	// again).
	LockLost
)

// Save stores the result of a handler that ran under the claim token of
// key: rec, kept for ttl, or, if rec is nil (the adapter would not keep the
// result) or the store refuses it as too large or full, the marker of
// UnknownRecord(fp). It never releases the claim. The error is the store's,
// for the adapter to log: nil only with SavedResult.
func Save(ctx context.Context, s Store, key, token, fp string, rec *Record, ttl time.Duration) (Saved, error) {
	var err error
	if rec != nil {
		err = s.Complete(ctx, key, token, *rec, ttl)
		switch {
		case err == nil:
			return SavedResult, nil
		case errors.Is(err, ErrNotOwner):
			return LockLost, err
		case !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrFull):
			return NotSaved, err
		}
	}
	merr := s.Complete(ctx, key, token, UnknownRecord(fp), ttl)
	switch {
	case merr == nil:
		return SavedUnknown, err
	case errors.Is(merr, ErrNotOwner):
		return LockLost, merr
	}
	return NotSaved, errors.Join(err, merr)
}
