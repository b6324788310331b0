package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

// The deadline scenario: a chain of three services on 127.0.0.1, A → B → C,
// each doing some work of its own before calling the next. The client gives
// up after one second, and most requests need more than that. The scenario
// measures how much of the services' work is done after the client had
// given up — work nobody is waiting for — under three configurations:
//
//   - fixed-timeouts: each hop bounds its work and its call to the next hop
//     with a fixed timeout of its own (2s) and does not learn that its caller
//     gave up (no deadline on the wire, no cancellation passed on: a queue,
//     a proxy that does not propagate cancellation, a service in another
//     language, or Go code that detaches from the request's context);
//   - fixed-timeouts+cancel: the same fixed timeouts, derived from the
//     request's context, so that Go's net/http passes a cancellation down
//     the chain when a caller closes its connection;
//   - propagated: each hop reads the caller's remaining time
//     (X-Request-Timeout-Ms, package deadline), works under it, sends the
//     rest on minus a margin, and fails fast when too little is left to
//     start.

func init() {
	Register(Scenario{
		Name:        "deadline",
		Description: "a chain of three services where the client gives up at 1s: work done after it gave up, with fixed per-hop timeouts vs propagated deadlines",
		Run:         runDeadline,
	})
}

const (
	dlFixed       = "fixed-timeouts"
	dlFixedCancel = "fixed-timeouts+cancel"
	dlPropagated  = "propagated"

	// Accounting headers: the lab's own, not part of any protocol.
	dlHeaderGaveUp = "X-Lab-Client-Gives-Up" // unix nanoseconds
	dlHeaderWork   = "X-Lab-Work"            // per-hop work in microseconds: "a,b,c"
)

type dlParams struct {
	requests      int
	interval      time.Duration // between requests (open loop)
	clientTimeout time.Duration
	workBase      time.Duration // each hop's work: base + U(0, spread)
	workSpread    time.Duration
	fixedTimeout  time.Duration
	margin        time.Duration
	minRemaining  time.Duration
}

func dlParamsFor(quick bool) dlParams {
	p := dlParams{
		requests:      200,
		interval:      20 * time.Millisecond, // 50 requests a second
		clientTimeout: time.Second,
		workBase:      300 * time.Millisecond,
		workSpread:    150 * time.Millisecond, // a chain needs 0.9–1.35s: most requests overrun 1s
		fixedTimeout:  2 * time.Second,
		margin:        10 * time.Millisecond, // loopback: a few ms of network each way
		minRemaining:  20 * time.Millisecond,
	}
	if quick {
		p.requests = 40
		p.interval = 25 * time.Millisecond
	}
	return p
}

// dlTally accumulates one configuration's work, across the three hops.
type dlTally struct {
	mu        sync.Mutex
	work      [3]time.Duration // work done per hop
	wasted    [3]time.Duration // of it, after the client had given up
	failFast  [3]int           // requests a hop refused to start
	started   [3]int
	succeeded int
	requests  int
}

func (t *dlTally) add(hop int, start, end, gaveUp time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.work[hop] += end.Sub(start)
	if end.After(gaveUp) {
		t.wasted[hop] += end.Sub(maxTime(start, gaveUp))
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (t *dlTally) total() (work, wasted time.Duration) {
	for i := range t.work {
		work += t.work[i]
		wasted += t.wasted[i]
	}
	return work, wasted
}

func runDeadline(ctx context.Context, opts Options) (*Result, error) {
	p := dlParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	// The same per-request work for every configuration, from the seed.
	rng := rand.New(rand.NewPCG(opts.Seed, 0xdead1e))
	work := make([][3]time.Duration, p.requests)
	for i := range work {
		for h := range 3 {
			work[i][h] = p.workBase + time.Duration(rng.Int64N(int64(p.workSpread)+1))
		}
	}
	configs := []string{dlFixed, dlFixedCancel, dlPropagated}
	tallies := make(map[string]*dlTally)
	start := time.Now()
	for _, cfg := range configs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "deadline: %s: %d requests\n", cfg, p.requests)
		t, err := dlRun(ctx, cfg, p, work)
		if err != nil {
			return nil, err
		}
		tallies[cfg] = t
	}
	return dlResult(p, opts, configs, tallies, time.Since(start)), nil
}

// dlRun runs one configuration on fresh servers.
func dlRun(ctx context.Context, cfg string, p dlParams, work [][3]time.Duration) (*dlTally, error) {
	prop, err := deadline.New(deadline.Config{Margin: p.margin, MinRemaining: p.minRemaining, Logger: discardLogger()})
	if err != nil {
		return nil, err
	}
	tally := &dlTally{requests: len(work)}
	transport := &http.Transport{MaxIdleConnsPerHost: 200}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	var servers [3]*httptest.Server
	for hop := 2; hop >= 0; hop-- {
		next := ""
		if hop < 2 {
			next = servers[hop+1].URL
		}
		servers[hop] = httptest.NewServer(dlHandler(cfg, hop, next, p, prop, client, tally))
	}
	defer func() {
		// Close waits for the handlers still running (the work the client
		// abandoned), so their work is counted before the tally is read.
		for _, s := range servers {
			s.Close()
		}
	}()

	var wg sync.WaitGroup
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for i := range work {
		if i > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if dlClientCall(ctx, cfg, p, prop, client, servers[0].URL, work[i]) {
				tally.mu.Lock()
				tally.succeeded++
				tally.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return tally, nil
}

// dlClientCall makes one request with the client's 1s deadline and reports
// whether the answer came in time.
func dlClientCall(ctx context.Context, cfg string, p dlParams, prop *deadline.Propagator, client *http.Client, url string, w [3]time.Duration) bool {
	cctx, cancel := context.WithTimeout(ctx, p.clientTimeout)
	defer cancel()
	gaveUp, _ := cctx.Deadline()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set(dlHeaderGaveUp, strconv.FormatInt(gaveUp.UnixNano(), 10))
	req.Header.Set(dlHeaderWork, fmt.Sprintf("%d,%d,%d", w[0].Microseconds(), w[1].Microseconds(), w[2].Microseconds()))
	if cfg == dlPropagated {
		if err := prop.Inject(cctx, req.Header); err != nil {
			return false
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK && cctx.Err() == nil
}

// dlHandler is hop number hop of the chain: its own work, then the call to
// next (if any).
func dlHandler(cfg string, hop int, next string, p dlParams, prop *deadline.Propagator, client *http.Client, tally *dlTally) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		gaveUpNs, _ := strconv.ParseInt(r.Header.Get(dlHeaderGaveUp), 10, 64)
		gaveUp := time.Unix(0, gaveUpNs)
		var w [3]time.Duration
		for i, s := range strings.SplitN(r.Header.Get(dlHeaderWork), ",", 3) {
			us, _ := strconv.ParseInt(s, 10, 64)
			w[i] = time.Duration(us) * time.Microsecond
		}

		var hctx context.Context
		var cancel context.CancelFunc
		switch cfg {
		case dlFixed:
			hctx, cancel = context.WithTimeout(context.WithoutCancel(r.Context()), p.fixedTimeout)
		case dlFixedCancel:
			hctx, cancel = context.WithTimeout(r.Context(), p.fixedTimeout)
		default:
			hctx, cancel = prop.WithIncoming(r.Context(), r.Header)
			if err := prop.Check(hctx); err != nil {
				cancel()
				tally.mu.Lock()
				tally.failFast[hop]++
				tally.mu.Unlock()
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		defer cancel()
		tally.mu.Lock()
		tally.started[hop]++
		tally.mu.Unlock()

		t0 := time.Now()
		timer := time.NewTimer(w[hop])
		select {
		case <-timer.C:
		case <-hctx.Done():
			timer.Stop()
		}
		tally.add(hop, t0, time.Now(), gaveUp)
		if hctx.Err() != nil {
			http.Error(rw, "gave up: "+context.Cause(hctx).Error(), http.StatusGatewayTimeout)
			return
		}
		if next == "" {
			_, _ = io.WriteString(rw, "ok")
			return
		}
		req, err := http.NewRequestWithContext(hctx, http.MethodGet, next, nil)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set(dlHeaderGaveUp, r.Header.Get(dlHeaderGaveUp))
		req.Header.Set(dlHeaderWork, r.Header.Get(dlHeaderWork))
		if cfg == dlPropagated {
			if err := prop.Inject(hctx, req.Header); err != nil {
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		rw.WriteHeader(resp.StatusCode)
	})
}

type dlJSON struct {
	Scenario string         `json:"scenario"`
	Results  []dlJSONResult `json:"results"`
}

type dlJSONResult struct {
	Config          string  `json:"config"`
	WastedWorkRatio float64 `json:"wasted_work_ratio"`
	WorkS           float64 `json:"work_s"`
	WastedS         float64 `json:"wasted_s"`
	SuccessRate     float64 `json:"success_rate"`
	FailFast        int     `json:"fail_fast"`
	Requests        int     `json:"requests"`
}

func dlResult(p dlParams, opts Options, configs []string, tallies map[string]*dlTally, took time.Duration) *Result {
	res := &Result{Scenario: "deadline"}
	res.Summary = fmt.Sprintf("Three services on 127.0.0.1 in a chain, A → B → C; each does %v–%v of work of its own "+
		"(seeded, the same for every configuration), then calls the next. A client sends %d requests, one every %v, and gives "+
		"up after %v: most chains need more than that. Wasted work is the work the services did after the client had given up, "+
		"as a share of all their work. fixed-timeouts: each hop bounds its work and its call with a fixed %v timeout and does "+
		"not learn that its caller gave up (no deadline on the wire and no cancellation passed on — a queue, a proxy that does "+
		"not propagate cancellation, a service in another language, or Go code that detaches from the request's context). "+
		"fixed-timeouts+cancel: the same timeouts derived from the request's context, so that Go's net/http cancels a hop when "+
		"its caller closes the connection. propagated: each hop works under the caller's remaining time (package deadline, "+
		"X-Request-Timeout-Ms), sends the rest on minus a margin (10%% of the time left, at most %v), and refuses to start with less than %v left. "+
		"Real time on a real network stack; one run per configuration; took %v.",
		p.workBase, p.workBase+p.workSpread, p.requests, p.interval, p.clientTimeout, p.fixedTimeout, p.margin, p.minRemaining,
		took.Round(100*time.Millisecond))
	tbl := Table{
		Title:  "Work done after the client had given up",
		Header: []string{"config", "requests", "client success", "work (s)", "wasted (s)", "wasted share", "refused to start (A/B/C)"},
	}
	doc := dlJSON{Scenario: "deadline"}
	ratio := map[string]float64{}
	for _, cfg := range configs {
		t := tallies[cfg]
		work, wasted := t.total()
		r := 0.0
		if work > 0 {
			r = float64(wasted) / float64(work)
		}
		ratio[cfg] = r
		ff := t.failFast[0] + t.failFast[1] + t.failFast[2]
		tbl.Rows = append(tbl.Rows, []string{
			cfg, strconv.Itoa(t.requests),
			fmt.Sprintf("%.1f%%", 100*float64(t.succeeded)/float64(max(t.requests, 1))),
			fmt.Sprintf("%.2f", work.Seconds()), fmt.Sprintf("%.2f", wasted.Seconds()),
			fmt.Sprintf("%.1f%%", 100*r),
			fmt.Sprintf("%d/%d/%d", t.failFast[0], t.failFast[1], t.failFast[2]),
		})
		doc.Results = append(doc.Results, dlJSONResult{
			Config: cfg, WastedWorkRatio: r, WorkS: work.Seconds(), WastedS: wasted.Seconds(),
			SuccessRate: float64(t.succeeded) / float64(max(t.requests, 1)), FailFast: ff, Requests: t.requests,
		})
	}
	res.Tables = []Table{tbl}
	res.JSON = doc
	fixed, prop := ratio[dlFixed], ratio[dlPropagated]
	// The ratio of the wasted shares; NaN (a failure) if fixed timeouts
	// wasted nothing, as there is then nothing to compare with.
	rel := math.NaN()
	if fixed > 0 {
		rel = prop / fixed
	}
	res.Checks = []Check{
		AtMost("propagated deadlines waste at most 1/5 of what fixed timeouts waste (ratio of the wasted shares)",
			math.Round(rel*1000)/1000, 0.2, "",
			fmt.Sprintf("wasted share: propagated %.2f%%, fixed-timeouts %.2f%%", 100*prop, 100*fixed)),
	}
	return res
}

// discardLogger is a logger that drops everything: the scenario sends no
// malformed headers, and a lab run should not print server logs.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
