package lab

// The gateway scenario's backends: `watertight lab-backend`, a hidden
// subcommand of the watertight command that serves one upstream of the
// scenario in a process of its own. The protocol between the scenario and
// a backend is all in this file: the flags, the line the backend prints
// when it listens, the control endpoints and the stats document.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Backend protocol.
const (
	// gwListening starts the one line a backend prints on stdout, once it
	// listens: "listening on 127.0.0.1:PORT".
	gwListening = "listening on "
	// gwRequestHeader carries a request's number in the schedule: the
	// backend draws the request's latency from it (and the seed, and its
	// own name), so a request meets the same latency on the same host in
	// every run of a seed.
	gwRequestHeader = "X-Lab-Request"
	// gwStallPath switches the long stall on (?on=1) and off (?on=0).
	gwStallPath = "/-/stall"
	// gwStatsPath answers the backend's counts (gwStats, as JSON).
	gwStatsPath = "/-/stats"
)

// gwStats is what a backend counted: the requests that reached it per
// route (the first segment of the path: "/hedged"), and how many ended
// because the caller went away before the answer.
type gwStats struct {
	Requests  map[string]int64 `json:"requests"`
	Cancelled int64            `json:"cancelled"`
}

// gwBackendConfig is a backend's flags.
type gwBackendConfig struct {
	name      string
	listen    string
	latency   time.Duration // every answer takes at least this
	jitter    time.Duration // mean of an exponential added to latency; 0: none
	stall     time.Duration // every answer's latency while the stall is on
	rareRate  float64       // share of requests that take rare instead
	rare      time.Duration
	seed      uint64
	workers   int  // requests served at once, the others waiting in turn; 0: no limit
	stdinExit bool // exit when stdin ends (the lab's pipe: the lab is gone)
}

// parseBackend reads the flags of `watertight lab-backend`.
func parseBackend(args []string) (gwBackendConfig, error) {
	var c gwBackendConfig
	fs := flag.NewFlagSet("watertight lab-backend", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.name, "name", "", "")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "")
	fs.DurationVar(&c.latency, "latency", 0, "")
	fs.DurationVar(&c.jitter, "jitter", 0, "")
	fs.DurationVar(&c.stall, "stall", 0, "")
	fs.Float64Var(&c.rareRate, "rare-rate", 0, "")
	fs.DurationVar(&c.rare, "rare", 0, "")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.IntVar(&c.workers, "workers", 0, "")
	fs.BoolVar(&c.stdinExit, "stdin-exit", false, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.name == "":
		return c, errors.New("--name is required (the service's name)")
	case c.latency < 0 || c.jitter < 0 || c.stall < 0 || c.rare < 0:
		return c, errors.New("--latency, --jitter, --stall and --rare must not be negative")
	case c.workers < 0:
		return c, errors.New("--workers must not be negative (0: no limit)")
	case !(c.rareRate >= 0 && c.rareRate <= 1):
		return c, fmt.Errorf("--rare-rate must be in [0, 1], got %v", c.rareRate)
	case c.rareRate > 0 && c.rare == 0:
		return c, errors.New("--rare-rate needs --rare (the latency of the rare requests)")
	}
	return c, nil
}

// BackendMain is `watertight lab-backend`: one upstream of the gateway
// scenario, served on 127.0.0.1 until ctx ends (or, with --stdin-exit,
// until stdin ends). Each request waits its latency — --latency, plus an
// exponential of mean --jitter, or --rare for a share --rare-rate of the
// requests, or --stall while the stall is on — then answers 200 with a
// small JSON document; a caller that goes away ends the wait. With
// --workers N, at most N requests are served at once, the others waiting
// for a worker in turn (FIFO) as long as their callers do. The latency
// is drawn from the request's X-Lab-Request number, --seed and --name.
// POST /-/stall?on=1 (or 0) switches the stall; GET /-/stats counts the
// requests per route. It prints "listening on ADDR" on stdout once it
// listens. It returns the process's exit code: 0, 1 when it cannot
// listen, 2 for bad flags.
func BackendMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseBackend(args)
	if err != nil {
		fmt.Fprintf(stderr, "watertight lab-backend: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.stdinExit {
		go func() {
			io.Copy(io.Discard, os.Stdin) // returns at EOF: the lab closed its end, or died
			cancel()
		}()
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "watertight lab-backend: %s: %v\n", c.name, err)
		return 1
	}
	b := newGWBackend(c)
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	fmt.Fprintf(stdout, "%s%s\n", gwListening, ln.Addr())
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if srv.Shutdown(sctx) != nil {
		srv.Close()
	}
	<-done
	return 0
}

// gwBackend is a backend's handler.
type gwBackend struct {
	c         gwBackendConfig
	stalled   atomic.Bool
	mu        sync.Mutex
	requests  map[string]int64
	cancelled atomic.Int64
	salt      uint64        // from the name: two hosts draw different latencies
	workers   chan struct{} // a token per worker; nil: no limit
}

// newGWBackend is the handler of a backend configured by c.
func newGWBackend(c gwBackendConfig) *gwBackend {
	var salt uint64 = 14695981039346656037 // FNV-1a
	for i := 0; i < len(c.name); i++ {
		salt ^= uint64(c.name[i])
		salt *= 1099511628211
	}
	b := &gwBackend{c: c, requests: map[string]int64{}, salt: salt}
	if c.workers > 0 {
		b.workers = make(chan struct{}, c.workers)
	}
	return b
}

// ServeHTTP answers the control endpoints, or counts the request and
// answers it after its latency (BackendMain says how it is drawn).
func (b *gwBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case gwStallPath:
		b.control(w, r)
		return
	case gwStatsPath:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(b.stats())
		return
	}
	route := r.URL.Path
	if i := strings.IndexByte(route[1:], '/'); i >= 0 {
		route = route[:i+1]
	}
	b.mu.Lock()
	b.requests[route]++
	b.mu.Unlock()
	if b.workers != nil {
		select {
		case b.workers <- struct{}{}: // Go wakes a channel's senders in turn
			defer func() { <-b.workers }()
		case <-r.Context().Done():
			b.cancelled.Add(1)
			return
		}
	}
	t := time.NewTimer(b.latency(r.Header.Get(gwRequestHeader)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		b.cancelled.Add(1)
		return // the caller gave up: nothing to answer
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"service\":%q,\"items\":[\"%s-1\",\"%s-2\"]}\n", b.c.name, b.c.name, b.c.name)
}

// latency is how long the request numbered id (its X-Lab-Request; any
// other value draws at random) waits.
func (b *gwBackend) latency(id string) time.Duration {
	if b.stalled.Load() {
		return b.c.stall
	}
	n, err := strconv.ParseUint(id, 10, 64)
	var u1, u2 float64
	if err == nil {
		u1 = hgUniform(b.c.seed, b.salt, n, 1)
		u2 = hgUniform(b.c.seed, b.salt, n, 2)
	} else {
		u1, u2 = rand.Float64(), rand.Float64()
	}
	if u1 < b.c.rareRate {
		return b.c.rare
	}
	return b.c.latency + time.Duration(-math.Log(1-u2)*float64(b.c.jitter))
}

// control is POST /-/stall?on=1|0.
func (b *gwBackend) control(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST "+gwStallPath+"?on=1 or ?on=0", http.StatusMethodNotAllowed)
		return
	}
	on, err := strconv.ParseBool(r.URL.Query().Get("on"))
	if err != nil {
		http.Error(w, "want ?on=1 or ?on=0", http.StatusBadRequest)
		return
	}
	b.stalled.Store(on)
	fmt.Fprintf(w, "stalled: %v\n", on)
}

// stats is a copy of the counts so far.
func (b *gwBackend) stats() gwStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := gwStats{Requests: make(map[string]int64, len(b.requests)), Cancelled: b.cancelled.Load()}
	for k, v := range b.requests {
		s.Requests[k] = v
	}
	return s
}

// gwReadListening reads a backend's first line of stdout and returns the
// address it listens on.
func gwReadListening(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no %q line on stdout: %w", strings.TrimSpace(gwListening), err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), gwListening)
	if !ok {
		return "", fmt.Errorf("want %q ADDR on stdout, got %q", strings.TrimSpace(gwListening), line)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("bad address %q on stdout: %w", addr, err)
	}
	return addr, nil
}
