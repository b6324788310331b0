// Package watertightkafka puts bulkheads inside a Kafka consumer, on
// franz-go: a consumer group whose records run through one worker pool per
// lane (per topic by default, or per tenant, header... with Config.LaneOf),
// so that a slow or failing topic keeps its compartment and the others go
// on. Kafka decouples services across the network; it does not stop one
// topic's slow work from taking every worker of the process that consumes
// it, nor does queueing everything instead bound the memory.
//
//	c, err := watertightkafka.New(watertightkafka.Config{
//		Brokers: []string{"127.0.0.1:9092"},
//		Group:   "billing",
//		Topics:  []string{"user-registrations", "video-transcoding"},
//		Handler: handle,
//		Lanes: map[string]watertightkafka.LaneConfig{
//			"user-registrations": {Workers: 4, QueueSize: 200},
//			"video-transcoding":  {Workers: 8, QueueSize: 16, MaxBatch: 1},
//		},
//	})
//	if err != nil {
//		return err // names the field and the rule
//	}
//	return c.Run(ctx) // until ctx ends; then drains, commits, leaves
//
// # Lanes and backpressure
//
// Each lane is a [bulkhead.Pool]: LaneConfig.Workers records at once, a
// queue of LaneConfig.QueueSize records in front. A poll's records of one
// partition are cut into tasks of consecutive records (at most
// LaneConfig.MaxBatch), each run in offset order by one worker. Records that
// do not fit in the queue are held, and the partitions that feed the full
// lane are paused (franz-go's PauseFetchPartitions) while other lanes have
// partitions to fetch; when every lane is full the consumer simply stops
// polling. Either way it fetches nothing more for a full lane until its
// held records are queued, then resumes. So a lane never holds more than
// Workers×MaxBatch records running, QueueSize queued and one poll's worth
// held (Config.MaxPollRecords, or one fetch response), however large the
// lag: the lag stays in Kafka, where it is cheap, visible (Snapshot's Lag)
// and shared by the consumers of the group.
//
// # Delivery
//
// At least once, in one sentence: an offset is committed only when every
// record before it in its partition has finished (processed,
// dead-lettered, or found processed already), so a crash or a rebalance
// replays records, never skips one. Records of a partition run
// concurrently (in different tasks); a contiguous-completion tracker per
// partition keeps the commits in order. Commits go out every
// Config.CommitInterval and when partitions are revoked: a revocation (a
// rebalance, or Close) stops the partition's queued and held records, waits
// up to Config.RevokeTimeout for the running ones, commits what finished
// and abandons the rest (their handler context ends with ErrAbandoned), for
// the next owner to run. Lost partitions (the group session ended) are
// abandoned at once, with no commit.
//
// With Config.Idempotency.Store (an [idempotency.MemoryStore], or
// contrib/redisstore's store shared by the consumer processes), each
// record is claimed under a key (topic/partition/offset, or
// Config.Idempotency.Key) before its handler runs and completed after: a
// replayed record whose key is completed is skipped (EventReplayed,
// CodeDuplicate), so its side effect does not happen twice.
//
// # Failures
//
// The handler's error is retried by the lane's retry.Policy (by default:
// three attempts, transient errors only, full-jitter backoff, under a
// retry budget of the lane's own), each attempt bounded by
// LaneConfig.AttemptTimeout. A record the policy gives up on is written to
// the lane's dead-letter topic (the record's topic + ".dlq" by default) with
// its own key, value and headers and the reason in headers (HeaderCode,
// HeaderError, HeaderAttempts, HeaderTopic, HeaderPartition, HeaderOffset,
// HeaderLane), and its partition moves on: a failing record holds its
// partition no longer than its retry policy says (plus the time to write
// the dead letter, which is retried until written, so that nothing is
// lost).
//
// With LaneConfig.Breaker, a [circuit.Breaker] per topic or per downstream
// dependency (lanes may share one), a record the open breaker refuses is
// not failed: it is held, the lane's partitions are paused, and every
// LaneConfig.ProbeInterval the lane looks at the breaker; once it is
// half-open, the held records go back to the workers and the breaker's
// trials decide. A handler that answers with another rejection
// (watertight.IsRejection: its own bulkhead full, say) is treated the same
// way.
//
// # Observing
//
// Config.Listener receives watertight.Events with Source "kafka" and a Code
// from this package (CodeQueueFull, CodeBreakerOpen, CodeResumed,
// CodeDeadLettered, ...). Snapshot gives, per lane, the pool's workers in
// use and the records queued, held and buffered, whether it is paused and
// how often it paused, and what it processed and dead-lettered; per topic,
// the partitions assigned and paused and the lag. Pools returns the lanes'
// pools for contrib/watertightprom's AddPool.
//
// # The client
//
// New builds the franz-go client from Config.Brokers and
// Config.ClientOptions, adding what the consumer relies on: a consumer
// group with autocommit off, BlockRebalanceOnPoll, and its partition
// callbacks; and, before the caller's options, FetchMaxWait(500ms), since
// a resumed partition waits for the fetch in flight. Set
// kgo.ConsumeResetOffset for a new group (franz-go starts one a minute
// back by default).
//
// docs/consumers.md says how to size a lane, what backpressure does to
// lag, and how to run the tests against a real cluster
// (WATERTIGHT_KAFKA_BROKERS).
package watertightkafka
