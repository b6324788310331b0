package watertightkafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
)

// Defaults used for zero fields of Config and LaneConfig.
const (
	// DefaultWorkers is LaneConfig.Workers when zero.
	DefaultWorkers = 10
	// DefaultQueueSize is LaneConfig.QueueSize when zero, in records.
	DefaultQueueSize = 500
	// DefaultMaxBatch is LaneConfig.MaxBatch when zero.
	DefaultMaxBatch = 64
	// DefaultAttemptTimeout is LaneConfig.AttemptTimeout when zero.
	DefaultAttemptTimeout = 30 * time.Second
	// DefaultProbeInterval is LaneConfig.ProbeInterval when zero.
	DefaultProbeInterval = 100 * time.Millisecond
	// DefaultDeadLetterSuffix is appended to a record's topic to name its
	// dead-letter topic when LaneConfig.DeadLetterTopic is empty.
	DefaultDeadLetterSuffix = ".dlq"
	// DefaultCommitInterval is Config.CommitInterval when zero.
	DefaultCommitInterval = time.Second
	// DefaultRevokeTimeout is Config.RevokeTimeout when zero.
	DefaultRevokeTimeout = 10 * time.Second
	// DefaultMaxLanes is Config.MaxLanes when zero.
	DefaultMaxLanes = 64
	// DefaultFetchMaxWait is the franz-go FetchMaxWait New sets before
	// Config.ClientOptions (which may override it): a resumed partition is
	// fetched again only after the broker's fetch in flight returns, which
	// takes up to FetchMaxWait when there is nothing new (franz-go's
	// default is 5s).
	DefaultFetchMaxWait = 500 * time.Millisecond
	// DefaultIdempotencyLockTTL is Idempotency.LockTTL when zero.
	DefaultIdempotencyLockTTL = 5 * time.Minute
	// DefaultIdempotencyTTL is Idempotency.TTL when zero.
	DefaultIdempotencyTTL = 24 * time.Hour
)

// OverflowLane is the lane that records go to, with a Config.LaneOf
// function, once Config.MaxLanes lanes exist.
const OverflowLane = "_overflow"

// Handler processes one record. It runs on a worker of the record's lane,
// with a context that ends when the attempt times out
// (LaneConfig.AttemptTimeout) or when the record's partition is abandoned
// (revoked and not drained in time, lost, or the consumer crashed).
//
// Delivery is at least once: a record may be handed to Handler again after
// a crash or a rebalance, unless Config.Idempotency is set. A nil error
// means the record is done. An error means its side effect did not happen
// (or is safe to repeat): the record is retried if the lane's retry policy
// says so (by default, transient errors only: mark others with
// retry.MarkTransient), and dead-lettered when it gives up.
type Handler func(ctx context.Context, r *kgo.Record) error

// Config configures a Consumer. Group, Topics and Handler are required;
// every other zero field takes the default its comment names.
type Config struct {
	// Name labels the consumer's events (Event.Name) and prefixes its
	// pools' names ("name/lane"). It may be empty.
	Name string
	// Brokers are the seed brokers ("host:port"). If empty, a
	// kgo.SeedBrokers option in ClientOptions names them, or franz-go's
	// default applies (127.0.0.1:9092).
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topics are the topics consumed. Required.
	Topics []string
	// ClientOptions are more franz-go options (TLS, SASL, balancers,
	// session timeout, ...). New adds, after them, the options it relies
	// on: kgo.ConsumerGroup, kgo.ConsumeTopics, kgo.DisableAutoCommit,
	// kgo.BlockRebalanceOnPoll and the OnPartitionsAssigned, Revoked and
	// Lost callbacks; and before them kgo.FetchMaxWait(DefaultFetchMaxWait),
	// which they may override.
	ClientOptions []kgo.Opt
	// Handler processes each record. Required unless every lane has its
	// own (LaneConfig.Handler).
	Handler Handler

	// LaneOf names the lane (worker pool) a record runs in. If nil, the
	// lane is the record's topic. A lane named in Lanes takes its
	// configuration from there, any other from DefaultLane. It is called
	// on the consumer's poll goroutine for every record: keep it cheap.
	LaneOf func(r *kgo.Record) string
	// Lanes configures lanes by name (the topic when LaneOf is nil).
	Lanes map[string]LaneConfig
	// DefaultLane configures the lanes not named in Lanes.
	DefaultLane LaneConfig
	// MaxLanes bounds the lanes LaneOf may create: records of further
	// lanes go to OverflowLane. Zero means DefaultMaxLanes; negative is an
	// error. Lanes named in Lanes and, without LaneOf, the topics always
	// get their own.
	MaxLanes int

	// MaxPollRecords caps the records one poll returns: the "one poll's
	// worth" that a full lane may hold beyond its queue before its
	// partitions are paused. Zero means no cap: a poll takes what the
	// client has buffered, which is at most one fetch response per broker
	// (kgo.FetchMaxBytes, and kgo.FetchMaxPartitionBytes per partition),
	// as a plain franz-go PollFetches loop does; taking it all lets the
	// client fetch the next response while the lanes work. Negative is an
	// error.
	MaxPollRecords int
	// CommitInterval is how often processed offsets are committed (they
	// are also committed when partitions are revoked and at Close). Zero
	// means DefaultCommitInterval; negative is an error.
	CommitInterval time.Duration
	// RevokeTimeout bounds how long a rebalance (or Close) waits for the
	// records of revoked partitions that are being processed: those not
	// done by then are abandoned (their context is cancelled) and replayed
	// by the next owner. Keep it below the group's rebalance timeout.
	// Zero means DefaultRevokeTimeout; negative means do not wait.
	RevokeTimeout time.Duration

	// Idempotency, if its Store is set, records each record's processing
	// under a key so that a record replayed after a crash or a rebalance
	// does not run its Handler again.
	Idempotency Idempotency

	// Listener, if not nil, receives the consumer's events (Source
	// "kafka", Name this Name, Key the lane, Code one of the Code
	// constants): see the package documentation. It is called with no
	// lock of the consumer held, on the poll goroutine or a worker.
	Listener watertight.Listener
}

// LaneConfig sizes and protects one lane: a worker pool with a bounded
// queue, a retry policy, an optional breaker and a dead-letter topic.
type LaneConfig struct {
	// Workers is the number of records processed at once in the lane.
	// Zero means DefaultWorkers; negative is an error.
	Workers int
	// QueueSize is how many records may wait for a worker. When it is
	// reached the records that do not fit are held and the partitions
	// that feed the lane are paused until they fit. Zero means
	// DefaultQueueSize; negative means no queue: records are taken only
	// by idle workers.
	QueueSize int
	// MaxBatch is the most consecutive records of one partition that one
	// task runs, in offset order, on one worker. A poll's records of a
	// partition are cut into tasks of min(MaxBatch, ceil(n/Workers))
	// records, so that they spread over the workers while a task still
	// amortises the hand-off to a worker over several cheap records. Zero
	// means DefaultMaxBatch; 1 gives one task per record; negative is an
	// error.
	MaxBatch int
	// Handler, if not nil, processes the lane's records instead of
	// Config.Handler.
	Handler Handler
	// Retry decides which failures are retried, how often and after what
	// wait. If nil, a policy of retry.Config{Idempotent: true} (three
	// attempts, transient errors only, full-jitter backoff) under a retry
	// budget of the lane's own (budget defaults: 10% of records).
	Retry *retry.Policy
	// Breaker, if not nil, guards the lane's dependency: while it is open
	// the lane's records are held, not failed, and its partitions are
	// paused; half-open trials resume them. Share one breaker between the
	// lanes that call one dependency.
	Breaker *circuit.Breaker
	// ProbeInterval is how often a lane held by an open breaker looks at
	// the breaker's state to send its half-open trials. Zero means
	// DefaultProbeInterval; negative is an error.
	ProbeInterval time.Duration
	// AttemptTimeout bounds each Handler call: its context ends, with
	// cause ErrAttemptTimeout, between AttemptTimeout and 1.125 times it
	// after the call began, and the attempt fails with an error that
	// matches ErrAttemptTimeout and that the retry policy takes as
	// transient. A watchdog enforces it (a clock that ticks every eighth
	// of the smallest lane's timeout), so it costs two atomic stores per
	// record rather than a timer; the context carries no Deadline. Zero
	// means DefaultAttemptTimeout; negative means no timeout but the
	// Handler's own.
	AttemptTimeout time.Duration
	// DeadLetterTopic is where records that keep failing go, with the
	// reason in headers (see HeaderCode). Empty means the record's topic
	// followed by DefaultDeadLetterSuffix. The topic must exist (or the
	// cluster create it): a record is not done, and its partition does not
	// move on, until its dead letter is written.
	DeadLetterTopic string
}

// Idempotency configures the deduplication of replayed records.
type Idempotency struct {
	// Store keeps the records' keys (idempotency.MemoryStore, or the
	// Redis store of contrib/redisstore for several consumer processes).
	// If nil, records are not deduplicated.
	Store idempotency.Store
	// Key returns a record's key. If nil, "topic/partition/offset". Keys
	// are scoped by the consumer group.
	Key func(r *kgo.Record) string
	// LockTTL is how long a claim protects a record being processed. It
	// must cover the record's longest processing (attempts, waits and the
	// dead letter). A record whose processing stopped without an outcome
	// (the process died while its handler ran) is not run again: it is
	// dead-lettered with CodeOutcomeUnknown. Zero means
	// DefaultIdempotencyLockTTL; negative is an error.
	LockTTL time.Duration
	// TTL is how long a processed record's key is remembered: longer than
	// a replay can come (the time a crash and a restart take, plus the
	// commit interval). Zero means DefaultIdempotencyTTL; negative is an
	// error; it must not be below LockTTL.
	TTL time.Duration
}

// errConfig prefixes validation errors.
func errConfig(format string, args ...any) error {
	return fmt.Errorf("watertightkafka: "+format, args...)
}

// resolve checks cfg and returns it with its defaults filled in, or an
// error naming the first invalid field and its rule.
func (cfg Config) resolve() (Config, error) {
	if cfg.Group == "" {
		return cfg, errConfig("Config.Group is required: the consumer group whose offsets are committed")
	}
	if len(cfg.Topics) == 0 {
		return cfg, errConfig("Config.Topics is required: name at least one topic")
	}
	for i, t := range cfg.Topics {
		if t == "" {
			return cfg, errConfig("Config.Topics[%d] is empty", i)
		}
	}
	if cfg.MaxLanes < 0 {
		return cfg, errConfig("Config.MaxLanes must be >= 0 (0 means %d), got %d", DefaultMaxLanes, cfg.MaxLanes)
	}
	if cfg.MaxLanes == 0 {
		cfg.MaxLanes = DefaultMaxLanes
	}
	if cfg.MaxPollRecords < 0 {
		return cfg, errConfig("Config.MaxPollRecords must be >= 0 (0 means no cap: one fetch's worth), got %d", cfg.MaxPollRecords)
	}
	if cfg.CommitInterval < 0 {
		return cfg, errConfig("Config.CommitInterval must be >= 0 (0 means %v), got %v", DefaultCommitInterval, cfg.CommitInterval)
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = DefaultCommitInterval
	}
	if cfg.RevokeTimeout == 0 {
		cfg.RevokeTimeout = DefaultRevokeTimeout
	}
	if err := cfg.Idempotency.resolve(&cfg.Idempotency); err != nil {
		return cfg, err
	}
	if err := cfg.DefaultLane.check("Config.DefaultLane", cfg.Handler); err != nil {
		return cfg, err
	}
	names := make([]string, 0, len(cfg.Lanes))
	for name := range cfg.Lanes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			return cfg, errConfig("Config.Lanes has an empty lane name")
		}
		lc := cfg.Lanes[name]
		if err := lc.check(fmt.Sprintf("Config.Lanes[%q]", name), cfg.Handler); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func (id Idempotency) resolve(out *Idempotency) error {
	if id.LockTTL < 0 {
		return errConfig("Config.Idempotency.LockTTL must be >= 0 (0 means %v), got %v", DefaultIdempotencyLockTTL, id.LockTTL)
	}
	if id.TTL < 0 {
		return errConfig("Config.Idempotency.TTL must be >= 0 (0 means %v), got %v", DefaultIdempotencyTTL, id.TTL)
	}
	if id.LockTTL == 0 {
		id.LockTTL = DefaultIdempotencyLockTTL
	}
	if id.TTL == 0 {
		id.TTL = DefaultIdempotencyTTL
	}
	if id.TTL < id.LockTTL {
		return errConfig("Config.Idempotency.TTL (%v) must not be below LockTTL (%v)", id.TTL, id.LockTTL)
	}
	*out = id
	return nil
}

// check validates a lane's configuration; field names the lane in errors.
func (lc LaneConfig) check(field string, handler Handler) error {
	switch {
	case lc.Workers < 0:
		return errConfig("%s.Workers must be >= 0 (0 means %d), got %d", field, DefaultWorkers, lc.Workers)
	case lc.MaxBatch < 0:
		return errConfig("%s.MaxBatch must be >= 0 (0 means %d), got %d", field, DefaultMaxBatch, lc.MaxBatch)
	case lc.ProbeInterval < 0:
		return errConfig("%s.ProbeInterval must be >= 0 (0 means %v), got %v", field, DefaultProbeInterval, lc.ProbeInterval)
	case lc.Handler == nil && handler == nil:
		return errConfig("%s has no Handler and Config.Handler is nil: set one of them", field)
	}
	return nil
}

// resolved returns lc with its defaults filled in (lc has passed check).
func (lc LaneConfig) resolved(lane string) (LaneConfig, error) {
	if lc.Workers == 0 {
		lc.Workers = DefaultWorkers
	}
	switch {
	case lc.QueueSize == 0:
		lc.QueueSize = DefaultQueueSize
	case lc.QueueSize < 0:
		lc.QueueSize = 0
	}
	if lc.MaxBatch == 0 {
		lc.MaxBatch = DefaultMaxBatch
	}
	if lc.ProbeInterval == 0 {
		lc.ProbeInterval = DefaultProbeInterval
	}
	if lc.AttemptTimeout == 0 {
		lc.AttemptTimeout = DefaultAttemptTimeout
	}
	if lc.Retry == nil {
		p, err := defaultRetry(lane)
		if err != nil {
			return lc, err
		}
		lc.Retry = p
	}
	return lc, nil
}

// smallestAttemptTimeout returns the smallest positive attempt timeout of
// the lanes (after defaults), or 0 when none has one.
func (cfg Config) smallestAttemptTimeout() time.Duration {
	var smallest time.Duration
	consider := func(d time.Duration) {
		if d == 0 {
			d = DefaultAttemptTimeout
		}
		if d > 0 && (smallest == 0 || d < smallest) {
			smallest = d
		}
	}
	consider(cfg.DefaultLane.AttemptTimeout)
	for _, lc := range cfg.Lanes {
		consider(lc.AttemptTimeout)
	}
	return smallest
}

// ErrClosed is returned by Run on a consumer that was closed or already
// ran. It is a rejection (watertight.IsRejection).
var ErrClosed = watertight.NewRejection("watertightkafka: consumer closed")

// ErrAttemptTimeout is the cause of a Handler context that ended because
// LaneConfig.AttemptTimeout passed (context.Cause), and what the attempt's
// error then matches (errors.Is).
var ErrAttemptTimeout = errors.New("watertightkafka: handler attempt timed out (LaneConfig.AttemptTimeout)")

// ErrAbandoned is the cause of a Handler context that ended because its
// partition was revoked and not drained within RevokeTimeout, was lost, or
// the consumer was closed (context.Cause).
var ErrAbandoned = errors.New("watertightkafka: partition abandoned (revoked, lost or closed)")
