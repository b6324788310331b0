package lab

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/watertighthttp"
)

// The tenants scenario: the noisy neighbour. A server on 127.0.0.1 of fixed
// capacity, as in the overload scenario — W workers, each request holding one
// for S of work, so W/S requests a second — is shared by four tenants, each
// sending open loop (seeded Poisson arrivals given their count) requests that
// carry a deadline on the wire (X-Request-Timeout-Ms, package deadline) and
// the tenant's name (X-Tenant). One noisy tenant offers 3× the server's whole
// capacity by itself; three quiet tenants offer 15% of it each. The server is
// wrapped in watertighthttp.Handler with route admission — MaxConcurrent W, a
// queue of W (adaptive LIFO), the deadline read from the header — in two
// configurations:
//
//   - route-limits: the Handler as above. It protects the server (goodput
//     holds at capacity, as in the overload scenario) but not the tenants
//     from each other: the noisy tenant keeps the route's W running and W
//     queued places full, and a quiet request finds them full as often as a
//     noisy one does, so the quiet tenants are turned away (503) in about the
//     proportion capacity / total offered.
//   - per-client: the same plus HandlerConfig.Client = the X-Tenant header
//     and MaxPerClient m = 10 with W = 16: the noisy tenant can hold at most
//     10 of the route's 2W = 32 places, running or queued (under a third;
//     its excess is answered 429 at once), and at most 10 of the 16 workers.
//
// Sizing MaxPerClient. Half the places (m = W) is not enough, because of the
// queue's adaptive LIFO. With the noisy tenant at its limit and every worker
// busy, the noisy tenant has m − W + (quiet requests running) requests
// queued, so the queue holds m − W + Q, Q being the quiet tenants' requests
// in the Handler; it turns LIFO when that exceeds W/2, that is when
// Q > 1.5W − m. In LIFO the newest queued request goes first, and the newest
// is nearly always the noisy tenant's (one of its requests arrives within a
// couple of milliseconds of each place it frees), so the quiet requests
// already queued wait, pile up, and are turned away once the route is full.
// Q is about Poisson with mean rate × S = 3 × 0.15 × W = 7.2 (Little's law):
// m = W turns LIFO when Q > 8, about 30% of the time (measured: the quiet
// tenants' success ratio falls to 0.94); m = 10 only when Q > 14, under 1%.
// From below, the noisy tenant must still fill the room the quiet tenants
// leave: it runs at most m requests, so workers idle only while fewer than
// W − m = 6 quiet requests run, which costs about 3% of the capacity on
// average (m = 8: about 10%). m = 10 is also docs/http.md's rule of thumb,
// MaxConcurrent / busy clients × 2 or 3 = 16 / 4 × 2–3 = 8–12.
//
// Goodput is the number of 200 answers within their deadline per second; a
// tenant class's success ratio is its goodput over its offered rate.

func init() {
	Register(Scenario{
		Name:        "tenants",
		Description: "a noisy tenant at 3× a server's capacity and three quiet ones at 15% each: what the quiet ones get with route limits alone and with per-client limits",
		Run:         runTenants,
	})
}

const (
	tnRouteLimits = "route-limits"
	tnPerClient   = "per-client"

	tnNoisy = "noisy"
	tnQuiet = "quiet"

	// tnHeader carries the tenant's name.
	tnHeader = "X-Tenant"
)

type tnParams struct {
	// The checks' bounds: the quiet tenants' success ratio with per-client
	// limits (0.95), how far below it the ratio with route limits alone
	// is (0.4), and the total goodput with per-client limits over the
	// capacity (0.85). The quick run, two seconds per configuration on a
	// machine shared with -race tests, holds 0.85, 0.3 and 0.7.
	minQuiet, minGap, minBusy float64
	workers                   int           // W: requests served at once
	work                      time.Duration // S: each request's work
	queue                     int           // MaxQueue
	maxPerClient              int           // per-client: MaxPerClient
	noisyLoad                 float64       // the noisy tenant's rate, × capacity
	quiet                     int           // quiet tenants
	quietLoad                 float64       // each quiet tenant's rate, × capacity
	clientDL                  time.Duration // each client's deadline
	margin                    time.Duration // deadline margin when sending
	minRemaining              time.Duration // least time left to start the work
	duration                  time.Duration // D: arrivals per configuration
	bins                      int           // chart: bins of the success ratio over time
}

func tnParamsFor(quick bool) tnParams {
	p := tnParams{
		minQuiet:     0.95,
		minGap:       0.4,
		minBusy:      0.85,
		workers:      16,
		work:         80 * time.Millisecond, // 16 / 80ms = 200 requests a second
		queue:        16,
		maxPerClient: 10, // see the scenario's comment
		noisyLoad:    3,  // 600/s
		quiet:        3,
		quietLoad:    0.15, // 30/s each, 90/s in all
		clientDL:     250 * time.Millisecond,
		margin:       5 * time.Millisecond,
		minRemaining: 100 * time.Millisecond, // the work and 20ms for the network and late timers
		duration:     3 * time.Second,
		bins:         12,
	}
	if quick {
		// Everything twice as slow — the work, the deadline and so the
		// queueing, which scale with it — so half the requests a second
		// (and half the CPU: the quick run is for tests with -race on a
		// loaded machine), for two seconds per configuration: the same
		// number of requests as one second of the full run.
		p.work *= 2 // 100/s: noisy 300/s, quiet 15/s each
		p.clientDL *= 2
		p.margin *= 2
		p.minRemaining *= 2
		p.duration = 2 * time.Second
		p.bins = 8
		p.minQuiet, p.minGap, p.minBusy = 0.85, 0.3, 0.7
	}
	return p
}

// capacity is W/S requests a second.
func (p tnParams) capacity() float64 { return float64(p.workers) / p.work.Seconds() }

// tnTally is what one tenant class got in one configuration.
type tnTally struct {
	sent     int
	good     int
	limited  int // 429s: over the tenant's MaxPerClient
	shed     int // 503s: route full, queue gave up, deadline too short
	timedOut int // no answer, or a 200, within the deadline
	other    int // any other answer (a late 504, a transport error)
	latency  []time.Duration
	binSent  []int // by send time
	binGood  []int
}

// tnRunResult is what one configuration did.
type tnRunResult struct {
	config string
	mu     sync.Mutex
	by     map[string]*tnTally // tenant class -> tally
}

// tnArrival is one request to send: when, and from whom.
type tnArrival struct {
	at     time.Duration
	tenant string
	class  string
}

// tnArrivals returns the seeded open-loop arrivals of every tenant over
// p.duration, merged in time order: rate × D requests per tenant at uniform
// random times in [0, D) — a Poisson process given its count, so that every
// run offers exactly its load.
func tnArrivals(p tnParams, seed uint64) []tnArrival {
	var out []tnArrival
	add := func(tenant, class string, load float64, i int) {
		rng := rand.New(rand.NewPCG(seed^uint64(i+1)*0x9e3779b97f4a7c15, 0x7e4a475))
		n := int(math.Round(load * p.capacity() * p.duration.Seconds()))
		for range n {
			out = append(out, tnArrival{at: time.Duration(rng.Int64N(int64(p.duration))), tenant: tenant, class: class})
		}
	}
	add(tnNoisy, tnNoisy, p.noisyLoad, 0)
	for i := range p.quiet {
		add(tnQuiet+"-"+strconv.Itoa(i+1), tnQuiet, p.quietLoad, i+1)
	}
	slices.SortStableFunc(out, func(a, b tnArrival) int { return cmp.Compare(a.at, b.at) })
	return out
}

func runTenants(ctx context.Context, opts Options) (*Result, error) {
	p := tnParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	arrivals := tnArrivals(p, opts.Seed) // the same for both configurations
	configs := []string{tnRouteLimits, tnPerClient}
	var runs []*tnRunResult
	start := time.Now()
	for _, cfg := range configs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "tenants: %s, noisy %.0f/s and %d quiet at %.0f/s each against %.0f/s for %v\n",
			cfg, p.noisyLoad*p.capacity(), p.quiet, p.quietLoad*p.capacity(), p.capacity(), p.duration)
		r, err := tnRun(ctx, cfg, p, arrivals)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return tnResult(p, runs, time.Since(start)), nil
}

// tnRun runs one configuration on a fresh server.
func tnRun(ctx context.Context, cfg string, p tnParams, arrivals []tnArrival) (*tnRunResult, error) {
	prop, err := deadline.New(deadline.Config{Margin: p.margin, MinRemaining: p.minRemaining, Logger: discardLogger()})
	if err != nil {
		return nil, err
	}
	run := &tnRunResult{config: cfg, by: map[string]*tnTally{}}
	for _, class := range []string{tnNoisy, tnQuiet} {
		run.by[class] = &tnTally{binSent: make([]int, p.bins), binGood: make([]int, p.bins)}
	}
	hc := watertighthttp.HandlerConfig{
		Deadline:      prop,
		MaxConcurrent: p.workers,
		MaxQueue:      p.queue,
		Logger:        discardLogger(),
	}
	if cfg == tnPerClient {
		hc.Client = func(r *http.Request) string { return r.Header.Get(tnHeader) }
		hc.MaxPerClient = p.maxPerClient
	}
	h, err := watertighthttp.NewHandler(tnHandler(p), hc)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 1024, DialContext: (&net.Dialer{}).DialContext}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	// Open loop: each request is sent at its time whatever the answers.
	at := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		at[i] = a.at
	}
	if err := openLoop(ctx, at, func(i int) { tnClientCall(ctx, p, prop, client, srv.URL, arrivals[i], run) }); err != nil {
		return nil, err
	}
	srv.Close()
	return run, ctx.Err()
}

// tnClientCall makes one request of tenant a.tenant with the client's
// deadline and records the outcome.
func tnClientCall(ctx context.Context, p tnParams, prop *deadline.Propagator, client *http.Client, url string, a tnArrival, run *tnRunResult) {
	status, lat, late, err := deadlineGet(ctx, client, prop, url, p.clientDL, [2]string{tnHeader, a.tenant})
	// The context's timer may fire late on a loaded machine: the latency
	// decides too.
	late = late || lat > p.clientDL
	bin := min(int(int64(a.at)*int64(p.bins)/int64(p.duration)), p.bins-1)
	run.mu.Lock()
	defer run.mu.Unlock()
	t := run.by[a.class]
	t.sent++
	t.binSent[bin]++
	switch {
	case status == http.StatusOK && err == nil && !late:
		t.good++
		t.binGood[bin]++
		t.latency = append(t.latency, lat)
	case status == http.StatusTooManyRequests:
		t.limited++
	case status == http.StatusServiceUnavailable:
		t.shed++
	case late || status == http.StatusOK:
		t.timedOut++
	default:
		t.other++
	}
}

// tnHandler is the server of fixed capacity: a request takes one of
// p.workers workers, then works for p.work, both under the request's context
// (which watertighthttp.Handler bounds by the deadline). The Handler's
// MaxConcurrent equals p.workers, so the wait for a worker is short: the
// Handler's queue is where requests wait.
func tnHandler(p tnParams) http.Handler {
	workers := make(chan struct{}, p.workers)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		select {
		case workers <- struct{}{}:
		case <-ctx.Done():
			http.Error(rw, "gave up waiting for a worker", http.StatusGatewayTimeout)
			return
		}
		defer func() { <-workers }()
		timer := time.NewTimer(p.work)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			http.Error(rw, "gave up working", http.StatusGatewayTimeout)
			return
		}
		_, _ = io.WriteString(rw, "ok")
	})
}

type tnJSON struct {
	Scenario string         `json:"scenario"`
	Results  []tnJSONResult `json:"results"`
}

// tnJSONResult is one tenant class in one configuration. Rates are per
// second; Offered and Goodput sum over the class's tenants.
type tnJSONResult struct {
	Config       string  `json:"config"`
	Tenant       string  `json:"tenant"`
	Tenants      int     `json:"tenants"`
	Offered      float64 `json:"offered"`
	Goodput      float64 `json:"goodput"`
	SuccessRatio float64 `json:"success_ratio"`
	Capacity     float64 `json:"capacity"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	Sent         int     `json:"sent"`
	Good         int     `json:"good"`
	Limited      int     `json:"rejected_429"`
	Shed         int     `json:"shed_503"`
	TimedOut     int     `json:"timed_out"`
	Other        int     `json:"other"`
}

func tnRound(x float64, decimals int) float64 {
	m := math.Pow10(decimals)
	return math.Round(x*m) / m
}

func tnResult(p tnParams, runs []*tnRunResult, took time.Duration) *Result {
	res := &Result{Scenario: "tenants"}
	secs := p.duration.Seconds()
	res.Summary = fmt.Sprintf("A server on 127.0.0.1 with %d workers; each request holds one for %v of work, so its capacity is "+
		"%.0f requests a second. It is shared by four tenants sending open loop (rate × duration requests at seeded uniform "+
		"random times — Poisson arrivals given their count — the same in both configurations) for %v, each request with a "+
		"%v deadline sent as X-Request-Timeout-Ms (%v margin) and its tenant in %s: one noisy tenant at %.0f× the capacity "+
		"(%.0f/s) and %d quiet tenants at %.0f%% of it (%.0f/s each). The server is wrapped in watertighthttp.Handler with "+
		"MaxConcurrent %d, MaxQueue %d (adaptive LIFO), the deadline read from the header and MinRemaining %v. route-limits: "+
		"that alone. per-client: the same plus Client = the %s header and MaxPerClient %d of the route's %d places (running "+
		"plus queued): few enough that the noisy tenant's queued requests keep the queue under half full, where it is FIFO "+
		"(beyond, its LIFO order would serve the noisy tenant's newest requests before the quiet ones already waiting), and "+
		"enough for it to fill the workers the quiet tenants leave idle. Goodput is the number of 200 answers within their deadline per "+
		"second; the success ratio is goodput over offered. 429 is a request over its tenant's limit, 503 one shed by the "+
		"route (full, or its deadline ran out in the queue). Latencies are those of the good answers. Real time on a shared "+
		"2-core machine (the load generator shares it), one run per configuration: expect a few per cent of noise. Took %v.",
		p.workers, p.work, p.capacity(), p.duration, p.clientDL, p.margin, tnHeader,
		p.noisyLoad, p.noisyLoad*p.capacity(), p.quiet, 100*p.quietLoad, p.quietLoad*p.capacity(),
		p.workers, p.queue, p.minRemaining, tnHeader, p.maxPerClient, p.workers+p.queue, took.Round(100*time.Millisecond))
	tbl := Table{
		Title: "What each tenant class got",
		Header: []string{"config", "tenant", "offered/s", "goodput/s", "success ratio",
			"p50 (ms)", "p99 (ms)", "429", "503", "timed out", "other"},
	}
	doc := tnJSON{Scenario: "tenants"}
	chart := Chart{
		File:   "tenants-success",
		Title:  fmt.Sprintf("tenants: success ratio over time (capacity %.0f/s, noisy %.0f/s, quiet %d × %.0f/s)", p.capacity(), p.noisyLoad*p.capacity(), p.quiet, p.quietLoad*p.capacity()),
		XLabel: "time since the load began (s), by send time",
		YLabel: "success ratio (200 within the deadline / sent)",
		YMax:   1,
	}
	got := map[string]map[string]tnJSONResult{}
	total := map[string]float64{}
	binWidth := p.duration / time.Duration(p.bins)
	for _, run := range runs {
		got[run.config] = map[string]tnJSONResult{}
		var all tnTally
		for _, class := range []string{tnQuiet, tnNoisy} {
			t := run.by[class]
			slices.Sort(t.latency)
			p50, p99 := ovPercentile(t.latency, 0.50), ovPercentile(t.latency, 0.99)
			tenants := 1
			if class == tnQuiet {
				tenants = p.quiet
			}
			ratio := 0.0
			if t.sent > 0 {
				ratio = float64(t.good) / float64(t.sent)
			}
			j := tnJSONResult{
				Config: run.config, Tenant: class, Tenants: tenants,
				Offered: tnRound(float64(t.sent)/secs, 1), Goodput: tnRound(float64(t.good)/secs, 1),
				SuccessRatio: tnRound(ratio, 4), Capacity: p.capacity(),
				P50Ms: tnRound(ovMs(p50), 2), P99Ms: tnRound(ovMs(p99), 2),
				Sent: t.sent, Good: t.good, Limited: t.limited, Shed: t.shed, TimedOut: t.timedOut, Other: t.other,
			}
			got[run.config][class] = j
			doc.Results = append(doc.Results, j)
			tbl.Rows = append(tbl.Rows, tnRow(run.config, class, p, t, p50, p99))
			all.sent += t.sent
			all.good += t.good
			all.limited += t.limited
			all.shed += t.shed
			all.timedOut += t.timedOut
			all.other += t.other

			s := Series{Name: run.config + " " + class}
			for b := range p.bins {
				if t.binSent[b] == 0 {
					continue
				}
				s.X = append(s.X, (time.Duration(b)*binWidth + binWidth/2).Seconds())
				s.Y = append(s.Y, float64(t.binGood[b])/float64(t.binSent[b]))
			}
			chart.Series = append(chart.Series, s)
		}
		total[run.config] = float64(all.good) / secs
		tbl.Rows = append(tbl.Rows, tnRow(run.config, "all", p, &all, -1, -1))
	}
	res.Tables = []Table{tbl}
	res.Charts = []Chart{chart}
	res.JSON = doc

	rlQ, pcQ := got[tnRouteLimits][tnQuiet], got[tnPerClient][tnQuiet]
	pcN := got[tnPerClient][tnNoisy]
	res.Checks = []Check{
		AtLeast(fmt.Sprintf("with per-client limits, the quiet tenants' success ratio is at least %s", fmtNum(p.minQuiet)),
			pcQ.SuccessRatio, p.minQuiet, "",
			fmt.Sprintf("%d of %d; 429: %d, 503: %d, timed out: %d", pcQ.Good, pcQ.Sent, pcQ.Limited, pcQ.Shed, pcQ.TimedOut)),
		AtLeast(fmt.Sprintf("with route limits alone, the quiet tenants' success ratio is at least %s below the per-client one (per-client less route-limits)", fmtNum(p.minGap)),
			tnRound(pcQ.SuccessRatio-rlQ.SuccessRatio, 4), p.minGap, "",
			fmt.Sprintf("%.3f with route limits alone (503: %d of %d) against %.3f per client",
				rlQ.SuccessRatio, rlQ.Shed, rlQ.Sent, pcQ.SuccessRatio)),
		AtLeast(fmt.Sprintf("with per-client limits, the server stays busy: total goodput at least %s of its capacity (goodput / capacity)", fmtNum(p.minBusy)),
			tnRound(total[tnPerClient]/p.capacity(), 3), p.minBusy, "",
			fmt.Sprintf("%.0f/s of %.0f/s (noisy %.0f/s, quiet %.0f/s); %.0f/s with route limits alone",
				total[tnPerClient], p.capacity(), pcN.Goodput, pcQ.Goodput, total[tnRouteLimits])),
	}
	return res
}

// tnRow is a table row; negative percentiles are left blank.
func tnRow(config, class string, p tnParams, t *tnTally, p50, p99 time.Duration) []string {
	secs := p.duration.Seconds()
	ratio := 0.0
	if t.sent > 0 {
		ratio = float64(t.good) / float64(t.sent)
	}
	ms := func(d time.Duration) string {
		if d < 0 {
			return ""
		}
		return fmt.Sprintf("%.1f", ovMs(d))
	}
	return []string{
		config, class,
		fmt.Sprintf("%.0f", float64(t.sent)/secs), fmt.Sprintf("%.0f", float64(t.good)/secs), fmt.Sprintf("%.3f", ratio),
		ms(p50), ms(p99),
		strconv.Itoa(t.limited), strconv.Itoa(t.shed), strconv.Itoa(t.timedOut), strconv.Itoa(t.other),
	}
}
