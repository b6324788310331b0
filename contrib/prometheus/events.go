package watertightprom

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// OnEvent implements watertight.Listener: it counts e under its kind, source,
// name and key, and for some kinds a bounded reason (see docs/observability.md).
// Set the Collector as the Listener of the protections' Configs (or combine
// it with others through watertight.Listeners).
//
// Cost: OnEvent allocates nothing once a label set has been seen. It hashes
// the event's labels into a map that is read without a lock (an atomic
// load), then adds one to an atomic counter; a label set seen for the first
// time takes a mutex. For a skipped retry or a shed request it also matches
// the event's error against the known reasons (errors.Is). It is far cheaper
// than the call that caused the event, but it is not free: the events of a
// hot path (rejections by an open breaker) each pay it.
func (c *Collector) OnEvent(e watertight.Event) {
	k := evKey{kind: e.Kind, source: e.Source, name: e.Name, key: e.Key}
	switch e.Kind {
	case watertight.EventStateChange:
		k.a, k.b = e.From, e.To
	case watertight.EventRetrySkipped:
		k.a = skipReason(e)
	case watertight.EventShed:
		k.a = shedReason(e)
	}
	c.events.inc(k)
}

// skipReason maps a skipped retry to a bounded label value: from the
// reason's sentinel error when Err wraps it, else from the words of
// e.Reason (retry's "not idempotent", "not enough time left before the
// deadline", "retry budget exhausted"; the HTTP Transport's "request body
// cannot be replayed").
func skipReason(e watertight.Event) string {
	switch {
	case errors.Is(e.Err, retry.ErrNotIdempotent):
		return "not_idempotent"
	case errors.Is(e.Err, retry.ErrNoTime):
		return "no_time"
	case errors.Is(e.Err, retry.ErrNoBudget), errors.Is(e.Err, budget.ErrExhausted):
		return "no_budget"
	case errors.Is(e.Err, watertighthttp.ErrBodyNotReplayable):
		return "body_not_replayable"
	}
	r := e.Reason
	switch {
	case r == "":
		return "other"
	case strings.Contains(r, "idempotent"):
		return "not_idempotent"
	case strings.Contains(r, "budget"):
		return "no_budget"
	case strings.Contains(r, "replay"):
		return "body_not_replayable"
	case strings.Contains(r, "time"), strings.Contains(r, "deadline"):
		return "no_time"
	}
	return "other"
}

// shedReason maps a shed request to a bounded label value.
func shedReason(e watertight.Event) string {
	switch {
	case errors.Is(e.Err, watertighthttp.ErrRouteFull):
		return "route_full"
	case errors.Is(e.Err, watertighthttp.ErrDisplaced):
		return "displaced"
	case errors.Is(e.Err, watertighthttp.ErrQueueGaveUp):
		return "queue_gave_up"
	case errors.Is(e.Err, deadline.ErrTooShort), errors.Is(e.Err, deadline.ErrExpired):
		return "deadline"
	}
	switch e.Reason {
	case "route_full", "displaced", "queue_gave_up", "deadline":
		return e.Reason
	}
	return "other"
}

// evKey is the label set an event is counted under.
type evKey struct {
	kind              watertight.EventKind
	source, name, key string
	a, b              string // reason, or from and to
}

type counterMap = map[evKey]*atomic.Uint64

// eventCounts counts events by label set. Lookups of a label set already
// promoted to the read map take no lock and allocate nothing; new label sets
// go to a dirty map under a mutex and are promoted in bulk once the misses
// have paid for the copy (as sync.Map does), so n label sets cost O(n)
// copying in all.
type eventCounts struct {
	max      int // bound on label sets; negative: none
	read     atomic.Pointer[counterMap]
	overflow atomic.Uint64

	mu     sync.Mutex
	dirty  counterMap // label sets not in read
	misses int
	n      int // label sets in read and dirty
}

func (ec *eventCounts) inc(k evKey) {
	if m := ec.read.Load(); m != nil {
		if n := (*m)[k]; n != nil {
			n.Add(1)
			return
		}
	}
	ec.incSlow(k)
}

func (ec *eventCounts) incSlow(k evKey) {
	ec.mu.Lock()
	var read counterMap
	if m := ec.read.Load(); m != nil {
		read = *m
	}
	n := read[k]
	if n == nil {
		n = ec.dirty[k]
	}
	if n == nil {
		if ec.max >= 0 && ec.n >= ec.max {
			ec.mu.Unlock()
			ec.overflow.Add(1)
			return
		}
		n = new(atomic.Uint64)
		if ec.dirty == nil {
			ec.dirty = counterMap{}
		}
		ec.dirty[k] = n
		ec.n++
	}
	if len(ec.dirty) > 0 {
		ec.misses++
		if ec.misses >= len(read) {
			merged := make(counterMap, len(read)+len(ec.dirty))
			for k, v := range read {
				merged[k] = v
			}
			for k, v := range ec.dirty {
				merged[k] = v
			}
			ec.read.Store(&merged)
			ec.dirty, ec.misses = nil, 0
		}
	}
	ec.mu.Unlock()
	n.Add(1)
}

// each calls f for every label set counted so far, under the mutex (f must
// not call back into ec).
func (ec *eventCounts) each(f func(evKey, uint64)) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if m := ec.read.Load(); m != nil {
		for k, v := range *m {
			f(k, v.Load())
		}
	}
	for k, v := range ec.dirty {
		f(k, v.Load())
	}
}

// aggKey is one series of an event metric: several label sets of eventCounts
// may add up into one (events_total has no key, and two sources may report
// retries under one name).
type aggKey struct {
	d  *prometheus.Desc
	n  int
	lv [4]string
}

func (c *Collector) collectEvents(ch chan<- prometheus.Metric) {
	d := &c.d
	sums := map[aggKey]uint64{}
	add := func(desc *prometheus.Desc, v uint64, lv ...string) {
		k := aggKey{d: desc, n: len(lv)}
		for i, s := range lv {
			k.lv[i] = validUTF8(s)
		}
		sums[k] += v
	}
	c.events.each(func(k evKey, v uint64) {
		add(d.events, v, k.source, k.kind.String(), k.name)
		switch k.kind {
		case watertight.EventStateChange:
			if k.source == "circuit" {
				add(d.circuitTransitions, v, k.name, k.key, k.a, k.b)
			}
		case watertight.EventRetryScheduled:
			add(d.retryScheduled, v, k.name, k.key)
		case watertight.EventRetryExhausted:
			add(d.retryExhausted, v, k.name, k.key)
		case watertight.EventRetrySkipped:
			add(d.retrySkipped, v, k.name, k.key, k.a)
		case watertight.EventShed:
			add(d.shed, v, k.name, k.key, k.a)
		case watertight.EventFallbackUsed:
			add(d.fallbackUsed, v, k.name, k.key)
		}
	})
	for k, v := range sums {
		counter(ch, k.d, float64(v), k.lv[:k.n]...)
	}
	counter(ch, d.eventsOverflow, float64(c.events.overflow.Load()))
}
