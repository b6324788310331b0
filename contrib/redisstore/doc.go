// Package redisstore is an idempotency.Store kept in Redis, for several
// server instances that share one Redis: whichever instance a request (or
// its retry) reaches, a key is claimed once, its operation runs once and
// its stored response is replayed by every instance.
//
// Each idempotency key is one Redis string, KeyPrefix followed by the key,
// holding either a claim (the owner's fencing token, the end of its lock and
// the request's fingerprint) or a completed record (status, headers, body,
// fingerprint, creation time). Claim, Complete and Release are each one Lua
// script, so every operation is atomic in Redis, and every expiry is timed
// by a Redis TTL: a claim's key lives for the result TTL, and its lock ends
// when the key's PTTL comes down to the lock end written in it — from then
// on the key reads idempotency.Unknown, never claimed again until Redis
// drops it; a record lives for its TTL stretched by up to 5%. Nothing is
// cached in the process. See docs/idempotency-redis.md for the key layout, the scripts
// and the behaviour when Redis fails.
//
// The store never hides a Redis failure: every operation returns the error,
// and the idempotency middleware fails closed on it by default (nothing
// runs, and the client is told it is safe to retry with the same key).
// Give the client ContextTimeoutEnabled (see New), so that a hung Redis
// costs a request no more than the middleware's StoreTimeout.
//
// This package is its own module (github.com/watertight-go/watertight/contrib/redisstore)
// so that the watertight module keeps to the standard library.
package redisstore
