package watertightotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
)

// Wants declines the events sent on every call (EventAcquired,
// EventReleased): what they would count is read from the protections'
// snapshots, so that a call that succeeds costs nothing here (see
// watertight.Wants).
func (m *Metrics) Wants(k watertight.EventKind) bool {
	return k != watertight.EventAcquired && k != watertight.EventReleased
}

// OnEvent implements watertight.Listener: it counts e under its kind, source,
// name and key, and its Code as the reason attribute (see
// docs/observability.md): the exporter copies the code the emitting package
// set, and learns nothing from the event's words or error.
// Set the Metrics as the Listener of the protections' Configs (or combine
// it with others through watertight.Listeners).
//
// The counts are reported through the asynchronous counters at collection
// time; OnEvent itself does not touch the OpenTelemetry SDK.
//
// Cost: OnEvent allocates nothing once an attribute set has been seen. It
// hashes the event's attributes into a map that is read without a lock (an atomic
// load), then adds one to an atomic counter; an attribute set seen for the
// first time takes a mutex. It also checks that Code has the shape of a code.
// It is far cheaper
// than the call that caused the event, but it is not free: the events of a
// hot path (rejections by an open breaker) each pay it.
func (m *Metrics) OnEvent(e watertight.Event) {
	m.events.Inc(eventcount.KeyOf(e))
}

// aggKey is one data point of an event metric: several entries of
// eventCounts may add up into one (watertight.events has no key, and two
// sources may report retries under one name).
type aggKey struct {
	inst metric.Int64Observable
	n    int
	kv   [5]attribute.KeyValue
}

func (m *Metrics) observeEvents(o metric.Observer) {
	in := &m.inst
	sums := map[aggKey]uint64{}
	add := func(inst metric.Int64Observable, v uint64, kv ...attribute.KeyValue) {
		k := aggKey{inst: inst, n: len(kv)}
		copy(k.kv[:], kv)
		sums[k] += v
	}
	m.events.Each(func(k eventcount.Key, v uint64) {
		name, key := AttrName.String(validUTF8(k.Name)), AttrKey.String(validUTF8(k.Key))
		reason := attrReason.String(k.Code) // a code: valid UTF-8 by its shape
		add(in.events, v, attrSource.String(validUTF8(k.Source)), attrEvent.String(k.Kind.String()), name, reason)
		switch k.Kind {
		case watertight.EventStateChange:
			if k.Source == "circuit" {
				add(in.circuitTransitions, v, name, key, attrFrom.String(validUTF8(k.From)), attrTo.String(validUTF8(k.To)), reason)
			}
		case watertight.EventRetryScheduled:
			add(in.retryScheduled, v, name, key)
		case watertight.EventRetryExhausted:
			add(in.retryExhausted, v, name, key)
		case watertight.EventRetrySkipped:
			add(in.retrySkipped, v, name, key, reason)
		case watertight.EventShed:
			add(in.shed, v, name, key, reason)
		case watertight.EventFallbackUsed:
			add(in.fallbackUsed, v, name, key)
		case watertight.EventBadInput:
			add(in.badInput, v, name, attrHeader.String(validUTF8(k.Key)), reason)
		}
	})
	for k, v := range sums {
		o.ObserveInt64(k.inst, count(v), metric.WithAttributes(k.kv[:k.n]...))
	}
	o.ObserveInt64(in.eventsOverflow, count(m.events.Overflow.Load()))
}
