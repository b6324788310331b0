package lab

// The gateway scenario: the storefront of the storefront scenario, but as
// separate processes on 127.0.0.1 behind a real `watertight proxy`. The
// backends (catalog, payment, recommendation; a tiered service; a pool of
// two hosts with rare stalls) are `watertight lab-backend` processes, the
// gateway a `watertight proxy --config FILE` process, and the load an
// open-loop generator in the lab's own process. Four runs, each on fresh
// processes:
//
//   - unprotected: the routes alone (no timeout, no retries, no bulkhead,
//     no breaker); recommendation stalls;
//   - protected: a bulkhead and a timeout per route, a breaker per host, a
//     fallback for recommendations; recommendation stalls;
//   - tenants: one route whose capacity premium and free share by weight,
//     the free tier quiet, then at five times its share; and the same with
//     one bulkhead of that capacity for every tier, the control;
//   - hedge: two routes to one pool of two hosts with rare 1 s stalls, one
//     hedging its reads.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() {
	Register(Scenario{
		Name:        "gateway",
		Description: "the storefront as processes behind `watertight proxy`: a stalled dependency with an empty and with a protective config, tenants' fair shares, hedged reads",
		Run:         runGateway,
	})
}

// gwTiers are the tenants run's tiers, by route index.
var gwTiers = [2]string{"premium", "free"}

// gwTierHeader says which tier a request is.
const gwTierHeader = "X-Tier"

// gwHedgeRoutes are the hedging run's routes, by route index.
var gwHedgeRoutes = [2]string{"hedged", "plain"}

// gwParams are the knobs of one run of the scenario.
type gwParams struct {
	seed  uint64
	quick bool
	// settle is the start of each run that no statistic counts: the
	// connections of both hops are being dialled, and the processes' first
	// requests are slower.
	settle time.Duration

	// The storefront runs.
	rate         float64       // requests per second per route (Poisson)
	warmup       time.Duration // healthy load before the stall
	stalled      time.Duration // load after the stall began
	stall        time.Duration // recommendation's latency once stalled
	deadline     time.Duration // the user's: a later answer is a failure
	frontTimeout time.Duration // the front end's own timeout of a call to the gateway
	frontConns   int           // the front end's pool of connections to the gateway
	// Bounds.
	minProtected   float64 // protected catalog and payment: success at least this
	maxP99Ratio    float64 // protected catalog and payment: p99 ≤ this × warm-up p99
	maxUnprotected float64 // unprotected catalog and payment: success below this

	// The tenants run.
	tenantLatency  time.Duration // the tiered service's latency
	tenantCap      int           // the route's max_concurrent
	tenantPhase    time.Duration // quiet, then noisy, each this long
	premiumRate    float64       // premium's requests per second, both phases
	freeQuietShare float64       // the free tier's load in the quiet phase, in its shares
	freeNoisyShare float64       // ... in the noisy phase
	tenantDeadline time.Duration
	maxTenantRatio float64 // premium's noisy p99 ≤ this × its quiet p99
	minPremium     float64 // premium's success in the noisy phase at least this

	// The hedging run.
	hedgeRate       float64       // requests per second per route
	hedgeLoad       time.Duration // how long
	hedgeBase       time.Duration // a host's latency: base + Exp(jitter), or rare
	hedgeJitter     time.Duration
	hedgeRareRate   float64
	hedgeRare       time.Duration
	hedgePercentile float64
	hedgeMinDelay   time.Duration
	hedgeDeadline   time.Duration
	minHedgeCut     float64 // plain p99.9 / hedged p99.9 at least this
	maxHedgeExtra   float64 // the hedged route's extra upstream requests, in %, at most this
}

// gwParamsFor is the full run's parameters, or the quick run's.
func gwParamsFor(opts Options) gwParams {
	p := gwParams{
		seed: opts.Seed, quick: opts.Quick, settle: 500 * time.Millisecond,
		rate: 150, warmup: 3 * time.Second, stalled: 5 * time.Second, stall: 3 * time.Second,
		deadline: time.Second, frontTimeout: 2 * time.Second, frontConns: 100,
		minProtected: 0.999, maxP99Ratio: 1.2, maxUnprotected: 0.5,

		tenantLatency: 100 * time.Millisecond, tenantCap: 30, tenantPhase: 4 * time.Second,
		premiumRate: 60, freeQuietShare: 0.5, freeNoisyShare: 5, tenantDeadline: time.Second,
		maxTenantRatio: 1.2, minPremium: 0.999,

		hedgeRate: 300, hedgeLoad: 8 * time.Second,
		hedgeBase: 3 * time.Millisecond, hedgeJitter: 1500 * time.Microsecond,
		hedgeRareRate: 0.01, hedgeRare: time.Second,
		hedgePercentile: 0.97, hedgeMinDelay: 10 * time.Millisecond, hedgeDeadline: 3 * time.Second,
		minHedgeCut: 5, maxHedgeExtra: 5,
	}
	if opts.Quick {
		// Shorter phases, looser bounds where a shorter phase has fewer
		// samples. The front end's pool still fills: 150/s × 2 s of
		// front-end timeout is 300 calls for 100 connections.
		p.warmup, p.stalled = 1500*time.Millisecond, 2500*time.Millisecond
		p.tenantPhase = 2 * time.Second
		p.hedgeLoad = 4 * time.Second
		p.minProtected, p.maxP99Ratio, p.maxUnprotected = 0.99, 2, 0.7
		p.maxTenantRatio, p.minPremium = 1.5, 0.99
	}
	return p
}

// freeShareRate is the free tier's share of the tenants route, in requests
// a second: its guaranteed permits (1 of the weights 3 + 1 + 1, the last
// the default share of every other tier) over the service's latency.
func (p gwParams) freeShareRate() float64 {
	return float64(p.tenantCap) / 5 / p.tenantLatency.Seconds()
}

// gwExecutableForTests, if not nil, gives a watertight binary when
// Options.Executable is empty, and a function to call once the run is done
// with it: the lab's tests build one.
var gwExecutableForTests func() (exe string, done func(), err error)

// gwExecutable is the watertight command the run starts its processes
// from, and what to call when the run is done with it.
func gwExecutable(opts Options) (string, func(), error) {
	if opts.Executable != "" {
		return opts.Executable, func() {}, nil
	}
	if gwExecutableForTests != nil {
		return gwExecutableForTests()
	}
	return "", nil, errors.New("gateway: this scenario runs `watertight proxy` and `watertight lab-backend` as processes: it needs the watertight command's path in lab.Options.Executable (`watertight lab` gives its own)")
}

// gwRun is what one run of the scenario measured.
type gwRun struct {
	name    string
	sched   []gwArrival
	samples []gwSample
	file    string        // the gateway's configuration
	elapsed time.Duration // processes started, load sent, processes stopped
	tails   string        // the end of every child's log, shown when a check fails
	// The hedging run: the requests each route sent upstream, counted at
	// the backends.
	upstream [2]int64
	// The tenants run, when the gateway refused its file: why.
	skipped string
}

// runGateway is the scenario: the runs in turn, each on fresh processes
// started from the watertight command, then the report.
func runGateway(ctx context.Context, opts Options) (*Result, error) {
	p := gwParamsFor(opts)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	exe, done, err := gwExecutable(opts)
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := os.MkdirTemp("", "watertight-lab-gateway-")
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	defer os.RemoveAll(dir)
	began := time.Now()
	sfSched := gwStorefrontSchedule(p)
	var runs gwRuns
	for _, protected := range []bool{false, true} {
		r, err := gwStorefrontRun(ctx, p, exe, dir, sfSched, protected, progress)
		if err != nil {
			return nil, err
		}
		runs.sf = append(runs.sf, r)
	}
	for i, tenants := range []bool{true, false} {
		if runs.tenants[i], err = gwTenantsRun(ctx, p, exe, dir, tenants, progress); err != nil {
			return nil, err
		}
	}
	if runs.hedge, err = gwHedgeRun(ctx, p, exe, dir, progress); err != nil {
		return nil, err
	}
	res := gwReport(p, runs, time.Since(began))
	for _, c := range res.Checks {
		if !c.OK {
			fmt.Fprintf(progress, "gateway: a check failed; the end of each process's log:")
			for _, r := range runs.all() {
				fmt.Fprint(progress, r.tails)
			}
			fmt.Fprintln(progress)
			break
		}
	}
	return res, nil
}

// gwRuns are the scenario's runs.
type gwRuns struct {
	sf      []*gwRun  // unprotected, protected
	tenants [2]*gwRun // tenants, one bulkhead
	hedge   *gwRun
}

// all are the runs in the order they ran.
func (r gwRuns) all() []*gwRun {
	return append(append(slices.Clone(r.sf), r.tenants[:]...), r.hedge)
}

// gwStorefrontSchedule is the storefront runs' arrivals, the storefront
// scenario's: a Poisson process per route, the same for both runs.
func gwStorefrontSchedule(p gwParams) []gwArrival {
	sp := sfParams{rate: p.rate, warmup: p.warmup, stalled: p.stalled, seed: p.seed}
	var out []gwArrival
	for _, a := range sfSchedule(sp) {
		out = append(out, gwArrival{at: a.at, route: a.route})
	}
	return gwSort(out)
}

// gwIDHeader sets the request's number.
func gwIDHeader(a gwArrival, h http.Header) { h.Set(gwRequestHeader, strconv.FormatUint(a.id, 10)) }

// gwStorefrontRun runs the storefront through a gateway process, with the
// empty configuration or the protective one, on fresh processes.
func gwStorefrontRun(ctx context.Context, p gwParams, exe, dir string, sched []gwArrival, protected bool, progress io.Writer) (run *gwRun, err error) {
	name := "unprotected"
	if protected {
		name = "protected"
	}
	began := time.Now()
	procs := &gwProcs{exe: exe, dir: dir}
	defer procs.stopAll()
	var ups [3]string
	var backends [3]*gwProc
	seed := strconv.FormatUint(p.seed, 10)
	for i, rt := range sfRoutes {
		args := []string{"--latency", rt.latency.String(), "--seed", seed}
		if i == sfRecommendation {
			args = append(args, "--stall", p.stall.String())
		}
		if backends[i], err = procs.backend(name+"-"+rt.name, args...); err != nil {
			return nil, err
		}
		ups[i] = backends[i].addr
	}
	gw, err := procs.gateway(ctx, name+"-gateway", gwStorefrontConfig(p, protected, ups))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "gateway: %s: %v healthy, then recommendation stalls (%v a call) for %v; %d requests through the gateway (pid %d)\n",
		name, p.warmup, p.stall, p.stalled, len(sched), gw.proc.cmd.Process.Pid)
	client, tr := gwClient(p.frontConns)
	defer tr.CloseIdleConnections()
	var stallErr error
	load := gwLoad{
		client:   client,
		url:      func(a gwArrival) string { return gw.url + "/" + sfRoutes[a.route].name },
		header:   gwIDHeader,
		deadline: p.deadline, timeout: p.frontTimeout,
		markAt: p.warmup,
		mark:   func() { stallErr = gwStall(ctx, backends[sfRecommendation].addr, true) },
	}
	run = &gwRun{name: name, sched: sched}
	if run.samples, err = load.run(ctx, sched); err != nil {
		return nil, err
	}
	if stallErr != nil {
		return nil, fmt.Errorf("gateway: %s: stalling recommendation: %w", name, stallErr)
	}
	return gwFinish(run, procs, gw, began, progress)
}

// gwFinish completes a run once its load has ended: every child must
// still run; the gateway's file and the children's logs are kept for the
// report.
func gwFinish(run *gwRun, procs *gwProcs, gw *gwGateway, began time.Time, progress io.Writer) (*gwRun, error) {
	if err := procs.alive(); err != nil {
		return nil, err
	}
	file, err := os.ReadFile(gw.file)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	run.file = string(file)
	run.tails = procs.tails()
	procs.stopAll()
	run.elapsed = time.Since(began)
	fmt.Fprintf(progress, "gateway: %s: done in %v\n", run.name, run.elapsed.Round(10*time.Millisecond))
	return run, nil
}

// gwStall switches the long stall of the backend at addr on or off.
func gwStall(ctx context.Context, addr string, on bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s%s?on=%t", addr, gwStallPath, on), nil)
	if err != nil {
		return err
	}
	resp, err := gwControlClient(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", gwStallPath, resp.Status)
	}
	return nil
}

// gwControlClient sends a request to a backend's control endpoints on a
// connection of its own, closed with the answer's body.
func gwControlClient(req *http.Request) (*http.Response, error) {
	req.Close = true
	return (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
}

// gwBackendStats reads the counts of the backend at addr.
func gwBackendStats(ctx context.Context, addr string) (gwStats, error) {
	var st gwStats
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+gwStatsPath, nil)
	if err != nil {
		return st, err
	}
	resp, err := gwControlClient(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s answered %s", gwStatsPath, resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// gwTenantsRun runs the tiered route, with tenants or with one bulkhead:
// premium at a steady rate throughout; the free tier at half its share,
// then at five times it. The service behind serves as many requests at
// once as the route admits (its workers), the others in turn. A gateway
// that refuses the file because tenants are not built yet gives a run with
// skipped set.
func gwTenantsRun(ctx context.Context, p gwParams, exe, dir string, tenants bool, progress io.Writer) (run *gwRun, err error) {
	began := time.Now()
	run = &gwRun{name: "tenants"}
	if !tenants {
		run.name = "one-bulkhead"
	}
	procs := &gwProcs{exe: exe, dir: dir}
	defer procs.stopAll()
	be, err := procs.backend(run.name+"-tiers", "--latency", p.tenantLatency.String(), "--workers", strconv.Itoa(p.tenantCap),
		"--seed", strconv.FormatUint(p.seed, 10))
	if err != nil {
		return nil, err
	}
	gw, err := procs.gateway(ctx, run.name+"-gateway", gwTenantsConfig(p, be.addr, tenants))
	var nb errGWNotBuilt
	if errors.As(err, &nb) {
		run.skipped = nb.msg
		fmt.Fprintf(progress, "gateway: %s: not run: the gateway refused the file: %s\n", run.name, nb.msg)
		return run, nil
	}
	if err != nil {
		return nil, err
	}
	run.sched = gwTenantsSchedule(p)
	fmt.Fprintf(progress, "gateway: %s: premium %.0f/s; free %.0f/s for %v, then %.0f/s for %v; %d requests\n",
		run.name, p.premiumRate, p.freeQuietShare*p.freeShareRate(), p.tenantPhase, p.freeNoisyShare*p.freeShareRate(), p.tenantPhase, len(run.sched))
	client, tr := gwClient(0)
	defer tr.CloseIdleConnections()
	load := gwLoad{
		client: client,
		url:    func(gwArrival) string { return gw.url + "/tiers" },
		header: func(a gwArrival, h http.Header) {
			gwIDHeader(a, h)
			h.Set(gwTierHeader, gwTiers[a.route])
		},
		deadline: p.tenantDeadline, timeout: p.tenantDeadline,
	}
	if run.samples, err = load.run(ctx, run.sched); err != nil {
		return nil, err
	}
	return gwFinish(run, procs, gw, began, progress)
}

// gwTenantsSchedule is the tenants runs' arrivals: premium throughout, the
// free tier quiet then noisy.
func gwTenantsSchedule(p gwParams) []gwArrival {
	share := p.freeShareRate()
	var arr []gwArrival
	arr = gwPoisson(arr, p.seed, 0x7e1, p.premiumRate, 0, 2*p.tenantPhase, 0)
	arr = gwPoisson(arr, p.seed, 0x7e2, p.freeQuietShare*share, 0, p.tenantPhase, 1)
	arr = gwPoisson(arr, p.seed, 0x7e3, p.freeNoisyShare*share, p.tenantPhase, 2*p.tenantPhase, 1)
	return gwSort(arr)
}

// gwHedgeRun runs the two routes to the pool of two hosts with rare
// stalls, one hedging, and counts at the hosts what each route sent.
func gwHedgeRun(ctx context.Context, p gwParams, exe, dir string, progress io.Writer) (run *gwRun, err error) {
	began := time.Now()
	run = &gwRun{name: "hedge"}
	procs := &gwProcs{exe: exe, dir: dir}
	defer procs.stopAll()
	var hosts [2]string
	for i, n := range []string{"hedge-host-a", "hedge-host-b"} {
		b, err := procs.backend(n, "--latency", p.hedgeBase.String(), "--jitter", p.hedgeJitter.String(),
			"--rare-rate", strconv.FormatFloat(p.hedgeRareRate, 'g', -1, 64), "--rare", p.hedgeRare.String(),
			"--seed", strconv.FormatUint(p.seed, 10))
		if err != nil {
			return nil, err
		}
		hosts[i] = b.addr
	}
	gw, err := procs.gateway(ctx, "hedge-gateway", gwHedgeConfig(p, hosts))
	if err != nil {
		return nil, err
	}
	var arr []gwArrival
	for i := range gwHedgeRoutes {
		arr = gwPoisson(arr, p.seed, 0x4ed6+uint64(i), p.hedgeRate, 0, p.hedgeLoad, i)
	}
	run.sched = gwSort(arr)
	fmt.Fprintf(progress, "gateway: hedge: %.0f/s on each of two routes for %v; %d requests\n", p.hedgeRate, p.hedgeLoad, len(run.sched))
	client, tr := gwClient(0)
	defer tr.CloseIdleConnections()
	load := gwLoad{
		client:   client,
		url:      func(a gwArrival) string { return gw.url + "/" + gwHedgeRoutes[a.route] + "/items" },
		header:   gwIDHeader,
		deadline: p.hedgeDeadline, timeout: p.hedgeDeadline,
	}
	if run.samples, err = load.run(ctx, run.sched); err != nil {
		return nil, err
	}
	for _, h := range hosts {
		st, err := gwBackendStats(ctx, h)
		if err != nil {
			return nil, fmt.Errorf("gateway: hedge: counts of %s: %w", h, err)
		}
		for i, r := range gwHedgeRoutes {
			run.upstream[i] += st.Requests["/"+r]
		}
	}
	return gwFinish(run, procs, gw, began, progress)
}

// The report.

// gwJSON is the scenario's JSON document.
type gwJSON struct {
	Scenario   string        `json:"scenario"`
	Storefront []gwJSONRoute `json:"storefront"`
	Tenants    []gwJSONTier  `json:"tenants"`
	// TenantsSkipped, if not empty, is why the tenants run did not run.
	TenantsSkipped string            `json:"tenants_skipped,omitempty"`
	Hedge          []gwJSONHedge     `json:"hedge"`
	Noise          []gwJSONNoise     `json:"noise"`
	Configs        map[string]string `json:"configs"` // each run's gateway file
}

// gwJSONRoute is one storefront route in one run, after the stall began;
// rates are fractions, latencies milliseconds.
type gwJSONRoute struct {
	Config            string  `json:"config"`
	Route             string  `json:"route"`
	Requests          int     `json:"requests"`
	SuccessRate       float64 `json:"success_rate"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	P999Ms            float64 `json:"p999_ms"`
	Fallback          int     `json:"fallback"`
	Refused           int     `json:"refused"`
	WarmupRequests    int     `json:"warmup_requests"`
	WarmupSuccessRate float64 `json:"warmup_success_rate"`
	WarmupP99Ms       float64 `json:"warmup_p99_ms"`
}

// gwJSONTier is one tier in one phase of a tenants run.
type gwJSONTier struct {
	Config      string  `json:"config"`
	Phase       string  `json:"phase"`
	Tier        string  `json:"tier"`
	OfferedRate float64 `json:"offered_per_s"`
	Requests    int     `json:"requests"`
	SuccessRate float64 `json:"success_rate"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	Refused     int     `json:"refused"`
}

// gwJSONHedge is one route of the hedging run.
type gwJSONHedge struct {
	Route            string  `json:"route"`
	Requests         int     `json:"requests"`
	UpstreamRequests int64   `json:"upstream_requests"`
	ExtraPct         float64 `json:"extra_pct"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	P999Ms           float64 `json:"p999_ms"`
	MaxMs            float64 `json:"max_ms"`
}

// gwJSONNoise is how late the load generator sent a run's requests.
type gwJSONNoise struct {
	Run      string  `json:"run"`
	LagP99Ms float64 `json:"lag_p99_ms"`
	LagMaxMs float64 `json:"lag_max_ms"`
}

// gwRate is a fraction for the JSON document: rounded, and 0 for a rate
// without requests (NaN, which JSON cannot hold).
func gwRate(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return math.Round(f*1e5) / 1e5
}

// gwReport makes the scenario's result from its runs.
func gwReport(p gwParams, runs gwRuns, took time.Duration) *Result {
	res := &Result{Scenario: "gateway"}
	doc := gwJSON{Scenario: "gateway", Configs: map[string]string{}}
	gwReportStorefront(p, runs.sf, res, &doc)
	gwReportTenants(p, runs.tenants, res, &doc)
	gwReportHedge(p, runs.hedge, res, &doc)
	noise := Table{Title: "noise: how late the load generator sent the requests", Header: []string{"run", "lag p99", "lag max"}}
	for _, r := range runs.all() {
		if r.samples == nil {
			continue
		}
		lp, lm := gwLag(r.samples, 0, math.MaxInt64)
		noise.Rows = append(noise.Rows, []string{r.name, sfFmtMs(lp), sfFmtMs(lm)})
		doc.Noise = append(doc.Noise, gwJSONNoise{Run: r.name, LagP99Ms: sfMs(lp), LagMaxMs: sfMs(lm)})
		doc.Configs[r.name] = r.file
	}
	res.Tables = append(res.Tables, noise)
	res.Summary = gwSummary(p, runs, took)
	res.JSON = doc
	return res
}

// gwReportStorefront adds the storefront runs' table, charts and checks.
func gwReportStorefront(p gwParams, sf []*gwRun, res *Result, doc *gwJSON) {
	end := p.warmup + p.stalled
	t := Table{
		Title:  fmt.Sprintf("storefront through the gateway, after recommendation stalled (%v of load, %.0f req/s per route)", p.stalled, p.rate),
		Header: []string{"config", "route", "requests", "success", "p50", "p99", "p99.9", "fallback", "refused (503)", "warm-up p99"},
	}
	var stall, warm [2][3]gwStat
	success := Chart{
		File:   "gateway-storefront-success",
		Title:  fmt.Sprintf("gateway: success rate per route (recommendation takes %v a call from %.1fs on)", p.stall, p.warmup.Seconds()),
		XLabel: "time since the load began (s)", YLabel: "success rate (%)", YMax: 100,
	}
	for c, run := range sf {
		lat := Chart{
			File:   "gateway-" + run.name + "-latency",
			Title:  fmt.Sprintf("gateway, %s: p99 latency per route, per 250 ms (recommendation stalls from %.1fs on)", run.name, p.warmup.Seconds()),
			XLabel: "time since the load began (s)", YLabel: "p99 latency (ms)", LogY: true,
		}
		for i, rt := range sfRoutes {
			warm[c][i] = gwSummarise(run.samples, run.sched, i, p.settle, p.warmup)
			st := gwSummarise(run.samples, run.sched, i, p.warmup, end)
			stall[c][i] = st
			name := rt.name
			if i == sfRecommendation {
				name += " (stalled)"
			}
			t.Rows = append(t.Rows, []string{run.name, name, fmt.Sprint(st.n), sfPct(st.rate()),
				sfFmtMs(st.p50), sfFmtMs(st.p99), sfFmtMs(st.p999), fmt.Sprint(st.fallback), fmt.Sprint(st.overloaded), sfFmtMs(warm[c][i].p99)})
			doc.Storefront = append(doc.Storefront, gwJSONRoute{
				Config: run.name, Route: rt.name, Requests: st.n, SuccessRate: gwRate(st.rate()),
				P50Ms: sfMs(st.p50), P99Ms: sfMs(st.p99), P999Ms: sfMs(st.p999), Fallback: st.fallback, Refused: st.overloaded,
				WarmupRequests: warm[c][i].n, WarmupSuccessRate: gwRate(warm[c][i].rate()), WarmupP99Ms: sfMs(warm[c][i].p99),
			})
			lat.Series = append(lat.Series, gwSeries(rt.name, run.samples, run.sched, i, sfBinWidth))
			success.Series = append(success.Series, gwSuccessSeries(run.name+" "+rt.name, run.samples, run.sched, i, sfBinWidth))
		}
		res.Charts = append(res.Charts, lat)
	}
	res.Charts = append(res.Charts, success)
	res.Tables = append(res.Tables, t)
	for i, rt := range sfRoutes {
		if i == sfRecommendation {
			continue
		}
		ps, pw, us := stall[1][i], warm[1][i], stall[0][i]
		ratio := math.NaN()
		if ps.n > 0 && pw.n > 0 {
			ratio = float64(ps.p99) / float64(max(pw.p99, 1))
		}
		res.Checks = append(res.Checks,
			AtLeast(fmt.Sprintf("protected %s success ≥ %s while recommendation stalls", rt.name, sfPct(p.minProtected)),
				100*ps.rate(), 100*p.minProtected, "%", fmt.Sprintf("%d of %d", ps.ok, ps.n)),
			AtMost(fmt.Sprintf("protected %s p99 ≤ %.1f× its healthy p99", rt.name, p.maxP99Ratio),
				ratio, p.maxP99Ratio, "×", fmt.Sprintf("p99 %s vs healthy p99 %s (%v–%v of the same run)", sfFmtMs(ps.p99), sfFmtMs(pw.p99), p.settle, p.warmup)),
			AtMost(fmt.Sprintf("unprotected %s collapses (success < %s)", rt.name, sfPct(p.maxUnprotected)),
				100*us.rate(), math.Nextafter(100*p.maxUnprotected, 0), "%", fmt.Sprintf("%d of %d", us.ok, us.n)),
		)
	}
}

// gwReportTenants adds the tenants runs' table, chart and checks: the run
// with tenants, and the one with one bulkhead for every tier.
func gwReportTenants(p gwParams, runs [2]*gwRun, res *Result, doc *gwJSON) {
	share := p.freeShareRate()
	t := Table{
		Title: fmt.Sprintf("tenants: one route of %d permits (tenants: shared by weight, premium 3, free 1, default 1; or one bulkhead), %v a request; free at %g× its share from %v on",
			p.tenantCap, p.tenantLatency, p.freeNoisyShare, p.tenantPhase),
		Header: []string{"config", "phase", "tier", "offered/s", "requests", "success", "p50", "p99", "refused (503)"},
	}
	chart := Chart{
		File:   "gateway-tenants-latency",
		Title:  fmt.Sprintf("gateway, tenants: p99 latency per tier, per 250 ms (free at %g× its share from %.1fs on)", p.freeNoisyShare, p.tenantPhase.Seconds()),
		XLabel: "time since the load began (s)", YLabel: "p99 latency (ms)",
	}
	var premium [2][2]gwStat // run × phase
	for r, run := range runs {
		if run.skipped != "" {
			doc.TenantsSkipped = run.skipped
			continue
		}
		for ph, phase := range []string{"free quiet", "free noisy"} {
			from := time.Duration(ph) * p.tenantPhase
			for i, tier := range gwTiers {
				st := gwSummarise(run.samples, run.sched, i, max(from, p.settle), from+p.tenantPhase)
				offered := p.premiumRate
				if i == 1 {
					offered = []float64{p.freeQuietShare, p.freeNoisyShare}[ph] * share
				} else {
					premium[r][ph] = st
				}
				t.Rows = append(t.Rows, []string{run.name, phase, tier, fmt.Sprintf("%.0f", offered), fmt.Sprint(st.n), sfPct(st.rate()), sfFmtMs(st.p50), sfFmtMs(st.p99), fmt.Sprint(st.overloaded)})
				doc.Tenants = append(doc.Tenants, gwJSONTier{Config: run.name, Phase: phase, Tier: tier, OfferedRate: math.Round(offered), Requests: st.n,
					SuccessRate: gwRate(st.rate()), P50Ms: sfMs(st.p50), P99Ms: sfMs(st.p99), Refused: st.overloaded})
			}
		}
		for i, tier := range gwTiers {
			chart.Series = append(chart.Series, gwSeries(run.name+" "+tier, run.samples, run.sched, i, sfBinWidth))
		}
	}
	res.Tables = append(res.Tables, t)
	res.Charts = append(res.Charts, chart)
	ratio := func(r int) float64 {
		if premium[r][0].n == 0 || premium[r][1].n == 0 {
			return math.NaN()
		}
		return float64(premium[r][1].p99) / float64(max(premium[r][0].p99, 1))
	}
	detail := func(r int) string {
		return fmt.Sprintf("p99 %s with free at %.0f/s vs %s with free at %.0f/s",
			sfFmtMs(premium[r][1].p99), p.freeNoisyShare*share, sfFmtMs(premium[r][0].p99), p.freeQuietShare*share)
	}
	name := fmt.Sprintf("tenants: premium p99 with free at %g× its share ≤ %.1f× its p99 with free quiet", p.freeNoisyShare, p.maxTenantRatio)
	if runs[0].skipped != "" {
		res.Checks = append(res.Checks, Check{
			Name:   name + ": NOT RUN",
			OK:     true,
			Detail: "the gateway refused the tenants route (" + runs[0].skipped + "); this check counts as passed until the gateway builds tenants",
		})
	} else {
		res.Checks = append(res.Checks,
			AtMost(name, ratio(0), p.maxTenantRatio, "×", detail(0)),
			AtLeast(fmt.Sprintf("tenants: premium success ≥ %s with free at %g× its share", sfPct(p.minPremium), p.freeNoisyShare),
				100*premium[0][1].rate(), 100*p.minPremium, "%", fmt.Sprintf("%d of %d", premium[0][1].ok, premium[0][1].n)),
		)
	}
	res.Checks = append(res.Checks,
		AtLeast(fmt.Sprintf("one bulkhead for every tier instead: premium p99 with free at %g× its share > %.1f× its quiet p99", p.freeNoisyShare, p.maxTenantRatio),
			ratio(1), math.Nextafter(p.maxTenantRatio, math.Inf(1)), "×", detail(1)+"; the control: without tenants the check above fails"))
}

// gwReportHedge adds the hedging run's table, chart and checks.
func gwReportHedge(p gwParams, run *gwRun, res *Result, doc *gwJSON) {
	t := Table{
		Title: fmt.Sprintf("hedge: two routes to one pool of two hosts (%v + Exp(%v) a request, %s of them %v), %.0f req/s each; latencies after the first %v",
			p.hedgeBase, p.hedgeJitter, sfPct(p.hedgeRareRate), p.hedgeRare, p.hedgeRate, p.settle),
		Header: []string{"route", "requests", "upstream requests", "extra", "p50", "p99", "p99.9", "max"},
	}
	var st [2]gwStat // after the settling
	var sent [2]int  // every request, for the extra requests
	var extra [2]float64
	chart := Chart{
		File:   "gateway-hedge-latency",
		Title:  "gateway, hedge: p99 latency per route, per 500 ms",
		XLabel: "time since the load began (s)", YLabel: "p99 latency (ms)", LogY: true,
	}
	for i, r := range gwHedgeRoutes {
		st[i] = gwSummarise(run.samples, run.sched, i, p.settle, math.MaxInt64)
		sent[i] = gwSummarise(run.samples, run.sched, i, 0, math.MaxInt64).n
		extra[i] = math.NaN()
		if sent[i] > 0 {
			extra[i] = 100 * (float64(run.upstream[i])/float64(sent[i]) - 1)
		}
		t.Rows = append(t.Rows, []string{r, fmt.Sprint(sent[i]), fmt.Sprint(run.upstream[i]), fmt.Sprintf("%.2f%%", extra[i]),
			sfFmtMs(st[i].p50), sfFmtMs(st[i].p99), sfFmtMs(st[i].p999), sfFmtMs(st[i].max)})
		doc.Hedge = append(doc.Hedge, gwJSONHedge{Route: r, Requests: sent[i], UpstreamRequests: run.upstream[i], ExtraPct: 100 * gwRate(extra[i]/100),
			P50Ms: sfMs(st[i].p50), P99Ms: sfMs(st[i].p99), P999Ms: sfMs(st[i].p999), MaxMs: sfMs(st[i].max)})
		chart.Series = append(chart.Series, gwSeries(r, run.samples, run.sched, i, 500*time.Millisecond))
	}
	res.Tables = append(res.Tables, t)
	res.Charts = append(res.Charts, chart)
	cut := float64(st[1].p999) / float64(max(st[0].p999, 1))
	res.Checks = append(res.Checks,
		AtLeast(fmt.Sprintf("hedge: hedged reads cut the p99.9 at least %g×", p.minHedgeCut), cut, p.minHedgeCut, "×",
			fmt.Sprintf("p99.9 %s without hedging, %s with", sfFmtMs(st[1].p999), sfFmtMs(st[0].p999))),
		AtMost(fmt.Sprintf("hedge: at most %g%% extra upstream requests", p.maxHedgeExtra), extra[0], p.maxHedgeExtra, "%",
			fmt.Sprintf("%d upstream requests for %d requests, counted at the hosts", run.upstream[0], sent[0])),
	)
}

// gwSummary is the scenario's paragraph.
func gwSummary(p gwParams, runs gwRuns, took time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "The storefront of the storefront scenario as separate processes on 127.0.0.1: catalog (10 ms), payment (20 ms) and recommendation (200 ms) are `watertight lab-backend` processes, the gateway is a `watertight proxy --config FILE` process, and an open-loop load generator in the lab's process sends %.0f req/s per route (Poisson arrivals, seed %d, the same schedule for both runs) through the storefront's front end: one HTTP client whose pool holds at most %d connections to the gateway (as an app server's HTTP client pool does) and which gives each call %v; the user gives up after %v (a later answer is a failure). ", p.rate, p.seed, p.frontConns, p.frontTimeout, p.deadline)
	fmt.Fprintf(&sb, "After %v, recommendation stalls (%v a call) for the remaining %v of load. ", p.warmup, p.stall, p.stalled)
	fmt.Fprintf(&sb, "Unprotected, the gateway's file has the routes alone (timeout: off, one attempt, no bulkhead, no breaker): the gateway itself shares nothing between routes (a goroutine per request, a connection pool per upstream, and a client that goes away cancels the call upstream), but it answers a stalled call only when its caller gives up, so each stalled call holds one of the front end's %d connections for the front end's %v: %.0f req/s × %v = %.0f connections wanted, and catalog and payment calls queue behind them for a connection until their user has given up. ",
		p.frontConns, p.frontTimeout, p.rate, p.frontTimeout, p.rate*p.frontTimeout.Seconds())
	var sizes []string
	for i, rt := range sfRoutes {
		s := gwSize(p, i)
		sizes = append(sizes, fmt.Sprintf("%s %d permits / %v", rt.name, s.permits, s.timeout))
	}
	fmt.Fprintf(&sb, "Protected, the file gives each route a bulkhead sized by Little's law from the nominal load (rate × latency in flight, then the fewest permits Erlang's loss formula says refuse at most 1 in 10,000 calls, a wait of at most 50 ms) and a timeout of twice the latency (at least 250 ms, so that a pause of the shared machine is not an upstream failure), each host a breaker (20 calls, 50%%, open 1 s), and recommendations a fallback (200, an empty list): %s; the gateway then answers recommendation within its timeout, or at once once its breaker is open, and the front end's pool stays free. ", strings.Join(sizes, "; "))
	fmt.Fprintf(&sb, "Tables cover the %v after the stall began; latencies run from each request's scheduled arrival and include failures; a fallback counts as a success and is counted apart; refused are the gateway's 503s with X-Overloaded. The healthy p99 is the protected run's, from %v to %v: the first %v of each run, while the connections of both hops are dialled, counts in no statistic (nor in the tenants' quiet phase or the hedging routes' latencies). ", p.stalled, p.settle, p.warmup, p.settle)
	share := p.freeShareRate()
	fmt.Fprintf(&sb, "Tenants: one route to a service of %d workers (%v a request; more requests wait for a worker in turn), sized to match: the route admits %d at once. With tenants {key: header X-Tier, max_concurrent: %d, shares: {premium: 3, free: 1}}, and the default share of 1 for every other tier, free is guaranteed 1/5 of the %d permits, %.0f req/s; the control, one-bulkhead, has one bulkhead of %d permits and a wait of at most 100 ms (tenants' default) for every tier. Premium sends %.0f req/s throughout, free %.0f req/s (%g× its share) for %v, then %.0f req/s (%g×) for %v. ",
		p.tenantCap, p.tenantLatency, p.tenantCap, p.tenantCap, p.tenantCap, share, p.tenantCap, p.premiumRate, p.freeQuietShare*share, p.freeQuietShare, p.tenantPhase, p.freeNoisyShare*share, p.freeNoisyShare, p.tenantPhase)
	if runs.tenants[0].skipped != "" {
		fmt.Fprintf(&sb, "The run with tenants did not run: the gateway refused the file (%s). ", runs.tenants[0].skipped)
	}
	fmt.Fprintf(&sb, "Hedge: two routes to one pool of two backend processes, each request taking %v + Exp(mean %v), or %v for %s of them (drawn from the seed, the request's number and the host, so both routes meet the same draws and a hedge to the other host stalls independently); `hedged` names hedges: {reads: {percentile: %g, min_delay: %v}}, `plain` nothing; %.0f req/s each for %v; upstream requests are counted at the hosts. With one call per request, a hedged request stalls only when both hosts do, %s² of the time, far below the p99.9; with 0.2%% of stalls the plain route's p99.9 would land on a stall only when 4 or more of its requests stall, which some seeds miss. The percentile is %g rather than 0.95: a hedge at the p95 costs 5%% of the requests by construction once the machine's noise lifts the tracked p95 above the %v floor, which is the bound itself. ",
		p.hedgeBase, p.hedgeJitter, p.hedgeRare, sfPct(p.hedgeRareRate), p.hedgePercentile, p.hedgeMinDelay, p.hedgeRate, p.hedgeLoad, sfPct(p.hedgeRareRate), p.hedgePercentile, p.hedgeMinDelay)
	fmt.Fprintf(&sb, "Each run starts its processes afresh and stops them (SIGTERM, then SIGKILL) before the next; the whole scenario took %v. Real processes and clocks: each run happened once, and the noise table says how late the load generator sent its requests.", took.Round(100*time.Millisecond))
	if p.quick {
		fmt.Fprintf(&sb, " This is the Quick version (shorter phases; looser bounds: protected ≥ %s, p99 ≤ %.1f× healthy, unprotected < %s, premium p99 ≤ %.1f×, premium ≥ %s).", sfPct(p.minProtected), p.maxP99Ratio, sfPct(p.maxUnprotected), p.maxTenantRatio, sfPct(p.minPremium))
	}
	return sb.String()
}
