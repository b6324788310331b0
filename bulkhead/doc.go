// Package bulkhead keeps one dependency from taking everything: it bounds how
// much of the caller's capacity (goroutines, connections, memory) calls to
// that dependency may hold at once. Like the watertight compartments of a
// ship's hull, a flood in one (a dependency that slows down, so calls to it
// pile up) stays there, and calls to the other dependencies go on.
//
// # Fair shares
//
// [Partitioned] is a semaphore whose MaxConcurrent permits are shared by
// named partitions (tiers, tenants) with weights: each is guaranteed its
// share, lends what it leaves unused to the others while keeping a
// [PartitionedConfig].Reserve of it free for its return, and has a FIFO
// queue of its own; a released permit goes first to a partition waiting
// under its guarantee. A spike of one tier (free) is refused and queued in
// its own partition while another (premium) keeps its latency. See
// docs/bulkhead.md.
//
// # Semaphore bulkhead
//
// [Bulkhead] is a counting semaphore: a call takes a permit before it runs
// and gives it back when it ends, on the caller's own goroutine. When all
// [Config].MaxConcurrent permits are held, a new call is refused at once with
// [ErrFull], or waits for a permit up to [Config].MaxWait in a waiting room
// of at most [Config].MaxWaiters callers, served in [Config].QueueOrder
// (first come, first served by default). A caller whose context ends first
// gets its context's error, marked [watertight.Ignored]: giving up is
// neither a failure of the dependency nor a saturation of the bulkhead.
// [Bulkhead.AcquireN] takes n permits at once, all or none, so that the
// permits can stand for a budget (bytes, rows, slots) rather than a number
// of calls; a large waiter at the head of the queue is not overtaken by
// small ones. Taking and giving back a permit when nobody waits costs a few
// atomic operations and no allocation, and refusing costs three or four
// atomic loads and a counter increment, so it can sit on every call. The
// permits are striped over per-core cells, so goroutines on different cores
// rarely touch the same cache line. A Bulkhead is a [watertight.Policy]: put it in
// a pipeline, inside the circuit breaker and outside the attempt timeout:
//
//	fallback → total deadline → retry | hedge → breaker → bulkhead → attempt timeout → call
//
// [Registry] holds one Bulkhead per key (a tenant, a host), bounded in the
// number of keys.
//
// # Worker pool
//
// [Pool] runs tasks on a fixed set of worker goroutines with a bounded queue
// in front: at most [PoolConfig].Workers tasks run at once, and when the
// queue is full [Pool.Submit] and [Call] refuse at once with [ErrQueueFull].
// Tasks wait in the queue at most [PoolConfig].MaxQueueWait, and a task whose
// context has ended is dropped before it runs.
//
// # Which one
//
// Use the semaphore bulkhead by default: it adds almost nothing to a call,
// keeps the call on the caller's goroutine (its stack, its context values,
// its panics) and needs no shutdown. Use the pool when the work must leave
// the caller's goroutine: when the caller has to be able to stop waiting
// while the work keeps its place under the limit until it really ends (code
// that ignores its context), when tasks are fire-and-forget, or when you want
// a queue of bounded length and age in front of a fixed number of workers.
// It costs a hand-off between goroutines and an allocation or two per task,
// and must be shut down.
//
// All rejections satisfy [watertight.IsRejection] (never retried, not a
// failure of the dependency), and the saturation ones ([ErrFull],
// [ErrQueueFull], [ErrQueueTimeout]) also [watertight.IsSaturation].
//
// # Events
//
// With a [Config].Listener (or [PoolConfig].Listener), a bulkhead reports each
// refusal as a [watertight.Event] with Source "bulkhead": EventBulkheadFull
// for a full bulkhead or queue, EventRejected for a closed pool, a full
// [Registry] or an AcquireN larger than the limit ([ErrTooMany]), and
// EventDropped for a pool task dropped from the queue. A semaphore Bulkhead
// with a Listener also sends EventAcquired and EventReleased for every call,
// with the permits taken or given back: throughput and permits in use can
// be drawn from them alone. A Registry's events carry the key as Key. Events are sent with no lock held,
// so a listener may call back in; without a listener none is built, and the
// paths cost what they did.
//
// Each refusal and drop carries a Code, a stable reason for metric labels
// and alerts: EventBulkheadFull CodeNoPermit "no_permit", CodeMaxWait
// "max_wait", CodeWaitingRoomFull "waiting_room_full", CodeEvicted "evicted"
// or CodeQueueFull "queue_full", and from a Partitioned bulkhead
// CodeOverShare "over_share"; EventRejected CodeTooManyPermits
// "too_many_permits", CodeClosed "closed" or CodeTooManyKeys "too_many_keys";
// EventDropped CodeQueueTimeout "queue_timeout", CodeContextDone
// "context_done" or CodeShutdown "shutdown".
package bulkhead
