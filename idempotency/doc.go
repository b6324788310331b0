// Package idempotency makes retried writes safe: a client sends one
// Idempotency-Key per logical operation on every attempt, and the server
// claims the key atomically, runs the operation once, stores the response
// and replays it for every later request with the key
// (draft-ietf-httpapi-idempotency-key-header).
//
// The guarantee is at most once per key while the key is remembered: once
// an operation may have run, its key is never handed to another execution
// before the key's TTL ends. When the outcome could not be recorded (the
// process died, the store failed while the result was saved, the result
// was too large to keep), the key reads Unknown and is answered "outcome
// unknown" instead of being run again; a result a store dropped early reads
// Forgotten.
//
// This package holds the key and fingerprint rules, the Store interface,
// the in-memory store, the conformance suite (storetest) and the protocol
// the adapters share (Resolve, Save); the HTTP middleware lives in
// watertighthttp, the gRPC interceptor in contrib/watertightgrpc and the
// Redis store in the contrib/redisstore module.
//
// The adapters' events carry the codes defined here (watertight.Event.Code),
// the same on both wires: rejections CodeKeyMissing "key_missing",
// CodeInvalidKey "invalid_key", CodeRequestTooLarge "request_too_large",
// CodeBodyUnreadable "body_unreadable", CodeInFlight "in_flight",
// CodeMismatch "mismatch", CodeOutcomeUnknown "outcome_unknown",
// CodeForgotten "forgotten", CodeStoreUnavailable "store_unavailable"; the
// fallback CodeFailOpen "fail_open"; the state changes of a claim whose
// result was not stored CodeNotStored "not_stored", CodeStoreFailed
// "store_failed", CodeLockLost "lock_lost" (Saved.Code), and CodeReleased
// "released".
package idempotency
