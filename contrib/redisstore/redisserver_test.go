package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

const (
	// outageTimeout is the clients' timeout in the outage tests.
	outageTimeout = time.Second
	// prompt bounds how long any store call may take while Redis is down
	// or hung: the client's timeout plus slack for a busy machine.
	prompt = outageTimeout + 3*time.Second
)

// redisServer is a redis-server process of the test's own, which the test
// can kill and start again on the same port.
type redisServer struct {
	t     *testing.T
	bin   string
	port  int
	extra []string // more redis-server arguments
	cmd   *exec.Cmd
	out   bytes.Buffer
}

// startOwnRedis starts a redis-server without persistence on a free port
// of 127.0.0.1, with the extra arguments. Without the binary the test is skipped, or fails under
// WATERTIGHT_REQUIRE_REDIS=1.
func startOwnRedis(t *testing.T, extra ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal("redis required but redis-server is not on PATH (WATERTIGHT_REQUIRE_REDIS=1)")
		}
		t.Skip("redis-server is not on PATH: skipping the Redis outage test (install Debian's redis-server to run it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{t: t, bin: bin, port: port, extra: extra}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.out.Reset()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no"}, r.extra...)
	r.cmd = exec.Command(r.bin, args...)
	r.cmd.Stdout = &r.out
	r.cmd.Stderr = &r.out
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	// Ready when it accepts connections.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.kill()
			r.t.Fatalf("redis-server on %s did not start: %v\n%s", r.addr(), err, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL (no goodbye to the clients) and
// waits for it to exit.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// failsPromptly checks that each store operation returns an error, within
// prompt, and that the error is a store error (not ErrNotOwner, which would
// be an answer about ownership that the store does not have).
func failsPromptly(t *testing.T, what string, s idempotency.Store, token string) {
	t.Helper()
	ctx := context.Background()
	ops := []struct {
		name string
		op   func() error
	}{
		{"Claim", func() error {
			c, err := s.Claim(ctx, "new", "fp", lockTTL, time.Hour)
			if err == nil {
				t.Fatalf("%s: Claim returned %+v", what, c)
			}
			return err
		}},
		{"Complete", func() error { return s.Complete(ctx, "held", token, sampleRecord("fp"), ttl) }},
		{"Release", func() error { return s.Release(ctx, "held", token) }},
	}
	for _, o := range ops {
		start := time.Now()
		err := o.op()
		took := time.Since(start)
		switch {
		case err == nil:
			t.Fatalf("%s: %s returned no error", what, o.name)
		case errors.Is(err, idempotency.ErrNotOwner):
			t.Fatalf("%s: %s returned %v; want a store error, not an ownership answer", what, o.name, err)
		case took > prompt:
			t.Fatalf("%s: %s took %v, want under %v", what, o.name, took, prompt)
		}
	}
}
