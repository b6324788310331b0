package lab

// The storefront scenario: the seed's shop, on real HTTP servers on
// 127.0.0.1. A gateway serves three routes, each backed by a dependency
// server of its own; after a warm-up one dependency stalls. An open-loop load
// generator drives the three routes through two gateways in turn: one that
// only has the seed's shared pool of workers, and one that also puts a
// breaker, a bulkhead sized by Little's law and an attempt timeout in front of
// each dependency, with a fallback for recommendations.

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/sizing"
	"github.com/watertight-go/watertight/timeout"
)

func init() {
	Register(Scenario{
		Name:        "storefront",
		Description: "real HTTP on 127.0.0.1: a gateway with a stalled dependency, unprotected vs bulkhead + timeout + breaker per dependency",
		Run:         runStorefront,
	})
}

// sfRoute is one route of the gateway and the dependency behind it.
type sfRoute struct {
	name    string
	latency time.Duration // healthy latency of the dependency
}

var sfRoutes = [3]sfRoute{
	{"catalog", 10 * time.Millisecond},
	{"payment", 20 * time.Millisecond},
	{"recommendation", 200 * time.Millisecond},
}

const (
	sfRecommendation = 2 // index of the route with a fallback
	sfWarm, sfStall  = 0, 1
	sfPhaseHeader    = "X-Storefront-Phase" // "warm-up" or "stall": which phase the gateway counts a request in
	sfFallbackBody   = `{"items":[]}`
	sfBinWidth       = 250 * time.Millisecond
)

// sfParams are the knobs of one run of the scenario.
type sfParams struct {
	slow     int           // index of the dependency that stalls
	stall    time.Duration // its latency once the stall began
	rate     float64       // arrivals per second per route (Poisson)
	warmup   time.Duration // healthy phase before the stall
	stalled  time.Duration // load after the stall began
	deadline time.Duration // each client request's deadline
	workers  int           // the gateway's shared pool
	seed     uint64
	// Pass bounds (looser in Quick runs).
	minProtected   float64 // protected healthy routes: success at least this
	maxP99Ratio    float64 // protected healthy routes: p99 ≤ this × warm-up p99
	maxUnprotected float64 // unprotected healthy routes: success below this
	// Sizing of the protected gateway.
	blocking   float64       // Erlang B target: the share of healthy calls a bulkhead may refuse
	maxWait    time.Duration // cap of the bulkheads' MaxWait
	minTimeout time.Duration // floor of the attempt timeouts
	// Export (watertight lab --metrics).
	metrics      Metrics
	callPolicies func(string) []watertight.Policy
}

func sfParamsFor(opts Options) (sfParams, error) {
	p := sfParams{
		slow:           -1,
		stall:          3 * time.Second,
		rate:           150,
		warmup:         3 * time.Second,
		stalled:        7 * time.Second,
		deadline:       time.Second,
		workers:        100,
		seed:           opts.Seed,
		metrics:        opts.Metrics,
		callPolicies:   opts.CallPolicies,
		minProtected:   0.999,
		maxP99Ratio:    1.2,
		maxUnprotected: 0.5,
		blocking:       1e-4, // a tenth of the 0.1% failure budget
		maxWait:        50 * time.Millisecond,
		minTimeout:     100 * time.Millisecond,
	}
	if opts.Quick {
		// A lower rate and shorter phases. The pool of 100 still fills in
		// 100 / rate = 1 s; the stall outlasts the stalled phase and the
		// deadline, so that no stalled call gives its worker back before
		// the end and the collapse is not blurred by a partial recovery.
		p.rate = 100
		p.warmup = time.Second
		p.stalled = 3 * time.Second
		p.stall = 4 * time.Second
		p.minProtected = 0.99
		p.maxP99Ratio = 2
		p.maxUnprotected = 0.7
	}
	if opts.Stall < 0 {
		return p, fmt.Errorf("storefront: stall must be positive, got %v", opts.Stall)
	}
	if opts.Stall > 0 {
		p.stall = opts.Stall
	}
	slow := opts.Slow
	if slow == "" {
		slow = "recommendation"
	}
	for i, r := range sfRoutes {
		if r.name == slow {
			p.slow = i
		}
	}
	if p.slow < 0 {
		return p, fmt.Errorf("storefront: --slow must be catalog, payment or recommendation, got %q", opts.Slow)
	}
	return p, nil
}

// sfArrival is one scheduled request.
type sfArrival struct {
	at    time.Duration // since the load began
	route int
}

// sfSchedule draws the open-loop arrivals: a Poisson process of the given rate
// per route, seeded, so both configurations meet the very same requests at
// the very same offsets.
func sfSchedule(p sfParams) []sfArrival {
	end := p.warmup + p.stalled
	var out []sfArrival
	for i := range sfRoutes {
		rng := rand.New(rand.NewPCG(p.seed, 0x5f0e+uint64(i)))
		var t time.Duration
		for {
			t += time.Duration(rng.ExpFloat64() / p.rate * float64(time.Second))
			if t >= end {
				break
			}
			out = append(out, sfArrival{at: t, route: i})
		}
	}
	slices.SortFunc(out, func(a, b sfArrival) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.route - b.route
	})
	return out
}

// sfDependency is a dependency server: it waits its latency, honouring the
// request's context, and answers a small JSON document.
type sfDependency struct {
	route   sfRoute
	stall   time.Duration // latency once stalled is set (slow dependency only)
	stalled atomic.Bool
}

func (d *sfDependency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	lat := d.route.latency
	if d.stalled.Load() {
		lat = d.stall
	}
	t := time.NewTimer(lat)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return // the caller gave up: nothing to answer
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"items":["`+d.route.name+`-1","`+d.route.name+`-2"]}`)
}

// sfServer is an HTTP server on 127.0.0.1.
type sfServer struct {
	srv  *http.Server
	url  string
	done chan struct{} // closed when Serve has returned
}

func sfListen(h http.Handler) (*sfServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("storefront: listen: %w", err)
	}
	s := &sfServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          log.New(io.Discard, "", 0), // clients that give up are the point
		},
		url:  "http://" + ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// shutdown stops the server and waits until its handlers have returned.
func (s *sfServer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}

// sfTransport is a keep-alive transport with room for every connection the
// load needs, so that dialling and ephemeral ports are not the bottleneck.
func sfTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no limit
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

// sfSizing is what the protected gateway derived from the warm-up for one
// dependency.
type sfSizing struct {
	rate     float64       // calls per second started during the warm-up
	p99      time.Duration // call latency p99 seen by the gateway
	p999     time.Duration
	little   float64       // rate × p99
	size     int           // bulkhead permits
	maxWait  time.Duration // bulkhead MaxWait
	timeout  time.Duration
	advice   sizing.Advice // what package sizing suggests, with its defaults
	opens    uint64        // breaker openings during the run
	rejected uint64        // bulkhead rejections during the run
	breaker  *circuit.Breaker
	bulkhead *bulkhead.Bulkhead
}

// sfGateway is the shop's gateway: one shared pool of workers, as in the
// seed, and (protected) a pipeline per dependency.
type sfGateway struct {
	p         sfParams
	protected bool
	pool      *bulkhead.Bulkhead // the shared workers
	client    *http.Client
	deps      [3]string // dependency URLs
	// base is the context of the unprotected gateway's outgoing calls: not
	// the incoming request's, so a call outlives the client that gave up on
	// it; it ends only when the run is torn down.
	base  context.Context
	pipes atomic.Pointer[[3]*watertight.Pipeline] // nil until calibrated

	measuring atomic.Bool
	started   [3]atomic.Int64 // calls started during the warm-up
	mu        sync.Mutex
	calls     [3][]time.Duration // successful call latencies during the warm-up

	rejected [2][3]atomic.Int64 // phase × route
	fallback [2][3]atomic.Int64
}

// sfListener is the listener the storefront's protections report to: the
// metrics, when exported.
func sfListener(p sfParams) watertight.Listener {
	if p.metrics == nil {
		return nil
	}
	return p.metrics
}

func newSFGateway(p sfParams, protected bool, deps [3]string, base context.Context) (*sfGateway, error) {
	// The server's workers: requests wait for one as long as their context
	// lets them, in a queue without bound (MaxWaiters -1), as a plain
	// server's would.
	pool, err := bulkhead.New(bulkhead.Config{Name: "workers", MaxConcurrent: p.workers, MaxWait: -1, MaxWaiters: -1, Listener: sfListener(p)})
	if err != nil {
		return nil, err
	}
	if p.metrics != nil {
		p.metrics.AddBulkhead(pool) // the second run's pool replaces the first's
	}
	g := &sfGateway{
		p:         p,
		protected: protected,
		pool:      pool,
		client:    &http.Client{Transport: sfTransport()}, // no timeout: that is the protected pipeline's job
		deps:      deps,
		base:      base,
	}
	g.measuring.Store(true)
	return g, nil
}

func (g *sfGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := -1
	for k, rt := range sfRoutes {
		if r.URL.Path == "/"+rt.name {
			i = k
		}
	}
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	phase := sfWarm
	if r.Header.Get(sfPhaseHeader) == "stall" {
		phase = sfStall
	}
	ctx := r.Context()
	if err := g.pool.Acquire(ctx); err != nil {
		// Waiting for a worker until the client gave up.
		g.rejected[phase][i].Add(1)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer g.pool.Release()

	var body []byte
	var err error
	if !g.protected {
		body, err = g.fetch(g.base, i)
	} else {
		var pipe *watertight.Pipeline
		if ps := g.pipes.Load(); ps != nil {
			pipe = ps[i]
		}
		body, err = watertight.Do(ctx, pipe, func(ctx context.Context) ([]byte, error) { return g.fetch(ctx, i) })
	}
	if err != nil {
		rejected := watertight.IsRejection(err)
		if rejected {
			g.rejected[phase][i].Add(1)
		}
		if g.protected && i == sfRecommendation && ctx.Err() == nil {
			// Degrade: no recommendations this time.
			g.fallback[phase][i].Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Fallback", "1")
			io.WriteString(w, sfFallbackBody)
			return
		}
		code := http.StatusBadGateway
		if rejected {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// fetch calls dependency i over HTTP.
func (g *sfGateway) fetch(ctx context.Context, i int) ([]byte, error) {
	t0 := time.Now()
	if g.measuring.Load() {
		g.started[i].Add(1)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.deps[i], nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("storefront: %s answered %s", sfRoutes[i].name, resp.Status)
	}
	if g.measuring.Load() {
		d := time.Since(t0)
		g.mu.Lock()
		g.calls[i] = append(g.calls[i], d)
		g.mu.Unlock()
	}
	return body, nil
}

// calibrate ends the warm-up measurement and, for the protected gateway,
// builds each dependency's pipeline from it: a bulkhead sized by Little's
// law (L = rate × p99 call latency calls in flight) with room for the
// randomness of arrivals (the fewest permits that Erlang's loss formula says
// refuse at most p.blocking of the calls when L are offered), where a call
// may wait for a permit as long as one healthy call (p99, at most
// p.maxWait) so that a burst after a pause of the machine queues briefly
// instead of failing; an attempt timeout of 3× the p99 call latency (at
// least p.minTimeout, and leaving a quarter of the client's deadline for the
// fallback); and a breaker.
func (g *sfGateway) calibrate(window time.Duration) ([3]*sfSizing, error) {
	g.measuring.Store(false)
	g.mu.Lock()
	calls := g.calls
	g.mu.Unlock()
	var out [3]*sfSizing
	if !g.protected {
		return out, nil
	}
	var pipes [3]*watertight.Pipeline
	for i, rt := range sfRoutes {
		lat := slices.Clone(calls[i])
		slices.Sort(lat)
		s := &sfSizing{
			rate: float64(g.started[i].Load()) / window.Seconds(),
			p99:  sfPercentile(lat, 0.99),
			p999: sfPercentile(lat, 0.999),
		}
		if len(lat) == 0 { // nothing measured: trust the nominal latency
			s.p99, s.p999 = rt.latency, rt.latency
			s.rate = g.p.rate
		}
		s.little = s.rate * s.p99.Seconds()
		s.size = sizing.ErlangSize(s.little, g.p.blocking)
		// The library's advice from the same observation, with its own
		// defaults (25% headroom, 0.1% blocking, 1.5× p99.9), printed next
		// to what the scenario configures.
		advice, err := sizing.Suggest(sizing.Config{MinSamples: -1}, sizing.Observation{Rate: s.rate, P99: s.p99, P999: s.p999, Samples: len(lat)})
		if err != nil {
			return out, err
		}
		s.advice = advice
		s.timeout = min(max(3*s.p99, g.p.minTimeout), g.p.deadline*3/4)
		s.maxWait = min(s.p99, g.p.maxWait)
		s.bulkhead, err = bulkhead.New(bulkhead.Config{Name: rt.name, MaxConcurrent: s.size, MaxWait: s.maxWait, Listener: sfListener(g.p)})
		if err != nil {
			return out, err
		}
		s.breaker, err = circuit.New(circuit.Config{
			Listener:      sfListener(g.p),
			Name:          rt.name,
			WindowSize:    20,
			MinCalls:      10,
			OpenDuration:  time.Second,
			HalfOpenCalls: 3,
		})
		if err != nil {
			return out, err
		}
		to, err := timeout.New(timeout.Config{Name: rt.name, Timeout: s.timeout})
		if err != nil {
			return out, err
		}
		policies := []watertight.Policy{s.breaker, s.bulkhead, to}
		if g.p.callPolicies != nil {
			policies = append(policies, g.p.callPolicies(rt.name)...)
		}
		pipes[i] = watertight.MustNew(policies...)
		if m := g.p.metrics; m != nil {
			m.AddBreaker(s.breaker)
			m.AddBulkhead(s.bulkhead)
		}
		out[i] = s
	}
	g.pipes.Store(&pipes)
	return out, nil
}

// sfSample is one request as the load generator saw it.
type sfSample struct {
	at  time.Duration // scheduled arrival, since the load began
	lat time.Duration // from the scheduled arrival to the end of the answer
	lag time.Duration // how late the load generator sent it
	ok  bool
}

// sfRunResult is one configuration's run.
type sfRunResult struct {
	protected bool
	samples   []sfSample // indexed like the schedule
	rejected  [2][3]int64
	fallback  [2][3]int64
	sizing    [3]*sfSizing
	elapsed   time.Duration
}

// sfRun runs one configuration on fresh servers and tears everything down
// before returning.
func sfRun(ctx context.Context, p sfParams, sched []sfArrival, protected bool) (res *sfRunResult, err error) {
	res = &sfRunResult{protected: protected, samples: make([]sfSample, len(sched))}
	began := time.Now()

	var deps [3]*sfDependency
	var depSrv [3]*sfServer
	var urls [3]string
	var gw *sfServer
	var g *sfGateway
	base, cancelBase := context.WithCancel(ctx)
	tr := sfTransport()
	client := &http.Client{Transport: tr}
	defer func() {
		// Tear down in order: the unprotected gateway's outgoing calls end,
		// so its handlers return; then the gateway, then the dependencies;
		// then the connections both clients keep.
		cancelBase()
		tr.CloseIdleConnections()
		shut := func(s *sfServer) {
			if s == nil {
				return
			}
			if e := s.shutdown(); e != nil && err == nil {
				err = fmt.Errorf("storefront: shutting a server down: %w", e)
			}
		}
		shut(gw)
		if g != nil {
			// Connections the gateway dialled but never used count as
			// active for the dependencies' Shutdown.
			g.client.CloseIdleConnections()
		}
		for _, s := range depSrv {
			shut(s)
		}
		if g != nil {
			g.client.CloseIdleConnections()
		}
		tr.CloseIdleConnections()
	}()
	for i, rt := range sfRoutes {
		deps[i] = &sfDependency{route: rt}
		if i == p.slow {
			deps[i].stall = p.stall
		}
		s, err := sfListen(deps[i])
		if err != nil {
			return nil, err
		}
		depSrv[i], urls[i] = s, s.url
	}
	g, err = newSFGateway(p, protected, urls, base)
	if err != nil {
		return nil, err
	}
	gw, err = sfListen(g)
	if err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	start := time.Now()
	stalled := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
dispatch:
	for k, a := range sched {
		due := start.Add(a.at)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				break dispatch
			}
		}
		if !stalled && a.at >= p.warmup {
			// The warm-up is over: the protected gateway sizes its
			// protections from what it saw, then the dependency stalls.
			stalled = true
			res.sizing, err = g.calibrate(time.Since(start))
			if err != nil {
				break dispatch
			}
			deps[p.slow].stalled.Store(true)
		}
		phase := "warm-up"
		if a.at >= p.warmup {
			phase = "stall"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			rctx, cancel := context.WithDeadline(base, due.Add(p.deadline))
			defer cancel()
			ok := false
			req, rerr := http.NewRequestWithContext(rctx, http.MethodGet, gw.url+"/"+sfRoutes[a.route].name, nil)
			if rerr == nil {
				req.Header.Set(sfPhaseHeader, phase)
				resp, rerr := client.Do(req)
				if rerr == nil {
					_, rerr = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = rerr == nil && resp.StatusCode == http.StatusOK
				}
			}
			end := time.Now()
			if end.After(due.Add(p.deadline)) {
				ok = false
			}
			res.samples[k] = sfSample{at: a.at, lat: end.Sub(due), lag: max(sent.Sub(due), 0), ok: ok}
		}()
	}
	wg.Wait()
	for ph := range 2 {
		for i := range sfRoutes {
			res.rejected[ph][i] = g.rejected[ph][i].Load()
			res.fallback[ph][i] = g.fallback[ph][i].Load()
		}
	}
	for _, s := range res.sizing {
		if s != nil {
			s.opens = s.breaker.Snapshot().Opens
			s.rejected = s.bulkhead.Snapshot().Rejected
		}
	}
	res.elapsed = time.Since(began)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, nil
}

// sfStats summarises a set of samples.
type sfStats struct {
	n, ok          int
	p50, p99, p999 time.Duration
}

func (s sfStats) rate() float64 {
	if s.n == 0 {
		return 0
	}
	return float64(s.ok) / float64(s.n)
}

func sfSummarise(samples []sfSample, sched []sfArrival, route int, keep func(sfSample) bool) sfStats {
	var st sfStats
	var lat []time.Duration
	for k, s := range samples {
		if sched[k].route != route || !keep(s) {
			continue
		}
		st.n++
		if s.ok {
			st.ok++
		}
		lat = append(lat, s.lat)
	}
	slices.Sort(lat)
	st.p50, st.p99, st.p999 = sfPercentile(lat, 0.5), sfPercentile(lat, 0.99), sfPercentile(lat, 0.999)
	return st
}

// sfPercentile is the nearest-rank percentile of sorted latencies.
func sfPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func sfMs(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }

// StorefrontJSON is the storefront scenario's JSON document: one row per
// configuration and route, measured after the stall began, and the sizes the
// protected gateway chose.
type StorefrontJSON struct {
	Scenario string             `json:"scenario"`
	Slow     string             `json:"slow"`
	StallMs  float64            `json:"stall_ms"`
	Rate     float64            `json:"rate_per_route"`
	Results  []StorefrontRow    `json:"results"`
	Sizing   []StorefrontSizing `json:"sizing"`
	Noise    []StorefrontNoise  `json:"noise"`
}

// StorefrontRow is one configuration × route of the storefront scenario.
// SuccessRate is a fraction in [0, 1]; latencies are in milliseconds.
type StorefrontRow struct {
	Config      string  `json:"config"`
	Route       string  `json:"route"`
	Requests    int     `json:"requests"`
	SuccessRate float64 `json:"success_rate"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	Rejected    int64   `json:"rejected"`
	Fallback    int64   `json:"fallback"`
	// The same route and configuration during the warm-up, before the
	// stall: the baseline.
	WarmupRequests    int     `json:"warmup_requests"`
	WarmupSuccessRate float64 `json:"warmup_success_rate"`
	WarmupP99Ms       float64 `json:"warmup_p99_ms"`
}

// StorefrontNoise is how late the load generator sent its requests during
// one configuration's stalled phase: a pause of the process (other work on
// the machine, the garbage collector) shows as lag, and delays every answer
// by as much.
type StorefrontNoise struct {
	Config   string  `json:"config"`
	LagP99Ms float64 `json:"lag_p99_ms"`
	LagMaxMs float64 `json:"lag_max_ms"`
}

// StorefrontSizing is what the protected gateway derived from its warm-up
// for one dependency.
type StorefrontSizing struct {
	Dependency string  `json:"dependency"`
	Rate       float64 `json:"warmup_rate"`
	P99Ms      float64 `json:"warmup_p99_ms"`
	Little     float64 `json:"little_l"`
	Bulkhead   int     `json:"bulkhead"`
	MaxWaitMs  float64 `json:"max_wait_ms"`
	TimeoutMs  float64 `json:"timeout_ms"`
	Opens      uint64  `json:"breaker_opens"`
	// SuggestedBulkhead and SuggestedTimeoutMs are package sizing's advice
	// from the same warm-up, with its default headroom and blocking.
	SuggestedBulkhead  int     `json:"suggested_bulkhead"`
	SuggestedTimeoutMs float64 `json:"suggested_timeout_ms"`
}

func runStorefront(ctx context.Context, opts Options) (*Result, error) {
	p, err := sfParamsFor(opts)
	if err != nil {
		return nil, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	sched := sfSchedule(p)
	began := time.Now()
	var runs [2]*sfRunResult
	configs := [2]string{"unprotected", "protected"}
	for c, name := range configs {
		fmt.Fprintf(progress, "storefront: %s: %v warm-up, then %s stalls (%v per call) for %v; %d requests\n",
			name, p.warmup, sfRoutes[p.slow].name, p.stall, p.stalled, len(sched))
		runs[c], err = sfRun(ctx, p, sched, c == 1)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "storefront: %s: done in %v\n", name, runs[c].elapsed.Round(10*time.Millisecond))
	}
	total := time.Since(began)

	inWarmup := func(s sfSample) bool { return s.at < p.warmup }
	inStall := func(s sfSample) bool { return s.at >= p.warmup }
	doc := StorefrontJSON{Scenario: "storefront", Slow: sfRoutes[p.slow].name, StallMs: sfMs(p.stall), Rate: p.rate}
	res := &Result{Scenario: "storefront"}
	var stall, warm [2][3]sfStats
	for c, run := range runs {
		t := Table{
			Title:  fmt.Sprintf("%s — after %s stalled (%v of load, %.0f req/s per route)", configs[c], sfRoutes[p.slow].name, p.stalled, p.rate),
			Header: []string{"route", "requests", "success", "p50", "p99", "p99.9", "rejected", "fallback", "warm-up p99"},
		}
		for i, rt := range sfRoutes {
			warm[c][i] = sfSummarise(run.samples, sched, i, inWarmup)
			st := sfSummarise(run.samples, sched, i, inStall)
			stall[c][i] = st
			name := rt.name
			if i == p.slow {
				name += " (stalled)"
			}
			t.Rows = append(t.Rows, []string{
				name,
				fmt.Sprint(st.n),
				fmt.Sprintf("%.2f%%", 100*st.rate()),
				sfFmtMs(st.p50), sfFmtMs(st.p99), sfFmtMs(st.p999),
				fmt.Sprint(run.rejected[sfStall][i]),
				fmt.Sprint(run.fallback[sfStall][i]),
				sfFmtMs(warm[c][i].p99),
			})
			doc.Results = append(doc.Results, StorefrontRow{
				Config:            configs[c],
				Route:             rt.name,
				Requests:          st.n,
				SuccessRate:       math.Round(st.rate()*1e5) / 1e5,
				P50Ms:             sfMs(st.p50),
				P99Ms:             sfMs(st.p99),
				P999Ms:            sfMs(st.p999),
				Rejected:          run.rejected[sfStall][i],
				Fallback:          run.fallback[sfStall][i],
				WarmupRequests:    warm[c][i].n,
				WarmupSuccessRate: math.Round(warm[c][i].rate()*1e5) / 1e5,
				WarmupP99Ms:       sfMs(warm[c][i].p99),
			})
		}
		res.Tables = append(res.Tables, t)
	}

	prot := runs[1]
	sizingTbl := Table{
		Title:  "protected gateway: per-dependency protections, sized from its warm-up (and package sizing's advice from the same warm-up)",
		Header: []string{"dependency", "warm-up rate", "call p99", "call p99.9", "L = rate × p99", "bulkhead", "max wait", "attempt timeout", "advice: bulkhead", "advice: timeout", "breaker opens", "bulkhead rejections"},
	}
	var sizes []string
	for i, rt := range sfRoutes {
		s := prot.sizing[i]
		if s == nil {
			continue
		}
		sizingTbl.Rows = append(sizingTbl.Rows, []string{
			rt.name,
			fmt.Sprintf("%.1f/s", s.rate),
			sfFmtMs(s.p99), sfFmtMs(s.p999),
			fmt.Sprintf("%.1f", s.little),
			fmt.Sprint(s.size),
			sfFmtMs(s.maxWait),
			sfFmtMs(s.timeout),
			fmt.Sprint(s.advice.MaxConcurrent),
			sfFmtMs(s.advice.Timeout),
			fmt.Sprint(s.opens),
			fmt.Sprint(s.rejected),
		})
		doc.Sizing = append(doc.Sizing, StorefrontSizing{
			Dependency: rt.name, Rate: math.Round(s.rate*10) / 10, P99Ms: sfMs(s.p99),
			Little: math.Round(s.little*100) / 100, Bulkhead: s.size, MaxWaitMs: sfMs(s.maxWait), TimeoutMs: sfMs(s.timeout), Opens: s.opens,
			SuggestedBulkhead: s.advice.MaxConcurrent, SuggestedTimeoutMs: sfMs(s.advice.Timeout),
		})
		sizes = append(sizes, fmt.Sprintf("%s %d permits (wait ≤ %v) / %v timeout", rt.name, s.size, s.maxWait.Round(100*time.Microsecond), s.timeout.Round(time.Millisecond)))
	}
	res.Tables = append(res.Tables, sizingTbl)

	// Success rate over time, 250 ms bins, by scheduled arrival.
	chart := Chart{
		File:   "storefront-success",
		Title:  fmt.Sprintf("storefront: success rate per route (%s takes %v a call from %.1fs on)", sfRoutes[p.slow].name, p.stall, p.warmup.Seconds()),
		XLabel: "time since the load began (s)",
		YLabel: "success rate (%)",
		YMax:   100,
	}
	bins := int((p.warmup + p.stalled + sfBinWidth - 1) / sfBinWidth)
	for c, run := range runs {
		for i, rt := range sfRoutes {
			n, ok := make([]int, bins), make([]int, bins)
			for k, s := range run.samples {
				if sched[k].route != i {
					continue
				}
				b := min(int(s.at/sfBinWidth), bins-1)
				n[b]++
				if s.ok {
					ok[b]++
				}
			}
			ser := Series{Name: configs[c] + " " + rt.name}
			for b := range bins {
				if n[b] == 0 {
					continue
				}
				ser.X = append(ser.X, (time.Duration(b)*sfBinWidth + sfBinWidth/2).Seconds())
				ser.Y = append(ser.Y, 100*float64(ok[b])/float64(n[b]))
			}
			chart.Series = append(chart.Series, ser)
		}
	}
	res.Charts = []Chart{chart}

	// Checks, on the healthy routes.
	for i, rt := range sfRoutes {
		if i == p.slow {
			continue
		}
		ps, pw, us := stall[1][i], warm[1][i], stall[0][i]
		// A route that got no request has no rate: NaN, which fails.
		rate := func(s sfStats) float64 {
			if s.n == 0 {
				return math.NaN()
			}
			return 100 * s.rate()
		}
		p99Ratio := math.NaN()
		if ps.n > 0 && pw.n > 0 {
			p99Ratio = float64(ps.p99) / float64(max(pw.p99, 1))
		}
		// The unprotected bound is strict (success < maxUnprotected): at
		// most the largest float below it.
		res.Checks = append(res.Checks,
			AtLeast(fmt.Sprintf("protected %s success ≥ %s while %s stalls", rt.name, sfPct(p.minProtected), sfRoutes[p.slow].name),
				rate(ps), 100*p.minProtected, "%", fmt.Sprintf("%d of %d", ps.ok, ps.n)),
			AtMost(fmt.Sprintf("protected %s p99 ≤ %.1f× its warm-up p99", rt.name, p.maxP99Ratio),
				p99Ratio, p.maxP99Ratio, "×", fmt.Sprintf("p99 %s vs warm-up p99 %s", sfFmtMs(ps.p99), sfFmtMs(pw.p99))),
			AtMost(fmt.Sprintf("unprotected %s collapses (success < %s)", rt.name, sfPct(p.maxUnprotected)),
				rate(us), math.Nextafter(100*p.maxUnprotected, 0), "%", fmt.Sprintf("%d of %d", us.ok, us.n)),
		)
	}

	// Noise: how late the load generator sent requests.
	var lags []time.Duration
	for c, run := range runs {
		var cl []time.Duration
		for _, s := range run.samples {
			lags = append(lags, s.lag)
			if inStall(s) {
				cl = append(cl, s.lag)
			}
		}
		slices.Sort(cl)
		doc.Noise = append(doc.Noise, StorefrontNoise{Config: configs[c], LagP99Ms: sfMs(sfPercentile(cl, 0.99)), LagMaxMs: sfMs(sfPercentile(cl, 1))})
	}
	slices.Sort(lags)
	quick := ""
	if opts.Quick {
		quick = fmt.Sprintf(" This is the Quick version (shorter phases, a lower rate; looser bounds: protected ≥ %s, p99 ≤ %.1f× warm-up, unprotected < %s).", sfPct(p.minProtected), p.maxP99Ratio, sfPct(p.maxUnprotected))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "A gateway on 127.0.0.1 serves three routes, each calling its dependency over real HTTP: catalog (10 ms), payment (20 ms), recommendation (200 ms). ")
	fmt.Fprintf(&sb, "An open-loop load generator sends %.0f req/s per route (Poisson arrivals, seed %d, the same schedule for both configurations: %d requests), each with a %v deadline. ", p.rate, p.seed, len(sched), p.deadline)
	fmt.Fprintf(&sb, "After a %v warm-up, %s stalls: every call takes %v. Both gateways have the seed's one shared pool of %d workers (a request waits for a worker until its client gives up). ", p.warmup, sfRoutes[p.slow].name, p.stall, p.workers)
	fmt.Fprintf(&sb, "Unprotected, the gateway's calls have no timeout and outlive the client that gave up: a stalled call holds its worker for the whole stall, and %.0f req/s × %v = %.0f stalled calls want %d workers. ", p.rate, p.stall, p.rate*p.stall.Seconds(), p.workers)
	fmt.Fprintf(&sb, "Protected, each dependency has a breaker (window 20 calls, 10 at least, 50%% failures, open 1 s, 3 trial calls), a bulkhead sized by Little's law from the gateway's own warm-up measurements (L = rate × p99 call latency in flight; then the fewest permits that Erlang's loss formula says refuse at most %g of calls arriving at random; a call waits for a permit at most one healthy call, the p99, capped at %v, so that a burst after a pause of the machine queues instead of failing) and an attempt timeout (3× the call p99, at least %v so that a scheduler pause on a shared machine is not a dependency failure, at most 3/4 of the client deadline so that the fallback still has time), and recommendations fall back to an empty list: %s. ", p.blocking, p.maxWait, p.minTimeout, strings.Join(sizes, "; "))
	fmt.Fprintf(&sb, "Tables cover the %v after the stall began; latencies run from each request's scheduled arrival (so a late load generator cannot hide queueing) and include failed requests (a request that hit its deadline counts about %v). Success is a 200 answer within the deadline; a fallback counts as success and is counted apart; rejected counts the requests the gateway refused without calling the dependency (a full bulkhead or an open breaker, or the shared pool the client stopped waiting for). ", p.stalled, p.deadline)
	fmt.Fprintf(&sb, "Noise: each configuration ran once, on a real network stack sharing the machine's cores with the load generator; the load generator sent requests late by %s at p99 and %s at most (a pause of the process delays every answer by as much). ", sfFmtMs(sfPercentile(lags, 0.99)), sfFmtMs(sfPercentile(lags, 1)))
	fmt.Fprintf(&sb, "The warm-up p99 rests on about %d requests per route (its 1%% tail is a handful of them), so on the 10 ms route the 1.2× bound is a margin of 2-3 ms: a single run can miss it by machine noise alone. ", warm[1][0].n)
	fmt.Fprintf(&sb, "The run took %v (unprotected %v, protected %v).%s", total.Round(100*time.Millisecond), runs[0].elapsed.Round(100*time.Millisecond), runs[1].elapsed.Round(100*time.Millisecond), quick)
	res.Summary = sb.String()
	res.JSON = doc
	return res, nil
}

func sfFmtMs(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", ms)
}

func sfPct(f float64) string {
	s := fmt.Sprintf("%.1f", 100*f)
	s = strings.TrimSuffix(s, ".0")
	return s + "%"
}
