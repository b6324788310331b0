package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/limit"
)

// The adaptive scenario (issue 18): an adaptive concurrency limit in front
// of a server whose capacity moves. A discrete-event simulation on virtual
// time, seeded:
//
//   - the server has W workers and a FIFO queue without bound: a request
//     that finds every worker busy waits in the queue, so its latency is its
//     wait plus its service time, drawn from a log-normal distribution (mean
//     100 ms, σ 0.5: a coefficient of variation of about 0.53, p99 about
//     2.8× the mean). Its capacity is W / E[S] requests a second and, by
//     Little's law, C* = W concurrent requests: more in flight only queue,
//     fewer leave workers idle;
//   - clients arrive as a Poisson process at the phase's rate, open loop,
//     each request with a deadline D = 500 ms. The server does not know the
//     deadline and does not cancel: a request whose client has given up
//     still waits its turn and takes a worker for its whole service time
//     (as in a server that knows nothing of deadlines, the overload
//     scenario's no-shedding);
//   - the limiter in front is asked with TryAcquire: a request it refuses
//     is shed at once. An answer within the deadline ends the permit with
//     Done(latency); a client that reaches its deadline first gives up and
//     ends it with Drop(), while the server keeps the request;
//   - a capacity change removes or adds workers: half of them go (a busy
//     worker finishes its request first), C* halves, the service time does
//     not change.
//
// Every configuration meets the same arrivals and the same service time per
// request (common random numbers), in three runs:
//
//   - ramp: 30 s phases at 0.5×, 1×, 2×, 3× (60 s), 2×, 1× and 0.5× of
//     capacity;
//   - halving: 1.5× of the full capacity throughout; half the workers go at
//     60 s and come back at 180 s, end at 300 s;
//   - degradation: the same with the workers gone for 10 minutes (60 s to
//     660 s), end at 780 s.
//
// The limiters use limit.Config's defaults (initial limit 20, windows of at
// least 10 calls and 1 s) with the virtual clock.

// adaptiveScenario is registered by init; TestAdaptiveQuick and
// TestAdaptiveSeeds run it directly too.
var adaptiveScenario = Scenario{
	Name:        "adaptive",
	Description: "adaptive concurrency limits in front of a server whose load ramps to 3× and whose capacity halves: no limit, static limits 2× too high and too low, AIMD, Vegas, Gradient2 and watertight's own",
	Run:         runAdaptive,
}

func init() { Register(adaptiveScenario) }

// Configuration names, as in the tables and the JSON.
const (
	adNone       = "no-limit"
	adStaticHigh = "static-2x-high"
	adStaticLow  = "static-2x-low"
	adAIMD       = "aimd"
	adVegas      = "vegas"
	adGradient2  = "gradient2"
	adDefault    = "watertight"
)

var adConfigs = []string{adNone, adStaticHigh, adStaticLow, adAIMD, adVegas, adGradient2, adDefault}

// Run names.
const (
	adRamp        = "ramp"
	adHalving     = "halving"
	adDegradation = "degradation"
)

var adRuns = []string{adRamp, adHalving, adDegradation}

// adParams size the scenario and hold the pass lines' bounds.
type adParams struct {
	workers  int           // W = C* at full capacity
	service  time.Duration // E[S]
	sigma    float64       // of the log-normal service time
	deadline time.Duration // D
	phase    time.Duration // ramp phases
	hold3x   time.Duration // the ramp's 3× phase
	ramp     []float64     // the ramp's loads, × capacity
	load     float64       // halving and degradation: × full capacity
	before   time.Duration // halving and degradation: full capacity first
	halving  time.Duration // how long half the workers are gone
	degrade  time.Duration // the same, in the degradation run
	after    time.Duration // full capacity again, to the end
	sample   time.Duration // the limits are sampled this often
	bin      time.Duration // chart bins

	band           float64       // ±20% of C*
	settleWithin   time.Duration // 60 s from the start
	halveWithin    time.Duration // 30 s after the capacity halves
	climbWithin    time.Duration // 60 s after it returns
	minGoodput     float64       // 0.9 of the peak goodput, at 3×
	maxP99Ratio    float64       // 2× the unloaded p99, at 3×
	staticLowWaste float64       // the low bulkhead's goodput at 3× at most this share of the peak
}

func adParamsFor(quick bool) adParams {
	p := adParams{
		workers:        40,
		service:        100 * time.Millisecond, // 400 requests a second
		sigma:          0.5,
		deadline:       500 * time.Millisecond,
		phase:          30 * time.Second,
		hold3x:         60 * time.Second,
		ramp:           []float64{0.5, 1, 2, 3, 2, 1, 0.5},
		load:           1.5,
		before:         60 * time.Second,
		halving:        120 * time.Second,
		degrade:        10 * time.Minute,
		after:          120 * time.Second,
		sample:         500 * time.Millisecond,
		bin:            5 * time.Second,
		band:           0.2,
		settleWithin:   60 * time.Second,
		halveWithin:    30 * time.Second,
		climbWithin:    60 * time.Second,
		minGoodput:     0.9,
		maxP99Ratio:    2,
		staticLowWaste: 0.6,
	}
	// The quick run is the full one: the whole simulation takes well under
	// a second of CPU, and its pass lines are in virtual time.
	_ = quick
	return p
}

// capacity is W / E[S] requests a second at full capacity.
func (p adParams) capacity() float64 { return float64(p.workers) / p.service.Seconds() }

// adSegment is a stretch of a run with one arrival rate and one number of
// workers: a phase of the tables.
type adSegment struct {
	name    string // as in the JSON: "ramp-3x", "halving-half"
	label   string // as in the tables: "3×", "half"
	start   time.Duration
	end     time.Duration
	load    float64 // × full capacity
	workers int
}

// adSchedule returns a run's segments.
func adSchedule(p adParams, run string) []adSegment {
	var segs []adSegment
	at := time.Duration(0)
	add := func(name, label string, d time.Duration, load float64, workers int) {
		segs = append(segs, adSegment{name: run + "-" + name, label: label, start: at, end: at + d, load: load, workers: workers})
		at += d
	}
	switch run {
	case adRamp:
		peak := false
		for _, l := range p.ramp {
			ls := strconv.FormatFloat(l, 'f', -1, 64)
			name, label, d := ls+"x", ls+"×", p.phase
			if peak {
				name, label = name+"-down", label+" down"
			}
			if l == slices.Max(p.ramp) {
				peak, d = true, p.hold3x
			}
			add(name, label, d, l, p.workers)
		}
	case adHalving, adDegradation:
		d := p.halving
		if run == adDegradation {
			d = p.degrade
		}
		add("before", "before", p.before, p.load, p.workers)
		add("half", "half workers", d, p.load, p.workers/2)
		add("after", "after", p.after, p.load, p.workers)
	}
	return segs
}

// adReq is one request.
type adReq struct {
	arrival  time.Duration
	service  time.Duration
	seg      int
	permit   limit.Permit
	answered bool // the server finished it (whether or not the client waited)
	gaveUp   bool // the client reached its deadline first
}

// adFIFO is a queue of requests.
type adFIFO struct {
	q    []*adReq
	head int
}

func (f *adFIFO) push(r *adReq) { f.q = append(f.q, r) }
func (f *adFIFO) len() int      { return len(f.q) - f.head }
func (f *adFIFO) peek() *adReq  { return f.q[f.head] }
func (f *adFIFO) pop() *adReq {
	r := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head > 4096 && f.head*2 > len(f.q) {
		f.q = append(f.q[:0], f.q[f.head:]...)
		f.head = 0
	}
	return r
}

// adDone is a request in service, by the time it completes.
type adDone struct {
	at time.Duration
	r  *adReq
}

// adHeap is a binary min-heap of completions.
type adHeap []adDone

func (h *adHeap) push(d adDone) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		j := (i - 1) / 2
		if s[j].at <= s[i].at {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}

func (h *adHeap) pop() adDone {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].at < s[m].at {
			m = l
		}
		if r := l + 1; r < n && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// adTally is what one configuration got in one segment, by arrival time.
type adTally struct {
	sent, shed, admitted, good, timedOut int
	served                               int // completions the server made during the segment, wanted or not
	latency                              []time.Duration
	svcSum, svcSq                        float64 // service times (s) of the good answers, for the goodput's noise
	limitErr                             float64 // sum over the segment's samples of |limit − C*| / C*
	limitSum                             float64
	samples                              int
}

// adSample is the limit at one instant.
type adSample struct {
	at    time.Duration
	limit int // -1: no limit
	cstar int
	load  float64
}

// adBin is a chart bin: answers and latencies of the requests that arrived
// in it.
type adBin struct {
	good    int
	latency []time.Duration
}

// adRunResult is one configuration in one run.
type adRunResult struct {
	config, run string
	segs        []adSegment
	tally       []adTally
	samples     []adSample
	bins        []adBin
	events      int
}

// adGate is the admission in front of the server.
type adGate struct {
	lim *limit.Limiter
	bh  *bulkhead.Bulkhead
}

func (g *adGate) try() (limit.Permit, bool) {
	switch {
	case g.lim != nil:
		return g.lim.TryAcquire()
	case g.bh != nil:
		return limit.Permit{}, g.bh.TryAcquire()
	}
	return limit.Permit{}, true
}

func (g *adGate) done(p limit.Permit, lat time.Duration) {
	switch {
	case g.lim != nil:
		p.Done(lat)
	case g.bh != nil:
		g.bh.Release()
	}
}

func (g *adGate) drop(p limit.Permit) {
	switch {
	case g.lim != nil:
		p.Drop()
	case g.bh != nil:
		g.bh.Release()
	}
}

func (g *adGate) limit() int {
	switch {
	case g.lim != nil:
		return g.lim.Limit()
	case g.bh != nil:
		return g.bh.Snapshot().MaxConcurrent
	}
	return -1
}

// adNewGate builds a configuration's admission; now is the simulation's
// clock and seed seeds Vegas's probe jitter.
func adNewGate(cfg string, p adParams, now func() time.Duration, seed uint64) (*adGate, error) {
	var alg func() limit.Algorithm
	switch cfg {
	case adNone:
		return &adGate{}, nil
	case adStaticHigh, adStaticLow:
		n := 2 * p.workers
		if cfg == adStaticLow {
			n = p.workers / 2
		}
		bh, err := bulkhead.New(bulkhead.Config{Name: cfg, MaxConcurrent: n})
		if err != nil {
			return nil, err
		}
		return &adGate{bh: bh}, nil
	case adAIMD:
		alg = func() limit.Algorithm { return limit.NewAIMD(limit.AIMDOptions{}) }
	case adVegas:
		rng := rand.New(rand.NewPCG(seed, 0x7e9a5))
		alg = func() limit.Algorithm { return limit.NewVegas(limit.VegasOptions{Rand: rng.Float64}) }
	case adGradient2:
		alg = func() limit.Algorithm { return limit.NewGradient2(limit.Gradient2Options{}) }
	case adDefault:
		alg = nil // limit.Config's default: limit.NewDefault(limit.DefaultOptions{})
	default:
		return nil, fmt.Errorf("lab: adaptive: no configuration %q", cfg)
	}
	l, err := limit.New(limit.Config{Name: cfg, Algorithm: alg, Clock: now})
	if err != nil {
		return nil, err
	}
	return &adGate{lim: l}, nil
}

// adSimulate runs one configuration through one run.
func adSimulate(ctx context.Context, cfg, run string, p adParams, seed uint64) (*adRunResult, error) {
	segs := adSchedule(p, run)
	end := segs[len(segs)-1].end
	res := &adRunResult{config: cfg, run: run, segs: segs, tally: make([]adTally, len(segs)),
		bins: make([]adBin, int((end+p.bin-1)/p.bin))}
	var now time.Duration
	gate, err := adNewGate(cfg, p, func() time.Duration { return now }, seed)
	if err != nil {
		return nil, err
	}
	// The same streams for every configuration: arrivals, and each
	// request's service time drawn as it arrives.
	arrivals := rand.New(rand.NewPCG(seed, 0xad0001))
	services := rand.New(rand.NewPCG(seed, 0xad0002))
	mu := math.Log(p.service.Seconds()) - p.sigma*p.sigma/2

	var (
		queue    adFIFO // the server's
		pending  adFIFO // admitted requests by arrival, for their deadlines
		inServ   adHeap
		busy     int
		workers  = segs[0].workers
		seg      = 0
		nextArr  time.Duration
		nextSamp time.Duration
	)
	never := time.Duration(math.MaxInt64)
	drawArrival := func(from time.Duration) time.Duration {
		// Piecewise-constant rate: draw in the current segment; past its
		// end, start again from the end at the next one's rate (memoryless).
		for s := adSegAt(segs, from); s < len(segs); s++ {
			rate := segs[s].load * p.capacity()
			t := from + time.Duration(arrivals.ExpFloat64()/rate*float64(time.Second))
			if t < segs[s].end {
				return t
			}
			from = segs[s].end
		}
		return never
	}
	start := func(r *adReq) {
		busy++
		inServ.push(adDone{at: now + r.service, r: r})
	}
	fill := func() {
		for busy < workers && queue.len() > 0 {
			start(queue.pop())
		}
	}
	nextArr = drawArrival(0)
	for n := 0; ; n++ {
		if n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		// The next event: a completion, a deadline, a change of segment,
		// a sample, an arrival (in that order at equal times).
		tDone, tDl, tSeg := never, never, never
		if len(inServ) > 0 {
			tDone = inServ[0].at
		}
		if pending.len() > 0 {
			tDl = pending.peek().arrival + p.deadline
		}
		if seg+1 < len(segs) {
			tSeg = segs[seg+1].start
		}
		tSamp := never
		if nextSamp < end {
			tSamp = nextSamp
		}
		t := min(tDone, tDl, tSeg, tSamp, nextArr)
		if t == never || (t >= end && pending.len() == 0) {
			break
		}
		now = t
		res.events++
		switch t {
		case tDone:
			d := inServ.pop()
			busy--
			r := d.r
			r.answered = true
			res.tally[adSegAt(segs, now)].served++
			if !r.gaveUp {
				lat := now - r.arrival
				gate.done(r.permit, lat)
				tl := &res.tally[r.seg]
				tl.good++
				tl.latency = append(tl.latency, lat)
				sv := r.service.Seconds()
				tl.svcSum += sv
				tl.svcSq += sv * sv
				b := &res.bins[int(r.arrival/p.bin)]
				b.good++
				b.latency = append(b.latency, lat)
			}
			fill()
		case tDl:
			r := pending.pop()
			if !r.answered {
				r.gaveUp = true
				gate.drop(r.permit)
				tl := &res.tally[r.seg]
				tl.timedOut++
				tl.latency = append(tl.latency, p.deadline)
				b := &res.bins[int(r.arrival/p.bin)]
				b.latency = append(b.latency, p.deadline)
			}
		case tSeg:
			seg++
			workers = segs[seg].workers
			fill()
		case tSamp:
			l := gate.limit()
			s := adSample{at: now, limit: l, cstar: workers, load: segs[seg].load}
			res.samples = append(res.samples, s)
			if l >= 0 {
				tl := &res.tally[seg]
				tl.limitErr += math.Abs(float64(l-workers)) / float64(workers)
				tl.limitSum += float64(l)
				tl.samples++
			}
			nextSamp += p.sample
		default: // an arrival
			svc := time.Duration(math.Exp(mu+p.sigma*services.NormFloat64()) * float64(time.Second))
			r := &adReq{arrival: now, service: svc, seg: seg}
			tl := &res.tally[seg]
			tl.sent++
			nextArr = drawArrival(now)
			pm, ok := gate.try()
			if !ok {
				tl.shed++
				continue
			}
			tl.admitted++
			r.permit = pm
			pending.push(r)
			if busy < workers {
				start(r)
			} else {
				queue.push(r)
			}
		}
	}
	return res, nil
}

// adSegAt returns the segment that holds t (the last one past the end).
func adSegAt(segs []adSegment, t time.Duration) int {
	for i, s := range segs {
		if t < s.end {
			return i
		}
	}
	return len(segs) - 1
}

func runAdaptive(ctx context.Context, opts Options) (*Result, error) {
	p := adParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	began := time.Now()
	type job struct{ cfg, run string }
	var jobs []job
	for _, run := range adRuns {
		for _, cfg := range adConfigs {
			jobs = append(jobs, job{cfg, run})
		}
	}
	results := make([]*adRunResult, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = adSimulate(ctx, j.cfg, j.run, p, opts.Seed)
		}()
	}
	wg.Wait()
	events := 0
	for i, err := range errs {
		if err != nil {
			return nil, err
		}
		events += results[i].events
	}
	took := time.Since(began)
	fmt.Fprintf(progress, "adaptive: %d configurations × %d runs, %d events of virtual time in %v\n",
		len(adConfigs), len(adRuns), events, took.Round(time.Millisecond))
	by := map[string]map[string]*adRunResult{}
	for _, r := range results {
		if by[r.run] == nil {
			by[r.run] = map[string]*adRunResult{}
		}
		by[r.run][r.config] = r
	}
	return adResult(p, by, took), nil
}

// adJSON is the scenario's document.
type adJSON struct {
	Scenario string         `json:"scenario"`
	Results  []adJSONResult `json:"results"`
	Checks   adJSONTimes    `json:"times"`
}

// adJSONResult is one configuration in one phase. LimitError and LimitMean
// are null without a limit.
type adJSONResult struct {
	Config       string   `json:"config"`
	Phase        string   `json:"phase"`
	Load         float64  `json:"load"`
	CStar        int      `json:"c_star"`
	LimitMean    *float64 `json:"limit_mean"`
	LimitError   *float64 `json:"limit_error"`
	Goodput      float64  `json:"goodput_per_s"`
	GoodputRatio float64  `json:"goodput_ratio"`
	P50Ms        float64  `json:"p50_ms"`
	P99Ms        float64  `json:"p99_ms"`
	Sent         int      `json:"sent"`
	Admitted     int      `json:"admitted"`
	Shed         int      `json:"shed"`
	TimedOut     int      `json:"timed_out"`
	Served       int      `json:"served"`
}

// adJSONTimes are the default's measured times, in seconds (null: never).
type adJSONTimes struct {
	SettleS  *float64 `json:"settle_s"`
	HalveS   *float64 `json:"halve_s"`
	ClimbS   *float64 `json:"climb_s"`
	DegradeS *float64 `json:"degradation_climb_s"`
	MaxLimit int      `json:"degradation_max_limit"`
}

// adSettle returns how long after from the limit entered, for good, the
// band around C* among the samples in [from, to) for which count says so;
// ok is false if the last such sample is out of the band.
func adSettle(samples []adSample, from, to time.Duration, band float64, count func(adSample) bool) (time.Duration, bool) {
	settled := from
	seen := false
	for _, s := range samples {
		if s.at < from || s.at >= to || !count(s) {
			continue
		}
		seen = true
		c := float64(s.cstar)
		if l := float64(s.limit); l < c*(1-band) || l > c*(1+band) {
			settled = s.at + 1 // not yet: the next sample at the earliest
		}
	}
	if !seen {
		return 0, false
	}
	last := from
	for _, s := range samples {
		if s.at >= from && s.at < to && count(s) {
			last = s.at
		}
	}
	if settled > last {
		return 0, false
	}
	return settled - from, true
}

// adGoodputSE estimates the standard error of a saturated phase's
// goodput: the answers of busy workers are a renewal process, so their
// count over the phase varies as n × cv², cv the coefficient of variation
// of the service times answered.
func adGoodputSE(t adTally, secs float64) float64 {
	if t.good < 2 {
		return 0
	}
	n := float64(t.good)
	mean := t.svcSum / n
	cv := math.Sqrt(max(0, t.svcSq/n-mean*mean)) / mean
	return math.Sqrt(n) * cv / secs
}

// adP99SE estimates the standard error of a p99 estimate, in ms: the rank
// of the 99th percentile in n draws varies by √(n·0.99·0.01), so half the
// spread of the order statistics that far either side.
func adP99SE(lat []time.Duration) float64 {
	n := len(lat)
	if n < 2 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	r, d := 0.99*float64(n-1), math.Sqrt(float64(n)*0.99*0.01)
	lo, hi := s[max(0, int(math.Floor(r-d)))], s[min(n-1, int(math.Ceil(r+d)))]
	return ovMs(hi-lo) / 2
}

func adPercentile(lat []time.Duration, q float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return ovPercentile(s, q)
}

func adRound(x float64, decimals int) float64 { return tnRound(x, decimals) }

func adResult(p adParams, by map[string]map[string]*adRunResult, took time.Duration) *Result {
	res := &Result{Scenario: "adaptive"}
	doc := adJSON{Scenario: "adaptive"}
	rows := map[string]map[string]adJSONResult{} // config -> phase -> row
	var peak float64
	for _, run := range adRuns {
		tbl := Table{
			Title: "run " + run,
			Header: []string{"config", "phase", "load", "C*", "limit (mean)", "limit error", "goodput/s", "goodput ratio",
				"p50 (ms)", "p99 (ms)", "shed", "timed out", "served/s"},
		}
		for _, cfg := range adConfigs {
			r := by[run][cfg]
			if rows[cfg] == nil {
				rows[cfg] = map[string]adJSONResult{}
			}
			for i, sg := range r.segs {
				t := r.tally[i]
				secs := (sg.end - sg.start).Seconds()
				capNow := float64(sg.workers) / p.service.Seconds()
				good := float64(t.good) / secs
				j := adJSONResult{
					Config: cfg, Phase: sg.name, Load: sg.load, CStar: sg.workers,
					Goodput: adRound(good, 1), GoodputRatio: adRound(good/min(sg.load*p.capacity(), capNow), 3),
					P50Ms: adRound(ovMs(adPercentile(t.latency, 0.5)), 1), P99Ms: adRound(ovMs(adPercentile(t.latency, 0.99)), 1),
					Sent: t.sent, Admitted: t.admitted, Shed: t.shed, TimedOut: t.timedOut, Served: t.served,
				}
				lm, le := "—", "—"
				if t.samples > 0 {
					m, e := adRound(t.limitSum/float64(t.samples), 1), adRound(t.limitErr/float64(t.samples), 3)
					j.LimitMean, j.LimitError = &m, &e
					lm, le = fmt.Sprintf("%.1f", m), fmt.Sprintf("%.3f", e)
				}
				if run == adRamp {
					peak = max(peak, good)
				}
				rows[cfg][sg.name] = j
				doc.Results = append(doc.Results, j)
				tbl.Rows = append(tbl.Rows, []string{cfg, sg.label, fmtNum(sg.load) + "×", strconv.Itoa(sg.workers), lm, le,
					fmt.Sprintf("%.0f", good), fmt.Sprintf("%.3f", j.GoodputRatio),
					fmt.Sprintf("%.1f", j.P50Ms), fmt.Sprintf("%.1f", j.P99Ms),
					strconv.Itoa(t.shed), strconv.Itoa(t.timedOut), fmt.Sprintf("%.0f", float64(t.served)/secs)})
			}
		}
		res.Tables = append(res.Tables, tbl)
	}
	res.Charts = adCharts(p, by)

	// The pass lines, for watertight's own.
	ramp := by[adRamp][adDefault]
	rampSegs := ramp.segs
	loaded := func(s adSample) bool { return s.load >= 1 }
	rampEnd := rampSegs[len(rampSegs)-1].end
	settle, settled := adSettle(ramp.samples, 0, rampEnd, p.band, loaded)
	half := by[adHalving][adDefault]
	hs := half.segs
	halve, halved := adSettle(half.samples, hs[1].start, hs[1].end, p.band, func(adSample) bool { return true })
	climb, climbed := adSettle(half.samples, hs[2].start, hs[2].end, p.band, func(adSample) bool { return true })
	deg := by[adDegradation][adDefault]
	ds := deg.segs
	degClimb, degClimbed := adSettle(deg.samples, ds[2].start, ds[2].end, p.band, func(adSample) bool { return true })
	maxLim, trend := 0, []string{}
	minuteMax := 0
	for _, s := range deg.samples {
		if s.at >= ds[1].start+p.halveWithin && s.at < ds[1].end {
			maxLim = max(maxLim, s.limit)
			minuteMax = max(minuteMax, s.limit)
			if (s.at-ds[1].start)%time.Minute == time.Minute-p.sample {
				trend = append(trend, strconv.Itoa(minuteMax))
				minuteMax = 0
			}
		}
	}
	secs := func(d time.Duration, ok bool) *float64 {
		if !ok {
			return nil
		}
		v := adRound(d.Seconds(), 1)
		return &v
	}
	doc.Checks = adJSONTimes{SettleS: secs(settle, settled), HalveS: secs(halve, halved), ClimbS: secs(climb, climbed),
		DegradeS: secs(degClimb, degClimbed), MaxLimit: maxLim}
	res.JSON = doc

	timeCheck := func(name string, d time.Duration, ok bool, bound time.Duration, detail string) Check {
		v := math.Inf(1)
		if ok {
			v = adRound(d.Seconds(), 1)
		} else {
			detail = "never settled; " + detail
		}
		return AtMost(name, v, bound.Seconds(), " s", detail)
	}
	band := fmt.Sprintf("±%.0f%%", 100*p.band)
	limitsOf := func(r *adRunResult, from, to time.Duration) string {
		var lo, hi = math.MaxInt, 0
		for _, s := range r.samples {
			if s.at >= from && s.at < to {
				lo, hi = min(lo, s.limit), max(hi, s.limit)
			}
		}
		if lo > hi {
			return "no sample in the band's span (it settled only after it)"
		}
		return fmt.Sprintf("limit %d–%d", lo, hi)
	}
	at3 := "ramp-3x"
	d3 := rows[adDefault][at3]
	unloaded := rows[adNone]["ramp-0.5x"].P99Ms
	res.Checks = append(res.Checks,
		timeCheck(fmt.Sprintf("ramp: the limit settles within %s of C* = %d within %v of the start (and stays there while the load is ≥ 1×)", band, p.workers, p.settleWithin),
			settle, settled, p.settleWithin,
			fmt.Sprintf("at 1× and above after settling: %s", limitsOf(ramp, rampSegs[1].start+settle, rampSegs[len(rampSegs)-2].end))),
		AtLeast(fmt.Sprintf("ramp: at 3×, goodput is at least %s of the peak goodput (goodput / peak)", fmtNum(p.minGoodput)),
			adRound(d3.Goodput/peak, 3), p.minGoodput, "",
			fmt.Sprintf("%.0f/s of a peak of %.0f/s (the most any configuration answered in time in a ramp phase; capacity %.0f/s)", d3.Goodput, peak, p.capacity())),
		AtMost(fmt.Sprintf("ramp: at 3×, the p99 of admitted requests is at most %s× the unloaded p99 (p99 / unloaded p99)", fmtNum(p.maxP99Ratio)),
			adRound(d3.P99Ms/unloaded, 3), p.maxP99Ratio, "",
			fmt.Sprintf("%.1f ms against %.1f ms (no limit at 0.5×)", d3.P99Ms, unloaded)),
		timeCheck(fmt.Sprintf("halving: when the capacity halves, the limit is within %s of the new C* = %d within %v", band, p.workers/2, p.halveWithin),
			halve, halved, p.halveWithin, fmt.Sprintf("after settling: %s", limitsOf(half, hs[1].start+halve, hs[1].end))),
		timeCheck(fmt.Sprintf("halving: when it returns, the limit is back within %s of C* = %d within %v", band, p.workers, p.climbWithin),
			climb, climbed, p.climbWithin, fmt.Sprintf("after settling: %s", limitsOf(half, hs[2].start+climb, hs[2].end))),
		AtMost(fmt.Sprintf("degradation: during %v at half capacity, the limit stays at most C* + %.0f%% = %s (the highest sampled from %v after it began)",
			p.degrade, 100*p.band, fmtNum(float64(p.workers/2)*(1+p.band)), p.halveWithin),
			float64(maxLim), float64(p.workers/2)*(1+p.band), "",
			fmt.Sprintf("highest limit per minute: %s; after the capacity returned, back in the band in %s",
				strings.Join(trend, ", "), fmtSecs(degClimb, degClimbed))),
	)
	// Against the other algorithms at 3×. Each figure is an estimate from
	// one minute of one seed, and at the optimum (a limit of C*, which the
	// best of them and ours both hold to a few calls) the differences are
	// that of the estimates' noise: a strict inequality would be a coin
	// toss. So each comparison allows three standard errors of the
	// difference, estimated from the run itself (adGoodputSE, adP99SE), and
	// the details say by how much ours leads or trails.
	i3 := slices.IndexFunc(rampSegs, func(s adSegment) bool { return s.name == at3 })
	secs3 := (rampSegs[i3].end - rampSegs[i3].start).Seconds()
	ourT := ramp.tally[i3]
	ourGSE, ourPSE := adGoodputSE(ourT, secs3), adP99SE(ourT.latency)
	bestGood, bestName, bestGSE, lowP99, lowName, lowPSE := -1.0, "", 0.0, math.Inf(1), "", 0.0
	var others []string
	for _, cfg := range []string{adAIMD, adVegas, adGradient2} {
		r := rows[cfg][at3]
		t := by[adRamp][cfg].tally[i3]
		others = append(others, fmt.Sprintf("%s %.1f/s, p99 %.1f ms", cfg, r.Goodput, r.P99Ms))
		if r.Goodput > bestGood {
			bestGood, bestName, bestGSE = r.Goodput, cfg, adGoodputSE(t, secs3)
		}
		if r.P99Ms < lowP99 {
			lowP99, lowName, lowPSE = r.P99Ms, cfg, adP99SE(t.latency)
		}
	}
	gTol := 3 * math.Hypot(ourGSE, bestGSE)
	pTol := 3 * math.Hypot(ourPSE, lowPSE)
	res.Checks = append(res.Checks,
		AtLeast("ramp: at 3×, our goodput is at least the best of AIMD, Vegas and Gradient2, within three standard errors of the difference (ours less theirs, /s)",
			adRound(d3.Goodput-bestGood, 1), -adRound(gTol, 1), "/s",
			fmt.Sprintf("ours %.1f/s, best %s; %s; standard errors %.1f/s and %.1f/s (√n × the service time's coefficient of variation / the phase's length)",
				d3.Goodput, bestName, strings.Join(others, "; "), ourGSE, bestGSE)),
		AtMost("ramp: at 3×, our p99 is at most the lowest of AIMD's, Vegas's and Gradient2's, within three standard errors of the difference (ours less theirs, ms)",
			adRound(d3.P99Ms-lowP99, 1), adRound(pTol, 1), " ms",
			fmt.Sprintf("ours %.1f ms, lowest of theirs %.1f ms (%s); standard errors %.1f ms and %.1f ms (half the spread of the order statistics √(n·0.99·0.01) ranks either side)",
				d3.P99Ms, lowP99, lowName, ourPSE, lowPSE)),
	)
	// Why adaptation matters: the static bulkheads.
	hi3, lo3 := rows[adStaticHigh][at3], rows[adStaticLow][at3]
	hiHalf, dHalf := rows[adStaticHigh]["halving-half"], rows[adDefault]["halving-half"]
	res.Checks = append(res.Checks,
		AtMost(fmt.Sprintf("static: the bulkhead 2× too low wastes capacity: at 3× its goodput is at most %s of the peak", fmtNum(p.staticLowWaste)),
			adRound(lo3.Goodput/peak, 3), p.staticLowWaste, "", fmt.Sprintf("%.0f/s of %.0f/s", lo3.Goodput, peak)),
		Check{Name: "static: the bulkhead 2× too high blows latency up: at 3× its median latency is at least 1.5× ours, and at half capacity at least 3× ours",
			OK: hi3.P50Ms >= 1.5*d3.P50Ms && hiHalf.P50Ms >= 3*dHalf.P50Ms,
			Detail: fmt.Sprintf("3×: %.1f ms against our %.1f ms (p99 %.1f against %.1f); half capacity: %.1f ms against our %.1f ms, with %d timed out against our %d (p99 %.1f against %.1f)",
				hi3.P50Ms, d3.P50Ms, hi3.P99Ms, d3.P99Ms, hiHalf.P50Ms, dHalf.P50Ms, hiHalf.TimedOut, dHalf.TimedOut, hiHalf.P99Ms, dHalf.P99Ms)},
	)

	res.Summary = fmt.Sprintf("A discrete-event simulation on virtual time (seeded: same seed, same numbers). A server with W = %d workers and a FIFO "+
		"queue without bound; each request's service time is log-normal with mean %v and σ %.1f (p99 about 2.8× the mean), so its capacity is "+
		"%.0f requests a second and C* = W = %d concurrent requests (Little's law: more only queue, fewer leave workers idle). Clients arrive open "+
		"loop as a Poisson process at the phase's rate, each with a %v deadline; every configuration meets the same arrivals and service times. "+
		"The server does not know the deadlines and never cancels: a request whose client gave up keeps its place and its worker. In front, "+
		"the admission: no-limit; a static bulkhead of %d (2× too high) or %d (2× too low); limit.Limiter with AIMD, Vegas, Gradient2 (Netflix's "+
		"defaults) or watertight's own default, all with limit.Config's defaults (initial limit 20, windows of 10 calls and at least 1 s) on the "+
		"virtual clock. A refused request is shed at once (TryAcquire); an answer within the deadline ends its permit with Done(latency), a "+
		"client that reaches its deadline first ends it with Drop(). Runs: ramp — %v phases at 0.5×, 1×, 2×, 3× (%v), 2×, 1×, 0.5× of capacity; "+
		"halving — %.1f× of the full capacity, half the workers gone from %v to %v (C* = %d, the service time unchanged); degradation — the same, "+
		"half the workers gone for %v. Goodput: answers within the deadline per second, by arrival; goodput ratio: over what the server could "+
		"answer in the phase (the offered rate or the capacity, the lesser). Latencies are those of the admitted requests, a client that gave up "+
		"counting as the deadline. The limit is sampled every %v: limit error is the mean of |limit − C*| / C*. Settling time: from the start "+
		"(or the change of capacity), the time after which every sample is within ±%.0f%% of C* — in the ramp, every sample at a load of 1× or "+
		"more (below, nothing tells any algorithm what C* is). The peak goodput is the most any configuration answered in time in a ramp phase; "+
		"the unloaded p99 that of no-limit at 0.5×. Took %v of CPU spread over the cores.",
		p.workers, p.service, p.sigma, p.capacity(), p.workers, p.deadline, 2*p.workers, p.workers/2,
		p.phase, p.hold3x, p.load, p.before, p.before+p.halving, p.workers/2, p.degrade, p.sample, 100*p.band, took.Round(10*time.Millisecond))
	return res
}

func fmtSecs(d time.Duration, ok bool) string {
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// adCharts draws the limits over time in each run, and goodput and p99
// over time in the ramp.
func adCharts(p adParams, by map[string]map[string]*adRunResult) []Chart {
	var charts []Chart
	for _, run := range adRuns {
		c := Chart{
			File:   "adaptive-" + run + "-limit",
			Title:  fmt.Sprintf("adaptive, %s: the limit over time (C* = %d, halved when half the workers go)", run, p.workers),
			XLabel: "virtual time (s)",
			YLabel: "concurrency limit",
		}
		cs := Series{Name: "C*"}
		for i, cfg := range adConfigs {
			if cfg == adNone {
				continue
			}
			r := by[run][cfg]
			s := Series{Name: cfg}
			for _, sm := range r.samples {
				if sm.at%time.Second != 0 {
					continue
				}
				s.X = append(s.X, sm.at.Seconds())
				s.Y = append(s.Y, float64(sm.limit))
				if i == len(adConfigs)-1 {
					cs.X = append(cs.X, sm.at.Seconds())
					cs.Y = append(cs.Y, float64(sm.cstar))
				}
			}
			c.Series = append(c.Series, s)
		}
		c.Series = append(c.Series, cs)
		charts = append(charts, c)
	}
	good := Chart{
		File:   "adaptive-ramp-goodput",
		Title:  fmt.Sprintf("adaptive, ramp: goodput over time (capacity %.0f/s; load 0.5×, 1×, 2×, 3×, 2×, 1×, 0.5×)", p.capacity()),
		XLabel: "virtual time (s), by arrival",
		YLabel: "answers within the deadline per second",
	}
	lat := Chart{
		File:   "adaptive-ramp-p99",
		Title:  fmt.Sprintf("adaptive, ramp: p99 latency of admitted requests over time (deadline %v)", p.deadline),
		XLabel: "virtual time (s), by arrival",
		YLabel: "p99 (ms)",
		LogY:   true,
	}
	for _, cfg := range adConfigs {
		r := by[adRamp][cfg]
		gs, ls := Series{Name: cfg}, Series{Name: cfg}
		for i, b := range r.bins {
			x := (time.Duration(i)*p.bin + p.bin/2).Seconds()
			gs.X = append(gs.X, x)
			gs.Y = append(gs.Y, float64(b.good)/p.bin.Seconds())
			if len(b.latency) > 0 {
				ls.X = append(ls.X, x)
				ls.Y = append(ls.Y, ovMs(adPercentile(b.latency, 0.99)))
			}
		}
		good.Series = append(good.Series, gs)
		lat.Series = append(lat.Series, ls)
	}
	return append(charts, good, lat)
}
