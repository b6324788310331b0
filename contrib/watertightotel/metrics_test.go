package watertightotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
)

var errBoom = errors.New("boom")

// harness is a Metrics on an SDK MeterProvider with a ManualReader.
type harness struct {
	m      *watertightotel.Metrics
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newHarness(t *testing.T, cfg watertightotel.Config) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.MeterProvider = mp
	m, err := watertightotel.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		m.Close()
		mp.Shutdown(context.Background())
	})
	return &harness{m: m, reader: reader, mp: mp}
}

// instrument describes one collected metric.
type instrument struct {
	unit      string
	kind      string // "gauge", "counter", "updown", "histogram"
	temporal  metricdata.Temporality
	monotonic bool
}

// collect returns every data point as name{k="v",...} (attributes sorted) →
// value, histograms as name_count{...} and name_sum{...}, and what each
// metric is.
func (h *harness) collect(t *testing.T) (map[string]float64, map[string]instrument) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]float64{}
	kinds := map[string]instrument{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != watertightotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, watertightotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			in := instrument{unit: m.Unit}
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				in.kind = "gauge"
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				in.kind = "gauge"
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = dp.Value
				}
			case metricdata.Sum[int64]:
				in.kind, in.temporal, in.monotonic = "updown", d.Temporality, d.IsMonotonic
				if d.IsMonotonic {
					in.kind = "counter"
				}
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				in.kind, in.temporal = "histogram", d.Temporality
				for _, dp := range d.DataPoints {
					out[m.Name+"_count"+attrs(dp.Attributes)] = float64(dp.Count)
					out[m.Name+"_sum"+attrs(dp.Attributes)] = dp.Sum
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			kinds[m.Name] = in
		}
	}
	return out, kinds
}

func attrs(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, fmt.Sprintf("%s=%q", kv.Key, kv.Value.String()))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

func want(t *testing.T, got map[string]float64, samples map[string]float64) {
	t.Helper()
	for k, v := range samples {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing data point %s (want %v)", k, v)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func absent(t *testing.T, got map[string]float64, prefix string) {
	t.Helper()
	for k := range got {
		if strings.HasPrefix(k, prefix) {
			t.Errorf("unexpected data point %s", k)
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
		h := newHarness(t, watertightotel.Config{})
		b, err := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 4, OpenDuration: time.Second, OpenJitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		h.m.AddBreaker(b)
		for range 3 {
			p, _ := b.Allow()
			p.Done(watertight.Success)
		}
		fail(b, 1)
		got, kinds := h.collect(t)
		const nk = `{watertight.key="",watertight.name="payments"}`
		want(t, got, map[string]float64{
			`watertight.circuit.state{state="closed",watertight.key="",watertight.name="payments"}`:       1,
			`watertight.circuit.state{state="open",watertight.key="",watertight.name="payments"}`:         0,
			`watertight.circuit.state{state="metrics-only",watertight.key="",watertight.name="payments"}`: 0,
			"watertight.circuit.window.calls" + nk:                                                        4,
			"watertight.circuit.window.failures" + nk:                                                     1,
			"watertight.circuit.failure_ratio" + nk:                                                       0.25,
			"watertight.circuit.opens" + nk:                                                               0,
		})
		for name, w := range map[string]instrument{
			"watertight.circuit.state":         {unit: "{state}", kind: "gauge"},
			"watertight.circuit.failure_ratio": {unit: "1", kind: "gauge"},
			"watertight.circuit.window.calls":  {unit: "{call}", kind: "gauge"},
			"watertight.circuit.rejections":    {unit: "{call}", kind: "counter", temporal: metricdata.CumulativeTemporality, monotonic: true},
			"watertight.circuit.trial_calls":   {unit: "{call}", kind: "updown", temporal: metricdata.CumulativeTemporality},
		} {
			if kinds[name] != w {
				t.Errorf("%s is %+v, want %+v", name, kinds[name], w)
			}
		}

		fail(b, 2) // 3 of 6 failed: opens
		b.Allow()
		got, _ = h.collect(t)
		want(t, got, map[string]float64{
			`watertight.circuit.state{state="closed",watertight.key="",watertight.name="payments"}`: 0,
			`watertight.circuit.state{state="open",watertight.key="",watertight.name="payments"}`:   1,
			"watertight.circuit.opens" + nk:      1,
			"watertight.circuit.rejections" + nk: 1,
		})
		time.Sleep(time.Second)
		synctest.Wait()
		got, _ = h.collect(t)
		want(t, got, map[string]float64{
			`watertight.circuit.state{state="half-open",watertight.key="",watertight.name="payments"}`: 1,
		})
	})
}

func TestRegistriesAndReplace(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	br, _ := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{WindowSize: 4, MinCalls: 2}})
	eu, _ := br.Get("eu")
	fail(eu, 2)
	br.Get("us")
	bh, _ := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 3}})
	a, _ := bh.Get("tenant-a")
	a.TryAcquire()
	defer a.Release()
	h.m.AddBreakerRegistry("hosts", br)
	removeBH := h.m.AddBulkheadRegistry("tenants", bh)
	got, _ := h.collect(t)
	want(t, got, map[string]float64{
		`watertight.circuit.state{state="open",watertight.key="eu",watertight.name="hosts"}`:                  1,
		`watertight.circuit.state{state="closed",watertight.key="us",watertight.name="hosts"}`:                1,
		`watertight.bulkhead.active{kind="semaphore",watertight.key="tenant-a",watertight.name="tenants"}`:    1,
		`watertight.bulkhead.available{kind="semaphore",watertight.key="tenant-a",watertight.name="tenants"}`: 2,
	})

	single, _ := bulkhead.New(bulkhead.Config{Name: "tenants", MaxConcurrent: 7})
	removeSingle := h.m.AddBulkhead(single) // replaces the registry
	removeBH()                              // no longer registered: does nothing
	got, _ = h.collect(t)
	absent(t, got, `watertight.bulkhead.active{kind="semaphore",watertight.key="tenant-a"`)
	want(t, got, map[string]float64{
		`watertight.bulkhead.limit{kind="semaphore",watertight.key="",watertight.name="tenants"}`: 7,
	})
	removeSingle()
	got, _ = h.collect(t)
	absent(t, got, "watertight.bulkhead.")
	for _, remove := range []func(){
		h.m.AddBreaker(nil), h.m.AddBreakerRegistry("x", nil), h.m.AddBulkhead(nil), h.m.AddBulkheadRegistry("x", nil),
		h.m.AddPartitioned(nil), h.m.AddPool(nil), h.m.AddBudget("x", nil), h.m.AddThrottler("x", nil),
	} {
		remove()
	}
}

func TestBulkheadPoolBudgetThrottler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, watertightotel.Config{})
		sem, _ := bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 2, MaxWait: -1})
		ctx := context.Background()
		sem.Acquire(ctx)
		sem.Acquire(ctx)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sem.Acquire(wctx) }()
		synctest.Wait()
		sem.TryAcquire()

		pool, _ := bulkhead.NewPool(bulkhead.PoolConfig{Name: "thumbs", Workers: 1, QueueSize: 1})
		release := make(chan struct{})
		pool.Submit(ctx, func(context.Context) { <-release })
		synctest.Wait()
		pool.Submit(ctx, func(context.Context) {})
		pool.Submit(ctx, func(context.Context) {}) // queue full

		bud, _ := budget.New(budget.Config{Ratio: 0.5, MinPerSecond: -1})
		bud.Deposit()
		bud.Deposit()
		bud.Withdraw()
		bud.Withdraw()
		th, _ := budget.NewThrottler(budget.ThrottleConfig{})
		th.Allow()
		th.Accepted()

		h.m.AddBulkhead(sem)
		h.m.AddPool(pool)
		h.m.AddBudget("payments", bud)
		h.m.AddThrottler("payments", th)
		got, kinds := h.collect(t)
		want(t, got, map[string]float64{
			`watertight.bulkhead.limit{kind="semaphore",watertight.key="",watertight.name="search"}`:      2,
			`watertight.bulkhead.active{kind="semaphore",watertight.key="",watertight.name="search"}`:     2,
			`watertight.bulkhead.queued{kind="semaphore",watertight.key="",watertight.name="search"}`:     1,
			`watertight.bulkhead.available{kind="semaphore",watertight.key="",watertight.name="search"}`:  0,
			`watertight.bulkhead.rejections{kind="semaphore",watertight.key="",watertight.name="search"}`: 1,
			`watertight.bulkhead.acquisitions{watertight.key="",watertight.name="search"}`:                2,
			`watertight.bulkhead.limit{kind="pool",watertight.key="",watertight.name="thumbs"}`:           1,
			`watertight.bulkhead.active{kind="pool",watertight.key="",watertight.name="thumbs"}`:          1,
			`watertight.bulkhead.queued{kind="pool",watertight.key="",watertight.name="thumbs"}`:          1,
			`watertight.bulkhead.rejections{kind="pool",watertight.key="",watertight.name="thumbs"}`:      1,
			`watertight.bulkhead.pool.queue.capacity{watertight.name="thumbs"}`:                           1,
			`watertight.budget.deposits{watertight.name="payments"}`:                                      2,
			`watertight.budget.withdrawals{watertight.name="payments"}`:                                   1,
			`watertight.budget.refusals{watertight.name="payments"}`:                                      1,
			`watertight.budget.balance{watertight.name="payments"}`:                                       0,
			`watertight.throttler.window.requests{watertight.name="payments"}`:                            1,
			`watertight.throttler.window.accepts{watertight.name="payments"}`:                             1,
			`watertight.throttler.reject_ratio{watertight.name="payments"}`:                               0,
			`watertight.throttler.rejections{watertight.name="payments"}`:                                 0,
		})
		if k := kinds["watertight.bulkhead.active"]; k.kind != "updown" || k.unit != "{call}" {
			t.Errorf("watertight.bulkhead.active is %+v", k)
		}
		cancel()
		<-done
		sem.Release()
		sem.Release()
		close(release)
		synctest.Wait()
		got, _ = h.collect(t)
		want(t, got, map[string]float64{
			`watertight.bulkhead.active{kind="semaphore",watertight.key="",watertight.name="search"}`: 0,
			`watertight.bulkhead.cancellations{watertight.key="",watertight.name="search"}`:           1,
			`watertight.bulkhead.pool.completed{watertight.name="thumbs"}`:                            2,
		})
		pool.Shutdown(ctx)
	})
}

// A partitioned bulkhead is reported as a bulkhead registry whose keys are
// its partitions, with kind "partitioned": the shared limit and the free
// permits once under the empty key, and per partition its guarantee, what
// it holds and borrows, its queue and its counters.
func TestPartitioned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, watertightotel.Config{})
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
		h.m.AddPartitioned(p)
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

		got, kinds := h.collect(t)
		want(t, got, map[string]float64{
			`watertight.bulkhead.limit{kind="partitioned",watertight.key="",watertight.name="api"}`:          4,
			`watertight.bulkhead.available{kind="partitioned",watertight.key="",watertight.name="api"}`:      0,
			`watertight.bulkhead.guaranteed{watertight.key="free",watertight.name="api"}`:                    1,
			`watertight.bulkhead.guaranteed{watertight.key="paid",watertight.name="api"}`:                    3,
			`watertight.bulkhead.active{kind="partitioned",watertight.key="free",watertight.name="api"}`:     3,
			`watertight.bulkhead.active{kind="partitioned",watertight.key="paid",watertight.name="api"}`:     1,
			`watertight.bulkhead.borrowed{watertight.key="free",watertight.name="api"}`:                      2,
			`watertight.bulkhead.borrowed{watertight.key="paid",watertight.name="api"}`:                      0,
			`watertight.bulkhead.queued{kind="partitioned",watertight.key="free",watertight.name="api"}`:     1,
			`watertight.bulkhead.queued{kind="partitioned",watertight.key="paid",watertight.name="api"}`:     0,
			`watertight.bulkhead.rejections{kind="partitioned",watertight.key="free",watertight.name="api"}`: 0,
			`watertight.bulkhead.rejections{kind="partitioned",watertight.key="paid",watertight.name="api"}`: 1,
			`watertight.bulkhead.acquisitions{watertight.key="free",watertight.name="api"}`:                  3,
			`watertight.bulkhead.acquisitions{watertight.key="paid",watertight.name="api"}`:                  1,
			`watertight.bulkhead.cancellations{watertight.key="free",watertight.name="api"}`:                 0,
		})
		for _, name := range []string{"guaranteed", "borrowed"} {
			if k := kinds["watertight.bulkhead."+name]; k.kind != "updown" || k.unit != "{permit}" {
				t.Errorf("watertight.bulkhead.%s is %+v, want an up-down counter in {permit}", name, k)
			}
		}
		// What the partitions share is reported once, with the empty key;
		// what each holds, only under its name.
		for _, m := range []string{"active", "queued", "rejections"} {
			absent(t, got, `watertight.bulkhead.`+m+`{kind="partitioned",watertight.key="",`)
		}
		for _, m := range []string{"acquisitions", "cancellations", "guaranteed", "borrowed"} {
			absent(t, got, `watertight.bulkhead.`+m+`{watertight.key="",`)
		}
		for _, m := range []string{"limit", "available"} {
			absent(t, got, `watertight.bulkhead.`+m+`{kind="partitioned",watertight.key="free"`)
			absent(t, got, `watertight.bulkhead.`+m+`{kind="partitioned",watertight.key="paid"`)
		}

		cancel()
		if err := <-errc; err == nil {
			t.Fatal("cancelled Acquire succeeded")
		}
		p.Release(free)
		p.Release(free) // free gives back what it borrowed
		got, _ = h.collect(t)
		want(t, got, map[string]float64{
			`watertight.bulkhead.available{kind="partitioned",watertight.key="",watertight.name="api"}`:  2,
			`watertight.bulkhead.active{kind="partitioned",watertight.key="free",watertight.name="api"}`: 1,
			`watertight.bulkhead.borrowed{watertight.key="free",watertight.name="api"}`:                  0,
			`watertight.bulkhead.queued{kind="partitioned",watertight.key="free",watertight.name="api"}`: 0,
			`watertight.bulkhead.cancellations{watertight.key="free",watertight.name="api"}`:             1,
			`watertight.bulkhead.acquisitions{watertight.key="free",watertight.name="api"}`:              3,
		})
		p.Release(free)
		p.Release(paid)
	})
}

func TestClose(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	b, _ := circuit.New(circuit.Config{Name: "x"})
	h.m.AddBreaker(b)
	if err := h.m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, _ := h.collect(t)
	absent(t, got, "watertight.circuit.")
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  watertightotel.Config
		want string
	}{
		{watertightotel.Config{Buckets: []float64{}}, "Config.Buckets must not be empty"},
		{watertightotel.Config{Buckets: []float64{0.1, 0.1}}, "Config.Buckets must be increasing"},
	} {
		_, err := watertightotel.New(tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "watertightotel: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	// The zero Config uses the global MeterProvider (a no-op one here).
	m, err := watertightotel.New(watertightotel.Config{})
	if err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	m.Close()
}

func TestConcurrentCollect(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	b, _ := bulkhead.New(bulkhead.Config{Name: "x"})
	var wg sync.WaitGroup
	const workers, n = 4, 500
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				h.m.OnEvent(watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: fmt.Sprint("r", i%5), Key: fmt.Sprint(w)})
				remove := h.m.AddBulkhead(b)
				if i%10 == 0 {
					remove()
				}
			}
		})
	}
	for range 20 {
		h.collect(t)
	}
	wg.Wait()
	got, _ := h.collect(t)
	total := 0.0
	for k, v := range got {
		if strings.HasPrefix(k, "watertight.retry.scheduled{") {
			total += v
		}
	}
	if total != workers*n {
		t.Errorf("watertight.retry.scheduled adds up to %v, want %d", total, workers*n)
	}
}
