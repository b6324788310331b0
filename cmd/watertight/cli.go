package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/watertight-go/watertight/lab"
)

// Exit codes.
const (
	exitOK     = 0 // every check passed
	exitFailed = 1 // a check failed, a scenario failed or was interrupted, or the report could not be written
	exitUsage  = 2 // unknown command or scenario, bad flag or flag value
)

// slowNames are the dependencies the storefront scenario can stall
// (lab.Options.Slow).
var slowNames = []string{"recommendation", "catalog", "payment"}

// run is the command: args without the program name; it returns the exit
// code. main only wires it to the process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" && args[1] == "lab" {
			labUsage(stdout)
			return exitOK
		}
		usage(stdout)
		return exitOK
	case "lab":
		return runLab(ctx, args[1:], stdout, stderr)
	case "config":
		return runConfig(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "watertight: unknown command %q (commands: lab, config; see watertight -h)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `watertight keeps a failure in its compartment: fault-tolerance patterns for Go.

Usage:
  watertight <command> [arguments]

Commands:
  lab    run the lab's scenarios: tables, checks against the literature, a report with charts
  config validate a configuration file, print what it resolves to (watertight config check FILE)
  help   print this text (watertight help lab: the lab's flags)

`)
	writeScenarios(w)
}

func writeScenarios(w io.Writer) {
	fmt.Fprintln(w, "Scenarios (watertight lab NAME ...; none named: all of them):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range lab.All() {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.Description)
	}
	tw.Flush()
}

func labUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  watertight lab [scenario ...] [flags]

Runs the named scenarios (all of them if none is named), prints each one's
summary, tables and checks, and writes a report (index.md and PNG charts).
Flags may come before or after the scenario names.

Flags:
  --seed N          seed of every simulation's random sources (default 1);
                    the same seed gives the same numbers
  --json            print one JSON document on stdout and nothing else there
                    (one scenario: its document; several: {"scenarios":[...]})
  --out DIR         folder of the report (default lab-report)
  --quick           short versions: fewer runs, smaller sweeps, same orderings
  --clients LIST    backoff: client counts to sweep, e.g. 10,50,100
                    (default 10…190 step 10)
  --slow NAME       storefront: the dependency that stalls: recommendation
                    (default), catalog or payment
  --stall DUR       storefront: the stalled latency, e.g. 3s (default 3s)
  --metrics ADDR    serve /metrics on ADDR (e.g. :9090) while the scenarios
                    run: the storefront's breakers, bulkheads, events and call
                    latencies, through contrib/watertightprom (watertight_…) and
                    contrib/watertightotel (otel_watertight_…)

Exit status: 0 when every check passes, 1 when a check or a scenario failed,
2 for a usage error. Progress goes to stderr.

`)
	writeScenarios(w)
}

// intList is a flag taking comma-separated positive integers; repeating the
// flag adds to the list.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// labFlags are the parsed arguments of `watertight lab`.
type labFlags struct {
	names   []string
	opts    lab.Options
	json    bool
	out     string
	metrics string // address to serve /metrics on, or ""
	cmdline string
}

// errHelp asks for the lab's usage.
var errHelp = errors.New("help")

// parseLab parses the arguments of `watertight lab`, flags before or after
// the scenario names.
func parseLab(args []string) (labFlags, error) {
	var f labFlags
	fs := flag.NewFlagSet("watertight lab", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64Var(&f.opts.Seed, "seed", 1, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.StringVar(&f.out, "out", "lab-report", "")
	fs.BoolVar(&f.opts.Quick, "quick", false, "")
	var clients intList
	fs.Var(&clients, "clients", "")
	fs.StringVar(&f.opts.Slow, "slow", "", "")
	fs.DurationVar(&f.opts.Stall, "stall", 0, "")
	fs.StringVar(&f.metrics, "metrics", "", "")

	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return f, errHelp
			}
			// The flag package names flags with one dash; the usage, two.
			return f, errors.New(strings.Replace(err.Error(), " -", " --", 1))
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if !slices.Contains(f.names, rest[0]) {
			f.names = append(f.names, rest[0])
		}
		rest = rest[1:]
	}
	if len(clients) > 0 {
		f.opts.Clients = clients
	}
	if f.opts.Slow != "" && !slices.Contains(slowNames, f.opts.Slow) {
		return f, fmt.Errorf("invalid value %q for flag --slow: want one of %s", f.opts.Slow, strings.Join(slowNames, ", "))
	}
	if f.opts.Stall < 0 {
		return f, fmt.Errorf("invalid value %v for flag --stall: must not be negative", f.opts.Stall)
	}
	if f.out == "" {
		return f, errors.New("invalid value \"\" for flag --out: want a folder")
	}
	f.cmdline = strings.TrimSpace("watertight lab " + strings.Join(args, " "))
	return f, nil
}

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseLab(args)
	if errors.Is(err, errHelp) {
		labUsage(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "watertight lab: %v (see watertight lab -h)\n", err)
		return exitUsage
	}
	var scenarios []lab.Scenario
	if len(f.names) == 0 {
		scenarios = lab.All()
	}
	for _, name := range f.names {
		s, err := lab.Lookup(name)
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: unknown scenario %q (have: %s)\n", name, strings.Join(scenarioNames(), ", "))
			return exitUsage
		}
		scenarios = append(scenarios, s)
	}

	if f.metrics != "" {
		m, err := startMetrics(f.metrics)
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: --metrics %s: %v\n", f.metrics, err)
			return exitFailed
		}
		defer func() {
			if err := m.close(); err != nil {
				fmt.Fprintf(stderr, "watertight lab: metrics: %v\n", err)
			}
		}()
		fmt.Fprintf(stderr, "lab: serving metrics at %s while the scenarios run\n", m.url)
		f.opts.Metrics = m
		f.opts.CallPolicies = m.callPolicies
	}

	code := exitOK
	f.opts.Progress = stderr
	var results []*lab.Result
	for _, s := range scenarios {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(stderr, "lab: %s: running\n", s.Name)
		start := time.Now()
		r, err := s.Run(ctx, f.opts)
		if err == nil && r == nil {
			err = errors.New("no result")
		}
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: %s: %v\n", s.Name, err)
			code = exitFailed
			continue
		}
		if r.Scenario == "" {
			r.Scenario = s.Name
		}
		fmt.Fprintf(stderr, "lab: %s: done in %.1fs\n", s.Name, time.Since(start).Seconds())
		results = append(results, r)
		if !f.json {
			if err := lab.WriteText(stdout, r); err != nil {
				fmt.Fprintf(stderr, "watertight lab: %v\n", err)
				code = exitFailed
			}
		}
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(stderr, "watertight lab: interrupted (%v)\n", context.Cause(ctx))
		code = exitFailed
	}
	if !lab.Passed(results) {
		code = exitFailed
		for _, r := range results {
			for _, c := range r.Checks {
				if !c.OK && f.json {
					fmt.Fprintf(stderr, "lab: %s: FAIL %s: %s\n", r.Scenario, c.Name, c.Detail)
				}
			}
		}
	}

	if len(results) > 0 {
		quick := ""
		if f.opts.Quick {
			quick = ", quick"
		}
		note := fmt.Sprintf("Written by `%s` (seed %d%s).", f.cmdline, f.opts.Seed, quick)
		info := stdout
		if f.json {
			info = stderr
		}
		if err := lab.WriteReport(f.out, results, note); err != nil {
			fmt.Fprintf(stderr, "watertight lab: %v\n", err)
			code = exitFailed
		} else {
			fmt.Fprintf(info, "report: %s\n", filepath.Join(f.out, lab.ReportIndex))
		}
	}

	if f.json {
		doc, err := json.MarshalIndent(lab.JSONDocument(results), "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: json: %v\n", err)
			return exitFailed
		}
		doc = append(doc, '\n')
		if _, err := stdout.Write(doc); err != nil {
			fmt.Fprintf(stderr, "watertight lab: %v\n", err)
			return exitFailed
		}
	}
	return code
}

func scenarioNames() []string {
	var names []string
	for _, s := range lab.All() {
		names = append(names, s.Name)
	}
	return names
}
