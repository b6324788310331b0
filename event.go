package watertight

import (
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event. Each pattern package documents which kinds it emits
// and which Event fields it fills.
const (
	// EventStateChange: a circuit breaker (or another state machine) moved
	// From one state To another; Reason says why, Code names the rule or
	// the cause (circuit.CodeFailureRate, circuit.CodeTimer...).
	EventStateChange EventKind = iota + 1
	// EventRejected: a call was refused without running (open breaker,
	// exhausted budget, deadline too short...); Err is the rejection.
	EventRejected
	// EventBulkheadFull: a bulkhead or queue was full; Err is the rejection.
	EventBulkheadFull
	// EventRetryScheduled: a failed attempt will be retried after Delay;
	// Attempt is the number of attempts made, Err the last attempt's error.
	EventRetryScheduled
	// EventRetryExhausted: the last allowed attempt failed.
	EventRetryExhausted
	// EventRetrySkipped: a failure was not retried; Reason says why, Code
	// is the reason's code (retry.CodeNotIdempotent...).
	EventRetrySkipped
	// EventBudgetExhausted: a retry or hedge budget refused a withdrawal.
	EventBudgetExhausted
	// EventHedgeSent: a hedged (extra) attempt was started; Attempt is its
	// number (2 for the first hedge), Delay how long after the first.
	EventHedgeSent
	// EventHedgeWon: a hedged attempt answered first.
	EventHedgeWon
	// EventHedgeSuppressed: a hedge was due but not sent; Reason and Code
	// say why (budget, breaker, bulkhead, overload).
	EventHedgeSuppressed
	// EventFallbackUsed: a fallback answered instead of the primary;
	// Reason names the fallback, Code its kind, Err is the primary's error.
	EventFallbackUsed
	// EventShed: a server dropped a request before running it (deadline
	// gone, over capacity); Reason says why, Code is the reason's code
	// (watertighthttp.CodeRouteFull...).
	EventShed
	// EventFaultInjected: fault injection replaced or delayed a call.
	EventFaultInjected
	// EventReplayed: an idempotency layer answered with a stored result.
	EventReplayed
	// EventDropped: a task or request that had been accepted into a queue
	// was dropped without running (it waited longer than allowed, its
	// context ended, or the queue was shut down); Err says why.
	EventDropped
	// EventBadInput: a value a client sent (a header) was malformed or out
	// of range and was ignored or clamped. Key names the header, Code (and
	// Reason) says why ("malformed", "absurd", "unknown_criticality"). It
	// is emitted for every such value, also when the log line about it is
	// rate-limited away.
	EventBadInput
	// EventAcquired: a bulkhead admitted a call, which took Permits
	// permits (the n of AcquireN; 1 for Acquire, TryAcquire and Enter)
	// after waiting Delay for them (zero when it did not wait). It is sent
	// per call, and only to a bulkhead that has a Listener.
	//
	// With EventReleased it is enough for a dashboard to show a bulkhead
	// from events alone: the rate of EventAcquired events is the
	// throughput admitted (calls per second), the sum of their Permits
	// minus the sum of EventReleased's Permits is the permits in use, and
	// their Delay is the time spent waiting for a permit.
	EventAcquired
	// EventReleased: a call gave back Permits permits to a bulkhead
	// (Release, ReleaseN, Exit); the rate of these events is the rate of
	// finished calls. See EventAcquired.
	EventReleased
	// EventLimitChanged: an adaptive concurrency limit (package limit)
	// moved its limit to Permits at the end of a window; Reason names the
	// algorithm and Code is its code, Delay is the window's mean latency.
	EventLimitChanged
	numEventKinds
)

var eventKindNames = [...]string{
	EventStateChange:     "state_change",
	EventRejected:        "rejected",
	EventBulkheadFull:    "bulkhead_full",
	EventRetryScheduled:  "retry_scheduled",
	EventRetryExhausted:  "retry_exhausted",
	EventRetrySkipped:    "retry_skipped",
	EventBudgetExhausted: "budget_exhausted",
	EventHedgeSent:       "hedge_sent",
	EventHedgeWon:        "hedge_won",
	EventHedgeSuppressed: "hedge_suppressed",
	EventFallbackUsed:    "fallback_used",
	EventShed:            "shed",
	EventFaultInjected:   "fault_injected",
	EventReplayed:        "replayed",
	EventDropped:         "dropped",
	EventBadInput:        "bad_input",
	EventAcquired:        "acquired",
	EventReleased:        "released",
	EventLimitChanged:    "limit_changed",
}

// String returns the kind's stable snake_case name ("state_change"), for
// logs and metric labels.
func (k EventKind) String() string {
	if k > 0 && k < numEventKinds {
		return eventKindNames[k]
	}
	return "unknown"
}

// Event is one thing a protection did, in one shape across every package,
// so that a single Listener can log or count them all. Fields that do not
// apply to a kind are zero.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Source is the emitting package: "circuit", "bulkhead", "retry",
	// "budget", "deadline", "hedge", "fallback", "chaos", "http", "grpc",
	// "idempotency", "limit", "balance".
	Source string
	// Name is the instance's configured name (Config.Name); may be empty.
	Name string
	// Key is the registry key, route or method the instance serves, when
	// it has one.
	Key string
	// Time is when it happened.
	Time time.Time
	// From and To are state names (EventStateChange only).
	From, To string
	// Reason says why, in words for people: "failure rate 60% >= 50% over
	// 20 calls", "budget exhausted". It may carry numbers and names; match
	// Code, not Reason, in programs.
	Reason string
	// Code says why in a stable, machine-readable form: a short snake_case
	// value ("not_idempotent", "failure_rate", "route_full") defined as an
	// exported constant (CodeXxx) by the package that emits the event and
	// listed in that package's doc and in docs/observability.md. A code
	// keeps its meaning across versions and is never built from client
	// input or error text, so the set of values is bounded: it is meant for
	// metric labels, dashboards and alerts.
	//
	// Kinds that say why carry a code: EventStateChange (the rule that
	// tripped, or why it moved back), EventRejected, EventBulkheadFull,
	// EventRetrySkipped, EventRetryExhausted, EventBudgetExhausted,
	// EventHedgeSuppressed, EventFallbackUsed, EventShed, EventFaultInjected,
	// EventDropped, EventBadInput and EventLimitChanged (the algorithm).
	// Kinds that only count (EventRetryScheduled, EventHedgeSent,
	// EventHedgeWon, EventReplayed, EventAcquired, EventReleased) may leave
	// it empty. An emitter outside this module should define its own codes
	// the same way: 1 to 40 bytes of a-z, 0-9 and '_', beginning with a
	// letter (the metrics exporters count any other value as "other"). An
	// empty Code means "not given".
	Code string
	// Attempt is the attempt number the event concerns (1 is the first).
	Attempt int
	// Delay is a wait: before the next retry, before a hedge was sent, how
	// long a breaker that opened stays open, or how long a call waited for
	// a bulkhead's permits (EventAcquired).
	Delay time.Duration
	// Permits is the number of bulkhead permits taken or given back
	// (EventAcquired and EventReleased only).
	Permits int
	// Err is the error concerned: the rejection, or the failure that led
	// to a retry or a fallback.
	Err error
}

// A Listener receives Events. Emitters call OnEvent synchronously, in the
// goroutine that caused the event (a caller, or a timer), never while
// holding a lock of their own, so a listener may call back into the
// emitter. OnEvent must be safe for concurrent use and must return quickly:
// some events (rejections) happen on hot paths. A listener that does slow
// work (writes to a file or the network) should be wrapped in an
// AsyncListener, which hands events to one goroutine and drops them rather
// than block when that goroutine falls behind.
type Listener interface {
	OnEvent(Event)
}

// Wants reports whether l takes events of kind k: true for any non-nil
// listener, unless l has a method Wants(EventKind) bool that says no.
// Emitters of events sent on every call (a bulkhead's EventAcquired and
// EventReleased) ask it once, when they are built, and send those to no
// listener that declines them, so that a listener which counts rejections
// and reads state from snapshots (the metrics exporters, the dashboard)
// adds nothing to a call that succeeds.
func Wants(l Listener, k EventKind) bool {
	if l == nil {
		return false
	}
	if f, ok := l.(interface{ Wants(EventKind) bool }); ok {
		return f.Wants(k)
	}
	return true
}

// ListenerFunc adapts a function to a Listener.
type ListenerFunc func(Event)

// OnEvent calls f(e).
func (f ListenerFunc) OnEvent(e Event) { f(e) }

// Listeners returns a Listener that passes each event to every non-nil
// listener in ls, in order. It returns nil when none is non-nil, so that
// emitters skip building events at all.
func Listeners(ls ...Listener) Listener {
	var keep multiListener
	for _, l := range ls {
		if l != nil {
			keep = append(keep, l)
		}
	}
	switch len(keep) {
	case 0:
		return nil
	case 1:
		return keep[0]
	}
	return keep
}

type multiListener []Listener

func (m multiListener) OnEvent(e Event) {
	for _, l := range m {
		if wantsAll(l) || Wants(l, e.Kind) {
			l.OnEvent(e)
		}
	}
}

// Wants reports whether any of the listeners wants kind k.
func (m multiListener) Wants(k EventKind) bool {
	for _, l := range m {
		if Wants(l, k) {
			return true
		}
	}
	return false
}

// wantsAll reports whether l takes every kind (it has no Wants method).
func wantsAll(l Listener) bool {
	_, ok := l.(interface{ Wants(EventKind) bool })
	return !ok
}

// Emit sends e to l if l is not nil, filling e.Time with the current time
// when it is zero. It is what pattern packages call; the clock is read only
// when somebody listens.
func Emit(l Listener, e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.OnEvent(e)
}

// AsyncListener delivers events to another Listener from a single goroutine
// through a bounded queue. OnEvent never blocks: when the queue is full the
// event is dropped and counted (Dropped). Events are delivered in the order
// they were accepted. Close stops the goroutine after delivering what is
// queued. Build it with NewAsyncListener.
type AsyncListener struct {
	next    Listener
	queue   chan Event
	dropped atomic.Uint64
	mu      sync.RWMutex // guards closed against a send on a closed queue
	closed  bool
	done    chan struct{}
}

// DefaultAsyncBuffer is the queue length NewAsyncListener uses for a buffer
// of zero.
const DefaultAsyncBuffer = 1024

// NewAsyncListener starts the goroutine that delivers to next and returns
// the listener. buffer is the queue length: zero means DefaultAsyncBuffer,
// and a negative buffer is treated as zero. Call Close when done with it.
func NewAsyncListener(next Listener, buffer int) *AsyncListener {
	if buffer <= 0 {
		buffer = DefaultAsyncBuffer
	}
	a := &AsyncListener{next: next, queue: make(chan Event, buffer), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *AsyncListener) run() {
	defer close(a.done)
	for e := range a.queue {
		if a.next != nil {
			a.next.OnEvent(e)
		}
	}
}

// Wants reports whether the listener it delivers to wants kind k.
func (a *AsyncListener) Wants(k EventKind) bool { return a.next != nil && Wants(a.next, k) }

// OnEvent queues e, or drops it when the queue is full or the listener is
// closed.
func (a *AsyncListener) OnEvent(e Event) {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		a.dropped.Add(1)
		return
	}
	select {
	case a.queue <- e:
	default:
		a.dropped.Add(1)
	}
	a.mu.RUnlock()
}

// Dropped returns how many events were dropped because the queue was full
// or the listener closed.
func (a *AsyncListener) Dropped() uint64 { return a.dropped.Load() }

// Close stops accepting events, waits until the queued ones are delivered,
// and stops the goroutine. It is safe to call more than once.
func (a *AsyncListener) Close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	<-a.done
}
