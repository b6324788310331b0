package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestGatewayBackendLatency: a backend's latency is a function of the
// seed, its name and the request's number, with the share of rare ones
// asked and the exponential's mean; the stall overrides it.
func TestGatewayBackendLatency(t *testing.T) {
	c := gwBackendConfig{name: "a", latency: 3 * time.Millisecond, jitter: 1500 * time.Microsecond, rareRate: 0.01, rare: time.Second, seed: 1}
	a, a2 := newGWBackend(c), newGWBackend(c)
	c.name = "b"
	b := newGWBackend(c)
	c.name, c.seed = "a", 2
	a3 := newGWBackend(c)
	n, rare, both, sameAsSeed2 := 100000, 0, 0, 0
	var sum time.Duration
	for i := range n {
		id := strconv.Itoa(i)
		d := a.latency(id)
		if d != a2.latency(id) {
			t.Fatal("latency not a function of the seed, the name and the number")
		}
		if d == a3.latency(id) {
			sameAsSeed2++
		}
		if d == time.Second {
			rare++
			if b.latency(id) == time.Second {
				both++
			}
			continue
		}
		if d < c.latency {
			t.Fatalf("latency %v below the base %v", d, c.latency)
		}
		sum += d - c.latency
	}
	if rare < 850 || rare > 1150 {
		t.Errorf("%d rare latencies in %d, want about 1%%", rare, n)
	}
	if both > 30 {
		t.Errorf("%d requests rare on both hosts, want about 1%% of 1%% (10): the hosts' draws are not independent", both)
	}
	if sameAsSeed2 > n/100 {
		t.Errorf("seed 2 gave the same latency %d times in %d", sameAsSeed2, n)
	}
	if mean := sum / time.Duration(n-rare); mean < 1400*time.Microsecond || mean > 1600*time.Microsecond {
		t.Errorf("mean of the exponential part %v, want about 1.5ms", mean)
	}
	a.stalled.Store(true)
	if d := a.latency("1"); d != 0 {
		t.Errorf("stalled with --stall 0: %v", d)
	}
}

// TestGatewayBackendMain: the backend as the lab runs it, on a real
// listener: it prints where it listens, counts requests per route, switches
// its stall, and ends with its context.
func TestGatewayBackendMain(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	outR, outW := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- BackendMain(ctx, []string{"--name", "catalog", "--stall", "1h", "--seed", "3"}, outW, &stderr)
		outW.Close()
	}()
	addr, err := gwReadListening(bufio.NewReader(outR))
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/catalog", "/catalog/items/1", "/hedged/items", "/"} {
		if code, body := get(p); code != 200 || !strings.Contains(body, `"service":"catalog"`) {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	if code, _ := get(gwStallPath + "?on=1"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", gwStallPath, code)
	}
	if err := gwStall(t.Context(), addr, true); err != nil {
		t.Fatal(err)
	}
	// Stalled for an hour: a caller that gives up ends the wait, and is
	// counted.
	rctx, rcancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/catalog", nil)
	if _, err := client.Do(req); err == nil {
		t.Error("a stalled backend answered")
	}
	rcancel()
	if err := gwStall(t.Context(), addr, false); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("/catalog"); code != 200 {
		t.Errorf("after the stall: %d", code)
	}
	st, err := gwBackendStats(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"/catalog": 4, "/hedged": 1, "/": 1}
	for k, v := range want {
		if st.Requests[k] != v {
			t.Errorf("requests %s: %d, want %d (all: %v)", k, st.Requests[k], v, st.Requests)
		}
	}
	// The cancelled request is counted once its handler has seen the
	// cancellation; the stats may be read before that.
	if st.Cancelled > 1 {
		t.Errorf("cancelled: %d, want at most 1", st.Cancelled)
	}
	raw, _ := json.Marshal(st)
	t.Logf("stats: %s", raw)
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("exit code %d, stderr %s", c, stderr.String())
	}
	goleak.VerifyNone(t)
}

// TestGatewayBackendFlags: bad flags are refused with exit code 2 and a
// message that says what to give.
func TestGatewayBackendFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--name is required"},
		{[]string{"--name", "a", "extra"}, `unexpected argument "extra"`},
		{[]string{"--name", "a", "--latency", "-1s"}, "must not be negative"},
		{[]string{"--name", "a", "--rare-rate", "2", "--rare", "1s"}, "--rare-rate must be in [0, 1]"},
		{[]string{"--name", "a", "--rare-rate", "0.1"}, "--rare-rate needs --rare"},
		{[]string{"--name", "a", "--latency", "soon"}, "invalid value"},
		{[]string{"--name", "a", "--listen", "256.0.0.1:0"}, "256.0.0.1"},
	} {
		var stderr strings.Builder
		code := BackendMain(t.Context(), tc.args, io.Discard, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error containing %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestGatewayReadListening: the line a backend prints is parsed, and
// anything else is an error that says what was expected.
func TestGatewayReadListening(t *testing.T) {
	addr, err := gwReadListening(bufio.NewReader(strings.NewReader("listening on 127.0.0.1:8080\nmore\n")))
	if err != nil || addr != "127.0.0.1:8080" {
		t.Errorf("got %q, %v", addr, err)
	}
	for _, in := range []string{"", "hello\n", "listening on nowhere\n", "listening on 127.0.0.1:1"} {
		if _, err := gwReadListening(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
