package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// dsn returns WATERTIGHT_POSTGRES_DSN, or skips the test without it (fails
// it under WATERTIGHT_REQUIRE_POSTGRES=1).
func dsn(t *testing.T) string {
	t.Helper()
	d := os.Getenv("WATERTIGHT_POSTGRES_DSN")
	if d == "" {
		if os.Getenv("WATERTIGHT_REQUIRE_POSTGRES") == "1" {
			t.Fatal("PostgreSQL required (WATERTIGHT_REQUIRE_POSTGRES=1) but WATERTIGHT_POSTGRES_DSN is unset: run the tests through scripts/test.sh, which starts one")
		}
		t.Skip("WATERTIGHT_POSTGRES_DSN is unset: skipping the PostgreSQL tests (scripts/test.sh starts a server when Debian's postgresql is installed)")
	}
	return d
}

// seq makes names unique within a run.
var seq atomic.Int64

// unique returns prefix with a suffix unique to this process and call, for
// table and application names that do not collide with another run's.
func unique(prefix string) string {
	return prefix + "_" + strconv.Itoa(os.Getpid()) + "_" + strconv.FormatInt(seq.Add(1), 10)
}

// openPool opens a pgx database/sql pool of n connections whose sessions
// carry the application name app; edit, if not nil, changes the connection
// config first. The pool is closed at the end of the test.
func openPool(t *testing.T, n int, app string, edit func(*pgx.ConnConfig)) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn(t))
	if err != nil {
		t.Fatalf("WATERTIGHT_POSTGRES_DSN: %v", err)
	}
	cfg.RuntimeParams["application_name"] = app
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if edit != nil {
		edit(cfg)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	t.Cleanup(func() { db.Close() })
	return db
}

// exec runs statements on db, failing the test on an error.
func exec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// newTable creates a table of the given columns with a unique name, filled
// by the fill statement (its %s is the name), and drops it at the end.
func newTable(t *testing.T, admin *sql.DB, prefix, columns, fill string) string {
	t.Helper()
	name := unique(prefix)
	exec(t, admin, fmt.Sprintf("CREATE TABLE %s (%s)", name, columns))
	t.Cleanup(func() { exec(t, admin, "DROP TABLE IF EXISTS "+name) })
	if fill != "" {
		exec(t, admin, fmt.Sprintf(fill, name))
	}
	return name
}

// waitFor polls cond every 10ms until it holds, for at most 10 s: for
// conditions on another process (the server), which no channel can signal.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminate ends the server sessions of application app, from admin, and
// returns how many it ended.
func terminate(t *testing.T, admin *sql.DB, app string) int {
	t.Helper()
	var n int
	err := admin.QueryRowContext(context.Background(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// proxy is a TCP proxy in front of the server, which the test can take
// down (its listener closed and every connection through it cut, as when a
// database host goes away) and bring back up on the same address.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startProxy starts a proxy to the server of WATERTIGHT_POSTGRES_DSN on a
// free port of 127.0.0.1; it is taken down at the end of the test.
func startProxy(t *testing.T) *proxy {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), addr: "127.0.0.1:0"}
	p.up()
	t.Cleanup(p.down)
	return p
}

// up listens again on the proxy's address.
func (p *proxy) up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr, p.closed, p.conns = ln, ln.Addr().String(), false, map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
}

func (p *proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			continue
		}
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
			s.Close()
		}
		p.wg.Go(func() { pipe(s, c) })
		p.wg.Go(func() { pipe(c, s) })
	}
}

// track records a proxied pair, or closes it when the proxy went down
// meanwhile.
func (p *proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

// down closes the listener and cuts every connection, and waits for the
// proxy's goroutines to end.
func (p *proxy) down() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ln.Close()
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// port is the proxy's port.
func (p *proxy) port() uint16 {
	_, port, _ := net.SplitHostPort(p.addr)
	n, _ := strconv.Atoi(port)
	return uint16(n)
}

// phase is what one run of a workload measured.
type phase struct {
	ops, failed int
	lat         []time.Duration // of the successful operations
	firstErr    error
}

func (p phase) success() float64 { return float64(p.ops-p.failed) / float64(max(p.ops, 1)) }

// quantile returns the q-quantile of the successful operations' latencies.
func (p phase) quantile(q float64) time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	s := slices.Clone(p.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (p phase) String() string {
	return fmt.Sprintf("%d ops, %.3f%% success, p50 %v, p99 %v", p.ops, 100*p.success(), p.quantile(0.5), p.quantile(0.99))
}

// measure runs op from workers goroutines for dur (and at most maxOps
// operations each), each operation under a deadline of opTimeout. Each
// goroutine starts an operation every interval at most (a ticker paces it;
// an operation that takes longer delays the next): a steady rate below what
// the machine can do, so that the latencies measured are those of the
// path through the pool, not of a CPU kept saturated by the load itself.
func measure(workers int, dur time.Duration, maxOps int, interval, opTimeout time.Duration, op func(ctx context.Context, w, i int) error) phase {
	results := make([]phase, workers)
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := &results[w]
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := 0; i < maxOps && time.Now().Before(stop); i++ {
				if i > 0 {
					<-tick.C
				}
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				start := time.Now()
				err := op(ctx, w, i)
				took := time.Since(start)
				cancel()
				r.ops++
				if err != nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.lat = append(r.lat, took)
			}
		})
	}
	wg.Wait()
	var all phase
	for _, r := range results {
		all.add(r)
	}
	return all
}

// add adds o's operations to p's.
func (p *phase) add(o phase) {
	p.ops += o.ops
	p.failed += o.failed
	p.lat = append(p.lat, o.lat...)
	if p.firstErr == nil {
		p.firstErr = o.firstErr
	}
}

// flood runs op from workers goroutines, one operation after another, until
// stop is called, which lets the operations in flight end and waits for the
// goroutines. It counts the operations that succeeded and those that
// failed.
func flood(workers int, op func() error) (stop func() (ok, failed int64)) {
	var stopping atomic.Bool
	var okN, failN atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !stopping.Load() {
				if err := op(); err != nil {
					failN.Add(1)
				} else {
					okN.Add(1)
				}
			}
		})
	}
	return func() (int64, int64) {
		stopping.Store(true)
		wg.Wait()
		return okN.Load(), failN.Load()
	}
}
