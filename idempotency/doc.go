// Package idempotency makes retried writes safe: a client sends one
// Idempotency-Key per logical operation on every attempt, and the server
// claims the key atomically, runs the operation once, stores the response
// and replays it for every later request with the key
// (draft-ietf-httpapi-idempotency-key-header).
//
// This package holds the key and fingerprint rules, the Store interface and
// the in-memory store; the HTTP middleware lives in watertighthttp and the
// Redis store in the contrib/redisstore module.
package idempotency
