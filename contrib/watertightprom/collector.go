package watertightprom

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

// DefaultBuckets are the upper bounds, in seconds, of the call duration
// histogram when Config.Buckets is nil: from 1 ms to 10 s.
var DefaultBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefaultMaxEventSeries is the bound on event label sets used when
// Config.MaxEventSeries is zero.
const DefaultMaxEventSeries = 10000

// Config configures a Collector. The zero value is valid: no constant
// labels, DefaultBuckets, watertight.Classify and DefaultMaxEventSeries.
type Config struct {
	// ConstLabels are added to every metric (a service, a region). If nil,
	// none. Their names must be valid Prometheus label names, and none may
	// be a label the Collector sets itself (name, key, state, kind,
	// outcome, reason, from, to, source, event).
	ConstLabels prometheus.Labels
	// Buckets are the upper bounds, in seconds, of the call duration
	// histogram (see Collector.Latency). Nil means DefaultBuckets. They must
	// be increasing; an empty non-nil slice is an error.
	Buckets []float64
	// Classify maps a call's error to the outcome label of the call
	// duration histogram. If nil, watertight.Classify.
	Classify watertight.Classifier
	// MaxEventSeries bounds the number of distinct label sets (kind,
	// source, name, key and reason or transition) the Collector counts
	// events under, so that names or keys taken from requests cannot grow
	// its memory without end. Events beyond it are counted only in
	// watertight_events_overflow_total. Zero means DefaultMaxEventSeries;
	// negative means no bound.
	MaxEventSeries int
	// Sources are the protections read at each scrape. If nil, the
	// Collector keeps a set of its own. A program with several exporters
	// (OpenTelemetry, the dashboard) fills one watch.Set and gives it to
	// each, so that a protection is registered once. The Add methods add
	// to this set. Kinds the Collector has no metrics for (balancers,
	// concurrency budgets) are skipped.
	Sources *watch.Set
}

// Collector is a prometheus.Collector for watertight's protections. Register
// it with a prometheus.Registry (or use Handler), and add the protections to
// watch with its Add methods; it reads their snapshots at every scrape.
// It is also a watertight.Listener (OnEvent) that counts the events that
// snapshots do not hold, and it builds call-latency policies (Latency).
//
// Sources may be added and removed at any time, also while a scrape runs.
// Each source is identified by its family and name: adding a breaker (or a
// breaker registry) under the name of one already added replaces it, and so
// for semaphore bulkheads, bulkhead registries and partitioned bulkheads,
// pools, budgets, throttlers and hedge policies. The counters of a replaced
// source restart from the new source's counts, which Prometheus's rate()
// and increase() read as a counter reset.
//
// One Collector serves a whole program: register it once per registry (two
// Collectors in one registry would describe the same metrics twice, which
// the registry refuses).
//
// A Collector is safe for concurrent use. Build it with NewCollector.
type Collector struct {
	cfg      Config
	d        descs
	classify watertight.Classifier
	calls    *prometheus.HistogramVec
	events   eventcount.Counts

	sources *watch.Set
}

// NewCollector returns a Collector for cfg, or an error that names the
// invalid field.
func NewCollector(cfg Config) (*Collector, error) {
	buckets := cfg.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	if len(buckets) == 0 {
		return nil, errors.New("watertightprom: Config.Buckets must not be empty (nil means DefaultBuckets)")
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i] > buckets[i-1]) {
			return nil, fmt.Errorf("watertightprom: Config.Buckets must be increasing, got %v then %v", buckets[i-1], buckets[i])
		}
	}
	c := &Collector{
		cfg:      cfg,
		classify: cfg.Classify,
		sources:  cfg.Sources,
	}
	if c.sources == nil {
		c.sources = new(watch.Set)
	}
	if c.classify == nil {
		c.classify = watertight.Classify
	}
	maxSeries := cfg.MaxEventSeries
	if maxSeries == 0 {
		maxSeries = DefaultMaxEventSeries
	}
	c.events.Max = maxSeries
	if err := c.d.init(cfg.ConstLabels); err != nil {
		return nil, err
	}
	c.calls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "watertight_call_duration_seconds",
		Help:        "Duration of the calls through a Latency policy, by outcome.",
		ConstLabels: cfg.ConstLabels,
		Buckets:     buckets,
	}, []string{"name", "outcome"})
	return c, nil
}

func noop() {}

// AddBreaker watches b under its name (Config.Name), with an empty key. It
// returns a function that stops watching it (and does nothing if b has been
// replaced since). A nil b is ignored.
func (c *Collector) AddBreaker(b *circuit.Breaker) (remove func()) {
	if b == nil {
		return noop
	}
	return c.sources.AddBreaker(b)
}

// AddBreakerRegistry watches every breaker r holds at scrape time, under the
// given name, each with its key. A breaker the registry evicted disappears
// from the metrics; a later breaker for its key starts its counters afresh.
// It returns a function that stops watching r. A nil r is ignored.
func (c *Collector) AddBreakerRegistry(name string, r *circuit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return c.sources.AddBreakerRegistry(name, r)
}

// AddBulkhead watches the semaphore bulkhead b under its name (Config.Name),
// with an empty key. It returns a function that stops watching it. A nil b is
// ignored.
func (c *Collector) AddBulkhead(b *bulkhead.Bulkhead) (remove func()) {
	if b == nil {
		return noop
	}
	return c.sources.AddBulkhead(b)
}

// AddBulkheadRegistry watches every bulkhead r holds at scrape time, under
// the given name, each with its key. It returns a function that stops
// watching r. A nil r is ignored.
func (c *Collector) AddBulkheadRegistry(name string, r *bulkhead.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return c.sources.AddBulkheadRegistry(name, r)
}

// AddPartitioned watches the partitioned bulkhead p under its name
// (PartitionedConfig.Name), with kind="partitioned": the permits its
// partitions share (watertight_bulkhead_max_concurrent) and those free
// (watertight_bulkhead_available) with an empty key, and each partition's
// counts with the partition's name as the key, its guarantee in
// watertight_bulkhead_guaranteed and what it borrows in
// watertight_bulkhead_borrowed. It is in the family of semaphore bulkheads:
// under the name of one already added it replaces it. It returns a
// function that stops watching it. A nil p is ignored.
func (c *Collector) AddPartitioned(p *bulkhead.Partitioned) (remove func()) {
	if p == nil {
		return noop
	}
	return c.sources.AddPartitioned(p)
}

// AddPool watches the worker pool p under its name (PoolConfig.Name), with
// an empty key; its metrics are the bulkhead ones with kind="pool". It
// returns a function that stops watching it. A nil p is ignored.
func (c *Collector) AddPool(p *bulkhead.Pool) (remove func()) {
	if p == nil {
		return noop
	}
	return c.sources.AddPool(p)
}

// AddBudget watches the retry budget b under the given name (a Budget has
// none of its own). It returns a function that stops watching it. A nil b
// (a disabled budget) is ignored.
func (c *Collector) AddBudget(name string, b *budget.Budget) (remove func()) {
	if b == nil {
		return noop
	}
	return c.sources.AddBudget(name, b)
}

// AddThrottler watches the adaptive throttler t under the given name. It
// returns a function that stops watching it. A nil t (a disabled throttler)
// is ignored.
func (c *Collector) AddThrottler(name string, t *budget.Throttler) (remove func()) {
	if t == nil {
		return noop
	}
	return c.sources.AddThrottler(name, t)
}

// AddHedge watches the hedge policy p under its name (Config.Name). It
// returns a function that stops watching it. A nil p is ignored.
func (c *Collector) AddHedge(p *hedge.Policy) (remove func()) {
	if p == nil {
		return noop
	}
	return c.sources.AddHedge(p)
}

// AddLimiter watches the adaptive limiter l under its name (Config.Name).
// It returns a function that stops watching it. A nil l is ignored.
func (c *Collector) AddLimiter(l *limit.Limiter) (remove func()) {
	if l == nil {
		return noop
	}
	return c.sources.AddLimiter(l)
}

// AddLimiterRegistry watches every limiter r holds at scrape time, under
// the given name, each with its key. It returns a function that stops
// watching r. A nil r is ignored.
func (c *Collector) AddLimiterRegistry(name string, r *limit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return c.sources.AddLimiterRegistry(name, r)
}

// Describe implements prometheus.Collector. The Collector's metrics and
// their labels are fixed, whatever sources it watches, so it describes them
// all.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
	c.calls.Describe(ch)
}

// Collect implements prometheus.Collector: it reads the snapshot of every
// source, the event counters and the call duration histogram.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources.Sources() {
		c.collectSource(ch, s)
	}
	c.collectEvents(ch)
	c.calls.Collect(ch)
}

func (c *Collector) collectSource(ch chan<- prometheus.Metric, s watch.Source) {
	switch {
	case s.Breaker != nil:
		c.collectBreaker(ch, s.Name, "", s.Breaker.Snapshot())
	case s.Breakers != nil:
		for _, snap := range s.Breakers.Snapshots() {
			c.collectBreaker(ch, s.Name, snap.Name, snap)
		}
	case s.Bulkhead != nil:
		c.collectBulkhead(ch, s.Name, "", s.Bulkhead.Snapshot())
	case s.Bulkheads != nil:
		for _, snap := range s.Bulkheads.Snapshots() {
			c.collectBulkhead(ch, s.Name, snap.Name, snap)
		}
	case s.Partitioned != nil:
		c.collectPartitioned(ch, s.Name, s.Partitioned.Snapshot())
	case s.Pool != nil:
		c.collectPool(ch, s.Name, s.Pool.Snapshot())
	case s.Budget != nil:
		c.collectBudget(ch, s.Name, s.Budget.Snapshot())
	case s.Throttler != nil:
		c.collectThrottler(ch, s.Name, s.Throttler.Snapshot())
	case s.Hedge != nil:
		c.collectHedge(ch, s.Name, s.Hedge.Snapshot())
	case s.Limiter != nil:
		c.collectLimiter(ch, s.Name, "", s.Limiter.Snapshot())
	case s.Limiters != nil:
		for _, snap := range s.Limiters.Snapshots() {
			c.collectLimiter(ch, s.Name, snap.Name, snap)
		}
	}
}

func (c *Collector) collectLimiter(ch chan<- prometheus.Metric, name, key string, s limit.Snapshot) {
	d := &c.d
	gauge(ch, d.limiterLimit, float64(s.Limit), name, key)
	gauge(ch, d.limiterInFlight, float64(s.InFlight), name, key)
	gauge(ch, d.limiterWaiting, float64(s.Waiting), name, key)
	counter(ch, d.limiterRejected, float64(s.Rejected), name, key)
	counter(ch, d.limiterAcquired, float64(s.Acquired), name, key)
	counter(ch, d.limiterChanges, float64(s.Changes), name, key)
	gauge(ch, d.limiterLatency, s.Last.MinLatency.Seconds(), name, key, "min")
	gauge(ch, d.limiterLatency, s.Last.MeanLatency.Seconds(), name, key, "mean")
	gauge(ch, d.limiterLatency, s.Last.MaxLatency.Seconds(), name, key, "max")
	gauge(ch, d.limiterDrops, float64(s.Last.Drops), name, key)
}

var circuitStates = [...]circuit.State{circuit.Closed, circuit.Open, circuit.HalfOpen, circuit.ForcedOpen, circuit.Disabled, circuit.MetricsOnly}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	constMetric(ch, d, prometheus.GaugeValue, v, lv)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	constMetric(ch, d, prometheus.CounterValue, v, lv)
}

// constMetric sends one sample. Label values must be valid UTF-8, and names
// and keys may come from requests (a route, a host): invalid bytes are
// escaped rather than let NewConstMetric fail.
func constMetric(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, lv []string) {
	for i, s := range lv {
		lv[i] = validUTF8(s)
	}
	m, err := prometheus.NewConstMetric(d, t, v, lv...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// validUTF8 returns s, or s with each byte that is not part of valid UTF-8
// written as \xNN, so that distinct invalid values stay distinct.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, "\\x%02x", s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func (c *Collector) collectBreaker(ch chan<- prometheus.Metric, name, key string, s circuit.Snapshot) {
	d := &c.d
	for _, st := range circuitStates {
		v := 0.0
		if s.State == st {
			v = 1
		}
		gauge(ch, d.circuitState, v, name, key, st.String())
	}
	gauge(ch, d.circuitWindowCalls, float64(s.Calls), name, key)
	gauge(ch, d.circuitWindowFailures, float64(s.Failures), name, key)
	gauge(ch, d.circuitWindowSlowCalls, float64(s.SlowCalls), name, key)
	gauge(ch, d.circuitWindowSaturated, float64(s.Saturated), name, key)
	gauge(ch, d.circuitFailureRatio, s.FailureRate/100, name, key)
	gauge(ch, d.circuitSlowCallRatio, s.SlowCallRate/100, name, key)
	gauge(ch, d.circuitTrials, float64(s.TrialsInFlight), name, key)
	counter(ch, d.circuitRejected, float64(s.Rejected), name, key)
	counter(ch, d.circuitOpens, float64(s.Opens), name, key)
}

func (c *Collector) collectBulkhead(ch chan<- prometheus.Metric, name, key string, s bulkhead.Snapshot) {
	d := &c.d
	const kind = "semaphore"
	gauge(ch, d.bulkheadMax, float64(s.MaxConcurrent), name, key, kind)
	gauge(ch, d.bulkheadActive, float64(s.Active), name, key, kind)
	gauge(ch, d.bulkheadQueued, float64(s.Waiting), name, key, kind)
	gauge(ch, d.bulkheadAvailable, float64(s.Available), name, key, kind)
	counter(ch, d.bulkheadRejected, float64(s.Rejected), name, key, kind)
	counter(ch, d.bulkheadAcquired, float64(s.Acquired), name, key)
	counter(ch, d.bulkheadCanceled, float64(s.Canceled), name, key)
}

// collectPartitioned exports a partitioned bulkhead as a bulkhead registry
// whose keys are its partitions, with what the partitions share under the
// empty key: one series of each kind per partition, so that summing over
// the keys adds nothing twice.
func (c *Collector) collectPartitioned(ch chan<- prometheus.Metric, name string, s bulkhead.PartitionedSnapshot) {
	d := &c.d
	const kind = "partitioned"
	gauge(ch, d.bulkheadMax, float64(s.MaxConcurrent), name, "", kind)
	gauge(ch, d.bulkheadAvailable, float64(s.Available), name, "", kind)
	for _, p := range s.Partitions {
		gauge(ch, d.bulkheadGuaranteed, float64(p.Guaranteed), name, p.Name)
		gauge(ch, d.bulkheadActive, float64(p.Active), name, p.Name, kind)
		gauge(ch, d.bulkheadBorrowed, float64(p.Borrowed), name, p.Name)
		gauge(ch, d.bulkheadQueued, float64(p.Waiting), name, p.Name, kind)
		counter(ch, d.bulkheadRejected, float64(p.Rejected), name, p.Name, kind)
		counter(ch, d.bulkheadAcquired, float64(p.Acquired), name, p.Name)
		counter(ch, d.bulkheadCanceled, float64(p.Canceled), name, p.Name)
	}
}

func (c *Collector) collectPool(ch chan<- prometheus.Metric, name string, s bulkhead.PoolSnapshot) {
	d := &c.d
	const key, kind = "", "pool"
	gauge(ch, d.bulkheadMax, float64(s.Workers), name, key, kind)
	gauge(ch, d.bulkheadActive, float64(s.Busy), name, key, kind)
	gauge(ch, d.bulkheadQueued, float64(s.Queued), name, key, kind)
	gauge(ch, d.bulkheadAvailable, float64(max(s.Workers-s.Busy, 0)), name, key, kind)
	counter(ch, d.bulkheadRejected, float64(s.Rejected), name, key, kind)
	gauge(ch, d.poolQueueCapacity, float64(s.QueueCapacity), name)
	counter(ch, d.poolDropped, float64(s.Dropped), name)
	counter(ch, d.poolCompleted, float64(s.Completed), name)
	counter(ch, d.poolPanicked, float64(s.Panicked), name)
}

func (c *Collector) collectBudget(ch chan<- prometheus.Metric, name string, s budget.Snapshot) {
	d := &c.d
	counter(ch, d.budgetDeposits, float64(s.Deposits), name)
	counter(ch, d.budgetWithdrawals, float64(s.Withdrawals), name)
	counter(ch, d.budgetRefused, float64(s.Refused), name)
	gauge(ch, d.budgetBalance, s.Balance, name)
}

func (c *Collector) collectThrottler(ch chan<- prometheus.Metric, name string, s budget.ThrottleSnapshot) {
	d := &c.d
	gauge(ch, d.throttlerRequests, float64(s.Requests), name)
	gauge(ch, d.throttlerAccepts, float64(s.Accepts), name)
	gauge(ch, d.throttlerRejectRatio, s.RejectProbability, name)
	counter(ch, d.throttlerRejected, float64(s.Rejected), name)
}

func (c *Collector) collectHedge(ch chan<- prometheus.Metric, name string, s hedge.Snapshot) {
	d := &c.d
	counter(ch, d.hedgeCalls, float64(s.Calls), name)
	counter(ch, d.hedgeNotIdempotent, float64(s.NotIdempotent), name)
	counter(ch, d.hedgeHedgedCalls, float64(s.HedgedCalls), name)
	counter(ch, d.hedgeSent, float64(s.Sent), name)
	counter(ch, d.hedgeWon, float64(s.Won), name)
	counter(ch, d.hedgeSuppressed, float64(s.SuppressedBudget), name, hedge.ReasonBudget)
	counter(ch, d.hedgeSuppressed, float64(s.SuppressedBreaker), name, hedge.ReasonBreaker)
	counter(ch, d.hedgeSuppressed, float64(s.SuppressedBulkhead), name, hedge.ReasonBulkhead)
	counter(ch, d.hedgeSuppressed, float64(s.SuppressedOverload), name, hedge.ReasonOverload)
	gauge(ch, d.hedgeDelay, s.Delay.Seconds(), name)
	over := 0.0
	if s.Overloaded {
		over = 1
	}
	gauge(ch, d.hedgeOverloaded, over, name)
}
