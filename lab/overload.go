package lab

import (
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

// The overload scenario: a server on 127.0.0.1 of fixed capacity — W workers,
// each request holding one for S of work, so W/S requests a second — driven
// open loop (seeded Poisson arrivals given their count) at 1×, 2× and 3× that
// capacity by clients that give up after a deadline, sent on the wire
// (X-Request-Timeout-Ms, package deadline). Goodput is the number of answers
// that came back 200 within their deadline, per second; the scenario compares
// it with the goodput at 1× under two configurations:
//
//   - no-shedding: the handler alone. Requests wait for a worker without
//     limit, and the work does not stop when the client gives up
//     (context.WithoutCancel): a server without deadline awareness, or Go
//     code that detaches from the request's context. Past capacity the queue
//     grows without bound, every answer comes later than the last, and the
//     workers spend their time on requests nobody waits for any more.
//   - shedding: the same handler wrapped in watertighthttp.Handler with
//     MaxConcurrent = W and a queue of W (adaptive LIFO), the deadline read
//     from the header: requests that find the queue full are turned away at
//     once (503 + X-Overloaded), queued requests whose deadline passes are
//     dropped, and those left with less than the work needs are not started;
//     the handler works under the request's context.

func init() {
	Register(Scenario{
		Name:        "overload",
		Description: "a server of fixed capacity driven open loop at 1×, 2× and 3× its capacity by clients with deadlines: goodput with and without load shedding",
		Run:         runOverload,
	})
}

const (
	ovNoShedding = "no-shedding"
	ovShedding   = "shedding"
)

type ovParams struct {
	// minRatio is the check's bound: with shedding, goodput at 2× and 3×
	// at least this share of the goodput at 1× (0.9; 0.8 in the quick run,
	// a second per point on a machine shared with -race tests).
	minRatio     float64
	workers      int           // W: requests served at once
	work         time.Duration // S: each request's work
	queue        int           // shedding: MaxQueue
	clientDL     time.Duration // each client's deadline
	margin       time.Duration // deadline margin when sending
	minRemaining time.Duration // shedding: least time left to start the work
	duration     time.Duration // D: arrivals per point
	loads        []int
}

func ovParamsFor(quick bool) ovParams {
	p := ovParams{
		minRatio:     0.9,
		workers:      8,
		work:         20 * time.Millisecond, // 8 / 20ms = 400 requests a second; 3× = 1200/s
		queue:        8,
		clientDL:     250 * time.Millisecond,
		margin:       5 * time.Millisecond, // loopback: a few ms of network each way
		minRemaining: 25 * time.Millisecond,
		duration:     3 * time.Second,
		loads:        []int{1, 2, 3},
	}
	if quick {
		// Half the rate (and so half the CPU: the quick run is for tests
		// with -race on a loaded machine), one second per point.
		p.work = 40 * time.Millisecond // 200/s; 3× = 600/s
		p.minRemaining = 45 * time.Millisecond
		p.duration = time.Second
		p.minRatio = 0.8
	}
	return p
}

// capacity is W/S requests a second.
func (p ovParams) capacity() float64 { return float64(p.workers) / p.work.Seconds() }

// ovPoint is what one configuration did at one load.
type ovPoint struct {
	config   string
	load     int
	duration time.Duration

	mu       sync.Mutex
	sent     int
	good     int
	shed     int // 503s
	timedOut int // no answer, or a 200, within the deadline
	other    int // any other answer (a late 504, a transport error)
	latency  []time.Duration
	served   int // work the server finished within the point's duration
}

func (pt *ovPoint) offered() float64 { return float64(pt.sent) / pt.duration.Seconds() }
func (pt *ovPoint) goodput() float64 { return float64(pt.good) / pt.duration.Seconds() }

func runOverload(ctx context.Context, opts Options) (*Result, error) {
	p := ovParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	configs := []string{ovNoShedding, ovShedding}
	points := map[string][]*ovPoint{}
	start := time.Now()
	for _, cfg := range configs {
		for li, load := range p.loads {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "overload: %s at %d× (%.0f/s offered) for %v\n", cfg, load, float64(load)*p.capacity(), p.duration)
			// The same seeded arrivals for both configurations.
			seed := opts.Seed ^ uint64(li+1)*0x9e3779b97f4a7c15
			pt, err := ovRun(ctx, cfg, load, p, seed)
			if err != nil {
				return nil, err
			}
			points[cfg] = append(points[cfg], pt)
		}
	}
	return ovResult(p, configs, points, time.Since(start)), nil
}

// ovRun runs one configuration at one load on a fresh server.
func ovRun(ctx context.Context, cfg string, load int, p ovParams, seed uint64) (*ovPoint, error) {
	prop, err := deadline.New(deadline.Config{Margin: p.margin, MinRemaining: p.minRemaining, Logger: discardLogger()})
	if err != nil {
		return nil, err
	}
	pt := &ovPoint{config: cfg, load: load, duration: p.duration}

	// stop ends the server's work when the point is over: in the
	// no-shedding configuration the backlog would otherwise take seconds to
	// drain, and nobody waits for it.
	stop, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	begin := time.Now() // the arrivals start a few microseconds later
	var h http.Handler = ovHandler(cfg, p, stop, pt, begin)
	if cfg == ovShedding {
		h, err = watertighthttp.NewHandler(h, watertighthttp.HandlerConfig{
			Deadline:      prop,
			MaxConcurrent: p.workers,
			MaxQueue:      p.queue,
			Logger:        discardLogger(),
		})
		if err != nil {
			return nil, err
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 1024, DialContext: (&net.Dialer{}).DialContext}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	// Open loop: n = load × capacity × D arrivals at seeded uniform random
	// times in [0, D) — a Poisson process given its count, so that every
	// point offers exactly its load — sent at their times whatever the
	// answers; a generator that fell behind catches up at once.
	rng := rand.New(rand.NewPCG(seed, 0x0e7104d))
	n := int(math.Round(float64(load) * p.capacity() * p.duration.Seconds()))
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = time.Duration(rng.Int64N(int64(p.duration)))
	}
	slices.Sort(at)
	if err := openLoop(ctx, at, func(int) { ovClientCall(ctx, p, prop, client, srv.URL, pt) }); err != nil {
		return nil, err
	}
	// Every client has its answer or gave up.
	stopWork()
	srv.Close()
	return pt, ctx.Err()
}

// ovClientCall makes one request with the client's deadline and records the
// outcome.
func ovClientCall(ctx context.Context, p ovParams, prop *deadline.Propagator, client *http.Client, url string, pt *ovPoint) {
	status, lat, late, err := deadlineGet(ctx, client, prop, url, p.clientDL, [2]string{})
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.sent++
	switch {
	case status == http.StatusOK && err == nil && !late:
		pt.good++
		pt.latency = append(pt.latency, lat)
	case status == http.StatusServiceUnavailable:
		pt.shed++
	case late || status == http.StatusOK:
		pt.timedOut++
	default:
		pt.other++
	}
}

// ovHandler is the server of fixed capacity: a request takes one of
// p.workers workers, waiting as long as it must, then works for p.work.
// Without shedding, neither the wait nor the work stops when the client gives
// up (only when the point ends); with shedding, both run under the request's
// context (which watertighthttp.Handler bounds by the deadline).
func ovHandler(cfg string, p ovParams, stop context.Context, pt *ovPoint, begin time.Time) http.Handler {
	workers := make(chan struct{}, p.workers)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		wctx := r.Context()
		if cfg == ovNoShedding {
			var cancel context.CancelFunc
			wctx, cancel = context.WithCancel(context.WithoutCancel(r.Context()))
			defer cancel()
			defer context.AfterFunc(stop, cancel)()
		}
		select {
		case workers <- struct{}{}:
		case <-wctx.Done():
			http.Error(rw, "gave up waiting for a worker", http.StatusGatewayTimeout)
			return
		}
		defer func() { <-workers }()
		timer := time.NewTimer(p.work)
		select {
		case <-timer.C:
		case <-wctx.Done():
			timer.Stop()
			http.Error(rw, "gave up working", http.StatusGatewayTimeout)
			return
		}
		if time.Since(begin) <= p.duration {
			pt.mu.Lock()
			pt.served++
			pt.mu.Unlock()
		}
		_, _ = io.WriteString(rw, "ok")
	})
}

// ovPercentile is the nearest-rank percentile q (0–1) of sorted durations.
func ovPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

type ovJSON struct {
	Scenario string         `json:"scenario"`
	Results  []ovJSONResult `json:"results"`
}

type ovJSONResult struct {
	Config       string  `json:"config"`
	Load         int     `json:"load"`
	GoodputRatio float64 `json:"goodput_ratio"`
	Goodput      float64 `json:"goodput_per_s"`
	Offered      float64 `json:"offered_per_s"`
	Served       float64 `json:"served_per_s"`
	Capacity     float64 `json:"capacity_per_s"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	Sent         int     `json:"sent"`
	Good         int     `json:"good"`
	Shed         int     `json:"shed"`
	TimedOut     int     `json:"timed_out"`
	Other        int     `json:"other"`
}

func ovMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ovResult(p ovParams, configs []string, points map[string][]*ovPoint, took time.Duration) *Result {
	res := &Result{Scenario: "overload"}
	var bestServed float64
	for _, cfg := range configs {
		for _, pt := range points[cfg] {
			bestServed = max(bestServed, float64(pt.served)/pt.duration.Seconds())
		}
	}
	res.Summary = fmt.Sprintf("A server on 127.0.0.1 with %d workers; each request holds one for %v of work, so its capacity is "+
		"%.0f requests a second. Clients arrive open loop (load × capacity × duration requests at seeded uniform random times — Poisson arrivals given their count — the same for both configurations) at 1×, 2× "+
		"and 3× that capacity for %v per point, each with a %v deadline sent as X-Request-Timeout-Ms (%v margin). Goodput is the "+
		"number of 200 answers within their deadline per second; the goodput ratio is goodput over the goodput at 1× of the "+
		"same configuration. no-shedding: the handler alone — requests wait for a worker without limit and the work does not "+
		"stop when the client gives up (context.WithoutCancel), as in a server without deadline awareness; its backlog is "+
		"dropped when the point ends. shedding: the same handler in watertighthttp.Handler with MaxConcurrent %d and MaxQueue "+
		"%d (adaptive LIFO), the deadline read from the header and MinRemaining %v, the work under the request's context. "+
		"\"served\" is the work the server finished during the point, per second, whoever still waited for it; at best %.0f/s "+
		"here, a little below the nominal capacity (timers and scheduling add to each %v of work), so 1× already loads the server "+
		"fully: without shedding its queue creeps up even there, and with shedding Poisson bursts overflow the bounded queue "+
		"now and then. Latencies are those of the good answers; with shedding their p99 is set by the adaptive LIFO, which "+
		"leaves the oldest queued requests waiting while newer ones are served (the old ones are dropped at their deadline). "+
		"Real time on a shared 2-core machine (the load generator shares it), one run per point: expect a few per cent of "+
		"noise. Took %v.",
		p.workers, p.work, p.capacity(), p.duration, p.clientDL, p.margin, p.workers, p.queue, p.minRemaining,
		bestServed, p.work, took.Round(100*time.Millisecond))
	tbl := Table{
		Title: "Goodput under overload",
		Header: []string{"config", "load", "offered/s", "goodput/s", "goodput ratio", "served/s",
			"p50 (ms)", "p99 (ms)", "shed (503)", "timed out"},
	}
	doc := ovJSON{Scenario: "overload"}
	chart := Chart{
		File:   "overload-goodput",
		Title:  fmt.Sprintf("overload: goodput relative to 1× (capacity %.0f/s, deadline %v)", p.capacity(), p.clientDL),
		XLabel: "offered load (× capacity)",
		YLabel: "goodput ratio (goodput / goodput at 1×)",
	}
	ratio := map[string]map[int]float64{}
	for _, cfg := range configs {
		ratio[cfg] = map[int]float64{}
		s := Series{Name: cfg}
		var base float64
		for _, pt := range points[cfg] {
			if pt.load == 1 {
				base = pt.goodput()
			}
		}
		for _, pt := range points[cfg] {
			r := 0.0
			if base > 0 {
				r = pt.goodput() / base
			}
			ratio[cfg][pt.load] = r
			slices.Sort(pt.latency)
			p50, p99 := ovPercentile(pt.latency, 0.50), ovPercentile(pt.latency, 0.99)
			served := float64(pt.served) / pt.duration.Seconds()
			tbl.Rows = append(tbl.Rows, []string{
				cfg, strconv.Itoa(pt.load) + "×",
				fmt.Sprintf("%.0f", pt.offered()), fmt.Sprintf("%.0f", pt.goodput()), fmt.Sprintf("%.2f", r),
				fmt.Sprintf("%.0f", served),
				fmt.Sprintf("%.1f", ovMs(p50)), fmt.Sprintf("%.1f", ovMs(p99)),
				strconv.Itoa(pt.shed), strconv.Itoa(pt.timedOut),
			})
			doc.Results = append(doc.Results, ovJSONResult{
				Config: cfg, Load: pt.load, GoodputRatio: r, Goodput: pt.goodput(), Offered: pt.offered(),
				Served: served, Capacity: p.capacity(), P50Ms: ovMs(p50), P99Ms: ovMs(p99),
				Sent: pt.sent, Good: pt.good, Shed: pt.shed, TimedOut: pt.timedOut, Other: pt.other,
			})
			s.X = append(s.X, float64(pt.load))
			s.Y = append(s.Y, r)
		}
		chart.Series = append(chart.Series, s)
	}
	res.Tables = []Table{tbl}
	res.Charts = []Chart{chart}
	res.JSON = doc
	for _, load := range []int{2, 3} {
		r := ratio[ovShedding][load]
		res.Checks = append(res.Checks, AtLeast(
			fmt.Sprintf("with shedding, goodput at %d× is at least %s of the goodput at 1×", load, fmtNum(p.minRatio)),
			math.Round(r*1000)/1000, p.minRatio, "",
			fmt.Sprintf("%.2f without shedding (not a check: no-shedding is expected to collapse)", ratio[ovNoShedding][load])))
	}
	return res
}
