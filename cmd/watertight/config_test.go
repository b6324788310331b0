package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigCheckValid(t *testing.T) {
	p := writeTemp(t, "ok.yaml", `defaults:
  bulkheads:
    max_wait: 10ms
bulkheads:
  payment:
    max_concurrent: 20
breakers:
  payment: {failure_rate_threshold: 25%}
`)
	code, stdout, stderr := runCLI(t, "config", "check", p)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"ok.yaml: 2 instances: every field as it resolves.",
		"bulkheads:\n  payment:",
		"    max_concurrent: 20",
		"    max_wait: 10ms",
		"# defaults, line 3",
		`    failure_rate_threshold: "25%"`,
		"    min_calls: 20",
		"# default\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// The output checks too.
	out := writeTemp(t, "resolved.yaml", stdout)
	if code, _, stderr := runCLI(t, "config", "check", "--quiet", out); code != exitOK || stderr != "" {
		t.Errorf("resolved output: exit %d, %s", code, stderr)
	}
	if code, stdout, _ := runCLI(t, "config", "check", "--quiet", p); code != exitOK || stdout != "" {
		t.Errorf("--quiet: exit %d, stdout %q", code, stdout)
	}
}

func TestConfigCheckExample(t *testing.T) {
	code, stdout, stderr := runCLI(t, "config", "check", "../../contrib/watertightconfig/testdata/example.yaml")
	if code != exitOK || !strings.Contains(stdout, "14 instances") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestConfigCheckErrors(t *testing.T) {
	bad := writeTemp(t, "payments.yaml", `bulkheads:
  payment:
    max_concurrent: -3
    max_wiat: 1s
breakers:
  payment:
    failure_rate_threshold: 50
`)
	good := writeTemp(t, "good.json", `{"timeouts": {"search": {"timeout": "250ms"}}}`)
	code, stdout, stderr := runCLI(t, "config", "check", good, bad)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		bad + ":3: bulkheads.payment.max_concurrent: must be > 0, got -3\n",
		bad + ":4: bulkheads.payment.max_wiat: unknown field (did you mean max_wait?)\n",
		bad + `:7: breakers.payment.failure_rate_threshold: must be a fraction of 1 (0.5) or a percentage ("50%"), got 50: write "50%" for a percentage` + "\n",
		"watertight config check: " + bad + ": invalid, 3 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// The valid file is still checked and printed.
	if !strings.Contains(stdout, "timeout: 250ms") {
		t.Errorf("stdout %q", stdout)
	}
}

func TestConfigUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"config"}, exitUsage, "Usage:"},
		{[]string{"config", "check"}, exitUsage, "name a file"},
		{[]string{"config", "nosuch"}, exitUsage, `unknown command "nosuch"`},
		{[]string{"config", "check", "--bogus", "x"}, exitUsage, "flag provided but not defined"},
		{[]string{"config", "check", filepath.Join(t.TempDir(), "missing.yaml")}, exitUsage, "no such file"},
		{[]string{"config", "-h"}, exitOK, ""},
		{[]string{"config", "check", "-h"}, exitOK, ""},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, stderr)
		}
		if code == exitOK && !strings.Contains(stdout, "watertight config check") {
			t.Errorf("%q: help %q", tc.args, stdout)
		}
	}
	if _, stdout, _ := runCLI(t, "-h"); !strings.Contains(stdout, "config") {
		t.Errorf("usage lacks config:\n%s", stdout)
	}
}

// lockedBuffer is a strings.Builder safe for a writer and a reader in two
// goroutines, which signals every write.
type lockedBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // receives (without blocking) after each write
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		select {
		case l.written <- struct{}{}:
		default:
		}
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits, write by write, until buf contains want (the watcher
// prints from its own goroutine).
func waitFor(t *testing.T, buf *lockedBuffer, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !strings.Contains(buf.String(), want) {
		select {
		case <-buf.written:
		case <-timeout:
			t.Fatalf("no %q in output:\n%s", want, buf.String())
		}
	}
}

// TestConfigWatch: `config watch` reloads its file on the signal, reports a
// change, rejects an invalid file whole (keeping the old configuration),
// and stops when its context ends.
func TestConfigWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("bulkheads:\n  payment:\n    max_concurrent: 10\n  catalog:\n    max_concurrent: 5\n")
	ctx, cancel := context.WithCancel(context.Background())
	out := lockedBuffer{written: make(chan struct{}, 1)}
	var errOut lockedBuffer
	done := make(chan int)
	go func() { done <- runConfigWatch(ctx, []string{path}, &out, &errOut, syscall.SIGUSR2) }()
	waitFor(t, &out, "watching "+path)

	write("bulkheads:\n  payment:\n    max_concurrent: 20\n  catalog:\n    max_concurrent: 5\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "reloaded "+path)

	write("bulkheads:\n  payment:\n    max_concurrent: -3\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "reload rejected, the old configuration stays")
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d", code)
	}
	got := out.String()
	for _, want := range []string{"changed bulkheads.payment", "kept bulkheads.catalog", "max_concurrent: must be > 0, got -3"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestConfigWatchUsage(t *testing.T) {
	var out, errOut strings.Builder
	if code := runConfigWatch(context.Background(), nil, &out, &errOut); code != exitUsage {
		t.Fatalf("no file: exit %d", code)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("bulkheads:\n  x:\n    max_concurrent: -1\n"), 0o600)
	if code := runConfigWatch(context.Background(), []string{bad}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "max_concurrent") {
		t.Fatalf("invalid file: exit %d, stderr %q", code, errOut.String())
	}
}

// TestConfigCheckFlagsAfterFiles: flags may follow the file names, as for
// watertight lab.
func TestConfigCheckFlagsAfterFiles(t *testing.T) {
	p := writeTemp(t, "ok.yaml", "bulkheads:\n  payment:\n    max_concurrent: 20\n")
	for _, args := range [][]string{
		{"config", "check", p, "--quiet"},
		{"config", "check", "--quiet", p},
		{"config", "check", p, "-quiet", p},
	} {
		if code, stdout, stderr := runCLI(t, args...); code != exitOK || stdout != "" || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "config", "check", p, "--loud"); code != exitUsage || !strings.Contains(stderr, "--loud") {
		t.Errorf("unknown flag after the file: exit %d, stderr %q", code, stderr)
	}
}

// TestConfigCheckDefinesNothing: a valid file that defines no instance
// says so (on stderr, even with --quiet); one that defines some does not.
func TestConfigCheckDefinesNothing(t *testing.T) {
	for _, content := range []string{"", "# nothing yet\n", "defaults:\n  bulkheads:\n    max_wait: 10ms\n"} {
		p := writeTemp(t, "empty.yaml", content)
		for _, quiet := range []bool{false, true} {
			args := []string{"config", "check", p}
			if quiet {
				args = append(args, "--quiet")
			}
			code, _, stderr := runCLI(t, args...)
			if code != exitOK || !strings.Contains(stderr, p+": defines nothing: no breakers, bulkheads, retries, budgets, timeouts or hedges") {
				t.Errorf("%q (%q): exit %d, stderr %q", content, args, code, stderr)
			}
		}
	}
	p := writeTemp(t, "one.yaml", "timeouts:\n  db:\n    timeout: 1s\n")
	if code, _, stderr := runCLI(t, "config", "check", p); code != exitOK || stderr != "" {
		t.Errorf("one instance: exit %d, stderr %q", code, stderr)
	}
}
