package watertightprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
)

var errBoom = errors.New("boom")

func newCollector(t *testing.T, cfg watertightprom.Config) *watertightprom.Collector {
	t.Helper()
	c, err := watertightprom.NewCollector(cfg)
	if err != nil {
		t.Fatalf("NewCollector: %v", err)
	}
	return c
}

// scrape registers c with a fresh registry, gathers it and returns every
// sample as "name{l1="v1",l2="v2"}" (labels sorted by name) → value;
// histograms as name_count{...} and name_sum{...}.
func scrape(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ls := labels(m)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[mf.GetName()+ls] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[mf.GetName()+ls] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+ls] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+ls] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("unexpected metric type %v for %s", mf.GetType(), mf.GetName())
			}
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// want checks that got holds each of the given samples with its value.
func want(t *testing.T, got map[string]float64, samples map[string]float64) {
	t.Helper()
	for k, v := range samples {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing sample %s (want %v)", k, v)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// absent checks that no sample of got starts with prefix.
func absent(t *testing.T, got map[string]float64, prefix string) {
	t.Helper()
	for k := range got {
		if strings.HasPrefix(k, prefix) {
			t.Errorf("unexpected sample %s", k)
		}
	}
}

func fail(b *circuit.Breaker, n int) {
	for range n {
		if p, err := b.Allow(); err == nil {
			p.Done(watertight.Failure)
		}
	}
}

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 4, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 2})
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector(t, watertightprom.Config{})
		c.AddBreaker(b)

		for range 3 {
			p, _ := b.Allow()
			p.Done(watertight.Success)
		}
		fail(b, 1)
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_circuit_state{key="",name="payments",state="closed"}`:       1,
			`watertight_circuit_state{key="",name="payments",state="open"}`:         0,
			`watertight_circuit_state{key="",name="payments",state="half-open"}`:    0,
			`watertight_circuit_state{key="",name="payments",state="forced-open"}`:  0,
			`watertight_circuit_state{key="",name="payments",state="disabled"}`:     0,
			`watertight_circuit_state{key="",name="payments",state="metrics-only"}`: 0,
			`watertight_circuit_window_calls{key="",name="payments"}`:               4,
			`watertight_circuit_window_failures{key="",name="payments"}`:            1,
			`watertight_circuit_failure_ratio{key="",name="payments"}`:              0.25,
			`watertight_circuit_slow_call_ratio{key="",name="payments"}`:            0,
			`watertight_circuit_opens_total{key="",name="payments"}`:                0,
			`watertight_circuit_rejected_total{key="",name="payments"}`:             0,
		})

		fail(b, 2) // 3 of 6 failed (50%): opens
		for range 3 {
			if _, err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
				t.Fatalf("Allow while open = %v", err)
			}
		}
		got = scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_circuit_state{key="",name="payments",state="closed"}`: 0,
			`watertight_circuit_state{key="",name="payments",state="open"}`:   1,
			`watertight_circuit_opens_total{key="",name="payments"}`:          1,
			`watertight_circuit_rejected_total{key="",name="payments"}`:       3,
			// While open the gauges keep the evidence: the window that opened it.
			`watertight_circuit_window_calls{key="",name="payments"}`:    6,
			`watertight_circuit_window_failures{key="",name="payments"}`: 3,
			`watertight_circuit_failure_ratio{key="",name="payments"}`:   0.5,
		})

		time.Sleep(time.Second) // the open duration passes: half-open
		synctest.Wait()
		p, err := b.Allow()
		if err != nil {
			t.Fatalf("trial: %v", err)
		}
		got = scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_circuit_state{key="",name="payments",state="open"}`:      0,
			`watertight_circuit_state{key="",name="payments",state="half-open"}`: 1,
			`watertight_circuit_trial_calls_in_flight{key="",name="payments"}`:   1,
			`watertight_circuit_rejected_total{key="",name="payments"}`:          3,
		})
		p.Done(watertight.Success)
	})
}

func TestBreakerRegistryAndReplace(t *testing.T) {
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{WindowSize: 4, MinCalls: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eu.example.com", "us.example.com"} {
		b, err := r.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		if k == "eu.example.com" {
			fail(b, 2)
		}
	}
	c := newCollector(t, watertightprom.Config{})
	c.AddBreakerRegistry("hosts", r)
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_circuit_state{key="eu.example.com",name="hosts",state="open"}`:   1,
		`watertight_circuit_state{key="us.example.com",name="hosts",state="closed"}`: 1,
		`watertight_circuit_opens_total{key="eu.example.com",name="hosts"}`:          1,
		`watertight_circuit_opens_total{key="us.example.com",name="hosts"}`:          0,
	})

	// A breaker added under the registry's name replaces it, and the
	// registry's remove function then leaves the new source alone.
	b, err := circuit.New(circuit.Config{Name: "hosts"})
	if err != nil {
		t.Fatal(err)
	}
	removeReg := c.AddBreakerRegistry("hosts", r)
	removeB := c.AddBreaker(b)
	got = scrape(t, c)
	absent(t, got, `watertight_circuit_state{key="eu.example.com"`)
	want(t, got, map[string]float64{`watertight_circuit_state{key="",name="hosts",state="closed"}`: 1})
	removeReg()
	got = scrape(t, c)
	want(t, got, map[string]float64{`watertight_circuit_state{key="",name="hosts",state="closed"}`: 1})
	removeB()
	got = scrape(t, c)
	absent(t, got, "watertight_circuit_")

	// nil sources are ignored.
	c.AddBreaker(nil)()
	c.AddBreakerRegistry("x", nil)()
	c.AddBulkhead(nil)()
	c.AddBulkheadRegistry("x", nil)()
	c.AddPartitioned(nil)()
	c.AddPool(nil)()
	c.AddBudget("x", nil)()
	c.AddThrottler("x", nil)()
	if n := len(scrape(t, c)); n != 1 { // watertight_events_overflow_total only
		t.Errorf("%d samples after nil sources, want 1", n)
	}
}

func TestBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 2, MaxWait: -1})
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector(t, watertightprom.Config{})
		c.AddBulkhead(b)
		ctx := context.Background()
		for range 2 {
			if err := b.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- b.Acquire(wctx) }()
		synctest.Wait() // the third caller waits
		if b.TryAcquire() {
			t.Fatal("TryAcquire on a full bulkhead succeeded")
		}
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_max_concurrent{key="",kind="semaphore",name="search"}`: 2,
			`watertight_bulkhead_active{key="",kind="semaphore",name="search"}`:         2,
			`watertight_bulkhead_queued{key="",kind="semaphore",name="search"}`:         1,
			`watertight_bulkhead_available{key="",kind="semaphore",name="search"}`:      0,
			`watertight_bulkhead_rejected_total{key="",kind="semaphore",name="search"}`: 1,
			`watertight_bulkhead_acquired_total{key="",name="search"}`:                  2,
			`watertight_bulkhead_canceled_total{key="",name="search"}`:                  0,
		})
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("cancelled Acquire succeeded")
		}
		b.Release()
		b.Release()
		got = scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_active{key="",kind="semaphore",name="search"}`:    0,
			`watertight_bulkhead_queued{key="",kind="semaphore",name="search"}`:    0,
			`watertight_bulkhead_available{key="",kind="semaphore",name="search"}`: 2,
			`watertight_bulkhead_canceled_total{key="",name="search"}`:             1,
			`watertight_bulkhead_acquired_total{key="",name="search"}`:             2,
		})
	})
}

func TestBulkheadRegistry(t *testing.T) {
	r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 3}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("tenant-a")
	b, _ := r.Get("tenant-b")
	a.TryAcquire()
	a.TryAcquire()
	b.TryAcquire()
	c := newCollector(t, watertightprom.Config{})
	c.AddBulkheadRegistry("tenants", r)
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_bulkhead_active{key="tenant-a",kind="semaphore",name="tenants"}`:    2,
		`watertight_bulkhead_available{key="tenant-a",kind="semaphore",name="tenants"}`: 1,
		`watertight_bulkhead_active{key="tenant-b",kind="semaphore",name="tenants"}`:    1,
	})
	a.Release()
	a.Release()
	b.Release()
}

// A partitioned bulkhead is exported as a bulkhead registry whose keys are
// its partitions, with kind="partitioned": the shared cap and the free
// permits once under the empty key, and per partition its guarantee, what
// it holds and borrows, its queue and its counters.
func TestPartitioned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := bulkhead.NewPartitioned(bulkhead.PartitionedConfig{
			Name:          "api",
			MaxConcurrent: 4,
			Partitions:    []bulkhead.PartitionConfig{{Name: "free", Weight: 1}, {Name: "paid", Weight: 3}},
			Default:       "free",
			Reserve:       -1, // lend every free permit
			MaxWait:       -1, // wait until the caller's context ends
		})
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector(t, watertightprom.Config{})
		c.AddPartitioned(p)
		free, paid := p.Index("free"), p.Index("paid")
		ctx := context.Background()
		for range 3 { // its guarantee (1) and two borrowed
			if err := p.Acquire(ctx, free); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Acquire(ctx, paid); err != nil {
			t.Fatal(err)
		}
		if p.TryAcquire(paid) {
			t.Fatal("TryAcquire with every permit held succeeded")
		}
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- p.Acquire(wctx, free) }()
		synctest.Wait() // a fourth call of free waits in its queue

		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_max_concurrent{key="",kind="partitioned",name="api"}`:     4,
			`watertight_bulkhead_available{key="",kind="partitioned",name="api"}`:          0,
			`watertight_bulkhead_guaranteed{key="free",name="api"}`:                        1,
			`watertight_bulkhead_guaranteed{key="paid",name="api"}`:                        3,
			`watertight_bulkhead_active{key="free",kind="partitioned",name="api"}`:         3,
			`watertight_bulkhead_active{key="paid",kind="partitioned",name="api"}`:         1,
			`watertight_bulkhead_borrowed{key="free",name="api"}`:                          2,
			`watertight_bulkhead_borrowed{key="paid",name="api"}`:                          0,
			`watertight_bulkhead_queued{key="free",kind="partitioned",name="api"}`:         1,
			`watertight_bulkhead_queued{key="paid",kind="partitioned",name="api"}`:         0,
			`watertight_bulkhead_rejected_total{key="free",kind="partitioned",name="api"}`: 0,
			`watertight_bulkhead_rejected_total{key="paid",kind="partitioned",name="api"}`: 1,
			`watertight_bulkhead_acquired_total{key="free",name="api"}`:                    3,
			`watertight_bulkhead_acquired_total{key="paid",name="api"}`:                    1,
			`watertight_bulkhead_canceled_total{key="free",name="api"}`:                    0,
		})
		// What the partitions share is exported once, with the empty key;
		// what each holds, only under its name: a sum over the keys counts
		// nothing twice.
		for _, m := range []string{"active", "queued", "rejected_total", "acquired_total", "canceled_total", "guaranteed", "borrowed"} {
			absent(t, got, `watertight_bulkhead_`+m+`{key="",`)
		}
		for _, m := range []string{"max_concurrent", "available"} {
			absent(t, got, `watertight_bulkhead_`+m+`{key="free"`)
			absent(t, got, `watertight_bulkhead_`+m+`{key="paid"`)
		}

		cancel()
		if err := <-errc; err == nil {
			t.Fatal("cancelled Acquire succeeded")
		}
		p.Release(free)
		p.Release(free) // free gives back what it borrowed
		got = scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_available{key="",kind="partitioned",name="api"}`:  2,
			`watertight_bulkhead_active{key="free",kind="partitioned",name="api"}`: 1,
			`watertight_bulkhead_borrowed{key="free",name="api"}`:                  0,
			`watertight_bulkhead_queued{key="free",kind="partitioned",name="api"}`: 0,
			`watertight_bulkhead_canceled_total{key="free",name="api"}`:            1,
			`watertight_bulkhead_acquired_total{key="free",name="api"}`:            3,
		})
		p.Release(free)
		p.Release(paid)

		// In the family of semaphore bulkheads: a bulkhead of the same name
		// replaces it, and its partitions' series go.
		bh, err := bulkhead.New(bulkhead.Config{Name: "api", MaxConcurrent: 2})
		if err != nil {
			t.Fatal(err)
		}
		c.AddBulkhead(bh)
		got = scrape(t, c)
		absent(t, got, `watertight_bulkhead_guaranteed{`)
		absent(t, got, `watertight_bulkhead_active{key="free"`)
		want(t, got, map[string]float64{`watertight_bulkhead_max_concurrent{key="",kind="semaphore",name="api"}`: 2})
	})
}

func TestPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := bulkhead.NewPool(bulkhead.PoolConfig{Name: "thumbnails", Workers: 1, QueueSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector(t, watertightprom.Config{})
		c.AddPool(p)
		ctx := context.Background()
		release := make(chan struct{})
		if err := p.Submit(ctx, func(context.Context) { <-release }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the worker runs it
		if err := p.Submit(ctx, func(context.Context) {}); err != nil {
			t.Fatal(err)
		}
		if err := p.Submit(ctx, func(context.Context) {}); !errors.Is(err, bulkhead.ErrQueueFull) {
			t.Fatalf("third Submit = %v, want ErrQueueFull", err)
		}
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_max_concurrent{key="",kind="pool",name="thumbnails"}`: 1,
			`watertight_bulkhead_active{key="",kind="pool",name="thumbnails"}`:         1,
			`watertight_bulkhead_queued{key="",kind="pool",name="thumbnails"}`:         1,
			`watertight_bulkhead_available{key="",kind="pool",name="thumbnails"}`:      0,
			`watertight_bulkhead_rejected_total{key="",kind="pool",name="thumbnails"}`: 1,
			`watertight_bulkhead_pool_queue_capacity{name="thumbnails"}`:               1,
			`watertight_bulkhead_pool_completed_total{name="thumbnails"}`:              0,
		})
		close(release)
		synctest.Wait()
		got = scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_bulkhead_active{key="",kind="pool",name="thumbnails"}`:    0,
			`watertight_bulkhead_queued{key="",kind="pool",name="thumbnails"}`:    0,
			`watertight_bulkhead_available{key="",kind="pool",name="thumbnails"}`: 1,
			`watertight_bulkhead_pool_completed_total{name="thumbnails"}`:         2,
		})
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBudgetAndThrottler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bud, err := budget.New(budget.Config{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			bud.Deposit()
		}
		granted := 0
		for range 3 {
			if bud.Withdraw() {
				granted++
			}
		}
		if granted != 2 {
			t.Fatalf("granted %d retries, want 2", granted)
		}
		th, err := budget.NewThrottler(budget.ThrottleConfig{K: 1, Rand: func() float64 { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if th.Allow() == nil {
				th.Accepted()
			}
			th.Allow() // not accepted
		}
		c := newCollector(t, watertightprom.Config{})
		c.AddBudget("payments", bud)
		c.AddThrottler("payments", th)
		got := scrape(t, c)
		ts := th.Snapshot()
		want(t, got, map[string]float64{
			`watertight_budget_deposits_total{name="payments"}`:     4,
			`watertight_budget_withdrawals_total{name="payments"}`:  2,
			`watertight_budget_refused_total{name="payments"}`:      1,
			`watertight_budget_balance{name="payments"}`:            0,
			`watertight_throttler_window_requests{name="payments"}`: float64(ts.Requests),
			`watertight_throttler_window_accepts{name="payments"}`:  float64(ts.Accepts),
			`watertight_throttler_reject_ratio{name="payments"}`:    ts.RejectProbability,
			`watertight_throttler_rejected_total{name="payments"}`:  float64(ts.Rejected),
		})
		if ts.Rejected == 0 || ts.RejectProbability == 0 {
			t.Errorf("throttler snapshot %+v: the test wants local rejections", ts)
		}
	})
}

func TestCountersAreMonotonic(t *testing.T) {
	b, _ := bulkhead.New(bulkhead.Config{Name: "x", MaxConcurrent: 1})
	c := newCollector(t, watertightprom.Config{})
	c.AddBulkhead(b)
	last := map[string]float64{}
	for i := range 5 {
		if b.TryAcquire() {
			b.TryAcquire() // rejected
			b.Release()
		}
		for k, v := range scrape(t, c) {
			if strings.Contains(k, "_total{") {
				if v < last[k] {
					t.Errorf("scrape %d: %s went from %v down to %v", i, k, last[k], v)
				}
				last[k] = v
			}
		}
	}
	want(t, last, map[string]float64{
		`watertight_bulkhead_rejected_total{key="",kind="semaphore",name="x"}`: 5,
		`watertight_bulkhead_acquired_total{key="",name="x"}`:                  5,
	})
}

func TestConstLabelsAndLint(t *testing.T) {
	c := newCollector(t, watertightprom.Config{ConstLabels: prometheus.Labels{"service": "shop"}})
	b, _ := circuit.New(circuit.Config{Name: "a"})
	bh, _ := bulkhead.New(bulkhead.Config{Name: "a"})
	p, _ := bulkhead.NewPool(bulkhead.PoolConfig{Name: "a", Workers: 1})
	defer p.Shutdown(context.Background())
	bud, _ := budget.New(budget.Config{})
	th, _ := budget.NewThrottler(budget.ThrottleConfig{})
	c.AddBreaker(b)
	c.AddBulkhead(bh)
	c.AddPool(p)
	c.AddBudget("a", bud)
	c.AddThrottler("a", th)
	hp, _ := hedge.New(hedge.Config{Name: "a", Delay: time.Millisecond})
	c.AddHedge(hp)
	c.OnEvent(watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "a"})
	c.Latency("a").Exit(context.Background(), watertight.Ticket{}, nil)
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_circuit_state{key="",name="a",service="shop",state="closed"}`:                           1,
		`watertight_bulkhead_max_concurrent{key="",kind="semaphore",name="a",service="shop"}`:               25,
		`watertight_retry_scheduled_total{key="",name="a",service="shop"}`:                                  1,
		`watertight_call_duration_seconds_count{name="a",outcome="success",service="shop"}`:                 1,
		`watertight_events_total{event="retry_scheduled",name="a",reason="",service="shop",source="retry"}`: 1,
	})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  watertightprom.Config
		want string
	}{
		{watertightprom.Config{Buckets: []float64{}}, "Config.Buckets must not be empty"},
		{watertightprom.Config{Buckets: []float64{1, 1}}, "Config.Buckets must be increasing"},
		{watertightprom.Config{Buckets: []float64{2, 1}}, "Config.Buckets must be increasing"},
		{watertightprom.Config{ConstLabels: prometheus.Labels{"name": "x"}}, "Config.ConstLabels"},
		{watertightprom.Config{ConstLabels: prometheus.Labels{"__x": "x"}}, "Config.ConstLabels"},
	} {
		_, err := watertightprom.NewCollector(tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "watertightprom: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCollector(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestDescribeIsFixed(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	count := func() int {
		ch := make(chan *prometheus.Desc, 100)
		c.Describe(ch)
		close(ch)
		n := 0
		for range ch {
			n++
		}
		return n
	}
	before := count()
	b, _ := circuit.New(circuit.Config{Name: "x"})
	c.AddBreaker(b)
	if after := count(); after != before || before < 40 {
		t.Errorf("Describe sent %d descriptions, then %d after adding a breaker; want the same fixed set", before, after)
	}
}

func TestServe(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	b, _ := circuit.New(circuit.Config{Name: "catalog"})
	c.AddBreaker(b)
	srv, err := watertightprom.Serve("127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || !strings.HasSuffix(srv.URL(), "/metrics") {
		t.Errorf("URL() = %q", srv.URL())
	}
	resp, err := http.Get(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %v %v", resp.Status, err)
	}
	for _, line := range []string{
		`watertight_circuit_state{key="",name="catalog",state="closed"} 1`,
		`# TYPE watertight_circuit_opens_total counter`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	resp, err = http.Get(strings.TrimSuffix(srv.URL(), "metrics") + "other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s, want 404", resp.Status)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(srv.URL()); err == nil {
		t.Error("GET after Close succeeded")
	}
	// An address in use is reported by Serve.
	srv2, err := watertightprom.Serve("127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if _, err := watertightprom.Serve(srv2.Addr(), c); err == nil {
		t.Error("Serve on an address in use succeeded")
	}
}

func TestConcurrentScrapes(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	b, _ := bulkhead.New(bulkhead.Config{Name: "x", MaxConcurrent: 4})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	const workers, n = 4, 500
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				c.OnEvent(watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: fmt.Sprint("p", i%7), Key: fmt.Sprint(w)})
				remove := c.AddBulkhead(b)
				if i%10 == 0 {
					remove()
				}
			}
		})
	}
	for range 20 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	got := scrape(t, c)
	total := 0.0
	for k, v := range got {
		if strings.HasPrefix(k, "watertight_retry_scheduled_total{") {
			total += v
		}
	}
	if total != workers*n {
		t.Errorf("retry_scheduled_total adds up to %v, want %d", total, workers*n)
	}
}

// A limiter's gauges follow its snapshot: the limit, what is held, and the
// last window the algorithm judged.
func TestLimiter(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	l, err := limit.New(limit.Config{Name: "api", InitialLimit: 2, MinLimit: 2, MaxLimit: 2, WindowSamples: 2, MinWindow: -1})
	if err != nil {
		t.Fatal(err)
	}
	c.AddLimiter(l)
	p1, _ := l.TryAcquire()
	p1.Done(2 * time.Millisecond)
	p2, _ := l.TryAcquire()
	p2.Drop()
	held, _ := l.TryAcquire()
	defer held.Ignore()
	want(t, scrape(t, c), map[string]float64{
		`watertight_limiter_limit{key="",name="api"}`:                             2,
		`watertight_limiter_in_flight{key="",name="api"}`:                         1,
		`watertight_limiter_acquired_total{key="",name="api"}`:                    3,
		`watertight_limiter_window_drops{key="",name="api"}`:                      1,
		`watertight_limiter_window_latency_seconds{key="",name="api",stat="min"}`: 0.002,
	})
	// A keyed registry: one series per key.
	reg, err := limit.NewRegistry(limit.RegistryConfig{Config: limit.Config{InitialLimit: 3}})
	if err != nil {
		t.Fatal(err)
	}
	c.AddLimiterRegistry("upstreams", reg)
	a, _ := reg.Get("a.example")
	pa, _ := a.TryAcquire()
	defer pa.Ignore()
	_, _ = reg.Get("b.example")
	want(t, scrape(t, c), map[string]float64{
		`watertight_limiter_limit{key="a.example",name="upstreams"}`:     3,
		`watertight_limiter_in_flight{key="a.example",name="upstreams"}`: 1,
		`watertight_limiter_in_flight{key="b.example",name="upstreams"}`: 0,
	})
}
