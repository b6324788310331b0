package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
				Checks:   []lab.Check{{Name: "always fails", OK: false, Detail: "on purpose"}},
			}, nil
		},
	})
}

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
		if len(args) > 0 && strings.Contains(strings.Join(args, " "), "nosuch") && !strings.Contains(stderr, `unknown scenario "nosuch"`) && !strings.Contains(stderr, `unknown command "nosuch"`) {
			t.Errorf("%q: stderr %q does not name the scenario", args, stderr)
		}
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
		Scenario string `json:"scenario"`
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
