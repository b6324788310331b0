package watertightsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"
)

// nopConn is a driver connection whose statements do nothing, so that what
// is measured is database/sql's work and this package's.
type nopConn struct{}

func (nopConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (nopConn) Close() error                        { return nil }
func (nopConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }
func (nopConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(1), nil
}

type nopConnector struct{}

func (nopConnector) Connect(context.Context) (driver.Conn, error) { return nopConn{}, nil }
func (nopConnector) Driver() driver.Driver                        { return nil }

// benchDB is a DB over a pool of n connections that do nothing, with one
// share "tenant" of n-1 and the default share of 1.
func benchDB(tb testing.TB, n int, cfg Config) *DB {
	tb.Helper()
	pool := sql.OpenDB(nopConnector{})
	pool.SetMaxOpenConns(n)
	pool.SetMaxIdleConns(n)
	cfg.Shares = map[string]int{"tenant": n - 1}
	d, err := New(pool, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pool.Close() })
	return d
}

// acquireRelease is the path every statement takes around its driver call:
// the key, its share, the breaker's permit, the share's permit, the
// statement context, and giving them back.
func acquireRelease(d *DB, ctx context.Context) error {
	key := d.keyOf(ctx)
	sh, err := d.shareOf(key)
	if err != nil {
		return err
	}
	l, err := d.begin(ctx, sh, key, true)
	if err != nil {
		return err
	}
	return l.end(nil)
}

// BenchmarkAcquire is the acquire path alone (see acquireRelease), under a
// caller's deadline shorter than the statement timeout (so that no context
// is derived), sequential and from parallel goroutines: it must not
// allocate.
func BenchmarkAcquire(b *testing.B) {
	d := benchDB(b, 1<<16, Config{QueryTimeout: 2 * time.Hour})
	ctx, cancel := context.WithTimeout(WithKey(context.Background(), "tenant"), time.Hour)
	defer cancel()
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := acquireRelease(d, ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := acquireRelease(d, ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// Without a deadline the statement gets one of its own
	// (Config.QueryTimeout): context.WithTimeoutCause's allocations.
	b.Run("own-timeout/parallel", func(b *testing.B) {
		bg := WithKey(context.Background(), "tenant")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := acquireRelease(d, bg); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkExec is a whole ExecContext through the DB next to the same
// statement on the bare *sql.DB, over connections that do nothing: the
// DB's cost per statement (a real statement's round trip is tens of
// microseconds or more).
func BenchmarkExec(b *testing.B) {
	d := benchDB(b, 64, Config{QueryTimeout: 2 * time.Hour})
	ctx, cancel := context.WithTimeout(WithKey(context.Background(), "tenant"), time.Hour)
	defer cancel()
	b.Run("bare/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := d.Raw().ExecContext(ctx, "UPDATE t"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("watertightsql/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := d.ExecContext(ctx, "UPDATE t"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestAcquireDoesNotAllocate holds the acquire path to no allocation under a
// caller's deadline.
func TestAcquireDoesNotAllocate(t *testing.T) {
	d := benchDB(t, 8, Config{})
	ctx, cancel := context.WithTimeout(WithKey(context.Background(), "tenant"), 10*time.Second)
	defer cancel()
	if n := testing.AllocsPerRun(1000, func() {
		if err := acquireRelease(d, ctx); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("the acquire path allocates %v times per statement, want 0", n)
	}
}
