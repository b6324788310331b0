package watertightsql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
	"github.com/watertight-go/watertight/watertightsql"
)

// newDB wraps a pool of maxOpen connections to f; the DB is closed at the
// end of the test.
func newDB(t *testing.T, f *fakeDB, maxOpen int, cfg watertightsql.Config) *watertightsql.DB {
	t.Helper()
	db, err := watertightsql.New(f.open(maxOpen), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// recorder is a Listener that keeps the events.
type recorder struct {
	mu  sync.Mutex
	evs []watertight.Event
}

func (r *recorder) OnEvent(e watertight.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

// codes returns the codes of the events of kind k, in order.
func (r *recorder) codes(k watertight.EventKind) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.evs {
		if e.Kind == k {
			out = append(out, e.Code)
		}
	}
	return out
}

func (r *recorder) all() []watertight.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watertight.Event(nil), r.evs...)
}

func key(k string) context.Context { return watertightsql.WithKey(context.Background(), k) }

func TestNewValidates(t *testing.T) {
	f := newFakeDB()
	unlimited := sql.OpenDB(f)
	defer unlimited.Close()
	if _, err := watertightsql.New(unlimited, watertightsql.Config{}); err == nil || !strings.Contains(err.Error(), "SetMaxOpenConns") {
		t.Fatalf("New on a pool without MaxOpenConns: got %v, want an error that says to call SetMaxOpenConns", err)
	}
	if _, err := watertightsql.New(nil, watertightsql.Config{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	pool := f.open(4)
	defer pool.Close()
	for _, c := range []struct {
		name string
		cfg  watertightsql.Config
		want string
	}{
		{"empty key", watertightsql.Config{Shares: map[string]int{"": 1}}, "empty key"},
		{"zero share", watertightsql.Config{Shares: map[string]int{"a": 0}}, `Shares["a"] must be at least 1`},
		{"over the pool", watertightsql.Config{Shares: map[string]int{"a": 3, "b": 2}}, "add up to 5 connections, more than the pool's MaxOpenConns (4)"},
		{"nothing left", watertightsql.Config{Shares: map[string]int{"a": 2, "b": 2}}, "none is left for keys without a share"},
		{"default too big", watertightsql.Config{Shares: map[string]int{"a": 2}, DefaultShare: 3}, "Config.DefaultShare (3) add up to 5"},
		{"bad breaker", watertightsql.Config{Breaker: circuit.Config{WindowSize: -1}}, "Config.Breaker"},
		{"bad retry", watertightsql.Config{Retry: retry.Config{MaxAttempts: -1}}, "Config.Retry"},
	} {
		_, err := watertightsql.New(pool, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	for _, cfg := range []watertightsql.Config{
		{},
		{Shares: map[string]int{"a": 2, "b": 2}, DefaultShare: -1},
		{Shares: map[string]int{"a": 1}, DefaultShare: 1}, // 2 connections left over for Raw
	} {
		if _, err := watertightsql.New(pool, cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// A key whose statements are slow holds at most its share: the rest of
// its statements wait MaxWait and are refused, and another key's
// statements run at once.
func TestShareIsolatesKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		rec := &recorder{}
		db := newDB(t, f, 4, watertightsql.Config{
			Name: "orders", Shares: map[string]int{"analytics": 2, "shop": 2}, DefaultShare: -1,
			MaxWait: 100 * time.Millisecond, Listener: rec,
		})
		start := time.Now()
		errs := make([]error, 10)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { _, errs[i] = db.ExecContext(key("analytics"), "sleep 1s analytics") })
		}
		synctest.Wait() // two run, eight wait
		if s := db.Snapshot().Shares[0]; s.Key != "analytics" || s.Active != 2 || s.Waiting != 8 {
			t.Fatalf("analytics share: %+v, want 2 active and 8 waiting", s)
		}
		if _, err := db.ExecContext(key("shop"), "ok shop"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the shop's statement took %v behind the analytics flood, want 0", d)
		}
		wg.Wait()
		ok, full := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, bulkhead.ErrFull) && watertight.IsRejection(err) && watertight.IsSaturation(err):
				full++
				if !strings.Contains(err.Error(), "orders/analytics") {
					t.Errorf("the rejection %q does not name the share", err)
				}
			default:
				t.Errorf("unexpected error %v", err)
			}
		}
		if ok != 2 || full != 8 {
			t.Errorf("%d ran and %d were refused, want 2 and 8", ok, full)
		}
		if runs, peak := f.count("analytics"); runs != 2 || peak != 2 {
			t.Errorf("the database ran %d analytics statements, %d at once; want 2 and 2", runs, peak)
		}
		if got := rec.codes(watertight.EventBulkheadFull); len(got) != 8 || got[0] != watertightsql.CodeShareFull {
			t.Errorf("share-full events: %v, want 8 × %q", got, watertightsql.CodeShareFull)
		}
		for _, e := range rec.all() {
			if e.Kind == watertight.EventBulkheadFull && (e.Source != "sql" || e.Name != "orders" || e.Key != "analytics") {
				t.Errorf("event %+v: want Source sql, Name orders, Key analytics", e)
			}
		}
		// The refused statements did not count against the database.
		if s := db.Breaker().Snapshot(); s.Failures != 0 || s.State != circuit.Closed {
			t.Errorf("breaker after the flood: %+v", s)
		}
	})
}

// The same flood on the bare *sql.DB: the other key's statement waits for
// a connection behind the slow ones. This is what the shares are for.
func TestWithoutSharesAFloodStarvesTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		pool := f.open(4)
		defer pool.Close()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { _, _ = pool.ExecContext(context.Background(), "sleep 1s analytics") })
		}
		synctest.Wait()
		start := time.Now()
		if _, err := pool.ExecContext(context.Background(), "ok shop"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("the shop's statement took %v on the bare pool; want it to wait for an analytics statement (1s)", d)
		}
		wg.Wait()
	})
}

// A statement waits for a permit of its share up to MaxWait, first come,
// first served.
func TestShareWaitsThenRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: time.Second})
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := db.ExecContext(key("a"), "sleep 400ms first"); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		start := time.Now()
		if _, err := db.ExecContext(key("a"), "ok second"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 400*time.Millisecond {
			t.Errorf("waited %v for the share, want 400ms", d)
		}
		wg.Wait()
	})
}

func TestDefaultShare(t *testing.T) {
	f := newFakeDB()
	// Two connections are left for every key not in Shares, together.
	db := newDB(t, f, 3, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: -1})
	ctx := context.Background()
	r1, err := db.QueryContext(key("x"), "rows 1 x")
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := db.QueryContext(ctx, "rows 1 nokey") // no key: the default share too
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if _, err := db.ExecContext(key("y"), "ok y"); !errors.Is(err, bulkhead.ErrFull) || !strings.Contains(err.Error(), watertightsql.DefaultShareName) {
		t.Fatalf("a third key outside Shares: got %v, want the default share full", err)
	}
	if _, err := db.ExecContext(key("a"), "ok a"); err != nil {
		t.Fatalf("key a has its own share: %v", err)
	}
	s := db.Snapshot()
	if len(s.Shares) != 2 || s.Shares[0].Key != "a" || s.Shares[1].Default != true || s.Shares[1].MaxConcurrent != 2 || s.Shares[1].Active != 2 {
		t.Errorf("snapshot shares: %+v", s.Shares)
	}

	// A negative DefaultShare refuses keys without a share.
	rec := &recorder{}
	strict := newDB(t, f, 3, watertightsql.Config{Shares: map[string]int{"a": 1}, DefaultShare: -1, Listener: rec})
	_, err = strict.ExecContext(key("x"), "ok x")
	if !errors.Is(err, watertightsql.ErrUnknownKey) || !watertight.IsRejection(err) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("unknown key: got %v, want ErrUnknownKey naming the key", err)
	}
	if got := rec.codes(watertight.EventRejected); len(got) != 1 || got[0] != watertightsql.CodeUnknownKey {
		t.Errorf("events: %v", got)
	}
	if strict.Snapshot().UnknownKeys != 1 {
		t.Errorf("UnknownKeys = %d, want 1", strict.Snapshot().UnknownKeys)
	}
}

// Config.Key chooses the key from the context.
func TestKeyFunc(t *testing.T) {
	type tenantKey struct{}
	f := newFakeDB()
	db := newDB(t, f, 2, watertightsql.Config{
		Shares: map[string]int{"t1": 1}, DefaultShare: -1, MaxWait: -1,
		Key: func(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s },
	})
	ctx := context.WithValue(context.Background(), tenantKey{}, "t1")
	rows, err := db.QueryContext(ctx, "rows 1 t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ok t1"); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("second statement of t1: %v, want its share full", err)
	}
	rows.Close()
	if _, err := db.ExecContext(key("t1"), "ok t1"); !errors.Is(err, watertightsql.ErrUnknownKey) {
		t.Errorf("WithKey is not the key when Config.Key is set: got %v", err)
	}
}

// Rows hold their permit until closed, or read to their end.
func TestRowsHoldThePermit(t *testing.T) {
	f := newFakeDB()
	db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: -1})
	ctx := key("a")
	active := func() int { return db.Snapshot().Shares[0].Active }

	rows, err := db.QueryContext(ctx, "rows 3 a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.QueryContext(ctx, "rows 1 a"); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("query while rows are open: %v, want the share full", err)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rows.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
	if active() != 0 {
		t.Fatalf("%d permits held after Close", active())
	}

	// Read to the end without Close: *sql.Rows closes itself, and so the
	// permit is given back.
	rows, err = db.QueryContext(ctx, "rows 3 a")
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	if err := rows.Err(); err != nil || sum != 6 {
		t.Fatalf("read %d, err %v; want 1+2+3", sum, err)
	}
	if active() != 0 {
		t.Fatalf("%d permits held after reading to the end", active())
	}
	if cols, err := rows.Columns(); err == nil {
		t.Errorf("Columns after the end: %v, want the closed error", cols)
	}
	rows.Close()

	// A Row holds it until Scan.
	row := db.QueryRowContext(ctx, "rows 1 a")
	if row.Err() != nil || active() != 1 {
		t.Fatalf("Row: err %v, %d held; want nil and 1", row.Err(), active())
	}
	var n int
	if err := row.Scan(&n); err != nil || n != 1 || active() != 0 {
		t.Fatalf("Row.Scan: %d, %v, %d held", n, err, active())
	}
	if err := db.QueryRowContext(ctx, "rows 0 a").Scan(&n); !errors.Is(err, sql.ErrNoRows) || active() != 0 {
		t.Fatalf("empty Row: %v, %d held; want sql.ErrNoRows and 0", err, active())
	}
	var raw sql.RawBytes
	if err := db.QueryRowContext(ctx, "rows 1 a").Scan(&raw); err == nil || active() != 0 {
		t.Fatalf("Row.Scan into RawBytes: %v, %d held; want an error and 0", err, active())
	}
	// A failed query's Row: its error, no permit.
	if err := db.QueryRowContext(ctx, "fail 42601 a").Scan(&n); SQLStateOf(err) != "42601" || active() != 0 {
		t.Fatalf("failing Row: %v, %d held", err, active())
	}
	if db.Snapshot().Pool.InUse != 0 {
		t.Errorf("the pool has %d connections in use", db.Snapshot().Pool.InUse)
	}
}

func SQLStateOf(err error) string { return watertightsql.SQLState(err) }

// A transaction holds its permit from BeginTx to Commit or Rollback.
func TestTxHoldsThePermit(t *testing.T) {
	f := newFakeDB()
	db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: -1})
	ctx := key("a")
	active := func() int { return db.Snapshot().Shares[0].Active }
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.BeginTx(ctx, nil); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("second BeginTx: %v, want the share full", err)
	}
	if _, err := tx.ExecContext(ctx, "ok a"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, "rows 2 a")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	rows.Close()
	var n int
	if err := tx.QueryRowContext(ctx, "rows 1 a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("tx Row: %d, %v", n, err)
	}
	if active() != 1 {
		t.Fatalf("%d held inside the transaction, want 1", active())
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("Rollback after Commit: %v", err)
	}
	if active() != 0 {
		t.Fatalf("%d held after Commit and Rollback, want 0", active())
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil || active() != 0 {
		t.Fatalf("Rollback: %v, %d held", err, active())
	}
	if tx.Raw() == nil {
		t.Error("Raw is nil")
	}
}

// The breaker counts a transaction once, with the last failed statement's
// error when it is rolled back.
func TestTxOutcomeOnTheBreaker(t *testing.T) {
	f := newFakeDB()
	db := newDB(t, f, 2, watertightsql.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		stmt     string
		failures int64
	}{
		{"fail 23505 x", 0}, // the caller's: ignored
		{"fail 08006 x", 1}, // connection failure
		{"ok x", 1},         // a rollback after success is a success
	} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = tx.ExecContext(ctx, c.stmt)
		_ = tx.Rollback()
		if got := db.Breaker().Snapshot().Failures; got != c.failures {
			t.Errorf("after a rollback over %q: %d failures, want %d", c.stmt, got, c.failures)
		}
	}
	if got := db.Breaker().Snapshot().Calls; got != 2 {
		t.Errorf("the breaker counted %d calls, want 2 (the ignored one not counted)", got)
	}
}

func TestQueryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		db := newDB(t, f, 2, watertightsql.Config{QueryTimeout: time.Second})
		start := time.Now()
		_, err := db.ExecContext(context.Background(), "sleep 5s slow")
		if !errors.Is(err, timeout.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the statement timeout", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("took %v, want 1s", d)
		}
		// A caller's sooner deadline is the caller's, not ours.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = db.ExecContext(ctx, "sleep 5s slow")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("got %v, want the caller's deadline", err)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("took %v, want 300ms", d)
		}
		// Reading rows is bounded too.
		rows, err := db.QueryContext(context.Background(), "rows 1 r")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // virtual: past the timeout while the rows are open
		synctest.Wait()
		for rows.Next() {
		}
		if err := rows.Err(); !errors.Is(err, timeout.ErrTimeout) {
			t.Errorf("rows read past the timeout: %v, want the statement timeout", err)
		}
		rows.Close()
		s := db.Snapshot()
		if s.TimedOut != 2 || s.Breaker.Failures != 3 {
			t.Errorf("TimedOut %d, breaker failures %d; want 2 (the statement and the rows) and 3 (and the caller's deadline)", s.TimedOut, s.Breaker.Failures)
		}
		// A negative QueryTimeout: no bound but the caller's.
		nobound := newDB(t, f, 2, watertightsql.Config{QueryTimeout: -1})
		start = time.Now()
		if _, err := nobound.ExecContext(context.Background(), "sleep 1m slow"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("took %v, want 1m", d)
		}
	})
}

func TestDeadlineTooShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		rec := &recorder{}
		db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: 5 * time.Second, Listener: rec})
		ctx, cancel := context.WithTimeout(key("a"), 2*time.Millisecond)
		defer cancel()
		_, err := db.ExecContext(ctx, "ok early")
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Fatalf("got %v, want deadline.ErrTooShort", err)
		}
		// After a wait for the share: granted with 3ms left, refused.
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = db.ExecContext(key("a"), "sleep 1s holder") })
		synctest.Wait()
		ctx2, cancel2 := context.WithTimeout(key("a"), time.Second+3*time.Millisecond)
		defer cancel2()
		_, err = db.ExecContext(ctx2, "ok late")
		if !errors.Is(err, deadline.ErrTooShort) {
			t.Fatalf("after the wait: %v, want deadline.ErrTooShort", err)
		}
		wg.Wait()
		for _, l := range []string{"early", "late"} {
			if runs, _ := f.count(l); runs != 0 {
				t.Errorf("%s ran %d times, want 0", l, runs)
			}
		}
		s := db.Snapshot()
		if s.TooShort != 2 || s.Shares[0].Active != 0 || s.Breaker.Calls != 1 {
			t.Errorf("snapshot: TooShort %d, active %d, breaker calls %d; want 2, 0, 1", s.TooShort, s.Shares[0].Active, s.Breaker.Calls)
		}
		if got := rec.codes(watertight.EventRejected); len(got) != 2 || got[0] != watertightsql.CodeDeadlineTooShort {
			t.Errorf("events: %v", got)
		}
		// MinQueryTime negative: no check.
		off := newDB(t, f, 2, watertightsql.Config{MinQueryTime: -1})
		ctx3, cancel3 := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel3()
		if _, err := off.ExecContext(ctx3, "ok unchecked"); err != nil {
			t.Errorf("MinQueryTime -1: %v", err)
		}
	})
}

func TestRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		rec := &recorder{}
		db := newDB(t, f, 2, watertightsql.Config{Listener: rec})
		idem := retry.Idempotent(key("k"))

		// Marked idempotent: two serialization failures, then success.
		if _, err := db.ExecContext(idem, "failn 2 40001 r1"); err != nil {
			t.Fatalf("idempotent statement: %v", err)
		}
		if runs, _ := f.count("r1"); runs != 3 {
			t.Errorf("ran %d times, want 3", runs)
		}
		if got := rec.codes(watertight.EventRetryScheduled); len(got) != 2 || got[0] != watertightsql.CodeRetryScheduled {
			t.Errorf("scheduled events: %v", got)
		}

		// Not marked: once, with the reason.
		_, err := db.ExecContext(key("k"), "failn 2 40001 r2")
		if !errors.Is(err, retry.ErrNotIdempotent) || watertightsql.SQLState(err) != "40001" {
			t.Fatalf("not idempotent: %v", err)
		}
		if runs, _ := f.count("r2"); runs != 1 {
			t.Errorf("ran %d times, want 1", runs)
		}
		if got := rec.codes(watertight.EventRetrySkipped); len(got) != 1 || got[0] != watertightsql.CodeNotIdempotent {
			t.Errorf("skipped events: %v", got)
		}

		// Every attempt fails: exhausted after three.
		_, err = db.QueryContext(idem, "failn 9 40P01 r3")
		if !errors.Is(err, retry.ErrExhausted) || watertightsql.SQLState(err) != "40P01" {
			t.Fatalf("exhausted: %v", err)
		}
		if runs, _ := f.count("r3"); runs != 3 {
			t.Errorf("ran %d times, want 3", runs)
		}
		if got := rec.codes(watertight.EventRetryExhausted); len(got) != 1 || got[0] != watertightsql.CodeRetryExhausted {
			t.Errorf("exhausted events: %v", got)
		}

		// A permanent error, marked or not: once, as it is.
		_, err = db.ExecContext(idem, "fail 23505 r4")
		var pe *pgError
		if !errors.As(err, &pe) || errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("permanent: %v", err)
		}
		if runs, _ := f.count("r4"); runs != 1 {
			t.Errorf("ran %d times, want 1", runs)
		}

		// driver.ErrBadConn: database/sql retries it on other connections
		// first; then this DB retries the idempotent statement.
		_, err = db.ExecContext(idem, "badconn r5")
		if !errors.Is(err, driver.ErrBadConn) || !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("bad connection: %v", err)
		}
		if db.Snapshot().Retries != 2+2+2 {
			t.Errorf("Retries = %d, want 6", db.Snapshot().Retries)
		}

		// MaxAttempts 1: no retries at all, the error as it is.
		once := newDB(t, f, 2, watertightsql.Config{Retry: retry.Config{MaxAttempts: 1}})
		_, err = once.ExecContext(idem, "failn 1 40001 r6")
		var pe2 *pgError
		if !errors.As(err, &pe2) || errors.Is(err, retry.ErrNotIdempotent) {
			t.Fatalf("MaxAttempts 1: %v", err)
		}
	})
}

// RunTx retries a whole transaction when it is marked idempotent.
func TestRunTxRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}})
		calls := 0
		body := func(tx *watertightsql.Tx) error {
			calls++
			_, err := tx.ExecContext(context.Background(), "failn 2 40001 tx1")
			return err
		}
		if err := db.RunTx(retry.Idempotent(key("a")), nil, body); err != nil {
			t.Fatal(err)
		}
		if calls != 3 {
			t.Errorf("fn ran %d times, want 3", calls)
		}
		if c, r := f.txCounts(); c != 1 || r != 2 {
			t.Errorf("%d commits and %d rollbacks, want 1 and 2", c, r)
		}
		calls = 0
		err := db.RunTx(key("a"), nil, func(tx *watertightsql.Tx) error {
			calls++
			_, err := tx.ExecContext(context.Background(), "failn 2 40001 tx2")
			return err
		})
		if !errors.Is(err, retry.ErrNotIdempotent) || calls != 1 {
			t.Fatalf("not marked: %v after %d calls", err, calls)
		}
		// fn's own error: rolled back, returned, not retried.
		mine := errors.New("business rule")
		if err := db.RunTx(retry.Idempotent(key("a")), nil, func(*watertightsql.Tx) error { return mine }); err != mine {
			t.Fatalf("fn's error: %v", err)
		}
		// A panic rolls back and goes on; the permit is given back.
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not go on")
				}
			}()
			_ = db.RunTx(key("a"), nil, func(*watertightsql.Tx) error { panic("boom") })
		}()
		if a := db.Snapshot().Shares[0].Active; a != 0 {
			t.Errorf("%d permits held after RunTx", a)
		}
		if s := db.Breaker().Snapshot(); s.Failures != 0 {
			t.Errorf("breaker failures %d, want 0: serialization failures and fn's errors are not the server's", s.Failures)
		}
	})
}

// The breaker opens when the database goes away, refuses at once while it
// is open, and closes again once trial statements succeed.
func TestBreakerOpensWhenTheDatabaseGoesAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		rec := &recorder{}
		db := newDB(t, f, 4, watertightsql.Config{
			Name: "orders", Listener: rec,
			Breaker: circuit.Config{WindowSize: 4, MinCalls: 4, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 1},
		})
		ctx := context.Background()
		// Callers' errors do not open it.
		for range 10 {
			if _, err := db.ExecContext(ctx, "fail 42601 syntax"); watertightsql.SQLState(err) != "42601" {
				t.Fatal(err)
			}
		}
		if s := db.Breaker().Snapshot(); s.State != circuit.Closed || s.Calls != 0 {
			t.Fatalf("after syntax errors: %+v", s)
		}
		// Hold a connection so that one is open when the server goes.
		rows, err := db.QueryContext(ctx, "rows 1 held")
		if err != nil {
			t.Fatal(err)
		}
		f.setDown(true)
		for i := range 4 {
			if _, err := db.ExecContext(ctx, "ok down"); err == nil || watertight.IsRejection(err) {
				t.Fatalf("statement %d while down: %v, want the database's error", i, err)
			}
		}
		rows.Close()
		if st := db.Breaker().State(); st != circuit.Open {
			t.Fatalf("breaker %v after 4 failures, want open", st)
		}
		runs, _ := f.count("down")
		if _, err := db.ExecContext(ctx, "ok down"); !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("while open: %v, want circuit.ErrOpen", err)
		}
		if again, _ := f.count("down"); again != runs {
			t.Error("a statement reached the database while the breaker was open")
		}
		f.setDown(false)
		time.Sleep(time.Second) // virtual: the open duration
		synctest.Wait()
		if _, err := db.ExecContext(ctx, "ok back"); err != nil {
			t.Fatalf("trial statement: %v", err)
		}
		if st := db.Breaker().State(); st != circuit.Closed {
			t.Fatalf("breaker %v after a successful trial, want closed", st)
		}
		got := rec.codes(watertight.EventStateChange)
		want := []string{circuit.CodeFailureRate, circuit.CodeTimer, circuit.CodeTrialsSucceeded}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("state change codes %v, want %v", got, want)
		}
		if got := rec.codes(watertight.EventRejected); len(got) != 1 || got[0] != watertightsql.CodeBreakerOpen {
			t.Errorf("rejections: %v", got)
		}
		if err := db.PingContext(ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})
}

func TestPingThroughTheShare(t *testing.T) {
	f := newFakeDB()
	db := newDB(t, f, 1, watertightsql.Config{MaxWait: -1})
	rows, err := db.QueryContext(context.Background(), "rows 1 x")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("Ping with the only connection held: %v, want the share full", err)
	}
	rows.Close()
	if err := db.PingContext(context.Background()); err != nil {
		t.Error(err)
	}
	if db.Raw() == nil || db.Stats().MaxOpenConnections != 1 {
		t.Error("Raw or Stats")
	}
}

// Rows with several result sets keep their permit until the last is read.
func TestRowsResultSets(t *testing.T) {
	f := newFakeDB()
	db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, MaxWait: -1})
	active := func() int { return db.Snapshot().Shares[0].Active }
	rows, err := db.QueryContext(key("a"), "sets 2 a")
	if err != nil {
		t.Fatal(err)
	}
	if types, err := rows.ColumnTypes(); err != nil || len(types) != 1 || rows.Raw() == nil {
		t.Fatalf("ColumnTypes: %v, %v", types, err)
	}
	for rows.Next() {
	}
	if active() != 1 {
		t.Fatalf("%d held after the first result set, want 1: another follows", active())
	}
	if !rows.NextResultSet() {
		t.Fatal("no second result set")
	}
	for rows.Next() {
	}
	if active() != 0 {
		t.Fatalf("%d held after the last result set, want 0", active())
	}
	if rows.NextResultSet() {
		t.Fatal("a third result set")
	}
	rows.Close()

	rows, err = db.QueryContext(key("a"), "sets 3 a")
	if err != nil {
		t.Fatal(err)
	}
	for rows.NextResultSet() {
	}
	if active() != 0 {
		t.Fatalf("%d held after NextResultSet returned false, want 0", active())
	}
	rows.Close()
}

// Statements in a transaction: their errors, their timeout, and a
// transaction whose context ended.
func TestTxStatements(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		db := newDB(t, f, 2, watertightsql.Config{Shares: map[string]int{"a": 1}, QueryTimeout: time.Second})
		ctx := key("a")
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.QueryContext(ctx, "fail 08006 a"); watertightsql.SQLState(err) != "08006" {
			t.Fatalf("failing query in a transaction: %v", err)
		}
		if _, err := tx.ExecContext(ctx, "sleep 5s a"); !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("slow statement in a transaction: %v, want the statement timeout", err)
		}
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if _, err := tx.QueryContext(short, "rows 1 a"); !errors.Is(err, deadline.ErrTooShort) {
			t.Fatalf("statement with 1ms left: %v, want deadline.ErrTooShort", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if s := db.Breaker().Snapshot(); s.Failures != 1 || s.Calls != 1 {
			t.Errorf("breaker: %d calls, %d failures; want the transaction once, failed (its last error was the timeout)", s.Calls, s.Failures)
		}

		// The transaction's context ends: database/sql rolls it back; Commit
		// then says so, and gives the permit back.
		txCtx, cancelTx := context.WithCancel(ctx)
		tx, err = db.BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cancelTx()
		synctest.Wait()
		if err := tx.Commit(); err == nil {
			t.Fatal("Commit after the context ended succeeded")
		}
		if a := db.Snapshot().Shares[0].Active; a != 0 {
			t.Errorf("%d held after Commit, want 0", a)
		}
	})
}

// A retry's backoff ends with the caller's context: the last error comes
// back, and no further attempt runs.
func TestRetryWaitEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDB()
		db := newDB(t, f, 2, watertightsql.Config{})
		ctx, cancel := context.WithCancel(retry.Idempotent(context.Background()))
		errc := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "failn 5 40001 w")
			errc <- err
		}()
		synctest.Wait() // the first attempt failed; the retry waits
		cancel()
		err := <-errc
		if watertightsql.SQLState(err) != "40001" {
			t.Fatalf("got %v, want the attempt's error", err)
		}
		if runs, _ := f.count("w"); runs != 1 {
			t.Errorf("%d runs, want 1", runs)
		}
	})
}
