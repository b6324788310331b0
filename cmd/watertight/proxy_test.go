package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freeAddress(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestProxyCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("listeners:\n  public: {address: 127.0.0.1:8080}\nupstreams:\n  a: {hosts: [127.0.0.1:9001]}\nroutes:\n  all: {upstream: b, timeout: 2}\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"proxy", "--check", bad}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, errb.String())
	}
	for _, want := range []string{bad + ":6: routes.all.timeout: must be a duration", bad + `:6: routes.all.upstream: no upstream named "b"`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}
	good := filepath.Join("..", "..", "examples", "gateway", "gateway.yaml")
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"proxy", "--check", good}, &out, &errb); code != exitOK || !strings.Contains(out.String(), ": ok: ") {
		t.Fatalf("the example config: exit %d, %s %s", code, out.String(), errb.String())
	}
	for _, args := range [][]string{{"proxy"}, {"proxy", "--config", "a", "--check", "b"}, {"proxy", "file.yaml"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// The gateway as a real process: it proxies, serves its admin listener,
// and on SIGTERM drains the request in flight and exits 0.
func TestProxyProcessDrainsOnSIGTERM(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	pub, adm := freeAddress(t), freeAddress(t)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf("listeners:\n  public: {address: %s}\nadmin: {address: %s}\nupstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a}\n", pub, adm, u.Host)), 0o644)
	cmd := exec.Command(os.Args[0], "proxy", "--config", path, "--watch", "0")
	cmd.Env = append(os.Environ(), "WATERTIGHT_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ready := false
	for range 500 { // bounded: 5 s for the process to listen
		if resp, err := c.Get("http://" + adm + "/readyz"); err == nil {
			resp.Body.Close()
			if ready = resp.StatusCode == 200; ready {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !ready {
		t.Fatalf("the proxy never became ready; its log:\n%s", stderr.String())
	}
	resp, err := c.Get("http://" + pub + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok /x" {
		t.Fatalf("through the proxy: %q", body)
	}
	// SIGHUP reloads: a second route appears.
	os.WriteFile(path, []byte(fmt.Sprintf("listeners:\n  public: {address: %s}\nadmin: {address: %s}\nupstreams:\n  a: {hosts: [%s]}\nroutes:\n  all: {upstream: a}\n  fallback: {path_prefix: /down, upstream: a, fallback: {status: 200, body: fb}}\n", pub, adm, u.Host)), 0o644)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloaded := false
	for range 500 { // bounded: 5 s
		resp, err := c.Get("http://" + adm + "/state")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if reloaded = strings.Contains(string(b), `"reloads": 1`) && strings.Contains(string(b), `"name": "fallback"`); reloaded {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reloaded {
		t.Fatalf("SIGHUP did not reload; log:\n%s", stderr.String())
	}
	slow := make(chan string, 1)
	go func() {
		resp, err := c.Get("http://" + pub + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- string(b)
	}()
	<-arrived
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range 500 { // until it drains: /readyz says 503 (or the admin listener is gone)
		resp, err := c.Get("http://" + adm + "/readyz")
		if err != nil {
			break
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if got := <-slow; got != "ok /slow" {
		t.Fatalf("the request in flight at SIGTERM: %q", got)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("exit: %v; log:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the proxy did not exit after draining; log:\n%s", stderr.String())
	}
}
