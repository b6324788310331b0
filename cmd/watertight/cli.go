package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/lab"
	"github.com/watertight-go/watertight/watch"
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
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "help":
		return runHelp(args[1:], stdout, stderr)
	case "lab":
		return runLab(ctx, args[1:], stdout, stderr)
	case "config":
		return runConfig(ctx, args[1:], stdout, stderr)
	case "proxy":
		return runProxy(ctx, args[1:], stdout, stderr)
	case "version":
		return runVersion(args[1:], stdout, stderr)
	case "lab-backend": // hidden: the gateway scenario's backends
		return runLabBackend(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "watertight: unknown command %q (commands: lab, config, proxy, version, help; see watertight -h)\n", args[0])
	return exitUsage
}

// runHelp is `watertight help [TOPIC]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return exitOK
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "watertight help: name one topic, not %d (topics: lab, config, proxy, version)\n", len(args))
		return exitUsage
	}
	switch args[0] {
	case "lab":
		labUsage(stdout)
	case "config":
		configUsage(stdout)
	case "proxy":
		proxyUsage(stdout)
	case "version":
		fmt.Fprint(stdout, versionUsage)
	default:
		fmt.Fprintf(stderr, "watertight help: unknown topic %q (topics: lab, config, proxy, version)\n", args[0])
		return exitUsage
	}
	return exitOK
}

func usage(w io.Writer) {
	fmt.Fprint(w, `watertight keeps a failure in its compartment: fault-tolerance patterns for Go.

Usage:
  watertight <command> [arguments]

Commands:
  lab      run the lab's scenarios: tables, checks against the literature, a report with charts
  config   validate a configuration file, print what it resolves to (watertight config check FILE)
  proxy    run the gateway: every protection in front of services in any language (--config FILE)
  version  print the module's version and the Go version it was built with
  help     print this text (watertight help lab, help config: their flags)

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

Runs the named scenarios (all of them if none is named; about 140 seconds, 70
seconds with --quick), prints each one's summary, tables and checks, then
"N of M checks passed", and writes a report: index.md and each chart as PNG
and SVG. The report folder holds one run: the charts an earlier report wrote
there that this run does not write are removed (nothing else is touched).
Flags may come before or after the scenario names.

Flags:
  --seed N          seed of every simulation's random sources, a whole number
                    from 0 to 18446744073709551615 (default 1); the same seed
                    gives the same numbers
  --json            print one JSON document on stdout and nothing else there:
                    one scenario: its document; several: {"scenarios":[...]};
                    with every check (name, pass, value, bound), the seed and
                    the flags
  --out DIR         folder of the report (default lab-report), created if
                    missing; checked before anything runs
  --quick           short versions: fewer runs, smaller sweeps, same orderings
  --clients LIST    backoff: client counts to sweep, e.g. 10,50,100
                    (default 10…190 step 10)
  --slow NAME       storefront: the dependency that stalls: recommendation
                    (default), catalog or payment
  --stall DUR       storefront: the stalled latency, above zero, e.g. 3s
                    (default 3s)
  --metrics ADDR    serve /metrics on ADDR (e.g. :9090) while the scenarios
                    run: the storefront's breakers, bulkheads, events and call
                    latencies, through contrib/watertightprom (watertight_…) and
                    contrib/watertightotel (otel_watertight_…)
  --dashboard ADDR  serve the live dashboard on ADDR (e.g. 127.0.0.1:8080)
                    while the scenarios run, and after they end until ^C:
                    watch the storefront's recommendation breaker open while
                    the catalog stays green

Exit status: 0 when every check passes, 1 when a check or a scenario failed,
2 for a usage error. Progress goes to stderr.

`)
	writeScenarios(w)
}

// seedFlag is --seed: a whole number, with an error that says so.
type seedFlag struct{ v *uint64 }

func (f seedFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatUint(*f.v, 10)
}

func (f seedFlag) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return errors.New("the seed is a whole number from 0 to 18446744073709551615, e.g. --seed 7")
	}
	*f.v = n
	return nil
}

// stallFlag is --stall: a duration above zero. Zero is refused rather than
// read as the default: a stall of nothing would be no scenario.
type stallFlag struct{ v *time.Duration }

func (f stallFlag) String() string {
	if f.v == nil {
		return ""
	}
	return f.v.String()
}

func (f stallFlag) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("want a duration with its unit, e.g. 3s or 500ms")
	}
	if d <= 0 {
		return errors.New("the stalled latency must be above zero, e.g. 3s (leave the flag out for the default, 3s)")
	}
	*f.v = d
	return nil
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
	dash    string // address to serve the dashboard on, or ""
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
	f.opts.Seed = 1
	fs.Var(seedFlag{&f.opts.Seed}, "seed", "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.StringVar(&f.out, "out", "lab-report", "")
	fs.BoolVar(&f.opts.Quick, "quick", false, "")
	var clients intList
	fs.Var(&clients, "clients", "")
	fs.StringVar(&f.opts.Slow, "slow", "", "")
	fs.Var(stallFlag{&f.opts.Stall}, "stall", "")
	fs.StringVar(&f.metrics, "metrics", "", "")
	fs.StringVar(&f.dash, "dashboard", "", "")

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
	if f.out == "" {
		return f, errors.New("invalid value \"\" for flag --out: want a folder")
	}
	if f.dash != "" {
		if _, _, err := net.SplitHostPort(f.dash); err != nil {
			return f, fmt.Errorf("invalid value %q for flag --dashboard: want host:port, e.g. 127.0.0.1:8080", f.dash)
		}
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
	// Before the scenarios run, not two minutes later.
	if err := checkOut(f.out); err != nil {
		fmt.Fprintf(stderr, "watertight lab: %v\n", err)
		return exitUsage
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
	if f.dash != "" {
		d, err := startDashboard(f.dash, f.opts.Metrics, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: --dashboard %s: %v\n", f.dash, err)
			return exitFailed
		}
		// After the report: the page stays up until ^C.
		defer d.serveUntil(ctx, stderr)
		if !slices.ContainsFunc(scenarios, func(s lab.Scenario) bool { return s.Name == "storefront" }) {
			fmt.Fprintln(stderr, "lab: note: only the storefront scenario has protections to show on the dashboard")
		}
		f.opts.Metrics = d
	}

	code := exitOK
	f.opts.Progress = stderr
	// The gateway scenario runs this binary's proxy and lab-backend as
	// processes of their own.
	if exe, err := os.Executable(); err == nil {
		f.opts.Executable = exe
	}
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
		passed, total := lab.Tally(results)
		note := fmt.Sprintf("Written by `%s` (seed %d%s): %d of %d checks passed.", f.cmdline, f.opts.Seed, quick, passed, total)
		if err := lab.WriteReport(f.out, results, note); err != nil {
			fmt.Fprintf(stderr, "watertight lab: %v\n", err)
			code = exitFailed
		} else {
			fmt.Fprintf(info(f, stdout, stderr), "report: %s\n", filepath.Join(f.out, lab.ReportIndex))
		}
	}

	// The last line on the terminal (stderr with --json, whose stdout is
	// the document alone).
	fmt.Fprintln(info(f, stdout, stderr), lab.TallyLine(results))

	if f.json {
		raw, err := lab.JSONDocument(results, lab.RunInfo{Command: f.cmdline, Seed: f.opts.Seed, Flags: f.jsonFlags()})
		var doc bytes.Buffer
		if err == nil {
			err = json.Indent(&doc, raw, "", "  ")
		}
		if err != nil {
			fmt.Fprintf(stderr, "watertight lab: json: %v\n", err)
			return exitFailed
		}
		doc.WriteByte('\n')
		if _, err := stdout.Write(doc.Bytes()); err != nil {
			fmt.Fprintf(stderr, "watertight lab: %v\n", err)
			return exitFailed
		}
	}
	return code
}

// labDashboard serves the live dashboard (package dashboard) of what the
// scenarios build. It is a lab.Metrics: the storefront hands it its
// breakers, bulkheads and events, which it passes on to the metrics
// exporters too when --metrics is given.
type labDashboard struct {
	d    *dashboard.Dashboard
	set  *watch.Set
	next lab.Metrics // --metrics, or nil
	srv  *http.Server
	url  string
	done chan struct{}
}

// startDashboard listens on addr and serves the dashboard at its root.
func startDashboard(addr string, next lab.Metrics, stderr io.Writer) (*labDashboard, error) {
	set := new(watch.Set)
	d, err := dashboard.New(dashboard.Config{Sources: set, Title: "watertight lab"})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		d.Close()
		return nil, err
	}
	l := &labDashboard{d: d, set: set, next: next, done: make(chan struct{}),
		srv: &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(stderr, "lab: warning: --dashboard %s is reachable from other machines; bind it to 127.0.0.1 (docs/dashboard.md says how to put it behind authentication)\n", addr)
		if ip == nil || ip.IsUnspecified() {
			host = "127.0.0.1"
		}
	}
	l.url = "http://" + net.JoinHostPort(host, port) + "/"
	go func() {
		defer close(l.done)
		l.srv.Serve(ln)
	}()
	fmt.Fprintf(stderr, "lab: dashboard at %s while the scenarios run\n", l.url)
	return l, nil
}

// AddBreaker shows b (and exports it with --metrics).
func (l *labDashboard) AddBreaker(b *circuit.Breaker) func() {
	r := l.set.AddBreaker(b)
	if l.next == nil {
		return r
	}
	r2 := l.next.AddBreaker(b)
	return func() { r(); r2() }
}

// AddBulkhead shows b (and exports it with --metrics).
func (l *labDashboard) AddBulkhead(b *bulkhead.Bulkhead) func() {
	r := l.set.AddBulkhead(b)
	if l.next == nil {
		return r
	}
	r2 := l.next.AddBulkhead(b)
	return func() { r(); r2() }
}

// OnEvent passes e to the dashboard (and the exporters).
func (l *labDashboard) OnEvent(e watertight.Event) {
	l.d.OnEvent(e)
	if l.next != nil {
		l.next.OnEvent(e)
	}
}

// serveUntil keeps the page up until ctx ends (^C), unless it has already,
// then stops serving.
func (l *labDashboard) serveUntil(ctx context.Context, stderr io.Writer) {
	if ctx.Err() == nil {
		fmt.Fprintf(stderr, "lab: the scenarios are done; the dashboard stays at %s until Ctrl-C\n", l.url)
		<-ctx.Done()
	}
	l.d.Close() // ends the pages' streams, which Shutdown would wait for
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.srv.Shutdown(sctx); err != nil {
		l.srv.Close()
	}
	<-l.done
}

// info is where the lab's report line and tally go: stdout, or stderr with
// --json.
func info(f labFlags, stdout, stderr io.Writer) io.Writer {
	if f.json {
		return stderr
	}
	return stdout
}

// labFlagsJSON are the flags in the JSON document, as the run used them.
type labFlagsJSON struct {
	Scenarios []string `json:"scenarios"`
	Seed      uint64   `json:"seed"`
	Quick     bool     `json:"quick"`
	Out       string   `json:"out"`
	Clients   []int    `json:"clients"` // null: the default sweep
	Slow      string   `json:"slow"`
	Stall     string   `json:"stall"`
	Metrics   string   `json:"metrics,omitempty"`
	Dashboard string   `json:"dashboard,omitempty"`
}

func (f labFlags) jsonFlags() labFlagsJSON {
	names := f.names
	if len(names) == 0 {
		names = scenarioNames()
	}
	slow := f.opts.Slow
	if slow == "" {
		slow = slowNames[0]
	}
	stall := f.opts.Stall
	if stall == 0 {
		stall = defaultStall
	}
	return labFlagsJSON{Scenarios: names, Seed: f.opts.Seed, Quick: f.opts.Quick, Out: f.out, Clients: f.opts.Clients,
		Slow: slow, Stall: stall.String(), Metrics: f.metrics, Dashboard: f.dash}
}

// defaultStall is the storefront's stalled latency when --stall is not
// given (lab.Options.Stall zero).
const defaultStall = 3 * time.Second

// checkOut makes sure the report can be written to dir: that it is a
// folder, or can be made one, and that a file can be created in it.
func checkOut(dir string) error {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("--out %s: is a file, not a folder; name a folder for the report (default lab-report)", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: cannot create the report folder: %v", dir, errors.Unwrap(err))
	}
	probe, err := os.CreateTemp(dir, ".watertight-lab-probe-*")
	if err != nil {
		return fmt.Errorf("--out %s: cannot write in the report folder: %v", dir, errors.Unwrap(err))
	}
	name := probe.Name()
	probe.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("--out %s: %v", dir, err)
	}
	return nil
}

func scenarioNames() []string {
	var names []string
	for _, s := range lab.All() {
		names = append(names, s.Name)
	}
	return names
}
