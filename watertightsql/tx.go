package watertightsql

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
)

// Tx is a transaction, with the context methods of *sql.Tx. It holds a
// permit of its key's share — its connection — from BeginTx until Commit or
// Rollback: a transaction left open keeps it, however long, so always end
// it (defer tx.Rollback(); a Rollback after Commit does nothing but return
// sql.ErrTxDone). When its context ends, database/sql rolls the
// transaction back, but the permit is given back only by Commit or
// Rollback.
//
// Each statement in it runs under the statement timeout (Config.QueryTimeout)
// and fails fast when its context's deadline leaves too little time; it
// does not pass the breaker on its own and is never retried alone (RunTx
// retries whole transactions). The transaction counts on the breaker as one
// call, from BeginTx to its end: its outcome is Commit's error, or, on
// Rollback, the error of the last statement that failed in it (a rollback
// after statements that all succeeded is a success).
//
// A Tx is safe for concurrent use, as *sql.Tx is.
type Tx struct {
	tx      *sql.Tx
	d       *DB
	l       lease
	ended   atomic.Bool
	lastErr atomic.Pointer[error] // the last statement error, for the breaker
}

// BeginTx starts a transaction, as sql.DB.BeginTx does, on a connection of
// the key's share, through the breaker (and retried if its context is
// marked idempotent and BEGIN fails with a transient error). ctx is used
// until the transaction ends, as database/sql uses it: it is not bounded by
// Config.QueryTimeout.
func (d *DB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	return run(d, ctx, func(ctx context.Context, sh *share, key string) (*Tx, error) {
		return d.beginTx(ctx, sh, key, opts)
	})
}

func (d *DB) beginTx(ctx context.Context, sh *share, key string, opts *sql.TxOptions) (*Tx, error) {
	l, err := d.begin(ctx, sh, key, false)
	if err != nil {
		return nil, err
	}
	tx, err := d.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, l.end(err)
	}
	return &Tx{tx: tx, d: d, l: l}, nil
}

// RunTx runs fn in a transaction: BeginTx, fn, then Commit if fn returned
// nil and Rollback otherwise (or if fn panics: the panic goes on after the
// rollback). It returns fn's error, or Commit's.
//
// When ctx is marked idempotent (retry.Idempotent) and the transaction
// fails with a transient error (Config.Retry.Retryable, IsTransient by
// default: a serialization failure, a deadlock, a lost connection...),
// RunTx rolls it back, gives its connection back, waits the retry
// policy's backoff, and runs fn again in a new transaction, as long as the
// retry policy allows. fn must then be safe to run more than once: every
// effect it has outside the transaction (a message sent, a counter in
// memory) happens again. fn should wrap the errors of its statements with
// %w, so that their SQLSTATE is seen.
func (d *DB) RunTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *Tx) error) error {
	_, err := run(d, ctx, func(ctx context.Context, sh *share, key string) (struct{}, error) {
		tx, err := d.beginTx(ctx, sh, key, opts)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, tx.do(fn)
	})
	return err
}

// do runs fn and commits, or rolls back when fn fails or panics.
func (tx *Tx) do(fn func(*Tx) error) (err error) {
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // fn panicked
		}
	}()
	err = fn(tx)
	done = true
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// note remembers the error of a statement in the transaction, for the
// breaker's outcome at Rollback.
func (tx *Tx) note(err error) {
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		tx.lastErr.Store(&err)
	}
}

// end gives the permit back once, with outcome err for the breaker.
func (tx *Tx) end(err error) {
	if tx.ended.CompareAndSwap(false, true) {
		tx.l.end(err)
	}
}

// Commit commits the transaction, as sql.Tx.Commit does, and gives the
// permit back.
func (tx *Tx) Commit() error {
	err := tx.tx.Commit()
	if errors.Is(err, sql.ErrTxDone) && tx.ended.Load() {
		return err // ended before: nothing to record
	}
	tx.end(err)
	return err
}

// Rollback aborts the transaction, as sql.Tx.Rollback does, and gives the
// permit back.
func (tx *Tx) Rollback() error {
	err := tx.tx.Rollback()
	var last error
	if p := tx.lastErr.Load(); p != nil {
		last = *p
	}
	tx.end(last)
	return err
}

// stmtCtx is the context of a statement in the transaction.
func (tx *Tx) stmtCtx(ctx context.Context) (lease, error) {
	key := tx.l.key
	c, cancel, err := tx.d.statementCtx(ctx, key, true)
	if err != nil {
		return lease{}, err
	}
	return lease{d: tx.d, ctx: c, cancel: cancel, key: key}, nil
}

// ExecContext runs a statement that returns no rows in the transaction, as
// sql.Tx.ExecContext does, under the statement timeout.
func (tx *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	l, err := tx.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	res, err := tx.tx.ExecContext(l.ctx, query, args...)
	err = l.end(err)
	tx.note(err)
	return res, err
}

// QueryContext runs a query in the transaction, as sql.Tx.QueryContext
// does, under the statement timeout, which covers reading the rows: close
// them.
func (tx *Tx) QueryContext(ctx context.Context, query string, args ...any) (*Rows, error) {
	l, err := tx.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.tx.QueryContext(l.ctx, query, args...)
	if err != nil {
		err = l.end(err)
		tx.note(err)
		return nil, err
	}
	return &Rows{rows: rows, l: l, tx: tx}, nil
}

// QueryRowContext runs a query that is expected to return at most one row
// in the transaction, as sql.Tx.QueryRowContext does.
func (tx *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *Row {
	rows, err := tx.QueryContext(ctx, query, args...)
	return &Row{rows: rows, err: err}
}

// Raw returns the *sql.Tx, for what Tx does not mirror (PrepareContext,
// StmtContext). End the transaction through the Tx, not the *sql.Tx, so
// that the permit is given back.
func (tx *Tx) Raw() *sql.Tx { return tx.tx }
