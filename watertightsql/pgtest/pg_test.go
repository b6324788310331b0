package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
	"github.com/watertight-go/watertight/watertightsql"
)

// The acceptance test of the shares, seed 004's case: a tenant running slow
// analytical queries at ten times its share leaves another tenant's
// transactional statements at >= 99.9% success and a p99 within 1.5 times
// the one they had alone; and the same load on the bare *sql.DB starves
// them, which shows that the test can fail.
//
// This machine is shared: its latency tail moves by several milliseconds
// from one second to the next. So the quiet and the flooded measurements
// alternate, in rounds, and each side's p99 is taken over all its rounds;
// and the p99 comparison, the one figure that such noise can tip, is made
// up to three times (each time quiet first, then flooded). Any failed shop
// statement fails the test at once, and the bare pool's starvation is
// checked once: it is hundreds of milliseconds, not a question of noise.
func TestAnalyticsFloodLeavesOtherTenantsAlone(t *testing.T) {
	const (
		poolSize       = 8
		analyticsShare = 2
		shopShare      = 4
		shopWorkers    = shopShare // the shop stays within its share
		floodWorkers   = 10 * analyticsShare
		rounds         = 6
		roundFor       = 400 * time.Millisecond
		bareFor        = 3 * time.Second
		maxOps         = 20000
		interval       = 2 * time.Millisecond // per shop worker: 2,000 statements a second in all
		opTimeout      = time.Second
		report         = "SELECT pg_sleep(0.2)" // a slow analytical query
	)
	admin := openPool(t, 2, unique("wt_admin"), nil)
	accounts := newTable(t, admin, "wt_accounts", "id int PRIMARY KEY, balance bigint NOT NULL",
		"INSERT INTO %s SELECT g, 0 FROM generate_series(1, 1000) g")
	update := fmt.Sprintf("UPDATE %s SET balance = balance + 1 WHERE id = $1", accounts)

	pool := openPool(t, poolSize, unique("wt_shares"), nil)
	db, err := watertightsql.New(pool, watertightsql.Config{
		Shares: map[string]int{"analytics": analyticsShare, "shop": shopShare}, // and 2 for other keys
	})
	if err != nil {
		t.Fatal(err)
	}
	shop := func(ctx context.Context, w, i int) error {
		_, err := db.ExecContext(watertightsql.WithKey(ctx, "shop"), update, 1+rand.IntN(1000))
		return err
	}
	analytics := func() error {
		ctx, cancel := context.WithTimeout(watertightsql.WithKey(context.Background(), "analytics"), 5*time.Second)
		defer cancel()
		_, err := db.ExecContext(ctx, report)
		return err
	}
	measure(shopWorkers, 300*time.Millisecond, 200, interval, opTimeout, shop) // connections opened, caches warm

	var quiet, loaded phase
	var reports, refused int64
	for attempt := 1; ; attempt++ {
		quiet, loaded, reports, refused = phase{}, phase{}, 0, 0
		for range rounds {
			quiet.add(measure(shopWorkers, roundFor, maxOps, interval, opTimeout, shop))
			stop := flood(floodWorkers, analytics)
			waitFor(t, "the analytics share to fill", func() bool {
				s := db.Snapshot().Shares[0]
				return s.Active == analyticsShare && s.Waiting > 0
			})
			loaded.add(measure(shopWorkers, roundFor, maxOps, interval, opTimeout, shop))
			ok, no := stop()
			reports, refused = reports+ok, refused+no
		}
		t.Logf("attempt %d: shop alone:            %v", attempt, quiet)
		t.Logf("attempt %d: shop during the flood: %v (analytics: %d reports ran, %d refused)", attempt, loaded, reports, refused)
		if quiet.failed != 0 || loaded.failed != 0 || quiet.ops < 1000 || loaded.ops < 1000 {
			t.Fatalf("shop statements failed or too few ran (first errors: %v; %v)", quiet.firstErr, loaded.firstErr)
		}
		if float64(loaded.quantile(0.99)) <= 1.5*float64(quiet.quantile(0.99)) || attempt == 3 {
			break
		}
	}
	if reports == 0 || refused == 0 {
		t.Errorf("the analytics flood ran %d reports and had %d refused: it did not fill its share", reports, refused)
	}
	if s := loaded.success(); s < 0.999 {
		t.Errorf("shop success during the flood %.3f%%, want >= 99.9%%", 100*s)
	}
	if q, l := quiet.quantile(0.99), loaded.quantile(0.99); float64(l) > 1.5*float64(q) {
		t.Errorf("shop p99 during the flood %v, more than 1.5 × its quiet p99 %v", l, q)
	}
	if st := db.Breaker().State(); st != circuit.Closed {
		t.Errorf("the breaker is %v after the flood: refusals by a full share must not count", st)
	}

	// The same flood on a bare pool of the same size.
	raw := openPool(t, poolSize, unique("wt_bare"), nil)
	stop := flood(floodWorkers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := raw.ExecContext(ctx, report)
		return err
	})
	waitFor(t, "the bare pool to fill", func() bool { return raw.Stats().WaitCount > 0 })
	bare := measure(shopWorkers, bareFor, maxOps, interval, opTimeout, func(ctx context.Context, w, i int) error {
		_, err := raw.ExecContext(ctx, update, 1+rand.IntN(1000))
		return err
	})
	stop()
	t.Logf("shop during the flood, bare pool: %v", bare)
	if q, b := quiet.quantile(0.99), bare.quantile(0.99); float64(b) <= 1.5*float64(q) && bare.success() >= 0.999 {
		t.Errorf("on the bare pool the shop kept %.3f%% success and a p99 of %v (quiet %v): the flood did not starve it, so this test proves nothing", 100*bare.success(), b, q)
	}
}

// proxied returns a pool of n connections whose sessions go through p.
func proxied(t *testing.T, p *proxy, n int) *sql.DB {
	return openPool(t, n, unique("wt_proxied"), func(c *pgx.ConnConfig) {
		c.Host, c.Port, c.Fallbacks = "127.0.0.1", p.port(), nil
		c.ConnectTimeout = 2 * time.Second
	})
}

// stateChanges is a Listener that passes the breaker's state changes on.
type stateChanges chan watertight.Event

func (c stateChanges) OnEvent(e watertight.Event) {
	if e.Kind == watertight.EventStateChange {
		c <- e
	}
}

func (c stateChanges) next(t *testing.T, to string) {
	t.Helper()
	select {
	case e := <-c:
		if e.To != to {
			t.Fatalf("the breaker went %s → %s (%s), want → %s", e.From, e.To, e.Reason, to)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the breaker did not go %s", to)
	}
}

// The breaker opens when the database goes away (its host's connections
// cut, new ones refused), refuses at once while open, and closes again when
// the database is back.
func TestBreakerOpensWhenPostgresGoesAway(t *testing.T) {
	p := startProxy(t)
	changes := make(stateChanges, 16)
	db, err := watertightsql.New(proxied(t, p, 4), watertightsql.Config{
		Listener: changes,
		Breaker: circuit.Config{
			WindowSize: 10, MinCalls: 5, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 1,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ping := func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
	for range 10 {
		if err := ping(); err != nil {
			t.Fatal(err)
		}
	}
	p.down()
	failures := 0
	for ; db.Breaker().State() == circuit.Closed && failures < 20; failures++ {
		err := ping()
		if err == nil || watertight.IsRejection(err) {
			t.Fatalf("statement %d with the database gone: %v, want its error", failures+1, err)
		}
		if watertightsql.Classify(ctx, err) != watertight.Failure {
			t.Fatalf("%v is not classified as a failure of the database", err)
		}
	}
	changes.next(t, "open")
	t.Logf("opened after %d failed statements", failures)
	if failures > 5 {
		t.Errorf("the breaker took %d failures to open, want 5 (MinCalls, all failing)", failures)
	}
	start := time.Now()
	err = ping()
	if !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("while open: %v, want circuit.ErrOpen", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("a refusal by the open breaker took %v", d)
	}
	p.up()
	changes.next(t, "half-open")
	if err := ping(); err != nil {
		t.Fatalf("trial statement with the database back: %v", err)
	}
	changes.next(t, "closed")
}

// Sessions that the server ends (pg_terminate_backend: SQLSTATE 57P01) are
// transient: an idempotent statement is retried on a new connection, one
// not marked is not, and both count as failures of the database.
func TestTerminatedSessionIsRetriedWhenIdempotent(t *testing.T) {
	admin := openPool(t, 2, unique("wt_admin"), nil)
	app := unique("wt_term")
	db, err := watertightsql.New(openPool(t, 2, app, nil), watertightsql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idempotent), func(t *testing.T) {
			s := unique("wt_seq")
			exec(t, admin, "CREATE SEQUENCE "+s)
			t.Cleanup(func() { exec(t, admin, "DROP SEQUENCE IF EXISTS "+s) })
			// Sleeps on its first run only: the run the test ends.
			stmt := fmt.Sprintf("SELECT pg_sleep(CASE WHEN nextval('%s') = 1 THEN 30 ELSE 0 END)", s)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if idempotent {
				ctx = retry.Idempotent(ctx)
			}
			before := db.Snapshot()
			errc := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(ctx, stmt)
				errc <- err
			}()
			waitFor(t, "the statement to run", func() bool {
				var n int
				err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_sleep%' AND state = 'active'", app).Scan(&n)
				return err == nil && n == 1
			})
			if n := terminate(t, admin, app); n == 0 {
				t.Fatal("no session to terminate")
			}
			err := <-errc
			after := db.Snapshot()
			var runs int
			if err := admin.QueryRowContext(ctx, "SELECT last_value FROM "+s).Scan(&runs); err != nil {
				t.Fatal(err)
			}
			var pgErr *pgconn.PgError
			if idempotent {
				if err != nil || runs != 2 || after.Retries != before.Retries+1 {
					t.Fatalf("got %v after %d runs and %d retries; want success after 2 runs and 1 retry", err, runs, after.Retries-before.Retries)
				}
			} else {
				if !errors.As(err, &pgErr) || pgErr.Code != "57P01" || !errors.Is(err, retry.ErrNotIdempotent) || runs != 1 {
					t.Fatalf("got %v after %d runs; want SQLSTATE 57P01, not retried (retry.ErrNotIdempotent)", err, runs)
				}
			}
			if f := after.Breaker.Failures - before.Breaker.Failures; f != 1 {
				t.Errorf("the breaker counted %d failures, want 1 (the terminated session)", f)
			}
		})
	}
}

// Two serializable transactions that conflict: the one that loses gets
// SQLSTATE 40001. Marked idempotent, RunTx runs it again and it commits;
// not marked, its error comes back and it ran once.
func TestSerializationFailureRetriedWhenIdempotent(t *testing.T) {
	admin := openPool(t, 2, unique("wt_admin"), nil)
	db, err := watertightsql.New(openPool(t, 2, unique("wt_serial"), nil), watertightsql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	serializable := &sql.TxOptions{Isolation: sql.LevelSerializable}
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idempotent), func(t *testing.T) {
			counters := newTable(t, admin, "wt_counters", "id int PRIMARY KEY, n int NOT NULL", "INSERT INTO %s VALUES (1, 0)")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if idempotent {
				ctx = retry.Idempotent(ctx)
			}
			attempts := 0
			err := db.RunTx(ctx, serializable, func(tx *watertightsql.Tx) error {
				attempts++
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT n FROM "+counters+" WHERE id = 1").Scan(&n); err != nil {
					return fmt.Errorf("read: %w", err)
				}
				if attempts == 1 { // another session commits a change in between
					exec(t, admin, "UPDATE "+counters+" SET n = n + 1 WHERE id = 1")
				}
				if _, err := tx.ExecContext(ctx, "UPDATE "+counters+" SET n = $1 WHERE id = 1", n+10); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				return nil
			})
			var n int
			if err := admin.QueryRowContext(ctx, "SELECT n FROM "+counters+" WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if idempotent {
				if err != nil || attempts != 2 || n != 11 {
					t.Fatalf("got %v after %d attempts, n = %d; want success after 2 attempts and n = 11", err, attempts, n)
				}
				return
			}
			if watertightsql.SQLState(err) != "40001" || !errors.Is(err, retry.ErrNotIdempotent) || attempts != 1 || n != 1 {
				t.Fatalf("got %v after %d attempts, n = %d; want SQLSTATE 40001 not retried, n = 1", err, attempts, n)
			}
		})
	}
	if f := db.Breaker().Snapshot().Failures; f != 0 {
		t.Errorf("the breaker counted %d failures: a serialization failure is not the server's", f)
	}
}

// A statement that outlives Config.QueryTimeout fails with the statement
// timeout, which counts on the breaker; the server stops the statement (pgx
// sends it a cancel request), and the pool is left as it was. By default pgx
// also closes that connection; with its CancelRequestContextWatcherHandler
// it keeps it.
func TestQueryTimeoutOnTheServer(t *testing.T) {
	admin := openPool(t, 2, unique("wt_admin"), nil)
	for _, cancelRequest := range []bool{false, true} {
		t.Run(fmt.Sprint("cancel request=", cancelRequest), func(t *testing.T) {
			app := unique("wt_timeout")
			pool := openPool(t, 2, app, func(c *pgx.ConnConfig) {
				if cancelRequest {
					c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
						return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Second}
					}
				}
			})
			db, err := watertightsql.New(pool, watertightsql.Config{QueryTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = db.ExecContext(context.Background(), "SELECT pg_sleep(5)")
			took := time.Since(start)
			if !errors.Is(err, timeout.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the statement timeout", err)
			}
			if took > 2*time.Second {
				t.Errorf("the statement took %v to end, want about 200ms", took)
			}
			sleeping := func() int {
				var n int
				if err := admin.QueryRowContext(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_sleep(5)%' AND state = 'active'", app).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			waitFor(t, "the server to stop the statement", func() bool { return sleeping() == 0 })
			s := db.Snapshot()
			if s.TimedOut != 1 || s.Breaker.Failures != 1 || s.Pool.InUse != 0 || s.Shares[0].Active != 0 {
				t.Errorf("after the timeout: TimedOut %d, breaker failures %d, pool in use %d, permits held %d; want 1, 1, 0, 0",
					s.TimedOut, s.Breaker.Failures, s.Pool.InUse, s.Shares[0].Active)
			}
			var one int
			if err := db.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after the timeout: %v", err)
			}
			if err := db.PingContext(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The callers' own errors reach them as pgx's errors, with their SQLSTATE,
// and do not count on the breaker.
func TestCallersErrorsDoNotCount(t *testing.T) {
	admin := openPool(t, 2, unique("wt_admin"), nil)
	items := newTable(t, admin, "wt_items", "id int PRIMARY KEY", "INSERT INTO %s VALUES (1)")
	db, err := watertightsql.New(openPool(t, 2, unique("wt_callers"), nil), watertightsql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 30 {
		_, err := db.ExecContext(ctx, "INSERT INTO "+items+" VALUES (1)")
		if watertightsql.SQLState(err) != "23505" {
			t.Fatalf("duplicate key: %v", err)
		}
		if _, err := db.ExecContext(ctx, "SELEC 1"); watertightsql.SQLState(err) != "42601" {
			t.Fatalf("syntax error: %v", err)
		}
		var id int
		if err := db.QueryRowContext(ctx, "SELECT id FROM "+items+" WHERE id = 2").Scan(&id); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("no row: %v", err)
		}
	}
	if s := db.Breaker().Snapshot(); s.State != circuit.Closed || s.Failures != 0 {
		t.Errorf("breaker after the callers' errors: %v with %d failures", s.State, s.Failures)
	}
}
