package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc"
)

// serveEnv names the environment variable that turns this test binary into
// a loopback server for the benchmarks ("http" or "grpc"): see serveMain and
// startServer.
const serveEnv = "WATERTIGHT_BENCH_SERVE"

// TestMain runs the benchmarks, or, in a child started by startServer, a
// server.
func TestMain(m *testing.M) {
	if kind := os.Getenv(serveEnv); kind != "" {
		if err := serveMain(kind, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveMain serves kind on a fresh 127.0.0.1 port, writes "addr <host:port>"
// on out, and serves until in reaches its end (the parent closed it or
// died).
func serveMain(kind string, in io.Reader, out io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var serve func() error
	var stop func()
	switch kind {
	case "http":
		srv := &http.Server{Handler: http.HandlerFunc(okHandler)}
		serve = func() error { return srv.Serve(lis) }
		stop = func() { srv.Close() }
	case "grpc":
		srv := grpc.NewServer()
		srv.RegisterService(&grpcService, struct{}{})
		serve = func() error { return srv.Serve(lis) }
		stop = srv.Stop
	default:
		return fmt.Errorf("%s=%q: want http or grpc", serveEnv, kind)
	}
	served := make(chan error, 1)
	go func() { served <- serve() }()
	if _, err := fmt.Fprintf(out, "addr %s\n", lis.Addr()); err != nil {
		stop()
		return err
	}
	io.Copy(io.Discard, in)
	stop()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// startServer starts this test binary again as a loopback server of kind
// ("http": okHandler; "grpc": grpcService) in a process of its own, and
// returns its address; the server ends with the test. In a process of its
// own, the server's allocations and garbage collections are not the
// benchmark's: allocs/op is what the client side costs, which is what the
// client adapters' targets are about.
func startServer(tb testing.TB, kind string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+kind)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("%s server: %v", kind, err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr ")
	if err != nil || !ok {
		tb.Fatalf("%s server: read %q, %v; want \"addr host:port\"", kind, line, err)
	}
	return addr
}
