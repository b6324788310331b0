package watertightprom_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
)

// dashboardFile is the Grafana dashboard for the Collector's metrics.
var dashboardFile = filepath.Join("grafana", "watertight.json")

// grafanaDashboard is the part of Grafana's dashboard JSON model the test
// reads.
type grafanaDashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

type grafanaPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr         string          `json:"expr"`
		LegendFormat string          `json:"legendFormat"`
		RefID        string          `json:"refId"`
		Datasource   json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

// exportedMetrics gathers a Collector that watches one source of every
// family and has counted events of every kind with a metric (everySignal),
// and returns each series name it exports with its label names. A
// histogram's series are its _bucket (with le), _sum and _count.
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(everySignal(t)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	add := func(name string, labels ...string) {
		for _, l := range labels {
			if !slices.Contains(out[name], l) {
				out[name] = append(out[name], l)
			}
		}
		if out[name] == nil {
			out[name] = []string{}
		}
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName())
			}
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				add(mf.GetName()+"_bucket", append(labels, "le")...)
				add(mf.GetName()+"_sum", labels...)
				add(mf.GetName()+"_count", labels...)
				continue
			}
			add(mf.GetName(), labels...)
		}
	}
	return out
}

// grafanaMacros are the variables Grafana replaces in a query before it
// sends it, with a value of the right type for the parser.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// checkPromQL parses expr (Grafana's macros replaced) and checks it against
// the exported metrics: every series selector names a metric the Collector
// exports (a regular expression on __name__ must match one), every label
// it matches on is one of that metric's, and every label an aggregation
// groups by is a label of a metric under it. It returns the metrics named
// and the labels of the metrics selected.
func checkPromQL(t *testing.T, where, expr string, metrics map[string][]string) (names []string, labels []string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaMacros.Replace(expr))
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil, nil
	}
	labelsOf := func(vs *parser.VectorSelector) []string {
		var ls []string
		var nameRe *regexp.Regexp
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				switch m.Type.String() {
				case "=":
					name = m.Value
				case "=~":
					nameRe = regexp.MustCompile("^(?:" + m.Value + ")$")
				}
			}
		}
		var selected []string
		switch {
		case name != "":
			if _, ok := metrics[name]; !ok {
				t.Errorf("%s: %q names %s, which the Collector does not export", where, expr, name)
				return nil
			}
			selected = []string{name}
		case nameRe != nil:
			for n := range metrics {
				if nameRe.MatchString(n) {
					selected = append(selected, n)
				}
			}
			if len(selected) == 0 {
				t.Errorf("%s: %q selects no metric the Collector exports", where, expr)
			}
		default:
			t.Errorf("%s: %q has a selector without a metric name", where, expr)
		}
		for _, n := range selected {
			names = append(names, n)
			for _, l := range metrics[n] {
				if !slices.Contains(ls, l) {
					ls = append(ls, l)
				}
			}
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" && !slices.Contains(ls, m.Name) {
				t.Errorf("%s: %q matches on the label %s, which %v do not have", where, expr, m.Name, selected)
			}
		}
		return ls
	}
	selected := map[*parser.VectorSelector][]string{} // checked once each
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			selected[vs] = labelsOf(vs)
		}
		return nil
	})
	selLabels := func(n parser.Node) []string {
		var ls []string
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				for _, l := range selected[vs] {
					if !slices.Contains(ls, l) {
						ls = append(ls, l)
					}
				}
			}
			return nil
		})
		return ls
	}
	labels = selLabels(e)
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if ag, ok := n.(*parser.AggregateExpr); ok && !ag.Without {
			inner := selLabels(ag.Expr)
			for _, g := range ag.Grouping {
				if !slices.Contains(inner, g) {
					t.Errorf("%s: %q groups by %s, which no metric under the aggregation has", where, expr, g)
				}
			}
		}
		return nil
	})
	return names, labels
}

// The dashboard in grafana/watertight.json is a Grafana dashboard for the
// Collector's metrics: every query parses as PromQL and names metrics and
// labels the Collector exports, and it has a panel for each protection.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("the dashboard needs a uid, a title and a schemaVersion to import: %q %q %d", d.UID, d.Title, d.SchemaVersion)
	}
	metrics := exportedMetrics(t)
	used := map[string]bool{}
	legend := regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	ids := map[int]bool{}
	var walk func(ps []grafanaPanel)
	queries := 0
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v is outside Grafana's 24 columns", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if !strings.Contains(string(p.Datasource), "${datasource}") {
				t.Errorf("panel %q: its datasource is %s, want the ${datasource} variable (so that the dashboard imports anywhere)", p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				queries++
				where := "panel " + p.Title
				names, labels := checkPromQL(t, where, tg.Expr, metrics)
				for _, n := range names {
					used[n] = true
				}
				for _, m := range legend.FindAllStringSubmatch(tg.LegendFormat, -1) {
					if !slices.Contains(labels, m[1]) {
						t.Errorf("%s: the legend %q names the label %s, which the query's metrics do not have", where, tg.LegendFormat, m[1])
					}
				}
			}
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		queries++
		names, _ := checkPromQL(t, "annotation "+a.Name, a.Expr, metrics)
		for _, n := range names {
			used[n] = true
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
				continue
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		queries++
		if _, labels := checkPromQL(t, "variable "+v.Name, m[1], metrics); !slices.Contains(labels, m[2]) {
			t.Errorf("variable %s: the metrics %s selects have no label %s", v.Name, m[1], m[2])
		}
	}
	if queries < 30 {
		t.Errorf("only %d queries found: is the dashboard's structure what the test reads?", queries)
	}
	// A panel for each protection, and for the reasons.
	for _, m := range []string{
		"watertight_circuit_state", "watertight_circuit_transitions_total", "watertight_circuit_failure_ratio",
		"watertight_circuit_slow_call_ratio", "watertight_circuit_rejected_total",
		"watertight_bulkhead_active", "watertight_bulkhead_queued", "watertight_bulkhead_rejected_total",
		"watertight_budget_balance", "watertight_budget_refused_total",
		"watertight_hedge_sent_total", "watertight_hedge_won_total", "watertight_hedge_suppressed_total",
		"watertight_limiter_limit", "watertight_limiter_in_flight",
		"watertight_shed_total", "watertight_retry_skipped_total", "watertight_events_total",
		"watertight_call_duration_seconds_bucket",
	} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}
