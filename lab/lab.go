// Package lab holds watertight's lab: scenarios that reproduce what the
// literature says about each pattern, using the shipped packages (not copies
// of them), with tables, charts and pass/fail checks against the published
// figures. The watertight command runs them (`watertight lab`).
//
// Simulations are seeded discrete-event simulations on a clock of their
// own: the same seed gives the same numbers. Scenarios on a real network
// (127.0.0.1) report their own noise.
package lab

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
)

// Options are what a scenario run may be told from the command line.
type Options struct {
	// Seed seeds every random source of a simulation.
	Seed uint64
	// Quick asks for a short version of the scenario (for tests and CI):
	// fewer runs, smaller sweeps, shorter load, same orderings.
	Quick bool
	// Progress receives a line now and then during long runs (stderr in
	// the CLI). Never nil when a scenario runs: use io.Discard for silence.
	Progress io.Writer
	// Clients, for the backoff scenario, restricts the sweep to these
	// client counts (nil: the default sweep).
	Clients []int
	// Slow, for the storefront scenario, names the dependency that stalls
	// ("recommendation" by default, or "catalog", "payment").
	Slow string
	// Stall, for the storefront scenario, is the stalled latency (zero: 3s).
	Stall time.Duration
	// Metrics, if not nil, is given the protections the storefront scenario
	// builds (its breakers and bulkheads, and the shared worker pool) and
	// their events, so that they can be exported while it runs
	// (`watertight lab --metrics ADDR`).
	Metrics Metrics
	// CallPolicies, if not nil, returns policies the storefront scenario
	// puts innermost in each dependency's pipeline, inside the attempt
	// timeout (latency histograms of the protected calls).
	CallPolicies func(dependency string) []watertight.Policy
	// Executable, for the gateway scenario, is the path of the watertight
	// command, whose `proxy` and hidden `lab-backend` subcommands it runs
	// as processes of their own (`watertight lab` gives os.Executable()).
	// Empty: the gateway scenario fails, saying so.
	Executable string
}

// Metrics is what a scenario hands its protections to for export. The
// Prometheus and OpenTelemetry adapters (contrib/watertightprom,
// contrib/watertightotel) satisfy it. Adding a breaker or bulkhead under a name
// already added replaces the earlier one.
type Metrics interface {
	AddBreaker(*circuit.Breaker) (remove func())
	AddBulkhead(*bulkhead.Bulkhead) (remove func())
	watertight.Listener
}

// Result is what a scenario produced.
type Result struct {
	// Scenario is the scenario's name.
	Scenario string
	// Summary is a paragraph saying what was run and what it shows.
	Summary string
	// Tables are printed in order.
	Tables []Table
	// Charts are drawn into the report.
	Charts []Chart
	// JSON is the scenario's JSON document, in the shape its issue fixes
	// (for example {"scenario":"backoff","results":[...]}); it is
	// marshalled with encoding/json.
	JSON any
	// Checks compare the results with the literature's figures or the
	// scenario's expectations.
	Checks []Check
}

// Table is a table of text cells.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// Chart is a line chart: one line per series.
type Chart struct {
	// File is the file name in the report folder, without extension
	// ("backoff-calls").
	File   string
	Title  string
	XLabel string
	YLabel string
	LogY   bool
	// YMax, if above zero, is the top of the Y axis: the most the quantity
	// can be (100 for a percentage, 1 for a ratio). Zero: the data's top.
	YMax   float64
	Series []Series
}

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// Check is one pass/fail comparison: a measured Value held to a bound (Min,
// Max) — make it with AtLeast, AtMost or Within, which set OK — or, for a
// check without numbers, just Name and OK.
type Check struct {
	Name   string // what is checked, e.g. "full jitter calls at N=100 within ±10% of 796"
	OK     bool
	Detail string // the other numbers seen; may be empty
	// Value is the quantity measured, in Unit ("%", "ms", "×", "/s"; ""
	// for a count or a ratio).
	Value float64
	Unit  string
	// Min and Max are the inclusive bounds Value is held to; nil: none on
	// that side.
	Min, Max *float64

	measured bool // made by AtLeast, AtMost or Within
}

// Scenario is one lab experiment.
type Scenario struct {
	// Name is what `watertight lab NAME` takes.
	Name string
	// Description is one line for `watertight lab -h`.
	Description string
	// Run runs the scenario. It honours ctx (the CLI cancels on ^C) and
	// opts.Quick.
	Run func(ctx context.Context, opts Options) (*Result, error)
}

var (
	mu        sync.Mutex
	scenarios = map[string]Scenario{}
)

// Register adds a scenario; scenario files call it from init. It panics on
// a duplicate name.
func Register(s Scenario) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := scenarios[s.Name]; dup {
		panic("lab: scenario registered twice: " + s.Name)
	}
	scenarios[s.Name] = s
}

// Order is the order in which `watertight lab` runs the scenarios; any
// registered scenario missing from it runs after them, by name.
var Order = []string{"backoff", "storm", "storefront", "deadline", "overload", "tenants", "payments", "hedge", "adaptive", "consumer"}

// All returns the registered scenarios, in Order.
func All() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	var out []Scenario
	seen := map[string]bool{}
	for _, name := range Order {
		if s, ok := scenarios[name]; ok {
			out = append(out, s)
			seen[name] = true
		}
	}
	var rest []string
	for name := range scenarios {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	for _, name := range rest {
		out = append(out, scenarios[name])
	}
	return out
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := scenarios[name]; ok {
		return s, nil
	}
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return Scenario{}, fmt.Errorf("lab: no scenario %q (have: %v)", name, names)
}
