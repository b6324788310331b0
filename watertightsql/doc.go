// Package watertightsql brings watertight to database/sql: a [DB] wraps a
// *sql.DB and gives each key of the context — a tenant, a query class — its
// own share of the pool's connections, so that a wave of slow analytical
// queries from one tenant holds at most that tenant's share, and the other
// tenants' transactional queries find their connections free. It adds a
// circuit breaker for the database, per-statement timeouts within the
// caller's deadline, and retries of transient errors for statements marked
// idempotent. It uses the standard library only, and works with any
// database/sql driver.
//
// # Shares
//
// [Config].Shares maps keys to a number of connections; the keys it does
// not list share [Config].DefaultShare (by default, the connections left).
// The shares add up to at most the pool's MaxOpenConns, which must be set
// (db.SetMaxOpenConns) before [New]. A statement takes a permit of its
// key's share before it gets a connection; when the share is full it waits
// up to [Config].MaxWait (100 ms by default), first come, first served, and
// then fails with a rejection matching bulkhead.ErrFull, without running.
// The key comes from the context: [WithKey], or [Config].Key.
//
// A permit is held as long as the connection is: for ExecContext and
// PingContext, the statement; for QueryContext, until the [Rows] are closed
// or read to their end; for QueryRowContext, until the [Row] is scanned;
// for BeginTx, until the [Tx] commits or rolls back.
//
// # Breaker, timeouts, retries
//
// One circuit breaker stands in front of the database ([Config].Breaker):
// it counts as failures only what says the server or the connection is in
// trouble ([Classify]: a lost connection, a server shutting down, a
// statement that ran out of time), not the callers' own errors (a syntax
// error, a constraint violation, a serialization failure). While it is
// open, statements fail at once with circuit.ErrOpen.
//
// Each statement runs under the sooner of the caller's deadline and
// [Config].QueryTimeout, and fails fast, with an error matching
// deadline.ErrTooShort, when the deadline leaves less than
// [Config].MinQueryTime.
//
// A statement is retried only when its context is marked idempotent
// (retry.Idempotent) and its error is transient ([IsTransient]:
// driver.ErrBadConn, SQLSTATE 40001, 40P01, class 08, 57P01, 57P02, 57P03,
// 53300). [DB.RunTx] retries whole transactions under the same rule.
//
// The order, outermost first, is the library's standard: deadline check →
// retry → breaker → share → statement timeout → database/sql.
//
// # Errors
//
// The rejections — a full share (bulkhead.ErrFull), an open breaker
// (circuit.ErrOpen, circuit.ErrHalfOpen), too little time
// (deadline.ErrTooShort), a key without a share ([ErrUnknownKey]) — satisfy
// watertight.IsRejection: nothing ran, and nothing is retried. A transient
// error of a statement not marked idempotent comes back as a
// *retry.SkippedError that matches retry.ErrNotIdempotent and the
// statement's error; one whose attempts all failed as a
// *retry.ExhaustedError. errors.As finds the driver's error in both.
//
// # Events
//
// With a [Config].Listener, the DB reports with Source "sql", Name
// Config.Name and Key the statement's key: EventBulkheadFull
// ([CodeShareFull]); EventRejected ([CodeUnknownKey],
// [CodeDeadlineTooShort], [CodeBreakerOpen], [CodeBreakerHalfOpenFull]);
// EventStateChange for the breaker (no Key; Code the circuit package's);
// EventRetryScheduled ([CodeRetryScheduled]), EventRetryExhausted
// ([CodeRetryExhausted]) and EventRetrySkipped ([CodeNotIdempotent],
// [CodeNoTime], [CodeNoBudget]). [DB.Snapshot] gives the shares, the
// breaker, the pool's statistics and the DB's counters, for metrics.
//
// See docs/consumers.md for sizing the shares, the retry rule and the
// pitfalls.
package watertightsql
