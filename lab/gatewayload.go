package lab

// The gateway scenario's load: open-loop arrivals, seeded, sent through a
// real HTTP client to the gateway process, each request measured from its
// scheduled arrival.

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// gwArrival is one scheduled request.
type gwArrival struct {
	at    time.Duration // since the load began
	route int           // index into the run's routes (or tiers)
	id    uint64        // its X-Lab-Request number
}

// gwSample is one request as the load generator saw it.
type gwSample struct {
	at         time.Duration // scheduled arrival
	lat        time.Duration // from the scheduled arrival to the end of the answer (or the give-up)
	lag        time.Duration // how late the load generator sent it
	status     int           // 0 without an answer
	ok         bool          // a 200 within the user's deadline
	fallback   bool          // the route's fallback answered (X-Watertight-Fallback)
	overloaded bool          // the gateway refused it (X-Overloaded: true)
}

// gwPoisson appends to out the arrivals of a Poisson process of rate per
// second between from and to, for route, drawn from seed and stream.
func gwPoisson(out []gwArrival, seed, stream uint64, rate float64, from, to time.Duration, route int) []gwArrival {
	if rate <= 0 {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	t := from
	for {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= to {
			return out
		}
		out = append(out, gwArrival{at: t, route: route})
	}
}

// gwSort sorts arrivals by time (then route) and numbers them in order of
// arrival per route: the k-th request of a route has id k, so that two
// routes of a run meet the same draws of the backends.
func gwSort(arr []gwArrival) []gwArrival {
	slices.SortFunc(arr, func(a, b gwArrival) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.route - b.route
	})
	next := map[int]uint64{}
	for i := range arr {
		arr[i].id = next[arr[i].route]
		next[arr[i].route]++
	}
	return arr
}

// gwLoad is how a run sends its arrivals.
type gwLoad struct {
	client *http.Client
	// url and header make an arrival's request.
	url    func(a gwArrival) string
	header func(a gwArrival, h http.Header)
	// deadline is the user's: a 200 later than this after the scheduled
	// arrival is not a success. timeout is the client's own: the request is
	// cancelled that long after its scheduled arrival.
	deadline, timeout time.Duration
	// mark, if not nil, is called once, in the sending goroutine, just
	// before the first arrival at or after markAt is sent.
	markAt time.Duration
	mark   func()
}

// run sends sched in open loop — each request in a goroutine of its own at
// its time, whatever the earlier ones are doing — and returns the samples,
// indexed like sched, once every request has ended. If ctx ends first, it
// stops sending and returns ctx's error with the samples so far.
func (l gwLoad) run(ctx context.Context, sched []gwArrival) ([]gwSample, error) {
	samples := make([]gwSample, len(sched))
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	marked := l.mark == nil
	start := time.Now()
	for k, a := range sched {
		due := start.Add(a.at)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return samples, ctx.Err()
			}
		}
		if !marked && a.at >= l.markAt {
			marked = true
			l.mark()
		}
		wg.Go(func() { samples[k] = l.send(ctx, a, due) })
	}
	return samples, nil
}

// send sends one request and measures it.
func (l gwLoad) send(ctx context.Context, a gwArrival, due time.Time) gwSample {
	s := gwSample{at: a.at, lag: max(time.Since(due), 0)}
	rctx, cancel := context.WithDeadline(ctx, due.Add(l.timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, l.url(a), nil)
	if err == nil {
		l.header(a, req.Header)
		var resp *http.Response
		if resp, err = l.client.Do(req); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.status = resp.StatusCode
			s.fallback = resp.Header.Get("X-Watertight-Fallback") != ""
			s.overloaded = resp.Header.Get("X-Overloaded") == "true"
		}
	}
	end := time.Now()
	s.lat = end.Sub(due)
	s.ok = err == nil && s.status == http.StatusOK && s.lat <= l.deadline
	return s
}

// gwClient is an HTTP client for the load: keep-alive connections to the
// gateway, at most conns of them at once (0: no limit), and no timeout of
// its own (each request's context has it).
func gwClient(conns int) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	if conns > 0 {
		tr.MaxIdleConnsPerHost = conns
	}
	return &http.Client{Transport: tr}, tr
}

// gwStat summarises the samples of one route (or tier) in a window of
// scheduled arrivals [from, to).
type gwStat struct {
	n, ok, fallback, overloaded int
	p50, p99, p999, max         time.Duration
}

// rate is the share of successes; NaN without requests.
func (s gwStat) rate() float64 {
	if s.n == 0 {
		return math.NaN()
	}
	return float64(s.ok) / float64(s.n)
}

// gwSummarise is the gwStat of the samples of route scheduled in [from,
// to).
func gwSummarise(samples []gwSample, sched []gwArrival, route int, from, to time.Duration) gwStat {
	var st gwStat
	var lat []time.Duration
	for k, s := range samples {
		if sched[k].route != route || s.at < from || s.at >= to {
			continue
		}
		st.n++
		if s.ok {
			st.ok++
		}
		if s.fallback {
			st.fallback++
		}
		if s.overloaded {
			st.overloaded++
		}
		lat = append(lat, s.lat)
	}
	slices.Sort(lat)
	st.p50, st.p99, st.p999, st.max = sfPercentile(lat, 0.5), sfPercentile(lat, 0.99), sfPercentile(lat, 0.999), sfPercentile(lat, 1)
	return st
}

// gwLag is the p99 and the largest of how late the load generator sent the
// requests scheduled in [from, to).
func gwLag(samples []gwSample, from, to time.Duration) (p99, most time.Duration) {
	var lags []time.Duration
	for _, s := range samples {
		if s.at >= from && s.at < to {
			lags = append(lags, s.lag)
		}
	}
	slices.Sort(lags)
	return sfPercentile(lags, 0.99), sfPercentile(lags, 1)
}

// gwSeries is the p99 latency of a route's requests, in ms, per bin of
// scheduled arrival: a line of a chart of latency over time.
func gwSeries(name string, samples []gwSample, sched []gwArrival, route int, bin time.Duration) Series {
	bins := map[int][]time.Duration{}
	for k, s := range samples {
		if sched[k].route == route {
			b := int(s.at / bin)
			bins[b] = append(bins[b], s.lat)
		}
	}
	keys := make([]int, 0, len(bins))
	for b := range bins {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	ser := Series{Name: name}
	for _, b := range keys {
		lat := bins[b]
		slices.Sort(lat)
		ser.X = append(ser.X, (time.Duration(b)*bin + bin/2).Seconds())
		ser.Y = append(ser.Y, float64(sfPercentile(lat, 0.99))/float64(time.Millisecond))
	}
	return ser
}

// gwSuccessSeries is the success rate (%) of a route's requests per bin of
// scheduled arrival.
func gwSuccessSeries(name string, samples []gwSample, sched []gwArrival, route int, bin time.Duration) Series {
	n, ok := map[int]int{}, map[int]int{}
	for k, s := range samples {
		if sched[k].route == route {
			b := int(s.at / bin)
			n[b]++
			if s.ok {
				ok[b]++
			}
		}
	}
	keys := make([]int, 0, len(n))
	for b := range n {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	ser := Series{Name: name}
	for _, b := range keys {
		ser.X = append(ser.X, (time.Duration(b)*bin + bin/2).Seconds())
		ser.Y = append(ser.Y, 100*float64(ok[b])/float64(n[b]))
	}
	return ser
}
