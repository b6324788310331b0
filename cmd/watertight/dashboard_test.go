package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/lab"
)

var _ lab.Metrics = (*labDashboard)(nil)

// A scenario of the test binary only that gives the lab a breaker, forced
// open, as the storefront gives its own.
func init() {
	lab.Register(lab.Scenario{
		Name:        "clitest-dashboard",
		Description: "test scenario with a breaker for the dashboard",
		Run: func(ctx context.Context, opts lab.Options) (*lab.Result, error) {
			if opts.Metrics != nil {
				b, err := circuit.New(circuit.Config{Name: "recommendation", Listener: opts.Metrics})
				if err != nil {
					return nil, err
				}
				opts.Metrics.AddBreaker(b)
				b.ForceOpen()
			}
			return &lab.Result{Scenario: "clitest-dashboard", Checks: []lab.Check{lab.AtMost("nothing", 0, 0, "", "")}}, nil
		},
	})
}

// watertight lab --dashboard: the page shows what the scenario built while
// it runs and after it ends, until ^C, which ends the command with the
// scenario's exit status.
func TestLabDashboardStaysUntilInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errR, errW := io.Pipe()
	var stdout strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"lab", "clitest-dashboard", "--dashboard", "127.0.0.1:0", "--out", t.TempDir()}, &stdout, errW)
		errW.Close()
	}()
	lines := bufio.NewScanner(errR)
	var url string
	for lines.Scan() {
		line := lines.Text()
		if m := regexp.MustCompile(`dashboard stays at (http://127\.0\.0\.1:\d+/) until Ctrl-C`).FindStringSubmatch(line); m != nil {
			url = m[1]
			break
		}
	}
	if url == "" {
		t.Fatal("no line saying the dashboard stays up until Ctrl-C")
	}
	go io.Copy(io.Discard, errR) // the rest of stderr

	// After the scenario: the page and its state are served.
	resp, err := http.Get(url + "state.json")
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Rows []struct{ Kind, Group, State, Code string }
	}
	err = json.NewDecoder(resp.Body).Decode(&state)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Rows) != 1 || state.Rows[0].Group != "recommendation" || state.Rows[0].State != "forced-open" || state.Rows[0].Code != circuit.CodeManual {
		t.Fatalf("state.json rows %+v, want the scenario's breaker forced open", state.Rows)
	}
	select {
	case c := <-code:
		t.Fatalf("the command ended (exit %d) before ^C", c)
	default:
	}

	cancel() // ^C
	select {
	case c := <-code:
		if c != exitOK {
			t.Errorf("exit %d after ^C once the scenarios had passed, want %d", c, exitOK)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end after ^C")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the dashboard is still served after the command ended")
	}
	if !strings.Contains(stdout.String(), "1 of 1 checks passed") {
		t.Errorf("stdout %q, want the tally", stdout.String())
	}
}

func TestLabDashboardBadAddress(t *testing.T) {
	code, _, stderr := runCLI(t, "lab", "clitest-count", "--dashboard", "8080")
	if code != exitUsage || !strings.Contains(stderr, `invalid value "8080" for flag --dashboard: want host:port, e.g. 127.0.0.1:8080`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
