package watertightprom_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/retry"
)

// signal is one row of the table of signals in docs/observability.md.
type signal struct {
	prom, promType, otel, instrument, unit string
	labels                                 []string // Prometheus label names, sorted
}

// docSignals parses the table between the signals markers of
// docs/observability.md, the list of what both exporters export.
func docSignals(t *testing.T) map[string]signal {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "observability.md")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the table of signals is in %s: %v", path, err)
	}
	defer f.Close()
	code := regexp.MustCompile("^`([^`]*)`$")
	unquote := func(cell string) string {
		if m := code.FindStringSubmatch(cell); m != nil {
			return m[1]
		}
		return cell
	}
	out := map[string]signal{}
	in, line := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(text, "<!-- signals:begin"):
			in = true
			continue
		case strings.HasPrefix(text, "<!-- signals:end"):
			in = false
			continue
		}
		if !in || !strings.HasPrefix(text, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), " | ")
		if len(cells) != 8 {
			t.Fatalf("%s:%d: %d cells, want 8 (Prometheus | type | OpenTelemetry | instrument | unit | labels | from | meaning)", path, line, len(cells))
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		s := signal{prom: unquote(cells[0]), promType: cells[1], otel: unquote(cells[2]), instrument: cells[3], unit: unquote(cells[4])}
		if cells[5] != "—" {
			for _, l := range strings.Split(cells[5], ",") {
				s.labels = append(s.labels, unquote(strings.TrimSpace(l)))
			}
		}
		slices.Sort(s.labels)
		if _, dup := out[s.prom]; dup {
			t.Errorf("%s:%d: %s listed twice", path, line, s.prom)
		}
		out[s.prom] = s
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 40 {
		t.Fatalf("%s: found %d signals between the signals markers; the table is missing or malformed", path, len(out))
	}
	return out
}

// everySignal is a Collector fed by one source of each family and one event
// of each kind that has a metric of its own, so that it exports every metric.
func everySignal(t *testing.T) *watertightprom.Collector {
	t.Helper()
	c := newCollector(t, watertightprom.Config{})
	// A closed breaker with a failure ratio of 0.25, and one forced open
	// (a transition).
	b, _ := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 4})
	c.AddBreaker(b)
	for range 3 {
		p, _ := b.Allow()
		p.Done(watertight.Success)
	}
	fail(b, 1)
	open, _ := circuit.New(circuit.Config{Name: "search", Listener: c})
	c.AddBreaker(open)
	open.ForceOpen()
	bh, _ := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 1})
	c.AddBulkhead(bh)
	part, _ := bulkhead.NewPartitioned(bulkhead.PartitionedConfig{Name: "tenants", MaxConcurrent: 4, Partitions: []bulkhead.PartitionConfig{{Name: "free"}, {Name: "paid", Weight: 3}}})
	c.AddPartitioned(part)
	p, _ := bulkhead.NewPool(bulkhead.PoolConfig{Name: "jobs", Workers: 1})
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	c.AddPool(p)
	bud, _ := budget.New(budget.Config{})
	c.AddBudget("payments", bud)
	th, _ := budget.NewThrottler(budget.ThrottleConfig{})
	c.AddThrottler("payments", th)
	hp, _ := hedge.New(hedge.Config{Name: "search", Delay: time.Millisecond})
	c.AddHedge(hp)
	lim, _ := limit.New(limit.Config{Name: "api"})
	c.AddLimiter(lim)
	for _, e := range []watertight.Event{
		{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "payments"},
		{Kind: watertight.EventRetryExhausted, Source: "retry", Name: "payments"},
		{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Err: retry.ErrNoTime, Code: retry.CodeNoTime},
		{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /", Err: errors.New("x"), Code: "route_full"},
		{Kind: watertight.EventFallbackUsed, Source: "fallback", Name: "payments", Code: "stale"},
		{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Reason: "malformed", Code: "malformed"},
	} {
		c.OnEvent(e)
	}
	l := c.Latency("payments")
	ctx, tk, _ := l.Enter(context.Background())
	l.Exit(ctx, tk, nil)
	return c
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// The Collector exports exactly the signals of the table in
// docs/observability.md, each with the type and labels written there: a
// metric added to the Collector and not to the table (which lists the
// OpenTelemetry name beside it) fails here.
func TestExportedSignalsMatchDocs(t *testing.T) {
	doc := docSignals(t)
	c := everySignal(t)

	// Describe: the fixed set of metric names.
	ch := make(chan *prometheus.Desc, 200)
	c.Describe(ch)
	close(ch)
	described := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		described[m[1]] = true
	}
	for name := range described {
		if _, ok := doc[name]; !ok {
			t.Errorf("the Collector describes %s, which the table of signals in docs/observability.md does not list (add a row with its OpenTelemetry name, and export it from contrib/watertightotel too)", name)
		}
	}
	for name, s := range doc {
		if !described[name] {
			t.Errorf("the table of signals lists %s (OpenTelemetry %s), which the Collector does not describe", name, s.otel)
		}
		if s.otel == "" || !strings.HasPrefix(s.otel, "watertight.") || strings.Contains(s.otel, "_total") {
			t.Errorf("%s: OpenTelemetry name %q: want watertight.<pattern>.<what>, without _total", name, s.otel)
		}
	}

	// Gather: what is exported, with its type and labels.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	gathered := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		gathered[name] = true
		s, ok := doc[name]
		if !ok {
			t.Errorf("the Collector exports %s, which the table of signals does not list", name)
			continue
		}
		if got := types[mf.GetType()]; got != s.promType {
			t.Errorf("%s is a %s (%v), the table says %s", name, got, mf.GetType(), s.promType)
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName())
			}
			slices.Sort(ls)
			if !slices.Equal(ls, s.labels) {
				t.Errorf("%s has the labels %v, the table says %v", name, ls, s.labels)
				break
			}
		}
		checkName(t, s)
		if strings.HasSuffix(name, "_ratio") {
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); !(v >= 0 && v <= 1) {
					t.Errorf("%s = %v, want a ratio from 0 to 1", name, v)
				}
			}
		}
	}
	for name := range doc {
		if !gathered[name] {
			t.Errorf("%s is in the table but was not exported by a Collector fed one source of each family and every event kind", name)
		}
	}
}

// checkName applies Prometheus's naming practices to one row of the table.
func checkName(t *testing.T, s signal) {
	t.Helper()
	name := s.prom
	if !strings.HasPrefix(name, "watertight_") {
		t.Errorf("%s: want the prefix watertight_", name)
	}
	if (s.promType == "counter") != strings.HasSuffix(name, "_total") {
		t.Errorf("%s (%s): counters, and only counters, end in _total", name, s.promType)
	}
	if s.unit == "s" && !strings.Contains(name, "_seconds") {
		t.Errorf("%s: a duration in seconds (OpenTelemetry unit s) is named _seconds", name)
	}
	if s.unit == "1" && !strings.HasSuffix(name, "_ratio") {
		t.Errorf("%s: a ratio (OpenTelemetry unit 1) ends in _ratio", name)
	}
	if strings.HasSuffix(name, "_ratio") && s.unit != "1" {
		t.Errorf("%s: ends in _ratio, so its OpenTelemetry unit is 1, not %s", name, s.unit)
	}
	for _, bad := range []string{"_rate", "_percent", "_probability", "_milliseconds"} {
		if strings.HasSuffix(name, bad) {
			t.Errorf("%s: ends in %s (a ratio ends in _ratio, a duration in _seconds)", name, bad)
		}
	}
}
