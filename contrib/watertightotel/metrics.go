package watertightotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

// ScopeName is the instrumentation scope of the Meter that New takes from
// the MeterProvider.
const ScopeName = "github.com/watertight-go/watertight/contrib/watertightotel"

// DefaultBuckets are the explicit bucket boundaries, in seconds, of the call
// duration histogram when Config.Buckets is nil: from 1 ms to 10 s.
var DefaultBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefaultMaxEventSeries is the bound on event attribute sets used when
// Config.MaxEventSeries is zero.
const DefaultMaxEventSeries = 10000

// Attribute keys set on the metrics.
const (
	// AttrName is the instance's name: Config.Name of a breaker, bulkhead
	// or pool, or the name given with a registry, budget or throttler.
	AttrName = attribute.Key("watertight.name")
	// AttrKey is a registry's key (a host, a tenant, a route); empty for a
	// single instance.
	AttrKey = attribute.Key("watertight.key")
)

var (
	attrState   = attribute.Key("state")
	attrKind    = attribute.Key("kind")
	attrOutcome = attribute.Key("outcome")
	attrReason  = attribute.Key("reason")
	attrFrom    = attribute.Key("from")
	attrTo      = attribute.Key("to")
	attrSource  = attribute.Key("source")
	attrEvent   = attribute.Key("event")
	attrHeader  = attribute.Key("header")
)

// Config configures Metrics. The zero value is valid: the global
// MeterProvider, DefaultBuckets, watertight.Classify and
// DefaultMaxEventSeries.
type Config struct {
	// MeterProvider gives the Meter (named ScopeName) that the instruments
	// are created with. If nil, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Buckets are the explicit bucket boundaries, in seconds, of the call
	// duration histogram (see Metrics.Latency). Nil means DefaultBuckets.
	// They must be increasing; an empty non-nil slice is an error.
	Buckets []float64
	// Classify maps a call's error to the outcome attribute of the call
	// duration histogram. If nil, watertight.Classify.
	Classify watertight.Classifier
	// MaxEventSeries bounds the number of distinct attribute sets (kind,
	// source, name, key and reason or transition) that events are counted
	// under, so that names or keys taken from requests cannot grow memory
	// without end. Events beyond it are counted only in
	// watertight.events_overflow. Zero means DefaultMaxEventSeries;
	// negative means no bound.
	MaxEventSeries int
	// Sources are the protections observed at each collection. If nil,
	// Metrics keeps a set of its own. A program with several exporters
	// (Prometheus, the dashboard) fills one watch.Set and gives it to each,
	// so that a protection is registered once. The Add methods add to this
	// set. Kinds Metrics has no instruments for (balancers, concurrency
	// budgets) are skipped.
	Sources *watch.Set
}

// Metrics reports watertight's protections through OpenTelemetry
// asynchronous instruments. Add the protections to watch with its Add
// methods; at every collection, its callback reads their snapshots. It is
// also a watertight.Listener (OnEvent) that counts the events snapshots do
// not hold, and it builds call-latency policies (Latency).
//
// Sources may be added and removed at any time. Each is identified by its
// family and name: adding a breaker (or a breaker registry) under the name of
// one already added replaces it, and so for semaphore bulkheads, bulkhead
// registries and partitioned bulkheads, pools, budgets, throttlers and hedge
// policies; the counters of a replaced
// source restart from the new source's counts, which a cumulative backend
// reads as a reset.
//
// One Metrics serves a whole program: make one per MeterProvider (two would
// share the instruments, and a source added to both would be observed
// twice).
//
// Metrics is safe for concurrent use. Build it with New and Close it when
// done, which unregisters its callback.
type Metrics struct {
	classify watertight.Classifier
	events   eventcount.Counts
	inst     instruments
	calls    metric.Float64Histogram
	reg      metric.Registration

	sources *watch.Set
}

// New creates the instruments on the Meter of cfg.MeterProvider and registers
// the callback that observes them. It returns an error that names the
// invalid field, or the Meter's error.
func New(cfg Config) (*Metrics, error) {
	buckets := cfg.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	if len(buckets) == 0 {
		return nil, errors.New("watertightotel: Config.Buckets must not be empty (nil means DefaultBuckets)")
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i] > buckets[i-1]) {
			return nil, fmt.Errorf("watertightotel: Config.Buckets must be increasing, got %v then %v", buckets[i-1], buckets[i])
		}
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{classify: cfg.Classify, sources: cfg.Sources}
	if m.sources == nil {
		m.sources = new(watch.Set)
	}
	if m.classify == nil {
		m.classify = watertight.Classify
	}
	m.events.Max = cfg.MaxEventSeries
	if m.events.Max == 0 {
		m.events.Max = DefaultMaxEventSeries
	}
	observables, err := m.inst.init(meter)
	if err != nil {
		return nil, fmt.Errorf("watertightotel: %w", err)
	}
	m.calls, err = meter.Float64Histogram("watertight.call.duration",
		metric.WithDescription("Duration of the calls through a Latency policy, by outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(buckets...))
	if err != nil {
		return nil, fmt.Errorf("watertightotel: %w", err)
	}
	m.reg, err = meter.RegisterCallback(m.observe, observables...)
	if err != nil {
		return nil, fmt.Errorf("watertightotel: %w", err)
	}
	return m, nil
}

// Close unregisters the callback: the instruments report nothing more.
// Latency policies go on recording. It may be called more than once.
func (m *Metrics) Close() error { return m.reg.Unregister() }

func noop() {}

// AddBreaker watches b under its name (Config.Name), with an empty key. It
// returns a function that stops watching it (and does nothing if b has been
// replaced since). A nil b is ignored.
func (m *Metrics) AddBreaker(b *circuit.Breaker) (remove func()) {
	if b == nil {
		return noop
	}
	return m.sources.AddBreaker(b)
}

// AddBreakerRegistry watches every breaker r holds at collection time, under
// the given name, each with its key. It returns a function that stops
// watching r. A nil r is ignored.
func (m *Metrics) AddBreakerRegistry(name string, r *circuit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return m.sources.AddBreakerRegistry(name, r)
}

// AddBulkhead watches the semaphore bulkhead b under its name (Config.Name),
// with an empty key. It returns a function that stops watching it. A nil b
// is ignored.
func (m *Metrics) AddBulkhead(b *bulkhead.Bulkhead) (remove func()) {
	if b == nil {
		return noop
	}
	return m.sources.AddBulkhead(b)
}

// AddBulkheadRegistry watches every bulkhead r holds at collection time,
// under the given name, each with its key. It returns a function that stops
// watching r. A nil r is ignored.
func (m *Metrics) AddBulkheadRegistry(name string, r *bulkhead.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return m.sources.AddBulkheadRegistry(name, r)
}

// AddPartitioned watches the partitioned bulkhead p under its name
// (PartitionedConfig.Name), with kind "partitioned": the permits its
// partitions share (watertight.bulkhead.limit) and those free
// (watertight.bulkhead.available) with an empty key, and each partition's
// counts with the partition's name as the key, its guarantee in
// watertight.bulkhead.guaranteed and what it borrows in
// watertight.bulkhead.borrowed. It is in the family of semaphore
// bulkheads: under the name of one already added it replaces it. It
// returns a function that stops watching it. A nil p is ignored.
func (m *Metrics) AddPartitioned(p *bulkhead.Partitioned) (remove func()) {
	if p == nil {
		return noop
	}
	return m.sources.AddPartitioned(p)
}

// AddPool watches the worker pool p under its name (PoolConfig.Name), with an
// empty key; its metrics are the bulkhead ones with kind "pool". It returns a
// function that stops watching it. A nil p is ignored.
func (m *Metrics) AddPool(p *bulkhead.Pool) (remove func()) {
	if p == nil {
		return noop
	}
	return m.sources.AddPool(p)
}

// AddBudget watches the retry budget b under the given name. It returns a
// function that stops watching it. A nil b (a disabled budget) is ignored.
func (m *Metrics) AddBudget(name string, b *budget.Budget) (remove func()) {
	if b == nil {
		return noop
	}
	return m.sources.AddBudget(name, b)
}

// AddThrottler watches the adaptive throttler t under the given name. It
// returns a function that stops watching it. A nil t is ignored.
func (m *Metrics) AddThrottler(name string, t *budget.Throttler) (remove func()) {
	if t == nil {
		return noop
	}
	return m.sources.AddThrottler(name, t)
}

// AddHedge watches the hedge policy p under its name (Config.Name). It
// returns a function that stops watching it. A nil p is ignored.
func (m *Metrics) AddHedge(p *hedge.Policy) (remove func()) {
	if p == nil {
		return noop
	}
	return m.sources.AddHedge(p)
}

// AddLimiter watches the adaptive limiter l under its name (Config.Name). It
// returns a function that stops watching it. A nil l is ignored.
func (m *Metrics) AddLimiter(l *limit.Limiter) (remove func()) {
	if l == nil {
		return noop
	}
	return m.sources.AddLimiter(l)
}

// AddLimiterRegistry watches every limiter r holds at collection time,
// under the given name, each with its key. It returns a function that
// stops watching r. A nil r is ignored.
func (m *Metrics) AddLimiterRegistry(name string, r *limit.Registry) (remove func()) {
	if r == nil {
		return noop
	}
	return m.sources.AddLimiterRegistry(name, r)
}

// observe is the callback: it reads every source and the event counts.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	for _, s := range m.sources.Sources() {
		m.observeSource(o, s)
	}
	m.observeEvents(o)
	return nil
}

func (m *Metrics) observeSource(o metric.Observer, s watch.Source) {
	switch {
	case s.Breaker != nil:
		m.observeBreaker(o, s.Name, "", s.Breaker.Snapshot())
	case s.Breakers != nil:
		for _, snap := range s.Breakers.Snapshots() {
			m.observeBreaker(o, s.Name, snap.Name, snap)
		}
	case s.Bulkhead != nil:
		m.observeBulkhead(o, s.Name, "", s.Bulkhead.Snapshot())
	case s.Bulkheads != nil:
		for _, snap := range s.Bulkheads.Snapshots() {
			m.observeBulkhead(o, s.Name, snap.Name, snap)
		}
	case s.Partitioned != nil:
		m.observePartitioned(o, s.Name, s.Partitioned.Snapshot())
	case s.Pool != nil:
		m.observePool(o, s.Name, s.Pool.Snapshot())
	case s.Budget != nil:
		m.observeBudget(o, s.Name, s.Budget.Snapshot())
	case s.Throttler != nil:
		m.observeThrottler(o, s.Name, s.Throttler.Snapshot())
	case s.Hedge != nil:
		m.observeHedge(o, s.Name, s.Hedge.Snapshot())
	case s.Limiter != nil:
		m.observeLimiter(o, s.Name, "", s.Limiter.Snapshot())
	case s.Limiters != nil:
		for _, snap := range s.Limiters.Snapshots() {
			m.observeLimiter(o, s.Name, snap.Name, snap)
		}
	}
}

var attrStat = attribute.Key("stat")

func (m *Metrics) observeLimiter(o metric.Observer, name, key string, s limit.Snapshot) {
	name, key = validUTF8(name), validUTF8(key)
	in := &m.inst
	n := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key)))
	o.ObserveInt64(in.limiterLimit, int64(s.Limit), n)
	o.ObserveInt64(in.limiterInFlight, int64(s.InFlight), n)
	o.ObserveInt64(in.limiterWaiting, int64(s.Waiting), n)
	o.ObserveInt64(in.limiterRejections, count(s.Rejected), n)
	o.ObserveInt64(in.limiterAcquisitions, count(s.Acquired), n)
	o.ObserveInt64(in.limiterChanges, count(s.Changes), n)
	o.ObserveInt64(in.limiterDrops, int64(s.Last.Drops), n)
	for _, st := range []struct {
		stat string
		d    time.Duration
	}{{"min", s.Last.MinLatency}, {"mean", s.Last.MeanLatency}, {"max", s.Last.MaxLatency}} {
		o.ObserveFloat64(in.limiterLatency, st.d.Seconds(), metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key), attrStat.String(st.stat))))
	}
}

// validUTF8 returns s, or s with each byte that is not part of valid UTF-8
// written as \xNN: names and keys may come from requests (a route, a host),
// and exporters (OTLP) reject strings that are not UTF-8.
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

// count converts a cumulative count for an Int64 instrument.
func count(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

var circuitStates = [...]circuit.State{circuit.Closed, circuit.Open, circuit.HalfOpen, circuit.ForcedOpen, circuit.Disabled, circuit.MetricsOnly}

func (m *Metrics) observeBreaker(o metric.Observer, name, key string, s circuit.Snapshot) {
	name, key = validUTF8(name), validUTF8(key)
	in := &m.inst
	nk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key)))
	for _, st := range circuitStates {
		v := int64(0)
		if s.State == st {
			v = 1
		}
		o.ObserveInt64(in.circuitState, v, metric.WithAttributes(AttrName.String(name), AttrKey.String(key), attrState.String(st.String())))
	}
	o.ObserveInt64(in.circuitWindowCalls, s.Calls, nk)
	o.ObserveInt64(in.circuitWindowFailures, s.Failures, nk)
	o.ObserveInt64(in.circuitWindowSlowCalls, s.SlowCalls, nk)
	o.ObserveInt64(in.circuitWindowSaturated, s.Saturated, nk)
	o.ObserveFloat64(in.circuitFailureRatio, s.FailureRate/100, nk)
	o.ObserveFloat64(in.circuitSlowCallRatio, s.SlowCallRate/100, nk)
	o.ObserveInt64(in.circuitTrials, int64(s.TrialsInFlight), nk)
	o.ObserveInt64(in.circuitRejections, count(s.Rejected), nk)
	o.ObserveInt64(in.circuitOpens, count(s.Opens), nk)
}

func (m *Metrics) observeBulkhead(o metric.Observer, name, key string, s bulkhead.Snapshot) {
	name, key = validUTF8(name), validUTF8(key)
	in := &m.inst
	nkk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key), attrKind.String("semaphore")))
	nk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key)))
	o.ObserveInt64(in.bulkheadLimit, int64(s.MaxConcurrent), nkk)
	o.ObserveInt64(in.bulkheadActive, int64(s.Active), nkk)
	o.ObserveInt64(in.bulkheadQueued, int64(s.Waiting), nkk)
	o.ObserveInt64(in.bulkheadAvailable, int64(s.Available), nkk)
	o.ObserveInt64(in.bulkheadRejections, count(s.Rejected), nkk)
	o.ObserveInt64(in.bulkheadAcquisitions, count(s.Acquired), nk)
	o.ObserveInt64(in.bulkheadCancellations, count(s.Canceled), nk)
}

// observePartitioned reports a partitioned bulkhead as a bulkhead registry
// whose keys are its partitions, with what the partitions share under the
// empty key: one data point of each instrument per partition, so that a
// sum over the keys adds nothing twice.
func (m *Metrics) observePartitioned(o metric.Observer, name string, s bulkhead.PartitionedSnapshot) {
	name = validUTF8(name)
	in := &m.inst
	kind := attrKind.String("partitioned")
	all := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(""), kind))
	o.ObserveInt64(in.bulkheadLimit, int64(s.MaxConcurrent), all)
	o.ObserveInt64(in.bulkheadAvailable, int64(s.Available), all)
	for _, p := range s.Partitions {
		key := validUTF8(p.Name)
		nkk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key), kind))
		nk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(key)))
		o.ObserveInt64(in.bulkheadGuaranteed, int64(p.Guaranteed), nk)
		o.ObserveInt64(in.bulkheadActive, int64(p.Active), nkk)
		o.ObserveInt64(in.bulkheadBorrowed, int64(p.Borrowed), nk)
		o.ObserveInt64(in.bulkheadQueued, int64(p.Waiting), nkk)
		o.ObserveInt64(in.bulkheadRejections, count(p.Rejected), nkk)
		o.ObserveInt64(in.bulkheadAcquisitions, count(p.Acquired), nk)
		o.ObserveInt64(in.bulkheadCancellations, count(p.Canceled), nk)
	}
}

func (m *Metrics) observePool(o metric.Observer, name string, s bulkhead.PoolSnapshot) {
	name = validUTF8(name)
	in := &m.inst
	nkk := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name), AttrKey.String(""), attrKind.String("pool")))
	n := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name)))
	o.ObserveInt64(in.bulkheadLimit, int64(s.Workers), nkk)
	o.ObserveInt64(in.bulkheadActive, int64(s.Busy), nkk)
	o.ObserveInt64(in.bulkheadQueued, int64(s.Queued), nkk)
	o.ObserveInt64(in.bulkheadAvailable, int64(max(s.Workers-s.Busy, 0)), nkk)
	o.ObserveInt64(in.bulkheadRejections, count(s.Rejected), nkk)
	o.ObserveInt64(in.poolQueueCapacity, int64(s.QueueCapacity), n)
	o.ObserveInt64(in.poolDropped, count(s.Dropped), n)
	o.ObserveInt64(in.poolCompleted, count(s.Completed), n)
	o.ObserveInt64(in.poolPanicked, count(s.Panicked), n)
}

func (m *Metrics) observeBudget(o metric.Observer, name string, s budget.Snapshot) {
	name = validUTF8(name)
	in := &m.inst
	n := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name)))
	o.ObserveInt64(in.budgetDeposits, count(s.Deposits), n)
	o.ObserveInt64(in.budgetWithdrawals, count(s.Withdrawals), n)
	o.ObserveInt64(in.budgetRefusals, count(s.Refused), n)
	o.ObserveFloat64(in.budgetBalance, s.Balance, n)
}

func (m *Metrics) observeThrottler(o metric.Observer, name string, s budget.ThrottleSnapshot) {
	name = validUTF8(name)
	in := &m.inst
	n := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name)))
	o.ObserveInt64(in.throttlerRequests, s.Requests, n)
	o.ObserveInt64(in.throttlerAccepts, s.Accepts, n)
	o.ObserveFloat64(in.throttlerRejectRatio, s.RejectProbability, n)
	o.ObserveInt64(in.throttlerRejections, count(s.Rejected), n)
}

func (m *Metrics) observeHedge(o metric.Observer, name string, s hedge.Snapshot) {
	name = validUTF8(name)
	in := &m.inst
	n := metric.WithAttributeSet(attribute.NewSet(AttrName.String(name)))
	o.ObserveInt64(in.hedgeCalls, count(s.Calls), n)
	o.ObserveInt64(in.hedgeNotIdempotent, count(s.NotIdempotent), n)
	o.ObserveInt64(in.hedgeHedgedCalls, count(s.HedgedCalls), n)
	o.ObserveInt64(in.hedgeSent, count(s.Sent), n)
	o.ObserveInt64(in.hedgeWon, count(s.Won), n)
	for _, r := range []struct {
		reason string
		v      uint64
	}{
		{hedge.ReasonBudget, s.SuppressedBudget},
		{hedge.ReasonBreaker, s.SuppressedBreaker},
		{hedge.ReasonBulkhead, s.SuppressedBulkhead},
		{hedge.ReasonOverload, s.SuppressedOverload},
	} {
		o.ObserveInt64(in.hedgeSuppressed, count(r.v), metric.WithAttributes(AttrName.String(name), attrReason.String(r.reason)))
	}
	o.ObserveFloat64(in.hedgeDelay, s.Delay.Seconds(), n)
	over := int64(0)
	if s.Overloaded {
		over = 1
	}
	o.ObserveInt64(in.hedgeOverloaded, over, n)
}
