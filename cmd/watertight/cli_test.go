package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/lab"
)

// A scenario of the test binary only, whose one check fails.
func init() {
	lab.Register(lab.Scenario{
		Name:        "clitest-fail",
		Description: "test scenario with a failing check",
		Run: func(ctx context.Context, opts lab.Options) (*lab.Result, error) {
			return &lab.Result{
				Scenario: "clitest-fail",
				Summary:  "fails on purpose",
				Tables:   []lab.Table{{Title: "t", Header: []string{"seed"}, Rows: [][]string{{"1"}}}},
				JSON:     map[string]any{"scenario": "clitest-fail", "seed": opts.Seed},
				Checks: []lab.Check{
					{Name: "always fails", OK: false, Detail: "on purpose"},
					lab.Within("a share in its band", 5.5, 4, 6, "%", "measured"),
				},
			}, nil
		},
	})
	lab.Register(lab.Scenario{
		Name:        "clitest-count",
		Description: "test scenario that counts its runs",
		Run: func(ctx context.Context, opts lab.Options) (*lab.Result, error) {
			countRuns.Add(1)
			return &lab.Result{Scenario: "clitest-count", Checks: []lab.Check{lab.AtMost("nothing", 0, 0, "", "")}}, nil
		},
	})
}

// countRuns counts the runs of the clitest-count scenario.
var countRuns atomic.Int64

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestParseLabFlagsAnywhere(t *testing.T) {
	f, err := parseLab([]string{"--seed", "7", "backoff", "--quick", "storm", "--clients", "10,50", "--clients=100", "-json", "--out", "x", "--slow", "catalog", "--stall", "2s", "backoff"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.names, []string{"backoff", "storm"}) {
		t.Errorf("names %v", f.names)
	}
	if f.opts.Seed != 7 || !f.opts.Quick || !f.json || f.out != "x" || f.opts.Slow != "catalog" || f.opts.Stall != 2*time.Second {
		t.Errorf("flags %+v", f)
	}
	if !slices.Equal(f.opts.Clients, []int{10, 50, 100}) {
		t.Errorf("clients %v", f.opts.Clients)
	}
	f, err = parseLab(nil)
	if err != nil || f.opts.Seed != 1 || f.out != "lab-report" || f.json || f.opts.Quick || f.opts.Clients != nil || len(f.names) != 0 {
		t.Errorf("defaults %+v, %v", f, err)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"lab", "nosuch"},
		{"lab", "backoff", "nosuch", "--quick"},
		{"lab", "--bogus"},
		{"lab", "backoff", "--seed", "-1"},
		{"lab", "backoff", "--seed", "x"},
		{"lab", "--clients", "10,x"},
		{"lab", "--clients", "0"},
		{"lab", "--slow", "database"},
		{"lab", "--stall", "soon"},
		{"lab", "--stall", "-1s"},
		{"lab", "--out", ""},
		{"lab", "--seed"},
		{"lab", "--stall", "0"},
		{"help", "nosuch"},
		{"help", "lab", "config"},
		{"version", "extra"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", args, stdout)
		}
		if len(args) > 0 && strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: stderr %q, want one line", args, stderr)
		}
		if len(args) > 0 && strings.Contains(strings.Join(args, " "), "nosuch") && !strings.Contains(stderr, `unknown scenario "nosuch"`) && !strings.Contains(stderr, `unknown command "nosuch"`) && !strings.Contains(stderr, `unknown topic "nosuch"`) {
			t.Errorf("%q: stderr %q does not name the scenario", args, stderr)
		}
	}
}

// TestUsageErrorsNameTheRule: a bad value says what a good one is, not
// just that it did not parse; --stall 0 is refused, not read as the
// default.
func TestUsageErrorsNameTheRule(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--seed=-5"}, "the seed is a whole number from 0 to 18446744073709551615"},
		{[]string{"lab", "--seed", "x"}, "the seed is a whole number"},
		{[]string{"lab", "--stall", "0"}, "must be above zero"},
		{[]string{"lab", "--stall=0s"}, "must be above zero"},
		{[]string{"lab", "--stall", "-1s"}, "must be above zero"},
		{[]string{"lab", "--stall", "soon"}, "want a duration with its unit, e.g. 3s"},
		{[]string{"help", "nosuch"}, `unknown topic "nosuch" (topics: lab, config, proxy, version)`},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "parse error") {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	f, err := parseLab([]string{"--stall", "1ms", "--seed", "0"})
	if err != nil || f.opts.Stall != time.Millisecond || f.opts.Seed != 0 {
		t.Errorf("--stall 1ms --seed 0: %+v, %v", f.opts, err)
	}
}

// TestLabOutCheckedFirst: an --out that cannot hold the report is a usage
// error before any scenario runs.
func TestLabOutCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ out, want string }{
		{file, "is a file, not a folder"},
		{filepath.Join(file, "sub"), "cannot create the report folder"},
	} {
		before := countRuns.Load()
		code, stdout, stderr := runCLI(t, "lab", "clitest-count", "--out", tc.out)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("--out %s: exit %d, stdout %q, stderr %q; want %d and %q", tc.out, code, stdout, stderr, exitUsage, tc.want)
		}
		if n := countRuns.Load() - before; n != 0 {
			t.Errorf("--out %s: the scenario ran %d times before the error", tc.out, n)
		}
	}
	// A folder that does not exist yet is made, and the probe leaves
	// nothing behind but the report.
	out := filepath.Join(dir, "new", "report")
	if code, _, stderr := runCLI(t, "lab", "clitest-count", "--out", out); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"index.md"}) {
		t.Errorf("report folder holds %v, want [index.md]", names)
	}
}

// TestLabEndsWithTally: the terminal output ends with "N of M checks
// passed" (stdout; stderr with --json).
func TestLabEndsWithTally(t *testing.T) {
	out := t.TempDir()
	code, stdout, _ := runCLI(t, "lab", "clitest-fail", "clitest-count", "--out", out)
	if code != exitFailed || !strings.HasSuffix(stdout, "report: "+filepath.Join(out, "index.md")+"\n2 of 3 checks passed\n") {
		t.Errorf("exit %d, stdout ends %q", code, stdout[max(0, len(stdout)-120):])
	}
	code, _, stderr := runCLI(t, "lab", "clitest-count", "--json", "--out", out)
	if code != exitOK || !strings.HasSuffix(stderr, "1 of 1 checks passed\n") {
		t.Errorf("--json: exit %d, stderr %q", code, stderr)
	}
}

// TestLabJSONChecksSeedFlags: the JSON document holds every check with its
// measured value and bound, the seed and the flags.
func TestLabJSONChecksSeedFlags(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "lab", "--json", "clitest-fail", "--quick", "--seed", "9", "--out", out, "--stall", "2s")
	if code != exitFailed {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var doc struct {
		Scenario string `json:"scenario"`
		Seed     uint64 `json:"seed"`
		Command  string `json:"command"`
		Passed   int    `json:"checks_passed"`
		Total    int    `json:"checks_total"`
		Flags    struct {
			Scenarios []string `json:"scenarios"`
			Seed      uint64   `json:"seed"`
			Quick     bool     `json:"quick"`
			Out       string   `json:"out"`
			Slow      string   `json:"slow"`
			Stall     string   `json:"stall"`
		} `json:"flags"`
		Checks []struct {
			Name  string   `json:"name"`
			Pass  bool     `json:"pass"`
			Value *float64 `json:"value"`
			Min   *float64 `json:"min"`
			Max   *float64 `json:"max"`
			Bound string   `json:"bound"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if doc.Scenario != "clitest-fail" || doc.Seed != 9 || doc.Passed != 1 || doc.Total != 2 || !strings.HasPrefix(doc.Command, "watertight lab --json clitest-fail") {
		t.Errorf("document %s", stdout)
	}
	if f := doc.Flags; !slices.Equal(f.Scenarios, []string{"clitest-fail"}) || f.Seed != 9 || !f.Quick || f.Out != out || f.Slow != "recommendation" || f.Stall != "2s" {
		t.Errorf("flags %+v", f)
	}
	if len(doc.Checks) != 2 || doc.Checks[0].Name != "always fails" || doc.Checks[0].Pass {
		t.Fatalf("checks %+v", doc.Checks)
	}
	if c := doc.Checks[1]; !c.Pass || c.Value == nil || *c.Value != 5.5 || c.Min == nil || *c.Min != 4 || c.Max == nil || *c.Max != 6 || c.Bound != "4–6%" {
		t.Errorf("measured check %+v", c)
	}
}

// TestVersion: the module's version from the build information, "(devel)"
// without one, and the Go version.
func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(stdout, "watertight ") || !strings.Contains(stdout, " go1.") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	if got := versionLine(&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.2.3"}}, true, "go0"); got != "watertight v1.2.3 go1.26.1" {
		t.Errorf("released: %q", got)
	}
	if got := versionLine(&debug.BuildInfo{Main: debug.Module{}}, true, "go1.26.2"); got != "watertight (devel) go1.26.2" {
		t.Errorf("no version: %q", got)
	}
	if got := versionLine(nil, false, "go1.26.3"); got != "watertight (devel) go1.26.3" {
		t.Errorf("no build information: %q", got)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, stdout, _ := runCLI(t, args...)
		if code != exitOK || !strings.Contains(stdout, "lab ") || !strings.Contains(stdout, "backoff") {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
	code, _, stderr := runCLI(t)
	if code != exitUsage || !strings.Contains(stderr, "Commands:") || !strings.Contains(stderr, "backoff") {
		t.Errorf("no arguments: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCLI(t, "help", "config"); code != exitOK || !strings.Contains(stdout, "--quiet") {
		t.Errorf("help config: exit %d, stdout %q", code, stdout)
	}
	if code, stdout, _ := runCLI(t, "help", "version"); code != exitOK || !strings.Contains(stdout, "(devel)") {
		t.Errorf("help version: exit %d, stdout %q", code, stdout)
	}
	for _, args := range [][]string{{"lab", "-h"}, {"lab", "backoff", "--help"}, {"help", "lab"}} {
		code, stdout, _ := runCLI(t, args...)
		if code != exitOK || !strings.Contains(stdout, "--seed") || !strings.Contains(stdout, "backoff") {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
}

func TestLabText(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r")
	code, stdout, stderr := runCLI(t, "lab", "backoff", "--quick", "--clients", "10,50", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"== backoff ==", "clients  none  exponential  full  equal  decorrelated", "report: " + filepath.Join(out, "index.md")} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "lab: backoff: done") {
		t.Errorf("stderr lacks progress: %q", stderr)
	}
	for _, name := range []string{"index.md", "backoff-calls.png", "backoff-time.png"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestLabJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r")
	code, stdout, stderr := runCLI(t, "lab", "--json", "backoff", "--quick", "--clients", "10,100", "--out", out, "--seed", "3")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var doc struct {
		Scenario string          `json:"scenario"`
		Checks   json.RawMessage `json:"checks"`
		Command  string          `json:"command"`
		Seed     uint64          `json:"seed"`
		Flags    json.RawMessage `json:"flags"`
		Passed   int             `json:"checks_passed"`
		Total    int             `json:"checks_total"`
		Results  []struct {
			Algorithm string  `json:"algorithm"`
			Clients   int     `json:"clients"`
			Calls     float64 `json:"calls"`
			TimeMS    float64 `json:"time_ms"`
		} `json:"results"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("stdout is not the JSON document: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one document:\n%s", stdout)
	}
	if doc.Scenario != "backoff" || len(doc.Results) != 10 {
		t.Fatalf("document %+v", doc)
	}
	for _, r := range doc.Results {
		if r.Algorithm == "" || (r.Clients != 10 && r.Clients != 100) || r.Calls < float64(r.Clients) || r.TimeMS <= 0 {
			t.Errorf("result %+v", r)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "index.md")); err != nil {
		t.Errorf("report not written: %v", err)
	}
	// Same seed, same numbers.
	_, again, _ := runCLI(t, "lab", "--json", "backoff", "--quick", "--clients", "10,100", "--out", out, "--seed", "3")
	if again != stdout {
		t.Error("same seed, different JSON")
	}
}

func TestLabSeveralJSONAndFailedCheck(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "lab", "backoff", "clitest-fail", "--quick", "--clients", "10", "--json", "--out", out, "--seed", "9")
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	var doc struct {
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if len(doc.Scenarios) != 2 || doc.Scenarios[0]["scenario"] != "backoff" || doc.Scenarios[1]["scenario"] != "clitest-fail" || doc.Scenarios[1]["seed"] != 9.0 {
		t.Errorf("document %s", stdout)
	}
	if !strings.Contains(stderr, "FAIL always fails") {
		t.Errorf("stderr does not report the failed check: %q", stderr)
	}

	// Without --json, everything is printed, then exit 1.
	code, stdout, _ = runCLI(t, "lab", "clitest-fail", "--out", out)
	if code != exitFailed || !strings.Contains(stdout, "FAIL  always fails: on purpose") || !strings.Contains(stdout, "report: ") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

func TestLabInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"lab", "backoff", "--out", t.TempDir()}, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}
