package watertightsql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fakeDB is a database/sql driver whose statements say what they do, for
// tests that must run in a synctest bubble:
//
//	ok [label]                 succeed at once (one row, one column: 1)
//	sleep <duration> [label]   take that long (or until the context ends)
//	rows <n> [label]           n rows
//	sets <k> [label]           k result sets of one row each
//	fail <sqlstate> [label]    fail with that SQLSTATE
//	failn <n> <sqlstate> [l]   fail the first n runs of this exact statement, then succeed
//	badconn [label]            fail with driver.ErrBadConn
//
// The label, any word, names the statement in the counts: how many runs,
// and how many ran at once at most. While down is set, new connections are
// refused and statements on open ones fail as if the server had gone.
type fakeDB struct {
	mu      sync.Mutex
	runs    map[string]int // runs per label (and per statement, for failn)
	running map[string]int
	peak    map[string]int
	conns   int // open connections
	commits int
	rolls   int
	down    bool
}

func newFakeDB() *fakeDB {
	return &fakeDB{runs: map[string]int{}, running: map[string]int{}, peak: map[string]int{}}
}

// open returns a *sql.DB on f with maxOpen connections at most, and as many
// idle ones kept.
func (f *fakeDB) open(maxOpen int) *sql.DB {
	db := sql.OpenDB(f)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	return db
}

func (f *fakeDB) setDown(v bool) {
	f.mu.Lock()
	f.down = v
	f.mu.Unlock()
}

func (f *fakeDB) count(label string) (runs, peak int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[label], f.peak[label]
}

func (f *fakeDB) txCounts() (commits, rollbacks int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commits, f.rolls
}

// Connect implements driver.Connector.
func (f *fakeDB) Connect(context.Context) (driver.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, &netError{op: "dial", err: syscall.ECONNREFUSED}
	}
	f.conns++
	return &fakeConn{f: f}, nil
}

// Driver implements driver.Connector.
func (f *fakeDB) Driver() driver.Driver { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake: use sql.OpenDB with a fakeDB")
}

// netError is what a refused dial looks like.
type netError struct {
	op  string
	err error
}

func (e *netError) Error() string { return "fake: " + e.op + ": " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// pgError is a database error with a SQLSTATE, as pgx's *pgconn.PgError.
type pgError struct{ code string }

func (e *pgError) Error() string    { return "fake: ERROR (SQLSTATE " + e.code + ")" }
func (e *pgError) SQLState() string { return e.code }

type fakeConn struct {
	f      *fakeDB
	broken bool
	tx     bool
}

func (c *fakeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("fake: Prepare is not supported")
}

func (c *fakeConn) Close() error {
	c.f.mu.Lock()
	c.f.conns--
	c.f.mu.Unlock()
	return nil
}

func (c *fakeConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *fakeConn) BeginTx(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	c.tx = true
	return fakeTx{c}, nil
}

func (c *fakeConn) Ping(context.Context) error { return c.check() }

// IsValid implements driver.Validator: a broken connection is dropped.
func (c *fakeConn) IsValid() bool { return !c.broken }

// check fails a statement on a connection to a server that went away.
func (c *fakeConn) check() error {
	c.f.mu.Lock()
	down := c.f.down
	c.f.mu.Unlock()
	if down || c.broken {
		c.broken = true
		return io.ErrUnexpectedEOF
	}
	return nil
}

type fakeTx struct{ c *fakeConn }

func (t fakeTx) Commit() error {
	t.c.tx = false
	t.c.f.mu.Lock()
	t.c.f.commits++
	t.c.f.mu.Unlock()
	return t.c.check()
}

func (t fakeTx) Rollback() error {
	t.c.tx = false
	t.c.f.mu.Lock()
	t.c.f.rolls++
	t.c.f.mu.Unlock()
	return nil
}

func (c *fakeConn) ExecContext(ctx context.Context, query string, _ []driver.NamedValue) (driver.Result, error) {
	if _, err := c.run(ctx, query); err != nil {
		return nil, err
	}
	return driver.RowsAffected(1), nil
}

func (c *fakeConn) QueryContext(ctx context.Context, query string, _ []driver.NamedValue) (driver.Rows, error) {
	n, err := c.run(ctx, query)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(query, "sets ") {
		return &fakeSets{fakeRows: fakeRows{n: 1}, sets: n}, nil
	}
	return &fakeRows{n: n}, nil
}

// run does what query says and returns its number of rows.
func (c *fakeConn) run(ctx context.Context, query string) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	w := strings.Fields(query)
	if len(w) == 0 {
		return 0, errors.New("fake: empty statement")
	}
	label := w[len(w)-1]
	f := c.f
	f.mu.Lock()
	f.runs[label]++
	f.runs[query]++
	nth := f.runs[query]
	f.running[label]++
	f.peak[label] = max(f.peak[label], f.running[label])
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running[label]--
		f.mu.Unlock()
	}()
	arg := func(i int) string {
		if i < len(w) {
			return w[i]
		}
		return ""
	}
	switch w[0] {
	case "ok":
		return 1, nil
	case "rows", "sets":
		return strconv.Atoi(arg(1))
	case "sleep":
		d, err := time.ParseDuration(arg(1))
		if err != nil {
			return 0, err
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	case "fail":
		return 0, &pgError{code: arg(1)}
	case "failn":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			return 0, err
		}
		if nth <= n {
			return 0, &pgError{code: arg(2)}
		}
		return 1, nil
	case "badconn":
		return 0, driver.ErrBadConn
	}
	return 0, fmt.Errorf("fake: unknown statement %q", query)
}

type fakeRows struct{ n, i int }

func (r *fakeRows) Columns() []string { return []string{"n"} }
func (r *fakeRows) Close() error      { return nil }

func (r *fakeRows) Next(dest []driver.Value) error {
	if r.i >= r.n {
		return io.EOF
	}
	r.i++
	dest[0] = int64(r.i)
	return nil
}

// fakeSets is sets result sets of one row each.
type fakeSets struct {
	fakeRows
	sets int
}

func (r *fakeSets) HasNextResultSet() bool { return r.sets > 1 }

func (r *fakeSets) NextResultSet() error {
	if r.sets <= 1 {
		return io.EOF
	}
	r.sets--
	r.fakeRows = fakeRows{n: 1}
	return nil
}
