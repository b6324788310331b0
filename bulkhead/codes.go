package bulkhead

// The codes of the package's events (watertight.Event.Code): stable,
// machine-readable reasons for metric labels, dashboards and alerts. They
// keep their meaning across versions; the words for people are in Reason.
const (
	// CodeNoPermit: EventBulkheadFull, no permit was free and the call
	// could not wait (MaxWait zero, or TryAcquire).
	CodeNoPermit = "no_permit"
	// CodeMaxWait: EventBulkheadFull, no permit came free within MaxWait.
	CodeMaxWait = "max_wait"
	// CodeWaitingRoomFull: EventBulkheadFull, no permit was free and the
	// waiting room (MaxWaiters) was full; for a Partitioned bulkhead, the
	// partition's queue (PartitionConfig.MaxWaiters).
	CodeWaitingRoomFull = "waiting_room_full"
	// CodeOverShare: EventBulkheadFull, a Partitioned bulkhead's partition
	// already held its guaranteed share and no permit could be lent to it
	// (every permit held, or the free ones kept in reserve for the other
	// partitions: PartitionedConfig.Reserve), and the call could not wait.
	// A partition below its guarantee refused at once gets CodeNoPermit.
	CodeOverShare = "over_share"
	// CodeEvicted: EventBulkheadFull, the caller was evicted from the
	// waiting room by a newer one (QueueOrder LIFO).
	CodeEvicted = "evicted"
	// CodeQueueFull: EventBulkheadFull, a pool's workers were all busy and
	// its queue full (ErrQueueFull).
	CodeQueueFull = "queue_full"
	// CodeTooManyPermits: EventRejected, an AcquireN asked for more permits
	// than MaxConcurrent (ErrTooMany).
	CodeTooManyPermits = "too_many_permits"
	// CodeClosed: EventRejected, a task was submitted to a pool after
	// Shutdown (ErrClosed).
	CodeClosed = "closed"
	// CodeTooManyKeys: EventRejected, a Registry.Get refused because the
	// registry is full (ErrTooManyKeys).
	CodeTooManyKeys = "too_many_keys"
	// CodeQueueTimeout: EventDropped, a pool task waited longer than
	// MaxQueueWait in the queue (ErrQueueTimeout).
	CodeQueueTimeout = "queue_timeout"
	// CodeContextDone: EventDropped, a pool task's context ended while it
	// was queued.
	CodeContextDone = "context_done"
	// CodeShutdown: EventDropped, a queued pool task was dropped by
	// Shutdown (ErrClosed).
	CodeShutdown = "shutdown"
)
