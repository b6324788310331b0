package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/lab"
)

// executableSeen is the lab.Options.Executable the clitest-executable
// scenario was given.
var executableSeen = make(chan string, 1)

func init() {
	lab.Register(lab.Scenario{
		Name:        "clitest-executable",
		Description: "test scenario: records the Executable it is given",
		Run: func(ctx context.Context, opts lab.Options) (*lab.Result, error) {
			executableSeen <- opts.Executable
			return &lab.Result{Scenario: "clitest-executable", Checks: []lab.Check{lab.AtMost("nothing", 0, 0, "", "")}}, nil
		},
	})
}

// TestLabGivesItsExecutable: `watertight lab` tells the scenarios where the
// running binary is, so that the gateway scenario can start its proxy and
// backends from it.
func TestLabGivesItsExecutable(t *testing.T) {
	want, err := os.Executable()
	if err != nil {
		t.Skip("os.Executable:", err)
	}
	if code, _, stderr := runCLI(t, "lab", "clitest-executable", "--out", t.TempDir()); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := <-executableSeen; got != want {
		t.Errorf("Executable %q, want %q", got, want)
	}
}

// TestLabBackendIsHidden: `watertight lab-backend` runs, but no usage names
// it.
func TestLabBackendIsHidden(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "lab"}, {"nosuch"}} {
		_, stdout, stderr := runCLI(t, args...)
		if strings.Contains(stdout+stderr, "lab-backend") {
			t.Errorf("%v names lab-backend:\n%s%s", args, stdout, stderr)
		}
	}
	code, _, stderr := runCLI(t, "lab-backend")
	if code != exitUsage || !strings.Contains(stderr, "--name is required") {
		t.Errorf("lab-backend without --name: exit %d, %q", code, stderr)
	}
}

// TestLabBackendProcess: the hidden command as the gateway scenario runs
// it, a process of its own: it says where it listens, serves, and exits
// when its stdin (the lab's pipe) ends.
func TestLabBackendProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "lab-backend", "--name", "catalog", "--stdin-exit")
	cmd.Env = append(os.Environ(), "WATERTIGHT_TEST_MAIN=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("first line %q (%v); stderr %s", line, err, stderr.String())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/catalog")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"service":"catalog"`) {
		t.Errorf("GET /catalog: %s %s", resp.Status, body)
	}
	tr.CloseIdleConnections()
	stdin.Close()
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after its stdin ended: %v; stderr %s", err, stderr.String())
	}
}
