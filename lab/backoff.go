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
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight/backoff"
)

// The backoff scenario reproduces Marc Brooker's simulation for "Exponential
// Backoff And Jitter" (AWS Architecture Blog, 2015), with the model of his
// published simulator (aws-samples/aws-arch-backoff-simulator,
// src/backoff_simulator.py):
//
//   - one server holds one row with a version number; N clients start at
//     t = 0 and each wants to write the row once, with optimistic
//     concurrency: read the version, then write conditionally on it;
//   - every message — client to server and back, for the read and for the
//     write — takes a network hop of |Normal(10 ms, sd 2 ms)|, so an attempt
//     is four hops: read request, read reply, write request, write reply;
//   - the server checks the version when the write arrives: the first write
//     carrying the current version wins and bumps it, every other write in
//     flight with that version fails (it read a version that is now stale);
//   - on a failed write the client increments its attempt counter (so the
//     first failure sleeps with n = 1) and sends its next read after one
//     network hop plus the backoff;
//   - "calls" counts the writes the server received; "time" is the time of
//     the last event, the success reply reaching the last client;
//   - each point is the mean over 100 runs.
//
// His simulator draws the network hops and the jitter from one random
// stream; so does each run here (one PCG per run, handed to
// backoff.Config.Rand), and each run's stream is derived from the seed, the
// algorithm, N and the run's index, so the numbers do not depend on how the
// runs are spread over goroutines.

const (
	backoffBase   = 5 * time.Millisecond
	backoffCap    = 2000 * time.Millisecond
	backoffHopMS  = 10.0 // mean network hop, ms
	backoffHopSD  = 2.0  // its standard deviation, ms
	backoffRuns   = 100  // runs per point
	backoffQuickN = 20   // runs per point with Options.Quick
	backoffRefN   = 100  // the N of the reference figures
	backoffRefTol = 0.10 // ±10%
)

// backoffAlgorithm is one line of Brooker's figures.
type backoffAlgorithm struct {
	name   string // as in the JSON, the tables and the charts
	jitter backoff.Jitter
	none   bool // no backoff at all: a nil *backoff.Backoff, which waits 0
}

// backoffAlgorithms are in the order of the tables and the JSON: Brooker's
// "None" (no backoff), "Exponential" (no jitter), "FullJitter",
// "EqualJitter" and "Decorr".
var backoffAlgorithms = []backoffAlgorithm{
	{name: "none", none: true},
	{name: "exponential", jitter: backoff.None},
	{name: "full", jitter: backoff.Full},
	{name: "equal", jitter: backoff.Equal},
	{name: "decorrelated", jitter: backoff.Decorrelated},
}

// backoffReference is a rerun of Brooker's published simulator at N = 100:
// mean calls and mean completion time (ms) over 100 runs.
var backoffReference = map[string]struct{ calls, timeMS float64 }{
	"none":         {2422, 2000},
	"exponential":  {1855, 63600},
	"full":         {796, 4900},
	"equal":        {813, 6600},
	"decorrelated": {1000, 4600},
}

// backoffDefaultClients is the default sweep: N = 10, 20, … 190.
func backoffDefaultClients() []int {
	var ns []int
	for n := 10; n <= 190; n += 10 {
		ns = append(ns, n)
	}
	return ns
}

// BackoffPoint is one point of the backoff scenario: the mean over the runs
// of one algorithm at one number of clients.
type BackoffPoint struct {
	Algorithm string  `json:"algorithm"`
	Clients   int     `json:"clients"`
	Calls     float64 `json:"calls"`
	TimeMS    float64 `json:"time_ms"`
}

// BackoffJSON is the backoff scenario's JSON document.
type BackoffJSON struct {
	Scenario string         `json:"scenario"`
	Results  []BackoffPoint `json:"results"`
}

func init() {
	Register(Scenario{
		Name:        "backoff",
		Description: "Brooker's exponential backoff and jitter simulation: N clients contend on one row (calls and completion time)",
		Run:         runBackoff,
	})
}

func runBackoff(ctx context.Context, opts Options) (*Result, error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	runs := backoffRuns
	clients := backoffDefaultClients()
	if opts.Quick {
		runs = backoffQuickN
		clients = []int{10, 50, 100}
	}
	if len(opts.Clients) > 0 {
		clients = slices.Clone(opts.Clients)
		slices.Sort(clients)
		clients = slices.Compact(clients)
		if clients[0] < 1 {
			return nil, fmt.Errorf("lab: backoff: clients must be >= 1, got %d", clients[0])
		}
	}

	// A progress line a second at most, and one at the end.
	start := time.Now()
	last := start
	points, err := backoffSweep(ctx, opts.Seed, clients, runs, func(n int, done, total int) {
		if now := time.Now(); now.Sub(last) >= time.Second || done == total {
			last = now
			fmt.Fprintf(progress, "backoff: %d of %d client counts done (N=%d; %d runs of %d algorithms each) after %.1fs\n",
				done, total, n, runs, len(backoffAlgorithms), now.Sub(start).Seconds())
		}
	})
	if err != nil {
		return nil, err
	}
	return backoffResult(opts.Seed, clients, runs, points, time.Since(start)), nil
}

// backoffSweep runs every algorithm at every N, runs times each, spread over
// GOMAXPROCS goroutines, and returns the means indexed [N index][algorithm].
// after is called once each N is complete, in order.
func backoffSweep(ctx context.Context, seed uint64, clients []int, runs int, after func(n, done, total int)) ([][]BackoffPoint, error) {
	type sum struct{ calls, timeMS float64 }
	workers := max(1, runtime.GOMAXPROCS(0))
	out := make([][]BackoffPoint, len(clients))
	for ni, n := range clients {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// One slot per run, summed in run order afterwards, so that the
		// float sums do not depend on scheduling either.
		calls := make([]int, len(backoffAlgorithms)*runs)
		times := make([]float64, len(backoffAlgorithms)*runs)
		var next atomic.Int64
		total := int64(len(calls))
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= total || ctx.Err() != nil {
						return
					}
					ai, run := int(i)/runs, int(i)%runs
					rng := rand.New(rand.NewPCG(seed, backoffStream(ai, n, run)))
					calls[i], times[i] = simulateOCC(n, backoffAlgorithms[ai], rng)
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		row := make([]BackoffPoint, len(backoffAlgorithms))
		for ai, alg := range backoffAlgorithms {
			var s sum
			for run := range runs {
				s.calls += float64(calls[ai*runs+run])
				s.timeMS += times[ai*runs+run]
			}
			row[ai] = BackoffPoint{
				Algorithm: alg.name,
				Clients:   n,
				Calls:     s.calls / float64(runs),
				TimeMS:    math.Round(s.timeMS/float64(runs)*1000) / 1000, // to the µs
			}
		}
		out[ni] = row
		if after != nil {
			after(n, ni+1, len(clients))
		}
	}
	return out, nil
}

// backoffStream derives the second PCG word of one run from the algorithm,
// N and the run's index (splitmix64's finaliser over their packing).
func backoffStream(ai, n, run int) uint64 {
	z := uint64(ai)<<48 ^ uint64(n)<<24 ^ uint64(run) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// OCC simulation events, in the order of one attempt.
const (
	evRead      uint8 = iota // read request reaches the server
	evReadReply              // read reply (payload: version) reaches the client
	evWrite                  // write request (payload: version read) reaches the server
	evWriteDone              // write reply (payload: 1 on success) reaches the client
)

type occEvent struct {
	t       float64 // ms since the start
	client  int32
	kind    uint8
	payload int64
}

// before orders events by time, then client; a client has one event in
// flight at most, so the order is total and the run deterministic.
func (e occEvent) before(f occEvent) bool {
	if e.t != f.t {
		return e.t < f.t
	}
	return e.client < f.client
}

// occQueue is a binary min-heap of events.
type occQueue []occEvent

func (q occQueue) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q[r].before(q[l]) {
			m = r
		}
		if !q[m].before(q[i]) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

func (q occQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			return
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

// simulateOCC runs one simulation of clients contending on one row with
// the given algorithm and returns the number of writes the server received
// and the time of the last event, in ms.
func simulateOCC(clients int, alg backoffAlgorithm, rng *rand.Rand) (calls int, lastMS float64) {
	var b *backoff.Backoff // nil: no backoff, Delay returns 0
	if !alg.none {
		var err error
		b, err = backoff.New(backoff.Config{Jitter: alg.jitter, Base: backoffBase, Cap: backoffCap, Rand: rng.Float64})
		if err != nil {
			panic(err) // constant configuration
		}
	}
	hop := func() float64 { return math.Abs(backoffHopMS + backoffHopSD*rng.NormFloat64()) }

	attempt := make([]int, clients)        // failures so far, per client
	prev := make([]time.Duration, clients) // last backoff, per client (decorrelated)
	q := make(occQueue, 0, clients)        // one event in flight per client
	for c := range clients {
		q = append(q, occEvent{t: hop(), client: int32(c), kind: evRead})
	}
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
	var version int64
	for len(q) > 0 {
		e := q[0]
		lastMS = e.t
		next := occEvent{client: e.client}
		switch e.kind {
		case evRead:
			next.t, next.kind, next.payload = e.t+hop(), evReadReply, version
		case evReadReply:
			next.t, next.kind, next.payload = e.t+hop(), evWrite, e.payload
		case evWrite:
			calls++
			var ok int64
			if e.payload == version {
				version++
				ok = 1
			}
			next.t, next.kind, next.payload = e.t+hop(), evWriteDone, ok
		case evWriteDone:
			if e.payload == 1 {
				// Done: drop the event.
				last := len(q) - 1
				q[0] = q[last]
				q = q[:last]
				q.down(0)
				continue
			}
			c := e.client
			attempt[c]++
			h := hop() // his order of draws: the hop, then the backoff
			d := b.Delay(attempt[c], prev[c])
			prev[c] = d
			next.t, next.kind = e.t+h+float64(d)/float64(time.Millisecond), evRead
		}
		// The next event of the same client replaces this one.
		q[0] = next
		q.down(0)
	}
	return calls, lastMS
}

// backoffResult builds the scenario's tables, charts, JSON and checks.
func backoffResult(seed uint64, clients []int, runs int, points [][]BackoffPoint, took time.Duration) *Result {
	r := &Result{Scenario: "backoff"}
	r.Summary = fmt.Sprintf("Brooker's \"Exponential Backoff And Jitter\" simulation: N clients start at t=0 and each "+
		"writes one row once under optimistic concurrency (read the version, write if unchanged; on conflict back off "+
		"and read again); every network hop takes |Normal(10 ms, 2 ms)|; base 5 ms, cap 2000 ms; delays from the "+
		"backoff package. Calls count the writes, time is when the last client succeeded; mean of %d runs per point, "+
		"seed %d, N = %s; %d simulations in %.1fs. Jitter cuts the work: exponential backoff without jitter keeps "+
		"colliding clients in step and is both the slowest and, after no backoff, the busiest.",
		runs, seed, intsString(clients), runs*len(clients)*len(backoffAlgorithms), took.Seconds())

	header := []string{"clients"}
	for _, a := range backoffAlgorithms {
		header = append(header, a.name)
	}
	callsT := Table{Title: fmt.Sprintf("calls (writes received by the server), mean of %d runs", runs), Header: header}
	timeT := Table{Title: fmt.Sprintf("completion time (s), mean of %d runs", runs), Header: header}
	doc := BackoffJSON{Scenario: "backoff"}
	callsC := Chart{File: "backoff-calls", Title: "Calls (writes) vs clients", XLabel: "clients", YLabel: "calls"}
	timeC := Chart{File: "backoff-time", Title: "Completion time vs clients", XLabel: "clients", YLabel: "time (s, log scale)", LogY: true}
	for _, a := range backoffAlgorithms {
		callsC.Series = append(callsC.Series, Series{Name: a.name})
		timeC.Series = append(timeC.Series, Series{Name: a.name})
	}
	for ni, n := range clients {
		cr := []string{strconv.Itoa(n)}
		tr := []string{strconv.Itoa(n)}
		for ai, p := range points[ni] {
			cr = append(cr, strconv.FormatFloat(p.Calls, 'f', 0, 64))
			tr = append(tr, strconv.FormatFloat(p.TimeMS/1000, 'f', 2, 64))
			doc.Results = append(doc.Results, p)
			callsC.Series[ai].X = append(callsC.Series[ai].X, float64(n))
			callsC.Series[ai].Y = append(callsC.Series[ai].Y, p.Calls)
			timeC.Series[ai].X = append(timeC.Series[ai].X, float64(n))
			timeC.Series[ai].Y = append(timeC.Series[ai].Y, p.TimeMS/1000)
		}
		callsT.Rows = append(callsT.Rows, cr)
		timeT.Rows = append(timeT.Rows, tr)
	}
	r.Tables = []Table{callsT, timeT}
	r.Charts = []Chart{callsC, timeC}
	r.JSON = doc

	ri := slices.Index(clients, backoffRefN)
	if ri < 0 {
		return r
	}
	refT := Table{
		Title:  fmt.Sprintf("N=%d against Brooker's simulator (rerun, mean of 100 runs); this run: mean of %d runs", backoffRefN, runs),
		Header: []string{"algorithm", "calls", "reference", "diff", "time (s)", "reference", "diff"},
	}
	for _, p := range points[ri] {
		ref := backoffReference[p.Algorithm]
		dc := p.Calls/ref.calls - 1
		dt := p.TimeMS/ref.timeMS - 1
		refT.Rows = append(refT.Rows, []string{
			p.Algorithm,
			strconv.FormatFloat(p.Calls, 'f', 0, 64), strconv.FormatFloat(ref.calls, 'f', 0, 64), pct(dc),
			strconv.FormatFloat(p.TimeMS/1000, 'f', 2, 64), strconv.FormatFloat(ref.timeMS/1000, 'f', 1, 64), pct(dt),
		})
		r.Checks = append(r.Checks,
			Within(fmt.Sprintf("%s calls at N=%d within ±10%% of %.0f", p.Algorithm, backoffRefN, ref.calls),
				math.Round(p.Calls*10)/10, ref.calls*(1-backoffRefTol), ref.calls*(1+backoffRefTol), "",
				pct(dc)+" from the reference"),
			Within(fmt.Sprintf("%s time at N=%d within ±10%% of %.1fs", p.Algorithm, backoffRefN, ref.timeMS/1000),
				math.Round(p.TimeMS)/1000, ref.timeMS/1000*(1-backoffRefTol), ref.timeMS/1000*(1+backoffRefTol), "s",
				pct(dt)+" from the reference"))
	}
	r.Tables = append(r.Tables, refT)
	return r
}

func pct(f float64) string { return fmt.Sprintf("%+.1f%%", 100*f) }

func intsString(ns []int) string {
	if len(ns) > 3 {
		step := ns[1] - ns[0]
		regular := true
		for i := 1; i < len(ns); i++ {
			regular = regular && ns[i]-ns[i-1] == step
		}
		if regular {
			return fmt.Sprintf("%d…%d step %d", ns[0], ns[len(ns)-1], step)
		}
	}
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(n)
	}
	return s
}
