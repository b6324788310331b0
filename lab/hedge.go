package lab

// The hedge scenario: "The Tail at Scale" (Dean & Barroso, 2013). A request
// fans out to many leaves, each served by one of several replicas; a leaf
// usually answers in a few milliseconds, but 0.2% of the time it stalls for
// a second (a garbage collection, a compaction, a noisy neighbour). The
// request waits for its slowest leaf, so with ten leaves about one request
// in fifty meets a stall. The stalls of two replicas are independent, so a
// leaf call whose hedge stalls too happens 0.2%² of the time: with 1% (one
// in ten thousand leaf calls, one request in a thousand) those double stalls
// alone would sit at the p99.9, which would then measure the luck of the
// seed — a third of the seeds put it at the stall — rather than the hedge.
// A hedge sends a second copy of a leaf call to
// another replica when the first has not answered within a delay, and takes
// whichever answers first. Run in real time through the shipped hedge and
// budget packages:
//
//   - none: no hedging;
//   - fixed-10ms: a hedge after a fixed 10 ms (the paper's BigTable figure:
//     p99.9 from 1,800 ms to 74 ms for 2% more requests);
//   - p95: a hedge after the p95 of recently seen latencies, about 5% more
//     requests;
//   - overload: every replica is slow (the whole service is overloaded) and
//     hedging at 10 ms would double the load; the hedge budget caps the
//     extra requests at its share.
//
// Each leaf attempt's latency is drawn from a hash of the seed, the request,
// the leaf and the attempt number, so every configuration meets the same
// stalls.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/hedge"
)

func init() {
	Register(Scenario{
		Name:        "hedge",
		Description: "tail latency of a fan-out over replicas with rare 1s stalls: no hedging, a hedge after 10ms, a hedge at the tracked p95, and hedging under overload within its budget",
		Run:         runHedge,
	})
}

// The band of the p95 configuration's extra requests in the quick run,
// wider than the full run's 5 ± 1%: the quick run's measured part lasts
// under a second, a few of the tracker's 100 ms refreshes, so that one
// burst of other work on the machine (every timer late by a few ms) moves
// the share hedged by a point or two either way. The band still fails a
// policy that hedges at another percentile: p90 adds about 10%, p99 about
// 1.5% (TestHedgeP95BandFails).
const (
	hgQuickP95Lo = 3
	hgQuickP95Hi = 7
)

// hgBudgetBurst is the hedge budget's MaxTokens: stalls come in bursts
// across the leaves in flight, and a budget that can save up only a few
// hedges would refuse the ones that matter.
const hgBudgetBurst = 100

const (
	hgNone     = "none"
	hgFixed    = "fixed-10ms"
	hgP95      = "p95"
	hgOverload = "overload"
)

type hgParams struct {
	warmup      int // requests run first and not counted: the tracker learns the latencies
	requests    int
	fanout      int           // leaves per request
	concurrency int           // requests in flight
	base        time.Duration // a leaf's least latency
	mean        time.Duration // mean of the exponential part of a leaf's latency
	stallRate   float64
	stall       time.Duration
	slowBase    time.Duration // overload: every replica is this much slower
	fixed       time.Duration // the fixed hedge delay
	percentile  float64
	budgetRatio float64 // the hedge budget's share
	// p95Lo and p95Hi bound the extra requests (%) of the p95
	// configuration, the check of the tracked percentile.
	p95Lo, p95Hi float64
}

func hgParamsFor(quick bool) hgParams {
	p := hgParams{
		warmup:      500,
		requests:    3000,
		fanout:      10,
		concurrency: 20,
		base:        3 * time.Millisecond,
		mean:        1500 * time.Microsecond,
		stallRate:   0.002,
		stall:       time.Second,
		slowBase:    20 * time.Millisecond,
		fixed:       10 * time.Millisecond,
		percentile:  0.95,
		budgetRatio: 0.10,
		p95Lo:       4,
		p95Hi:       6,
	}
	if quick {
		p.requests = 1200
		p.p95Lo, p.p95Hi = hgQuickP95Lo, hgQuickP95Hi
	}
	return p
}

// hgLatency is the latency of one leaf attempt, from the seed: base +
// Exp(mean), or a stall.
func hgLatency(p hgParams, seed uint64, overload bool, req, leaf, attempt int) time.Duration {
	u1 := hgUniform(seed, uint64(req), uint64(leaf), uint64(attempt), 1)
	u2 := hgUniform(seed, uint64(req), uint64(leaf), uint64(attempt), 2)
	if u1 < p.stallRate {
		return p.stall
	}
	d := p.base + time.Duration(-math.Log(1-u2)*float64(p.mean))
	if overload {
		d += p.slowBase
	}
	return d
}

// hgUniform is a number in [0, 1) from a hash of its arguments (splitmix64).
func hgUniform(xs ...uint64) float64 {
	h := uint64(0x243f6a8885a308d3)
	for _, x := range xs {
		h ^= x + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	return float64(h>>11) / (1 << 53)
}

// hgRun is one configuration's run.
type hgRun struct {
	config    string
	latencies []time.Duration // per request, sorted
	leafCalls int64           // first attempts
	extra     int64           // hedges sent (Snapshot.Sent)
	won       uint64
	suppr     uint64
	delay     time.Duration // the policy's delay at the end
	// How late the leaves' own timers fired: the machine's noise. Go's
	// timers fire up to a millisecond late on an idle Linux machine; much
	// more means other work held the cores, and the percentages measure
	// the machine rather than the hedging.
	timers, lateSum, late2ms int64
}

// lateMean is the mean lateness of the leaves' timers.
func (r *hgRun) lateMean() time.Duration { return time.Duration(r.lateSum / max(r.timers, 1)) }

// latePct is the share of the leaves' timers that fired more than 2 ms late.
func (r *hgRun) latePct() float64 { return 100 * float64(r.late2ms) / float64(max(r.timers, 1)) }

// hgNoise accumulates the lateness of the leaves' timers.
type hgNoise struct{ timers, lateSum, late2ms atomic.Int64 }

func (n *hgNoise) note(late time.Duration) {
	n.timers.Add(1)
	n.lateSum.Add(int64(late))
	if late > 2*time.Millisecond {
		n.late2ms.Add(1)
	}
}

func (r *hgRun) extraPct() float64 { return 100 * float64(r.extra) / float64(max(r.leafCalls, 1)) }

func runHedge(ctx context.Context, opts Options) (*Result, error) {
	p := hgParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	var runs []*hgRun
	for _, cfg := range []string{hgNone, hgFixed, hgP95, hgOverload} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "hedge: %s: %d requests × %d leaves\n", cfg, p.requests, p.fanout)
		r, err := hgRunConfig(ctx, cfg, p, opts.Seed, progress)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return hgResult(p, runs, time.Since(start)), nil
}

func hgPolicy(cfg string, p hgParams) (*hedge.Policy, error) {
	if cfg == hgNone {
		return nil, nil // a nil Policy calls the function once
	}
	b, err := budget.New(budget.Config{Name: "hedge", Ratio: p.budgetRatio, MaxTokens: hgBudgetBurst, MinPerSecond: -1})
	if err != nil {
		return nil, err
	}
	c := hedge.Config{Name: cfg, Idempotent: true, MaxHedges: 1, Budget: b}
	switch cfg {
	case hgFixed, hgOverload:
		c.Delay = p.fixed
	case hgP95:
		c.Percentile = p.percentile
		c.MinDelay = p.base
		c.Delay = p.fixed // until the tracker has enough samples
		c.Window = 5 * time.Second
	}
	return hedge.New(c)
}

// hgProgressEvery is how often a configuration's run says how far it got.
const hgProgressEvery = time.Second

func hgRunConfig(ctx context.Context, cfg string, p hgParams, seed uint64, progress io.Writer) (*hgRun, error) {
	pol, err := hgPolicy(cfg, p)
	if err != nil {
		return nil, err
	}
	overload := cfg == hgOverload
	run := &hgRun{config: cfg, latencies: make([]time.Duration, p.requests)}
	var leafCalls atomic.Int64
	var noise hgNoise
	// The warm-up: requests numbered after the measured ones (other
	// latencies from the seed), neither timed nor counted.
	var warm atomic.Int64
	if err := hgLoad(ctx, p, p.warmup, func(i int) error {
		return hgRequest(ctx, pol, p, seed, overload, p.requests+i, &warm, nil)
	}); err != nil {
		return nil, err
	}
	s0 := pol.Snapshot()
	// A line a second while the requests run: the configurations without
	// a hedge wait out every stall, for tens of seconds in the full run.
	var done atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	var reporter sync.WaitGroup
	reporter.Add(1)
	go func() {
		defer reporter.Done()
		tick := time.NewTicker(hgProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				fmt.Fprintf(progress, "hedge: %s: %d of %d requests done after %.1fs\n", cfg, done.Load(), p.requests, time.Since(start).Seconds())
			case <-stop:
				return
			}
		}
	}()
	err = hgLoad(ctx, p, p.requests, func(i int) error {
		t0 := time.Now()
		if err := hgRequest(ctx, pol, p, seed, overload, i, &leafCalls, &noise); err != nil {
			return err
		}
		run.latencies[i] = time.Since(t0)
		done.Add(1)
		return nil
	})
	close(stop)
	reporter.Wait()
	if err != nil {
		return nil, err
	}
	slices.Sort(run.latencies)
	run.leafCalls = leafCalls.Load()
	s := pol.Snapshot()
	run.extra, run.won, run.suppr, run.delay = int64(s.Sent-s0.Sent), s.Won-s0.Won, s.Suppressed()-s0.Suppressed(), s.Delay
	run.timers, run.lateSum, run.late2ms = noise.timers.Load(), noise.lateSum.Load(), noise.late2ms.Load()
	return run, nil
}

// hgLoad runs request(0..n-1) from p.concurrency goroutines (a closed loop)
// and returns the first error.
func hgLoad(ctx context.Context, p hgParams, n int, request func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	for range p.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := request(i); err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	return ctx.Err()
}

var errHgCancelled = errors.New("lab: leaf cancelled")

// hgRequest fans out to p.fanout leaves and waits for all of them.
func hgRequest(ctx context.Context, pol *hedge.Policy, p hgParams, seed uint64, overload bool, req int, leafCalls *atomic.Int64, noise *hgNoise) error {
	var wg sync.WaitGroup
	errs := make([]error, p.fanout)
	for leaf := range p.fanout {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leafCalls.Add(1)
			_, errs[leaf] = hedge.Do(ctx, pol, func(ctx context.Context, attempt int) (struct{}, error) {
				start := time.Now()
				// attempt n goes to replica n of this leaf; its latency
				// comes from the seed.
				d := hgLatency(p, seed, overload, req, leaf, attempt)
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
					if noise != nil && d < p.stall {
						noise.note(time.Since(start) - d)
					}
					return struct{}{}, nil
				case <-ctx.Done():
					return struct{}{}, errHgCancelled
				}
			})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// hgPercentile returns the q-quantile of sorted latencies.
func hgPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

type hgJSON struct {
	Scenario string         `json:"scenario"`
	Results  []hgJSONResult `json:"results"`
}

type hgJSONResult struct {
	Config           string  `json:"config"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	P999Ms           float64 `json:"p999_ms"`
	ExtraRequestsPct float64 `json:"extra_requests_pct"`
	HedgesWon        uint64  `json:"hedges_won"`
	HedgesSuppressed uint64  `json:"hedges_suppressed"`
	DelayMs          float64 `json:"delay_ms"`
	// TimerLateMeanMs and TimersLate2msPct are the machine's noise: how
	// late the leaves' own timers fired, on average, and the share that
	// fired more than 2 ms late.
	TimerLateMeanMs  float64 `json:"timer_late_mean_ms"`
	TimersLate2msPct float64 `json:"timers_late_2ms_pct"`
}

func hgMs(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }

func hgResult(p hgParams, runs []*hgRun, took time.Duration) *Result {
	res := &Result{Scenario: "hedge"}
	res.Summary = fmt.Sprintf("After %d warm-up requests (not counted), each of %d requests fans out to %d leaves (%d requests in flight); a leaf attempt takes %v + Exp(mean %v), "+
		"and %.1f%% of attempts stall for %v instead (drawn from the seed, the same for every configuration). A request waits for its "+
		"slowest leaf. A hedge sends the leaf call again, to another replica, when the first attempt has not answered within the delay, "+
		"and takes the first answer (package hedge, one hedge at most, a hedge budget of %.0f%% of leaf calls). none: no hedging. "+
		"fixed-10ms: a hedge after %v. p95: a hedge after the tracked p95 of recent latencies (%v until enough are seen). overload: "+
		"every replica is %v slower, so a fixed %v hedge would fire on every call; the budget caps it. Extra requests are hedges sent "+
		"per leaf call. Real time: the last column says how late the leaves' own timers fired (the machine's noise); took %v.",
		p.warmup, p.requests, p.fanout, p.concurrency, p.base, p.mean, 100*p.stallRate, p.stall, 100*p.budgetRatio, p.fixed, p.fixed,
		p.slowBase, p.fixed, took.Round(100*time.Millisecond))
	tbl := Table{
		Title:  "Request latency (slowest of the leaves) and extra load",
		Header: []string{"config", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "extra requests", "hedges won", "suppressed", "delay at end (ms)", "timer lateness (mean / >2ms)"},
	}
	doc := hgJSON{Scenario: "hedge"}
	chart := Chart{File: "hedge-tail", Title: "Share of requests slower than x",
		XLabel: fmt.Sprintf("latency (ms); stalled requests take %d ms, beyond the right edge", p.stall.Milliseconds()),
		YLabel: "share slower (log)", LogY: true, YMax: 1}
	byCfg := map[string]hgJSONResult{}
	for _, r := range runs {
		j := hgJSONResult{
			Config: r.config, P50Ms: hgMs(hgPercentile(r.latencies, 0.5)), P99Ms: hgMs(hgPercentile(r.latencies, 0.99)),
			P999Ms: hgMs(hgPercentile(r.latencies, 0.999)), ExtraRequestsPct: math.Round(r.extraPct()*100) / 100,
			HedgesWon: r.won, HedgesSuppressed: r.suppr, DelayMs: hgMs(r.delay),
			TimerLateMeanMs: math.Round(float64(r.lateMean())/1e3) / 1e3, TimersLate2msPct: math.Round(r.latePct()*100) / 100,
		}
		byCfg[r.config] = j
		doc.Results = append(doc.Results, j)
		tbl.Rows = append(tbl.Rows, []string{r.config, fmt.Sprintf("%.1f", j.P50Ms), fmt.Sprintf("%.1f", j.P99Ms),
			fmt.Sprintf("%.1f", j.P999Ms), fmt.Sprintf("%.2f%%", j.ExtraRequestsPct), strconv.FormatUint(r.won, 10),
			strconv.FormatUint(r.suppr, 10), fmt.Sprintf("%.1f", j.DelayMs),
			fmt.Sprintf("%.2f ms / %.2f%%", j.TimerLateMeanMs, j.TimersLate2msPct)})
		if r.config != hgOverload {
			chart.Series = append(chart.Series, hgTailSeries(r))
		}
	}
	res.Tables = []Table{tbl}
	res.Charts = []Chart{chart}
	res.JSON = doc
	none, fixed, p95, over := byCfg[hgNone], byCfg[hgFixed], byCfg[hgP95], byCfg[hgOverload]
	// The budget's own burst (MaxTokens) may add a few hedges above the ratio.
	overCap := 100*p.budgetRatio + 100*hgBudgetBurst/float64(p.requests*p.fanout)
	cut := math.NaN() // none's p99.9 over fixed's; NaN (a failure) without a hedged p99.9
	if fixed.P999Ms > 0 {
		cut = math.Round(none.P999Ms/fixed.P999Ms*100) / 100
	}
	res.Checks = []Check{
		Within(fmt.Sprintf("hedging at the tracked p95 adds %s ± %s%% requests", fmtNum((p.p95Lo+p.p95Hi)/2), fmtNum((p.p95Hi-p.p95Lo)/2)),
			p95.ExtraRequestsPct, p.p95Lo, p.p95Hi, "%", fmt.Sprintf("delay at end %.1f ms", p95.DelayMs)),
		AtMost("hedging after 10 ms adds at most 3% requests", fixed.ExtraRequestsPct, 3, "%", ""),
		AtLeast("hedging after 10 ms cuts the p99.9 at least 10×", cut, 10, "×",
			fmt.Sprintf("p99.9 %.1f ms → %.1f ms", none.P999Ms, fixed.P999Ms)),
		AtLeast("under overload (every replica slow) hedging suppresses itself (hedges suppressed)", float64(over.HedgesSuppressed), 1, "", ""),
		AtMost("under overload the extra requests stay within the budget and its burst", over.ExtraRequestsPct, math.Round(overCap*100)/100, "%",
			fmt.Sprintf("budget %.0f%%", 100*p.budgetRatio)),
	}
	return res
}

// hgTailXMax is the right edge of the tail chart: the hedged
// configurations end well inside it, and the stalls (1 s) are off the edge,
// where they show as a plateau at the share of requests that met one.
const hgTailXMax = 50.0 // ms

// hgTailSeries is the share of requests slower than x, at each distinct
// latency (complementary CDF), thinned to a few hundred points and cut at
// hgTailXMax.
func hgTailSeries(r *hgRun) Series {
	s := Series{Name: r.config}
	n := len(r.latencies)
	step := max(n/400, 1)
	for i := 0; i < n; i += step {
		share := float64(n-1-i) / float64(n)
		if share <= 0 {
			break
		}
		x := float64(r.latencies[i]) / float64(time.Millisecond)
		if x > hgTailXMax {
			s.X = append(s.X, hgTailXMax)
			s.Y = append(s.Y, float64(n-i)/float64(n))
			break
		}
		s.X = append(s.X, x)
		s.Y = append(s.Y, share)
	}
	return s
}
