package watertightotel_test

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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
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

// everySignal is a Metrics fed by one source of each family and one event
// of each kind that has an instrument of its own, so that it reports every
// instrument.
func everySignal(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, watertightotel.Config{})
	m := h.m
	// A closed breaker with a failure ratio of 0.25, and one forced open
	// (a transition).
	b, _ := circuit.New(circuit.Config{Name: "payments", WindowSize: 10, MinCalls: 4})
	m.AddBreaker(b)
	for range 3 {
		p, _ := b.Allow()
		p.Done(watertight.Success)
	}
	fail(b, 1)
	open, _ := circuit.New(circuit.Config{Name: "search", Listener: m})
	m.AddBreaker(open)
	open.ForceOpen()
	bh, _ := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 1})
	m.AddBulkhead(bh)
	part, _ := bulkhead.NewPartitioned(bulkhead.PartitionedConfig{Name: "tenants", MaxConcurrent: 4, Partitions: []bulkhead.PartitionConfig{{Name: "free"}, {Name: "paid", Weight: 3}}})
	m.AddPartitioned(part)
	p, _ := bulkhead.NewPool(bulkhead.PoolConfig{Name: "jobs", Workers: 1})
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	m.AddPool(p)
	bud, _ := budget.New(budget.Config{})
	m.AddBudget("payments", bud)
	th, _ := budget.NewThrottler(budget.ThrottleConfig{})
	m.AddThrottler("payments", th)
	hp, _ := hedge.New(hedge.Config{Name: "search", Delay: time.Millisecond})
	m.AddHedge(hp)
	lim, _ := limit.New(limit.Config{Name: "api"})
	m.AddLimiter(lim)
	for _, e := range []watertight.Event{
		{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "payments"},
		{Kind: watertight.EventRetryExhausted, Source: "retry", Name: "payments"},
		{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Err: retry.ErrNoTime},
		{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /", Err: errors.New("x")},
		{Kind: watertight.EventFallbackUsed, Source: "fallback", Name: "payments"},
		{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Reason: "malformed"},
	} {
		m.OnEvent(e)
	}
	l := m.Latency("payments")
	ctx, tk, _ := l.Enter(context.Background())
	l.Exit(ctx, tk, nil)
	return h
}

// otelAttr is the attribute a Prometheus label of the table becomes.
func otelAttr(label string) string {
	switch label {
	case "name":
		return string(watertightotel.AttrName)
	case "key":
		return string(watertightotel.AttrKey)
	}
	return label
}

// Metrics reports exactly the signals of the table in docs/observability.md,
// each under the OpenTelemetry name, instrument, unit and attributes written
// there: an instrument added to Metrics and not to the table (which lists
// the Prometheus name beside it) fails here.
func TestExportedSignalsMatchDocs(t *testing.T) {
	doc := map[string]signal{}
	for _, s := range docSignals(t) {
		if _, dup := doc[s.otel]; dup {
			t.Errorf("the table of signals lists the OpenTelemetry name %s twice", s.otel)
		}
		doc[s.otel] = s
	}
	h := everySignal(t)
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	instruments := map[string]string{"gauge": "gauge", "counter": "counter", "up-down counter": "updown", "histogram": "histogram"}
	reported := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			reported[md.Name] = true
			s, ok := doc[md.Name]
			if !ok {
				t.Errorf("Metrics reports %s, which the table of signals in docs/observability.md does not list (add a row with its Prometheus name, and export it from contrib/watertightprom too)", md.Name)
				continue
			}
			var kind string
			var sets []attribute.Set
			var values []float64
			switch d := md.Data.(type) {
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, dp := range d.DataPoints {
					sets, values = append(sets, dp.Attributes), append(values, float64(dp.Value))
				}
			case metricdata.Gauge[float64]:
				kind = "gauge"
				for _, dp := range d.DataPoints {
					sets, values = append(sets, dp.Attributes), append(values, dp.Value)
				}
			case metricdata.Sum[int64]:
				kind = "updown"
				if d.IsMonotonic {
					kind = "counter"
				}
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				kind = "histogram"
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			default:
				t.Errorf("%s: unexpected data %T", md.Name, md.Data)
				continue
			}
			if want := instruments[s.instrument]; kind != want {
				t.Errorf("%s is a %s, the table says %q", md.Name, kind, s.instrument)
			}
			if md.Unit != s.unit {
				t.Errorf("%s has the unit %q, the table says %q", md.Name, md.Unit, s.unit)
			}
			var want []string
			for _, l := range s.labels {
				want = append(want, otelAttr(l))
			}
			slices.Sort(want)
			for _, set := range sets {
				var got []string
				for _, kv := range set.ToSlice() {
					got = append(got, string(kv.Key))
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("%s has the attributes %v, the table says %v", md.Name, got, want)
					break
				}
			}
			checkName(t, s)
			if s.unit == "1" {
				for _, v := range values {
					if !(v >= 0 && v <= 1) {
						t.Errorf("%s = %v, want a ratio from 0 to 1", md.Name, v)
					}
				}
			}
		}
	}
	for name, s := range doc {
		if !reported[name] {
			t.Errorf("the table of signals lists %s (Prometheus %s), which Metrics fed one source of each family and every event kind did not report", name, s.prom)
		}
	}
}

var otelName = regexp.MustCompile(`^watertight(\.[a-z][a-z0-9_]*)+$`)

// checkName applies OpenTelemetry's naming conventions to one row of the
// table.
func checkName(t *testing.T, s signal) {
	t.Helper()
	name := s.otel
	if !otelName.MatchString(name) {
		t.Errorf("%s: want watertight.<pattern>.<what>, dotted, lower case", name)
	}
	for _, bad := range []string{"_total", "_seconds", "_count", "_rate", "_percent"} {
		if strings.HasSuffix(name, bad) {
			t.Errorf("%s: ends in %s (no unit nor _total in OpenTelemetry names; a ratio is _ratio with the unit 1)", name, bad)
		}
	}
	if (s.unit == "1") != strings.HasSuffix(name, "_ratio") {
		t.Errorf("%s (unit %q): the unit 1 is for ratios only, named _ratio", name, s.unit)
	}
	if !(s.unit == "1" || s.unit == "s" || strings.HasPrefix(s.unit, "{") && strings.HasSuffix(s.unit, "}")) {
		t.Errorf("%s: unit %q: want s, 1 or an annotation such as {call}", name, s.unit)
	}
}

// No OpenTelemetry name is the namespace of another (semantic conventions:
// names must not coincide with namespaces).
func TestSignalNamesAreNotNamespaces(t *testing.T) {
	var names []string
	for _, s := range docSignals(t) {
		names = append(names, s.otel)
	}
	for _, a := range names {
		for _, b := range names {
			if strings.HasPrefix(b, a+".") {
				t.Errorf("%s is an instrument and the namespace of %s", a, b)
			}
		}
	}
}
