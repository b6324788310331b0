package lab

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
)

// The consumer scenario (issue 22; seed 004, "why Kafka does not replace
// bulkheads"): one consumer reads two topics, a steady stream of light
// user-registrations records and, after a quiet spell, a burst of slow
// video-transcoding jobs. A discrete-event simulation on virtual time,
// seeded; every configuration meets the same records (arrival times and
// processing times: common random numbers).
//
//   - Each topic is one partition, a log the records arrive in (produced)
//     open loop: registrations as a Poisson process at a steady rate,
//     transcoding jobs as a slow Poisson trickle plus the burst, a fixed
//     number of jobs at uniform times over a short span. Processing times
//     are log-normal (σ 0.5) around each topic's mean.
//   - The consumer polls every 5 ms; a poll takes from each partition it
//     has not paused at most FetchMax records, oldest first (Kafka's fetch
//     limit per partition), and hands them to the records' worker pool.
//   - A worker pool is N workers and a bounded FIFO queue, as
//     bulkhead.Pool: a record starts at once on an idle worker, else waits
//     in the queue, else the pool is full. The workers are permits of a
//     shipped bulkhead.Bulkhead (TryAcquire when a record starts, Release
//     when it ends), the queue is the simulation's.
//   - Records the pool cannot take stay in the consumer's own buffer, in
//     fetch order, and go to the pool as its queue drains. Without
//     backpressure the consumer keeps polling, so that buffer grows with
//     the backlog (the seed's "queue everything"). With backpressure it
//     pauses a partition while the partition's pool queue is full and
//     resumes it once the queue has room (franz-go's PauseFetchPartitions /
//     ResumeFetchPartitions): the backlog waits in the topic instead, and
//     the consumer holds at most its queues plus the records of the last
//     fetch from each partition that did not fit, FetchMax − 1 at most.
//
// Configurations: shared-pool, one pool for both topics (16 workers, a
// queue of 64), fetched records in one buffer; per-topic, a pool per topic
// (registrations 4 workers and 32 queued, transcoding 12 and 32: the same
// 16 workers) and a buffer per topic, no backpressure; per-topic+
// backpressure, the same pools with pausing.
//
// Latency is from a record's arrival in its topic to the end of its
// processing. Phases, by arrival: quiet before the burst; burst from its
// first job until the configuration has processed its last one (at least
// the burst's span); after, the rest. Buffered records are those the
// consumer has fetched and not started: in a pool's queue or in its own
// buffer (records being processed are bounded by the workers anyway). Lag
// is the records in a topic not fetched yet.

// consumerScenario is registered by init; the tests run it directly too.
var consumerScenario = Scenario{
	Name:        "consumer",
	Description: "a Kafka-like consumer with a slow topic beside a light one: a burst of transcoding jobs against one shared worker pool, per-topic pools, and per-topic pools with backpressure",
	Run:         runConsumer,
}

func init() { Register(consumerScenario) }

// Configuration, topic and phase names, as in the tables and the JSON.
const (
	cnShared       = "shared-pool"
	cnPerTopic     = "per-topic"
	cnBackpressure = "per-topic+backpressure"

	cnRegs  = "user-registrations"
	cnVideo = "video-transcoding"

	cnQuiet = "quiet"
	cnBurst = "burst"
	cnAfter = "after"
)

var (
	cnTopics = []string{cnRegs, cnVideo}
	cnPhases = []string{cnQuiet, cnBurst, cnAfter}
)

// Topic indexes.
const (
	cnRegsT = iota
	cnVideoT
)

// cnConfig is one way of building the consumer.
type cnConfig struct {
	name         string
	shared       bool // one pool for both topics; else a pool per topic
	backpressure bool // pause a partition while its pool's queue is full
	// headOfLine: the fetched records of both topics wait in one buffer,
	// in fetch order, and the head goes first or nothing does — a single
	// dispatch loop that blocks on a full pool. The scenario never builds
	// it; the tests use it to show the isolation checks fail without
	// isolated buffers.
	headOfLine bool
}

var cnConfigs = []cnConfig{
	{name: cnShared, shared: true},
	{name: cnPerTopic},
	{name: cnBackpressure, backpressure: true},
}

// cnParams size the scenario and hold the pass lines' bounds.
type cnParams struct {
	regRate     float64       // registrations a second
	regMean     time.Duration // a registration's mean processing time
	videoRate   float64       // transcoding jobs a second outside the burst
	videoMean   time.Duration // a transcoding job's mean processing time
	sigma       float64       // of the log-normal processing times
	quiet       time.Duration // the burst's first job can come this late
	burst       int           // jobs in the burst
	burstSpan   time.Duration // over which they arrive
	end         time.Duration // arrivals stop
	poll        time.Duration // the consumer polls this often
	fetchMax    int           // records a poll takes from a partition at most
	sharedPool  cnPoolSize
	regPool     cnPoolSize
	videoPool   cnPoolSize
	bin         time.Duration // chart bins
	minShared   float64       // shared pool: burst p99 / quiet p99 at least (10)
	maxIsolated float64       // per-topic pools: burst p99 / quiet p99 at most (1.5)
	minGrowth   float64       // no backpressure: peak buffered / Σ queues at least (5)
}

// cnPoolSize is a worker pool's size.
type cnPoolSize struct{ workers, queue int }

func cnParamsFor(quick bool) cnParams {
	p := cnParams{
		regRate:     200,
		regMean:     5 * time.Millisecond, // one worker busy on average
		videoRate:   1,
		videoMean:   500 * time.Millisecond,
		sigma:       0.5,
		quiet:       20 * time.Second,
		burst:       600, // 300 worker-seconds: 25 s for 12 workers
		burstSpan:   2 * time.Second,
		end:         60 * time.Second,
		poll:        5 * time.Millisecond,
		fetchMax:    50,
		sharedPool:  cnPoolSize{16, 64},
		regPool:     cnPoolSize{4, 32},
		videoPool:   cnPoolSize{12, 32},
		bin:         time.Second,
		minShared:   10,
		maxIsolated: 1.5,
		minGrowth:   5,
	}
	if quick {
		// Half as long: the same burst of jobs half as slow (150
		// worker-seconds), and still 2,000 quiet registrations for their
		// p99.
		p.videoMean, p.quiet, p.burstSpan, p.end, p.bin = 250*time.Millisecond, 10*time.Second, time.Second, 30*time.Second, 500*time.Millisecond
	}
	return p
}

// queues is the sum of the queue sizes of the per-topic pools.
func (p cnParams) queues() int { return p.regPool.queue + p.videoPool.queue }

// bufferBound is what the consumer may hold with backpressure: its queues,
// plus the part of one fetch per partition that did not fit.
func (p cnParams) bufferBound() int { return p.queues() + len(cnTopics)*(p.fetchMax-1) }

// cnRecord is one record in a topic.
type cnRecord struct {
	topic   int
	arrival time.Duration
	service time.Duration
	burst   bool
}

// cnRecords draws the records both topics receive, by arrival. Each stream
// has its own random source, so that removing the burst (a test does) leaves
// the others as they were.
func cnRecords(p cnParams, seed uint64) []cnRecord {
	var recs []cnRecord
	logNormal := func(r *rand.Rand, mean time.Duration) time.Duration {
		mu := math.Log(mean.Seconds()) - p.sigma*p.sigma/2
		return time.Duration(math.Exp(mu+p.sigma*r.NormFloat64()) * float64(time.Second))
	}
	poisson := func(topic int, rate float64, mean time.Duration, stream uint64) {
		if rate <= 0 {
			return
		}
		at := rand.New(rand.NewPCG(seed, stream))
		svc := rand.New(rand.NewPCG(seed, stream+1))
		for t := time.Duration(0); ; {
			t += time.Duration(at.ExpFloat64() / rate * float64(time.Second))
			if t >= p.end {
				return
			}
			recs = append(recs, cnRecord{topic: topic, arrival: t, service: logNormal(svc, mean)})
		}
	}
	poisson(cnRegsT, p.regRate, p.regMean, 0xc0_0001)
	poisson(cnVideoT, p.videoRate, p.videoMean, 0xc0_0003)
	at := rand.New(rand.NewPCG(seed, 0xc0_0005))
	svc := rand.New(rand.NewPCG(seed, 0xc0_0006))
	for range p.burst {
		t := p.quiet + time.Duration(at.Float64()*float64(p.burstSpan))
		recs = append(recs, cnRecord{topic: cnVideoT, arrival: t, service: logNormal(svc, p.videoMean), burst: true})
	}
	slices.SortStableFunc(recs, func(a, b cnRecord) int {
		return cmp.Or(cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.topic, b.topic))
	})
	return recs
}

// cnFIFO is a queue of record indexes.
type cnFIFO struct {
	q    []int
	head int
}

func (f *cnFIFO) push(i int) { f.q = append(f.q, i) }
func (f *cnFIFO) len() int   { return len(f.q) - f.head }
func (f *cnFIFO) peek() int  { return f.q[f.head] }
func (f *cnFIFO) pop() int {
	i := f.q[f.head]
	f.head++
	if f.head > 1024 && f.head*2 > len(f.q) {
		f.q = append(f.q[:0], f.q[f.head:]...)
		f.head = 0
	}
	return i
}

// cnPool is a worker pool: its workers are a bulkhead's permits, its queue
// is bounded.
type cnPool struct {
	bh    *bulkhead.Bulkhead
	size  cnPoolSize
	busy  int
	queue cnFIFO
}

// cnDone is a record being processed, by the time it ends.
type cnDone struct {
	at  time.Duration
	rec int
}

// cnHeap is a binary min-heap of processing ends (ties: the older record
// first, so that the order is the same on every run).
type cnHeap []cnDone

func (h cnHeap) less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].rec < h[j].rec)
}

func (h *cnHeap) push(d cnDone) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		j := (i - 1) / 2
		if !s.less(i, j) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}

func (h *cnHeap) pop() cnDone {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && s.less(r, m) {
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

// cnBin is a chart bin: the latencies of the registrations that arrived in
// it, and the most records buffered at a poll in it.
type cnBin struct {
	regLatency []time.Duration
	buffered   int
}

// cnRun is one configuration's run.
type cnRun struct {
	cfg         cnConfig
	recs        []cnRecord
	end         []time.Duration // per record: when its processing ended
	burstEnd    time.Duration   // the end of the burst phase
	peak        int             // records buffered, at most
	peakTopic   [2]int          // of each topic
	peakLag     [2]int          // records in each topic not fetched, at most
	pausedPolls [2]int          // polls that skipped each topic
	polls       int
	bins        []cnBin
	events      int
}

// cnSimulate runs one configuration over recs.
func cnSimulate(ctx context.Context, p cnParams, cfg cnConfig, recs []cnRecord) (*cnRun, error) {
	if cfg.shared && cfg.backpressure {
		return nil, fmt.Errorf("lab: consumer: configuration %q: backpressure needs a pool per topic", cfg.name)
	}
	newPool := func(name string, size cnPoolSize) (*cnPool, error) {
		bh, err := bulkhead.New(bulkhead.Config{Name: name, MaxConcurrent: size.workers})
		if err != nil {
			return nil, err
		}
		return &cnPool{bh: bh, size: size}, nil
	}
	var pools [2]*cnPool // by topic
	if cfg.shared {
		pl, err := newPool(cfg.name, p.sharedPool)
		if err != nil {
			return nil, err
		}
		pools = [2]*cnPool{pl, pl}
	} else {
		for t, size := range []cnPoolSize{p.regPool, p.videoPool} {
			pl, err := newPool(cnTopics[t], size)
			if err != nil {
				return nil, err
			}
			pools[t] = pl
		}
	}
	// The consumer's buffers: one for both topics when one pool or one
	// dispatch loop takes them in fetch order, else one per topic.
	var buffers [2]*cnFIFO
	buffers[0] = &cnFIFO{}
	buffers[1] = buffers[0]
	if !cfg.shared && !cfg.headOfLine {
		buffers[1] = &cnFIFO{}
	}
	var bufList []*cnFIFO
	if buffers[0] == buffers[1] {
		bufList = []*cnFIFO{buffers[0]}
	} else {
		bufList = []*cnFIFO{buffers[0], buffers[1]}
	}

	run := &cnRun{cfg: cfg, recs: recs, end: make([]time.Duration, len(recs)),
		bins: make([]cnBin, int((p.end+p.bin-1)/p.bin))}
	var (
		now     time.Duration
		logs    [2]cnFIFO // the partitions: records arrived, not fetched
		working cnHeap
		next    int // the next record to arrive
		nextPol time.Duration
		// fetched and not started, by topic
		buffered [2]int
	)
	start := func(pl *cnPool, i int) error {
		if !pl.bh.TryAcquire() {
			return fmt.Errorf("lab: consumer: %s: the bulkhead refused a worker with %d of %d busy", cfg.name, pl.busy, pl.size.workers)
		}
		pl.busy++
		buffered[recs[i].topic]--
		working.push(cnDone{at: now + recs[i].service, rec: i})
		return nil
	}
	// offer gives record i to its pool: a worker, else the queue; false if
	// the pool is full.
	offer := func(i int) (bool, error) {
		pl := pools[recs[i].topic]
		switch {
		case pl.busy < pl.size.workers && pl.queue.len() == 0:
			return true, start(pl, i)
		case pl.queue.len() < pl.size.queue:
			pl.queue.push(i)
			return true, nil
		}
		return false, nil
	}
	dispatch := func() error {
		for _, b := range bufList {
			for b.len() > 0 {
				ok, err := offer(b.peek())
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				b.pop()
			}
		}
		return nil
	}
	bin := func(t time.Duration) *cnBin { return &run.bins[min(int(t/p.bin), len(run.bins)-1)] }
	never := time.Duration(math.MaxInt64)
	for n := 0; ; n++ {
		if n&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		tDone, tArr := never, never
		if len(working) > 0 {
			tDone = working[0].at
		}
		if next < len(recs) {
			tArr = recs[next].arrival
		}
		idle := next == len(recs) && len(working) == 0 && logs[0].len()+logs[1].len() == 0
		for _, b := range bufList {
			idle = idle && b.len() == 0
		}
		if idle {
			break
		}
		// At equal times: processing ends, then arrivals, then the poll.
		now = min(tDone, tArr, nextPol)
		run.events++
		switch now {
		case tDone:
			d := working.pop()
			run.end[d.rec] = now
			pl := pools[recs[d.rec].topic]
			pl.bh.Release()
			pl.busy--
			if pl.queue.len() > 0 {
				if err := start(pl, pl.queue.pop()); err != nil {
					return nil, err
				}
			}
			if err := dispatch(); err != nil {
				return nil, err
			}
		case tArr:
			logs[recs[next].topic].push(next)
			next++
		default: // a poll
			run.polls++
			for t := range cnTopics {
				if cfg.backpressure && pools[t].queue.len() >= pools[t].size.queue {
					run.pausedPolls[t]++
					continue
				}
				for k := 0; k < p.fetchMax && logs[t].len() > 0; k++ {
					buffers[t].push(logs[t].pop())
					buffered[t]++
				}
			}
			if err := dispatch(); err != nil {
				return nil, err
			}
			run.sample(buffered, [2]int{logs[0].len(), logs[1].len()}, bin(now))
			nextPol += p.poll
		}
	}
	// The burst phase ends when its last job has been processed.
	run.burstEnd = p.quiet + p.burstSpan
	for i, r := range recs {
		if r.burst {
			run.burstEnd = max(run.burstEnd, run.end[i])
		}
		if r.topic == cnRegsT {
			b := bin(r.arrival)
			b.regLatency = append(b.regLatency, run.end[i]-r.arrival)
		}
	}
	return run, nil
}

// sample records, at a poll, the records buffered and lagging.
func (run *cnRun) sample(buffered, lag [2]int, b *cnBin) {
	total := buffered[0] + buffered[1]
	run.peak = max(run.peak, total)
	b.buffered = max(b.buffered, total)
	for t := range buffered {
		run.peakTopic[t] = max(run.peakTopic[t], buffered[t])
		run.peakLag[t] = max(run.peakLag[t], lag[t])
	}
}

// phase names the phase of a record that arrived at t.
func (run *cnRun) phase(p cnParams, t time.Duration) string {
	switch {
	case t < p.quiet:
		return cnQuiet
	case t < run.burstEnd:
		return cnBurst
	}
	return cnAfter
}

// latencies returns the sorted latencies of topic's records in phase.
func (run *cnRun) latencies(p cnParams, topic int, phase string) []time.Duration {
	var lat []time.Duration
	for i, r := range run.recs {
		if r.topic == topic && run.phase(p, r.arrival) == phase {
			lat = append(lat, run.end[i]-r.arrival)
		}
	}
	slices.Sort(lat)
	return lat
}

// p99Ratio is the registrations' p99 during the burst over their quiet p99.
func (run *cnRun) p99Ratio(p cnParams) (ratio, quiet, burst float64) {
	quiet = ovMs(ovPercentile(run.latencies(p, cnRegsT, cnQuiet), 0.99))
	burst = ovMs(ovPercentile(run.latencies(p, cnRegsT, cnBurst), 0.99))
	return burst / quiet, quiet, burst
}

func runConsumer(ctx context.Context, opts Options) (*Result, error) {
	p := cnParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	began := time.Now()
	runs, err := cnRunAll(ctx, p, cnConfigs, opts.Seed)
	if err != nil {
		return nil, err
	}
	took := time.Since(began)
	events := 0
	for _, r := range runs {
		events += r.events
	}
	fmt.Fprintf(progress, "consumer: %d configurations, %d events of virtual time in %v\n", len(runs), events, took.Round(time.Millisecond))
	return cnResult(p, runs, took), nil
}

// cnRunAll runs each configuration over the same records.
func cnRunAll(ctx context.Context, p cnParams, cfgs []cnConfig, seed uint64) (map[string]*cnRun, error) {
	recs := cnRecords(p, seed)
	runs := map[string]*cnRun{}
	for _, cfg := range cfgs {
		r, err := cnSimulate(ctx, p, cfg, recs)
		if err != nil {
			return nil, err
		}
		runs[cfg.name] = r
	}
	return runs, nil
}

// cnJSON is the scenario's document.
type cnJSON struct {
	Scenario string          `json:"scenario"`
	Results  []cnJSONResult  `json:"results"`
	Buffers  []cnJSONBuffers `json:"buffers"`
}

// cnJSONResult is one topic in one phase of one configuration.
type cnJSONResult struct {
	Config  string  `json:"config"`
	Topic   string  `json:"topic"`
	Phase   string  `json:"phase"`
	Records int     `json:"records"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// cnJSONBuffers is what one configuration's consumer held.
type cnJSONBuffers struct {
	Config          string  `json:"config"`
	PeakBuffered    int     `json:"peak_buffered"`
	PeakByTopic     []int   `json:"peak_buffered_by_topic"`
	QueueSizes      int     `json:"queue_sizes"`
	FetchMax        int     `json:"fetch_max"`
	PeakLagByTopic  []int   `json:"peak_lag_by_topic"`
	PausedPolls     []int   `json:"paused_polls_by_topic"`
	BurstDrainedS   float64 `json:"burst_drained_s"`
	RegsP99Ratio    float64 `json:"registrations_p99_burst_over_quiet"`
	VideoP99BurstMs float64 `json:"transcoding_p99_burst_ms"`
}

func cnPoolsText(p cnParams, cfg cnConfig) string {
	if cfg.shared {
		return fmt.Sprintf("%d workers + %d queued", p.sharedPool.workers, p.sharedPool.queue)
	}
	return fmt.Sprintf("%d + %d / %d + %d", p.regPool.workers, p.regPool.queue, p.videoPool.workers, p.videoPool.queue)
}

func cnResult(p cnParams, runs map[string]*cnRun, took time.Duration) *Result {
	res := &Result{Scenario: "consumer"}
	doc := cnJSON{Scenario: "consumer"}
	lat := Table{
		Title:  "processing latency (arrival in the topic to the end of processing), by the phase the record arrived in",
		Header: []string{"config", "topic", "phase", "records", "p50 (ms)", "p99 (ms)", "p99 / quiet p99"},
	}
	buf := Table{
		Title: "the consumer's buffer: records fetched and not started (pool queues and its own buffer), and the lag left in the topics",
		Header: []string{"config", "pools (workers + queue)", "peak buffered", "registrations", "transcoding",
			"peak lag (transcoding)", "polls paused (transcoding)", "burst drained at"},
	}
	for _, cfg := range cnConfigs {
		run := runs[cfg.name]
		for t, topic := range cnTopics {
			var quietP99 float64
			for _, ph := range cnPhases {
				l := run.latencies(p, t, ph)
				p50, p99 := ovMs(ovPercentile(l, 0.5)), ovMs(ovPercentile(l, 0.99))
				if ph == cnQuiet {
					quietP99 = p99
				}
				doc.Results = append(doc.Results, cnJSONResult{Config: cfg.name, Topic: topic, Phase: ph, Records: len(l),
					P50Ms: tnRound(p50, 1), P99Ms: tnRound(p99, 1)})
				ratio := "—"
				if quietP99 > 0 && len(l) > 0 {
					ratio = fmt.Sprintf("%.2f×", p99/quietP99)
				}
				lat.Rows = append(lat.Rows, []string{cfg.name, topic, ph, strconv.Itoa(len(l)),
					fmt.Sprintf("%.1f", p50), fmt.Sprintf("%.1f", p99), ratio})
			}
		}
		ratio, _, _ := run.p99Ratio(p)
		doc.Buffers = append(doc.Buffers, cnJSONBuffers{
			Config: cfg.name, PeakBuffered: run.peak, PeakByTopic: run.peakTopic[:], QueueSizes: cnQueues(p, cfg),
			FetchMax: p.fetchMax, PeakLagByTopic: run.peakLag[:], PausedPolls: run.pausedPolls[:],
			BurstDrainedS:   tnRound(run.burstEnd.Seconds(), 2),
			RegsP99Ratio:    tnRound(ratio, 3),
			VideoP99BurstMs: tnRound(ovMs(ovPercentile(run.latencies(p, cnVideoT, cnBurst), 0.99)), 1),
		})
		buf.Rows = append(buf.Rows, []string{cfg.name, cnPoolsText(p, cfg), strconv.Itoa(run.peak),
			strconv.Itoa(run.peakTopic[cnRegsT]), strconv.Itoa(run.peakTopic[cnVideoT]),
			strconv.Itoa(run.peakLag[cnVideoT]), fmt.Sprintf("%d of %d", run.pausedPolls[cnVideoT], run.polls),
			fmt.Sprintf("%.1f s", run.burstEnd.Seconds())})
	}
	res.Tables = []Table{lat, buf}
	res.JSON = doc
	res.Checks = cnChecks(p, runs)
	res.Charts = cnCharts(p, runs)
	res.Summary = fmt.Sprintf("A discrete-event simulation on virtual time (seeded: same seed, same numbers) of one Kafka-like consumer "+
		"reading two topics of one partition each. user-registrations: %.0f records a second (Poisson), %v of processing on average; "+
		"video-transcoding: %.0f job a second, %v on average, and from t = %v a burst of %d jobs over %v (log-normal processing times, "+
		"σ %.1f; every configuration meets the same records). The consumer polls every %v and takes at most %d records a partition per "+
		"poll; a worker pool is N workers (a bulkhead.Bulkhead's permits) and a bounded FIFO queue; what a pool cannot take waits in the "+
		"consumer's buffer. shared-pool: one pool of %d workers and %d queued, one buffer in fetch order; per-topic: registrations %d + %d, "+
		"transcoding %d + %d, a buffer each, polling never stops; per-topic+backpressure: the same, and a partition is paused while its "+
		"pool's queue is full and resumed once it has room, so the backlog stays in the topic. Latency: from a record's arrival in its "+
		"topic to the end of its processing; phases by arrival — quiet before the burst, burst until the configuration has processed the "+
		"burst's last job, after. Buffered: records fetched and not started (in a pool's queue or the consumer's buffer); with "+
		"backpressure the bound is the queues (%d) plus what one fetch per partition can bring beyond them (%d − 1 each): %d. Took %v.",
		p.regRate, p.regMean, p.videoRate, p.videoMean, p.quiet, p.burst, p.burstSpan, p.sigma, p.poll, p.fetchMax,
		p.sharedPool.workers, p.sharedPool.queue, p.regPool.workers, p.regPool.queue, p.videoPool.workers, p.videoPool.queue,
		p.queues(), p.fetchMax, p.bufferBound(), took.Round(time.Millisecond))
	return res
}

// cnQueues is the sum of cfg's pools' queue sizes.
func cnQueues(p cnParams, cfg cnConfig) int {
	if cfg.shared {
		return p.sharedPool.queue
	}
	return p.queues()
}

// cnChecks holds the runs of the three configurations, by name, to the
// issue's pass lines.
func cnChecks(p cnParams, runs map[string]*cnRun) []Check {
	ratioCheck := func(cfgName string, atLeast bool, bound float64, what string) Check {
		run := runs[cfgName]
		ratio, quiet, burst := run.p99Ratio(p)
		detail := fmt.Sprintf("%.1f ms during the burst (to %.1f s) against %.1f ms quiet", burst, run.burstEnd.Seconds(), quiet)
		if atLeast {
			return AtLeast(fmt.Sprintf("%s: registrations' p99 during the burst is at least %s× its quiet value (%s)", cfgName, fmtNum(bound), what),
				tnRound(ratio, 2), bound, "×", detail)
		}
		return AtMost(fmt.Sprintf("%s: registrations' p99 during the burst is at most %s× its quiet value (%s)", cfgName, fmtNum(bound), what),
			tnRound(ratio, 3), bound, "×", detail)
	}
	bp, nobp := runs[cnBackpressure], runs[cnPerTopic]
	return []Check{
		ratioCheck(cnShared, true, p.minShared, "the transcoding jobs take every worker and the queue"),
		ratioCheck(cnPerTopic, false, p.maxIsolated, "a pool each: the burst stays in its own"),
		ratioCheck(cnBackpressure, false, p.maxIsolated, "pausing the transcoding partition does not pause the registrations"),
		AtMost(fmt.Sprintf("%s: buffered records stay at most the queue sizes plus one fetch per partition beyond them (%d + %d × %d)",
			cnBackpressure, p.queues(), len(cnTopics), p.fetchMax-1),
			float64(bp.peak), float64(p.bufferBound()), "",
			fmt.Sprintf("peak %d (registrations %d, transcoding %d); the backlog waited in the topic instead: lag up to %d, the partition paused at %d of %d polls",
				bp.peak, bp.peakTopic[cnRegsT], bp.peakTopic[cnVideoT], bp.peakLag[cnVideoT], bp.pausedPolls[cnVideoT], bp.polls)),
		AtLeast(fmt.Sprintf("%s (no backpressure): buffered records grow with the burst, to at least %s× the queue sizes (peak / %d)",
			cnPerTopic, fmtNum(p.minGrowth), p.queues()),
			tnRound(float64(nobp.peak)/float64(p.queues()), 2), p.minGrowth, "×",
			fmt.Sprintf("peak %d records (transcoding %d); lag at most %d", nobp.peak, nobp.peakTopic[cnVideoT], nobp.peakLag[cnVideoT])),
	}
}

// cnCharts draws the registrations' p99 and the buffered records over time.
func cnCharts(p cnParams, runs map[string]*cnRun) []Chart {
	lat := Chart{
		File:   "consumer-registrations-p99",
		Title:  fmt.Sprintf("consumer: user-registrations p99 over time (%d slow jobs at %v)", p.burst, p.quiet),
		XLabel: "virtual time (s), by arrival",
		YLabel: "p99 (ms)",
		LogY:   true,
	}
	buf := Chart{
		File:   "consumer-buffered",
		Title:  "consumer: records buffered (fetched, not started) over time",
		XLabel: "virtual time (s)",
		YLabel: "records buffered (most at a poll in the bin)",
	}
	for _, cfg := range cnConfigs {
		run := runs[cfg.name]
		ls, bs := Series{Name: cfg.name}, Series{Name: cfg.name}
		for i, b := range run.bins {
			x := (time.Duration(i)*p.bin + p.bin/2).Seconds()
			if len(b.regLatency) > 0 {
				l := slices.Clone(b.regLatency)
				slices.Sort(l)
				ls.X = append(ls.X, x)
				ls.Y = append(ls.Y, ovMs(ovPercentile(l, 0.99)))
			}
			bs.X = append(bs.X, x)
			bs.Y = append(bs.Y, float64(b.buffered))
		}
		lat.Series = append(lat.Series, ls)
		buf.Series = append(buf.Series, bs)
	}
	bound := Series{Name: fmt.Sprintf("backpressure bound (%d)", p.bufferBound())}
	for _, x := range []float64{0, p.end.Seconds()} {
		bound.X = append(bound.X, x)
		bound.Y = append(bound.Y, float64(p.bufferBound()))
	}
	buf.Series = append(buf.Series, bound)
	return []Chart{lat, buf}
}
