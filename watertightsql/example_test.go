package watertightsql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertightsql"
)

// exampleDriver is a tiny database/sql driver for the examples: every query
// returns one row holding 1, and the statement "UPDATE stock" fails with a
// serialization failure (SQLSTATE 40001) every other time it runs.
type exampleDriver struct{ updates atomic.Int64 }

func init() { sql.Register("watertightsql-example", &exampleDriver{}) }

func (d *exampleDriver) Open(string) (driver.Conn, error) { return exampleConn{d}, nil }

type exampleConn struct{ d *exampleDriver }

func (exampleConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (exampleConn) Close() error                        { return nil }
func (c exampleConn) Begin() (driver.Tx, error)         { return c, nil }
func (exampleConn) Commit() error                       { return nil }
func (exampleConn) Rollback() error                     { return nil }

func (c exampleConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	if q == "UPDATE stock" && c.d.updates.Add(1)%2 == 1 {
		return nil, serializationFailure{}
	}
	return driver.RowsAffected(1), nil
}

func (exampleConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &oneRow{}, nil
}

type oneRow struct{ done bool }

func (*oneRow) Columns() []string { return []string{"n"} }
func (*oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, int64(1)
	return nil
}

// serializationFailure is what pgx's *pgconn.PgError looks like to this
// package: an error with a SQLState method.
type serializationFailure struct{}

func (serializationFailure) Error() string {
	return "ERROR: could not serialize access (SQLSTATE 40001)"
}
func (serializationFailure) SQLState() string { return "40001" }

// A pool of four connections: one for the analytics tenant, three for the
// shop. While an analytics report holds its connection, the next report is
// refused at once (MaxWait -1 says not to wait), and the shop's queries run.
func Example() {
	pool, err := sql.Open("watertightsql-example", "")
	if err != nil {
		panic(err)
	}
	pool.SetMaxOpenConns(4) // required: the shares split these connections
	pool.SetMaxIdleConns(4)
	db, err := watertightsql.New(pool, watertightsql.Config{
		Shares:       map[string]int{"analytics": 1, "shop": 3},
		DefaultShare: -1, // no connection for other keys
		MaxWait:      -1,
	})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	analytics := watertightsql.WithKey(context.Background(), "analytics")
	report, err := db.QueryContext(analytics, "SELECT big report")
	if err != nil {
		panic(err)
	}
	_, err = db.QueryContext(analytics, "SELECT another report")
	fmt.Println("analytics:", err)

	var n int
	err = db.QueryRowContext(watertightsql.WithKey(context.Background(), "shop"), "SELECT 1").Scan(&n)
	fmt.Println("shop:", n, err)

	report.Close() // gives the analytics connection back
	s := db.Snapshot()
	fmt.Println(s.Shares[0].Key, "refused", s.Shares[0].Rejected)
	// Output:
	// analytics: bulkhead: analytics: full
	// shop: 1 <nil>
	// analytics refused 1
}

// RunTx retries a transaction that failed with a transient error (here a
// serialization failure) when its context is marked idempotent; unmarked,
// the error comes back with the reason it was not retried.
func ExampleDB_RunTx() {
	pool, err := sql.Open("watertightsql-example", "")
	if err != nil {
		panic(err)
	}
	pool.SetMaxOpenConns(2)
	db, err := watertightsql.New(pool, watertightsql.Config{})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	attempts := 0
	move := func(tx *watertightsql.Tx) error {
		attempts++
		_, err := tx.ExecContext(context.Background(), "UPDATE stock")
		return err
	}
	err = db.RunTx(retry.Idempotent(context.Background()), nil, move)
	fmt.Println("idempotent:", err, "after", attempts, "attempts")

	attempts = 0
	err = db.RunTx(context.Background(), nil, move)
	fmt.Println("not marked:", watertightsql.SQLState(err), errors.Is(err, retry.ErrNotIdempotent), "after", attempts, "attempt")
	// Output:
	// idempotent: <nil> after 2 attempts
	// not marked: 40001 true after 1 attempt
}
