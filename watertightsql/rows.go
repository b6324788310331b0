package watertightsql

import (
	"database/sql"
	"errors"
	"sync/atomic"
)

// Rows is the result of a query, with the methods of *sql.Rows. It holds a
// permit of its key's share, and its statement's context, until it is
// closed or read to its end (Next returns false with no result set left, as
// *sql.Rows closes itself then): close it, as you would close *sql.Rows.
// Rows from a transaction hold no permit (the transaction does).
//
// Rows is not safe for concurrent use, any more than *sql.Rows is; Close may
// be called more than once.
type Rows struct {
	rows  *sql.Rows
	l     lease
	tx    *Tx // the transaction the rows belong to, if any
	ended atomic.Bool
}

// Next prepares the next row for Scan, as sql.Rows.Next does. When it
// returns false and the rows have closed themselves (no result set left, or
// an error), the permit is given back.
func (r *Rows) Next() bool {
	if r.rows.Next() {
		return true
	}
	r.endIfClosed()
	return false
}

// NextResultSet prepares the next result set, as sql.Rows.NextResultSet
// does. When there is none, the rows are closed and the permit given back.
func (r *Rows) NextResultSet() bool {
	if r.rows.NextResultSet() {
		return true
	}
	r.finish()
	return false
}

// endIfClosed gives the permit back if *sql.Rows has closed itself: its
// Columns method then fails, without allocating.
func (r *Rows) endIfClosed() {
	if r.ended.Load() {
		return
	}
	if _, err := r.rows.Columns(); err != nil {
		r.finish()
	}
}

// finish ends the lease once, with the rows' error as the outcome.
func (r *Rows) finish() {
	if !r.ended.CompareAndSwap(false, true) {
		return
	}
	err := r.l.end(r.rows.Err())
	if r.tx != nil {
		r.tx.note(err)
	}
}

// Scan copies the columns of the current row into dest, as sql.Rows.Scan
// does.
func (r *Rows) Scan(dest ...any) error { return r.rows.Scan(dest...) }

// Err returns the error met during iteration, as sql.Rows.Err does; when
// the statement timeout (Config.QueryTimeout) ended the statement, the
// error matches timeout.ErrTimeout too.
func (r *Rows) Err() error { return r.l.wrap(r.rows.Err()) }

// Close closes the rows, as sql.Rows.Close does, and gives the permit back.
func (r *Rows) Close() error {
	err := r.rows.Close()
	r.finish()
	return err
}

// Columns returns the column names, as sql.Rows.Columns does.
func (r *Rows) Columns() ([]string, error) { return r.rows.Columns() }

// ColumnTypes returns column information, as sql.Rows.ColumnTypes does.
func (r *Rows) ColumnTypes() ([]*sql.ColumnType, error) { return r.rows.ColumnTypes() }

// Raw returns the *sql.Rows. Close the Rows, not the *sql.Rows, so that
// the permit is given back.
func (r *Rows) Raw() *sql.Rows { return r.rows }

// Row is the result of QueryRowContext, with the methods of *sql.Row.
type Row struct {
	rows *Rows
	err  error
}

// errRowRawBytes is sql.Row.Scan's answer to a *sql.RawBytes destination,
// whose memory would not outlive the Scan.
var errRowRawBytes = errors.New("sql: RawBytes isn't allowed on Row.Scan")

// Scan copies the columns of the first row into dest, closes the rows and
// gives the permit back, as sql.Row.Scan does: it returns sql.ErrNoRows
// when the query selected no row, and the query's error when it failed.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	for _, dp := range dest {
		if _, ok := dp.(*sql.RawBytes); ok {
			return errRowRawBytes
		}
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// Err returns the query's error without scanning, as sql.Row.Err does. A
// Row whose query succeeded still holds its permit until Scan.
func (r *Row) Err() error { return r.err }
