package watertightsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
)

// Defaults used for zero fields of Config.
const (
	// DefaultMaxWait is how long a statement waits for a connection of its
	// key's share when Config.MaxWait is zero.
	DefaultMaxWait = 100 * time.Millisecond
	// DefaultQueryTimeout bounds a statement when Config.QueryTimeout is
	// zero.
	DefaultQueryTimeout = 30 * time.Second
	// DefaultMinQueryTime is the least time a statement must have before
	// its context's deadline when Config.MinQueryTime is zero.
	DefaultMinQueryTime = 5 * time.Millisecond
)

// DefaultShareName is the name of the default share (the keys that
// Config.Shares does not list) in its errors ("bulkhead: (other keys):
// full").
const DefaultShareName = "(other keys)"

// ErrUnknownKey is the error of a statement whose key has no share in
// Config.Shares when Config.DefaultShare is negative (keys without a share
// are refused). The error returned wraps it and names the key. It is a
// rejection (watertight.IsRejection): never retried, not a failure of the
// database.
var ErrUnknownKey = watertight.NewRejection("watertightsql: the key has no share (Config.Shares) and keys without one are refused (Config.DefaultShare < 0)")

// Config configures a DB. The zero value is valid: one share of all the
// pool's connections for every key, a wait of up to DefaultMaxWait for a
// connection, statements bounded by DefaultQueryTimeout, the circuit
// package's default breaker, and the retry package's defaults (three
// attempts for statements marked idempotent).
type Config struct {
	// Name labels the DB in its events and its shares' errors. It may be
	// empty.
	Name string
	// Shares gives keys (tenants, query classes) their own share of the
	// pool's connections: Shares["tenant-a"] = 4 lets at most 4 statements
	// (or open Rows, or transactions) of the key "tenant-a" hold a
	// connection at once, whatever the other keys do. A key must not be
	// empty and a share must be at least 1; with DefaultShare, the shares
	// must add up to at most the pool's MaxOpenConns, so that a statement
	// holding a share's permit never waits for a connection inside
	// database/sql. Shares is read by New only.
	Shares map[string]int
	// DefaultShare is the share of connections that all the keys not in
	// Shares use together (the empty key of a context without WithKey
	// included): however many such keys there are, they hold at most
	// DefaultShare connections at once. Zero means the connections that
	// Shares leaves (MaxOpenConns minus their sum), which must then be at
	// least one; a negative value refuses keys without a share with
	// ErrUnknownKey.
	DefaultShare int
	// Key returns the key of a statement from its context. If nil, the key
	// set by WithKey (KeyFrom). It is called once per statement, on the
	// hot path: keep it cheap.
	Key func(context.Context) string
	// MaxWait is how long a statement waits for a connection of its share
	// when all are held. Waiters are served first come, first served;
	// when MaxWait runs out, or sooner when the context's deadline comes,
	// the statement fails with a rejection that matches bulkhead.ErrFull
	// ("bulkhead: tenant-a: full") and runs nothing. Zero means
	// DefaultMaxWait (100 ms); a negative value means no wait: a full
	// share refuses at once.
	MaxWait time.Duration
	// QueryTimeout bounds each statement: it runs under a context whose
	// deadline is the sooner of the caller's deadline and QueryTimeout
	// from its start (from the permit's grant: the wait is not counted),
	// and a statement that runs out of it fails with an error matching
	// timeout.ErrTimeout and context.DeadlineExceeded. Rows are read under
	// the statement's context, so the bound covers reading them; a
	// transaction (BeginTx) is bounded by its context only, and each
	// statement in it by QueryTimeout. Zero means DefaultQueryTimeout
	// (30 s); negative means none (the caller's deadline only).
	QueryTimeout time.Duration
	// MinQueryTime is the least time a statement must have before its
	// context's deadline: with less left, it fails fast with an error
	// matching deadline.ErrTooShort (a rejection), before it takes a
	// connection, and again after its wait for one. Zero means
	// DefaultMinQueryTime (5 ms); negative turns the check off.
	MinQueryTime time.Duration
	// Breaker configures the circuit breaker in front of the database. Its
	// zero value is the circuit package's defaults. If Breaker.Classify is
	// nil, Classify (this package's) decides what counts as a failure, so
	// that the callers' own errors (a syntax error, a constraint violation)
	// do not open it. Breaker.OnStateChange and Breaker.Listener, if set,
	// are called as the circuit package says, beside this DB's own events.
	// To run without a breaker, call Breaker().Disable() after New.
	Breaker circuit.Config
	// Retry configures the retries. A statement is retried only when it is
	// marked idempotent (its context by retry.Idempotent, or
	// Retry.Idempotent set to say that every statement is: rarely true of
	// SQL) and its error is transient: Retry.Retryable, or IsTransient when
	// it is nil. An attempt gives its connection back before the wait for
	// the next, and each attempt passes the breaker and the share again.
	// Rows are retried only for errors that QueryContext itself returns,
	// never once rows are handed over; the statements inside a transaction
	// are never retried on their own (a failed statement aborts the
	// transaction): retry the whole transaction with RunTx. The zero value
	// is the retry package's defaults: three attempts, full-jitter backoff,
	// no budget; a zero Retry.MinAttemptTime is MinQueryTime, so that no
	// retry is scheduled that would be refused as too short. MaxAttempts 1
	// disables retries.
	Retry retry.Config
	// Listener, if not nil, receives the DB's events, with Source "sql",
	// Name this Name and Key the statement's key: see the package
	// documentation for the kinds and their codes. It is called in the
	// statement's goroutine with no lock held (see watertight.Listener).
	// If nil, no events are built.
	Listener watertight.Listener
}

// Source is the Source of the DB's events.
const Source = "sql"

type keyCtx struct{}

// WithKey returns a context that carries key, the name of the share its
// statements take their connection from (a tenant, a query class). Keys
// should come from a bounded set.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFrom returns the key WithKey put in ctx, or "" when there is none.
func KeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

// share is one key's share of the connections: a semaphore bulkhead.
type share struct {
	key string // "" for the default share
	b   *bulkhead.Bulkhead
}

// DB is a *sql.DB behind per-key shares of its connections, a circuit
// breaker, per-statement timeouts and retries of idempotent statements. Its
// methods mirror sql.DB's context methods, so that moving to it is a change
// of type: QueryContext, QueryRowContext, ExecContext, BeginTx and
// PingContext, plus RunTx for a transaction that may be retried.
//
// Each statement finds its share from its context's key (WithKey,
// Config.Key) and takes one of the share's permits — one connection —
// before it runs, and gives it back when its connection is free again: at
// the end of ExecContext and PingContext, when Rows are closed (or read to
// their end), when a Row is scanned, when a transaction commits or rolls
// back. A share that is full makes the statement wait up to Config.MaxWait
// and then fails it with a rejection, so that one key's flood of slow
// statements holds at most its own share of the pool and the other keys'
// statements never queue behind it.
//
// The order of the protections, outermost first, is the library's
// standard: fail fast on too short a deadline → retry (idempotent only) →
// breaker → share (bulkhead) → statement timeout → database/sql.
//
// The shares hold only if every statement goes through the DB: code that
// uses the *sql.DB (Raw) directly takes connections no share counts, and
// may make the DB's statements wait inside database/sql. Leave room for it
// (shares below MaxOpenConns), or route it through the DB too.
//
// A DB is safe for concurrent use. Build it with New; the zero value is not
// usable.
type DB struct {
	db       *sql.DB
	name     string
	keyOf    func(context.Context) string
	shares   map[string]*share
	def      *share   // the default share; nil refuses unknown keys
	all      []*share // sorted by key, the default last: for Snapshot
	breaker  *circuit.Breaker
	retry    *retry.Policy
	retries  bool          // Retry.MaxAttempts != 1
	timeout  time.Duration // QueryTimeout; negative: none
	cause    *timeout.Error
	minTime  time.Duration // MinQueryTime; negative: no check
	classify watertight.Classifier
	listener watertight.Listener
	maxOpen  int

	tooShort, timedOut, retried, unknown atomic.Uint64
}

// New returns a DB that sends its statements to db, or an error that names
// the invalid field and its rule. db must have a connection limit
// (db.SetMaxOpenConns(n) with n > 0) before New: the shares split those n
// connections. Do not change it afterwards.
func New(db *sql.DB, cfg Config) (*DB, error) {
	if db == nil {
		return nil, errors.New("watertightsql: New: db is nil")
	}
	maxOpen := db.Stats().MaxOpenConnections
	if maxOpen <= 0 {
		return nil, errors.New("watertightsql: New: the *sql.DB has no connection limit (MaxOpenConns is unlimited): call db.SetMaxOpenConns(n) with the number of connections this process may hold before New; the shares split those n connections")
	}
	d := &DB{
		db:       db,
		name:     cfg.Name,
		keyOf:    cfg.Key,
		shares:   make(map[string]*share, len(cfg.Shares)),
		timeout:  cfg.QueryTimeout,
		minTime:  cfg.MinQueryTime,
		listener: cfg.Listener,
		maxOpen:  maxOpen,
	}
	if d.keyOf == nil {
		d.keyOf = KeyFrom
	}
	if d.timeout == 0 {
		d.timeout = DefaultQueryTimeout
	}
	if d.minTime == 0 {
		d.minTime = DefaultMinQueryTime
	}
	d.cause = &timeout.Error{Name: "watertightsql: Config.QueryTimeout", Timeout: d.timeout}
	if err := d.buildShares(cfg); err != nil {
		return nil, err
	}
	if err := d.buildBreaker(cfg.Breaker); err != nil {
		return nil, err
	}
	rc := cfg.Retry
	if rc.Retryable == nil {
		rc.Retryable = IsTransient
	}
	if rc.MinAttemptTime == 0 && d.minTime > 0 {
		rc.MinAttemptTime = d.minTime // no retry that would be refused as too short
	}
	p, err := retry.New(rc)
	if err != nil {
		return nil, fmt.Errorf("watertightsql: Config.Retry: %w", err)
	}
	d.retry, d.retries = p, rc.MaxAttempts != 1
	return d, nil
}

// buildShares checks Config.Shares and DefaultShare against the pool's
// limit and makes a bulkhead for each share.
func (d *DB) buildShares(cfg Config) error {
	wait := cfg.MaxWait
	switch {
	case wait == 0:
		wait = DefaultMaxWait
	case wait < 0:
		wait = 0 // the bulkhead's "no wait"
	}
	keys := make([]string, 0, len(cfg.Shares))
	sum := 0
	for k, n := range cfg.Shares {
		if k == "" {
			return errors.New("watertightsql: Config.Shares has an empty key: the empty key (a context without WithKey) always uses DefaultShare")
		}
		if n < 1 {
			return fmt.Errorf("watertightsql: Config.Shares[%q] must be at least 1 connection, got %d", k, n)
		}
		sum += n
		keys = append(keys, k)
	}
	if sum > d.maxOpen {
		return fmt.Errorf("watertightsql: Config.Shares add up to %d connections, more than the pool's MaxOpenConns (%d): lower them, or raise db.SetMaxOpenConns", sum, d.maxOpen)
	}
	def := cfg.DefaultShare
	switch {
	case def == 0:
		def = d.maxOpen - sum
		if def == 0 {
			return fmt.Errorf("watertightsql: Config.Shares take all %d connections of the pool, so none is left for keys without a share (Config.DefaultShare 0 means the rest): set DefaultShare to -1 to refuse such keys, or lower the shares", d.maxOpen)
		}
	case def > 0 && sum+def > d.maxOpen:
		return fmt.Errorf("watertightsql: Config.Shares (%d) and Config.DefaultShare (%d) add up to %d connections, more than the pool's MaxOpenConns (%d)", sum, def, sum+def, d.maxOpen)
	}
	sort.Strings(keys)
	mk := func(key, label string, n int) (*share, error) {
		name := label
		if d.name != "" {
			name = d.name + "/" + label
		}
		b, err := bulkhead.New(bulkhead.Config{Name: name, MaxConcurrent: n, MaxWait: wait})
		if err != nil {
			return nil, fmt.Errorf("watertightsql: share %q: %w", label, err)
		}
		return &share{key: key, b: b}, nil
	}
	for _, k := range keys {
		s, err := mk(k, k, cfg.Shares[k])
		if err != nil {
			return err
		}
		d.shares[k] = s
		d.all = append(d.all, s)
	}
	if def > 0 {
		s, err := mk("", DefaultShareName, def)
		if err != nil {
			return err
		}
		d.def = s
		d.all = append(d.all, s)
	}
	return nil
}

// buildBreaker makes the breaker, with this package's classification and
// its state changes sent as the DB's events.
func (d *DB) buildBreaker(bc circuit.Config) error {
	if bc.Classify == nil {
		bc.Classify = Classify
	}
	d.classify = bc.Classify
	if bc.Name == "" {
		bc.Name = d.name
	}
	if d.listener != nil {
		user := bc.OnStateChange
		bc.OnStateChange = func(c circuit.StateChange) {
			if user != nil {
				user(c)
			}
			watertight.Emit(d.listener, watertight.Event{
				Kind: watertight.EventStateChange, Source: Source, Name: d.name,
				From: c.From.String(), To: c.To.String(), Reason: c.Reason, Delay: c.OpenFor, Code: c.Code,
			})
		}
	}
	b, err := circuit.New(bc)
	if err != nil {
		return fmt.Errorf("watertightsql: Config.Breaker: %w", err)
	}
	d.breaker = b
	return nil
}

// Raw returns the *sql.DB the DB wraps, for what the DB does not mirror
// (PrepareContext, Conn, SetConnMaxLifetime...). Connections taken through
// it are not counted in any share: see DB.
func (d *DB) Raw() *sql.DB { return d.db }

// Breaker returns the DB's circuit breaker, to read its state or to force
// it (ForceOpen, Disable, Reset).
func (d *DB) Breaker() *circuit.Breaker { return d.breaker }

// Close closes the *sql.DB (sql.DB.Close).
func (d *DB) Close() error { return d.db.Close() }

// Stats returns the *sql.DB's pool statistics (sql.DB.Stats).
func (d *DB) Stats() sql.DBStats { return d.db.Stats() }

// shareOf returns the share of key.
func (d *DB) shareOf(key string) (*share, error) {
	if s, ok := d.shares[key]; ok {
		return s, nil
	}
	if d.def != nil {
		return d.def, nil
	}
	d.unknown.Add(1)
	err := fmt.Errorf("%w: key %q", ErrUnknownKey, key)
	d.emit(watertight.EventRejected, CodeUnknownKey, key, "no share for the key", err)
	return nil, err
}

// lease is what one statement holds while it runs: its share's permit, its
// breaker permit and its statement context. The zero share (a statement
// inside a transaction) holds only the context.
type lease struct {
	d      *DB
	sh     *share // nil: no share permit (inside a transaction)
	bt     watertight.Ticket
	bp     circuit.Permit
	ctx    context.Context // the statement's context
	cancel context.CancelFunc
	key    string
}

// checkTime fails fast when ctx leaves less than MinQueryTime. It returns
// the time left, and whether ctx has a deadline.
func (d *DB) checkTime(ctx context.Context, key string) (left time.Duration, ok bool, err error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false, nil
	}
	left = time.Until(dl)
	if d.minTime >= 0 && left < d.minTime {
		return left, true, d.tooShortErr(key, left)
	}
	return left, true, nil
}

func (d *DB) tooShortErr(key string, left time.Duration) error {
	d.tooShort.Add(1)
	var err error
	if left <= 0 {
		err = fmt.Errorf("%w: the deadline passed %v ago", deadline.ErrTooShort, (-left).Round(time.Microsecond))
	} else {
		err = fmt.Errorf("%w: %v left, a statement needs at least %v (Config.MinQueryTime)", deadline.ErrTooShort, left.Round(time.Microsecond), d.minTime)
	}
	d.emit(watertight.EventRejected, CodeDeadlineTooShort, key, "too little time left before the deadline", err)
	return err
}

// statementCtx returns the context a statement runs under: ctx, or ctx with
// the QueryTimeout when that comes before ctx's deadline. It fails fast when
// too little time is left.
func (d *DB) statementCtx(ctx context.Context, key string, derive bool) (context.Context, context.CancelFunc, error) {
	left, has, err := d.checkTime(ctx, key)
	if err != nil || !derive || d.timeout < 0 || (has && left <= d.timeout) {
		return ctx, nil, err
	}
	c, cancel := context.WithTimeoutCause(ctx, d.timeout, d.cause)
	return c, cancel, nil
}

// begin takes what a statement of key needs before it runs: time, the
// breaker's permit, a permit of its share, and its context (with the
// statement timeout when derive is set).
func (d *DB) begin(ctx context.Context, sh *share, key string, derive bool) (lease, error) {
	if _, _, err := d.checkTime(ctx, key); err != nil {
		return lease{}, err
	}
	bp, err := d.breaker.Allow()
	if err != nil {
		code := CodeBreakerOpen
		if errors.Is(err, circuit.ErrHalfOpen) {
			code = CodeBreakerHalfOpenFull
		}
		d.emit(watertight.EventRejected, code, key, "circuit breaker refused the statement", err)
		return lease{}, err
	}
	_, bt, err := sh.b.Enter(ctx)
	if err != nil {
		bp.Done(d.classify(ctx, err))
		if watertight.IsSaturation(err) {
			d.emit(watertight.EventBulkheadFull, CodeShareFull, key, "the key's share of connections is full", err)
		}
		return lease{}, err
	}
	l := lease{d: d, sh: sh, bt: bt, bp: bp, ctx: ctx, key: key}
	l.ctx, l.cancel, err = d.statementCtx(ctx, key, derive) // again: the wait took time
	if err != nil {
		sh.b.Exit(ctx, bt, nil)
		bp.Done(watertight.Ignored)
		return lease{}, err
	}
	return l, nil
}

// end gives back what the lease holds, records err's outcome on the
// breaker, and returns err, said to be the statement timeout's when it was.
func (l *lease) end(err error) error {
	if l.d == nil {
		return err
	}
	if w := l.wrap(err); w != err {
		l.d.timedOut.Add(1)
		err = w
	}
	if l.sh != nil {
		l.bp.Done(l.d.classify(l.ctx, err)) // before cancel: see Classify
		l.sh.b.Exit(l.ctx, l.bt, nil)
	}
	if l.cancel != nil {
		l.cancel()
	}
	return err
}

// wrap returns err as a *timeout.Error when the statement timeout ended the
// statement.
func (l *lease) wrap(err error) error {
	if err == nil || l.cancel == nil || context.Cause(l.ctx) != error(l.d.cause) {
		return err
	}
	var te *timeout.Error
	if errors.As(err, &te) && te.Name == l.d.cause.Name {
		return err // wrapped already
	}
	return &timeout.Error{Name: l.d.cause.Name, Timeout: l.d.timeout, Err: err}
}

// run runs op, one attempt of a statement, for ctx's key, and runs it again
// while the retry policy says so.
func run[T any](d *DB, ctx context.Context, op func(ctx context.Context, sh *share, key string) (T, error)) (T, error) {
	key := d.keyOf(ctx)
	sh, err := d.shareOf(key)
	if err != nil {
		var zero T
		return zero, err
	}
	if !d.retries {
		return op(ctx, sh, key)
	}
	_, t, _ := d.retry.Enter(ctx)
	for n := 1; ; n++ {
		v, err := op(ctx, sh, key)
		if err == nil {
			_ = d.retry.Exit(ctx, t, nil)
			return v, nil
		}
		var wait time.Duration
		var again bool
		t, wait, again = d.retry.Again(ctx, t, err)
		if again {
			d.retried.Add(1)
			if d.listener != nil {
				watertight.Emit(d.listener, watertight.Event{
					Kind: watertight.EventRetryScheduled, Source: Source, Name: d.name, Key: key,
					Attempt: n, Delay: wait, Err: err, Code: CodeRetryScheduled,
					Reason: "transient error of an idempotent statement",
				})
			}
			if sleep(ctx, wait) {
				continue
			}
		}
		err = d.retry.Exit(ctx, t, err)
		d.emitRetryEnd(key, err)
		var zero T
		return zero, err
	}
}

// sleep waits d or until ctx ends, and reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ExecContext runs a statement that returns no rows, as sql.DB.ExecContext
// does, through the key's share, the breaker and the statement timeout,
// retried if it is marked idempotent and fails with a transient error.
func (d *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return run(d, ctx, func(ctx context.Context, sh *share, key string) (sql.Result, error) {
		l, err := d.begin(ctx, sh, key, true)
		if err != nil {
			return nil, err
		}
		res, err := d.db.ExecContext(l.ctx, query, args...)
		return res, l.end(err)
	})
}

// QueryContext runs a query, as sql.DB.QueryContext does. The Rows hold a
// permit of the key's share and the statement's context until they are
// closed, or read to their end: close them. The query is retried (marked
// idempotent, transient error) only when QueryContext itself fails; an
// error met while reading the rows is the caller's to handle.
func (d *DB) QueryContext(ctx context.Context, query string, args ...any) (*Rows, error) {
	return run(d, ctx, func(ctx context.Context, sh *share, key string) (*Rows, error) {
		l, err := d.begin(ctx, sh, key, true)
		if err != nil {
			return nil, err
		}
		rows, err := d.db.QueryContext(l.ctx, query, args...)
		if err != nil {
			return nil, l.end(err)
		}
		return &Rows{rows: rows, l: l}, nil
	})
}

// QueryRowContext runs a query that is expected to return at most one row,
// as sql.DB.QueryRowContext does: errors are deferred until Row's Scan,
// which gives the permit back. A Row that is never scanned keeps its
// permit.
func (d *DB) QueryRowContext(ctx context.Context, query string, args ...any) *Row {
	rows, err := d.QueryContext(ctx, query, args...)
	return &Row{rows: rows, err: err}
}

// PingContext checks that the database answers, as sql.DB.PingContext does,
// through the key's share and the breaker (an open breaker answers
// circuit.ErrOpen at once). It is never retried.
func (d *DB) PingContext(ctx context.Context) error {
	key := d.keyOf(ctx)
	sh, err := d.shareOf(key)
	if err != nil {
		return err
	}
	l, err := d.begin(ctx, sh, key, true)
	if err != nil {
		return err
	}
	return l.end(d.db.PingContext(l.ctx))
}

// Snapshot is a point-in-time view of a DB, for metrics. Its fields are read
// one by one, so under load they may not add up exactly.
type Snapshot struct {
	// Name is Config.Name.
	Name string
	// MaxOpenConns is the pool's limit, as New read it.
	MaxOpenConns int
	// Shares are the shares, sorted by key, the default share last.
	Shares []ShareSnapshot
	// Breaker is the breaker's state and counts.
	Breaker circuit.Snapshot
	// Pool is the *sql.DB's statistics.
	Pool sql.DBStats
	// TooShort counts the statements refused because their deadline left
	// less than Config.MinQueryTime.
	TooShort uint64
	// TimedOut counts the statements that Config.QueryTimeout ended.
	TimedOut uint64
	// Retries counts the retries scheduled.
	Retries uint64
	// UnknownKeys counts the statements refused with ErrUnknownKey.
	UnknownKeys uint64
}

// ShareSnapshot is one share's state: its bulkhead's Snapshot
// (MaxConcurrent is the share's size, Active the connections it holds,
// Waiting the statements waiting for one, Rejected those refused).
type ShareSnapshot struct {
	// Key is the share's key in Config.Shares; empty for the default share.
	Key string
	// Default is true for the share of the keys not in Config.Shares.
	Default bool
	bulkhead.Snapshot
}

// Snapshot returns the DB's current state and totals.
func (d *DB) Snapshot() Snapshot {
	s := Snapshot{
		Name:         d.name,
		MaxOpenConns: d.maxOpen,
		Shares:       make([]ShareSnapshot, 0, len(d.all)),
		Breaker:      d.breaker.Snapshot(),
		Pool:         d.db.Stats(),
		TooShort:     d.tooShort.Load(),
		TimedOut:     d.timedOut.Load(),
		Retries:      d.retried.Load(),
		UnknownKeys:  d.unknown.Load(),
	}
	for _, sh := range d.all {
		s.Shares = append(s.Shares, ShareSnapshot{Key: sh.key, Default: sh == d.def, Snapshot: sh.b.Snapshot()})
	}
	return s
}
