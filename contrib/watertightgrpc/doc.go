// Package watertightgrpc brings watertight to gRPC: client interceptors
// with a circuit breaker and a bulkhead per method or per target, retries of
// idempotent calls under a retry budget and a deadline margin; and server
// interceptors that shed requests whose deadline is gone or too short, admit
// the rest per method through a bounded queue that respects criticality, and
// answer every rejection with RESOURCE_EXHAUSTED (or UNAVAILABLE) and the
// "overloaded, don't retry" pushback (grpc-retry-pushback-ms: -1).
//
// # Client
//
// UnaryClientInterceptor runs each call through, outermost first:
//
//	retry (idempotent calls only, with a budget) → breaker → bulkhead → attempt
//
// where each attempt sends the caller's remaining time less the margin of
// ClientConfig.Deadline as grpc-timeout, so that the server gives up first
// and its answer comes back in the margin, and fails fast with
// deadline.ErrTooShort when less than a millisecond would be sent. StreamClientInterceptor takes a breaker permit and a bulkhead permit
// when a stream is created and gives them back when the stream ends; streams
// are never retried.
//
// A call is retried only when it is idempotent: its method is listed in
// ClientConfig.Idempotent or named in ClientConfig.Methods (a per-method
// table of retry settings, which ParseServiceConfig reads from a gRPC
// service config's methodConfig), or its context is marked with
// retry.Idempotent or retry.WithIdempotencyKey, or its outgoing metadata
// carries an idempotency-key. With ClientConfig.Hedge, idempotent calls are hedged
// (package hedge) instead of retried: hedge → breaker → bulkhead → attempt.
//
// # Status codes
//
// ClassifyCode says how each code counts for a breaker and whether it is
// worth retrying: UNAVAILABLE and a DEADLINE_EXCEEDED that is not the
// caller's own deadline are transient; RESOURCE_EXHAUSTED is transient only
// with a non-negative grpc-retry-pushback-ms; the caller's own errors
// (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED...) are ignored by the
// breaker and never retried. A negative or malformed pushback is the
// "overloaded, don't retry" signal: the error then matches
// watertight.ErrOverloaded and no layer retries it.
//
// # Server
//
// UnaryServerInterceptor and StreamServerInterceptor read the criticality
// from the x-criticality metadata (the values of watertighthttp, whose
// Criticality type and context key they share, so that it is forwarded on
// the next hop, HTTP or gRPC), shed a request whose deadline has passed or
// leaves less than the Propagator's MinRemaining, optionally hold each client
// (ServerConfig.Client) to MaxPerClient requests in the server, and admit
// the rest through a per-method limit with a bounded queue;
// ServerInterceptors builds both with one shared state. A handler error that
// carries the overloaded signal (a downstream client that exhausted its
// retries) is answered with the negative pushback too, so that callers
// upstream do not multiply the retries.
//
// # Idempotency
//
// IdempotencyUnaryServerInterceptor is the server side of idempotency keys
// for unary calls, with watertighthttp.Idempotency's semantics and stores:
// the first call with an idempotency-key runs and its reply (or status) is
// stored; later calls with the key get it replayed (idempotent-replayed:
// true); a duplicate in flight is ABORTED (or waits), a key reused for
// another request FAILED_PRECONDITION, a store failure UNAVAILABLE with
// nothing run.
//
// # Events
//
// With a Listener, the interceptors emit watertight.Events with Source
// "grpc", each with a stable Code for metric labels and alerts: a shed
// request or bad input the codes of watertighthttp (CodeRouteFull
// "route_full" for a method at its limit, CodeDisplaced, CodeQueueGaveUp,
// CodeClientLimit, CodeClientOverflow, CodeDeadline, CodeUnknownCriticality),
// the client's retries the codes of package retry, idempotency the codes of
// package idempotency, and a call the client's own protections refused the
// code of the protection (circuit.CodeOpen, ...) or CodeBulkheadFull
// "bulkhead_full", CodeDeadlineTooShort "deadline_too_short", CodeRejected
// "rejected"; CodeFingerprintFailed "fingerprint_failed" and CodeReplayFailed
// "replay_failed" are the idempotency interceptor's own.
//
// The metadata keys are lower case, as gRPC requires; see the Metadata*
// constants. docs/grpc.md has the full tables and the measured overhead.
package watertightgrpc
