package watertightprom

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
)

// Wants declines the events sent on every call (EventAcquired,
// EventReleased): what they would count is read from the protections'
// snapshots, so that a call that succeeds costs nothing here (see
// watertight.Wants).
func (c *Collector) Wants(k watertight.EventKind) bool {
	return k != watertight.EventAcquired && k != watertight.EventReleased
}

// OnEvent implements watertight.Listener: it counts e under its kind, source,
// name and key, and its Code as the reason label (see docs/observability.md):
// the exporter copies the code the emitting package set, and learns nothing
// from the event's words or error.
// Set the Collector as the Listener of the protections' Configs (or combine
// it with others through watertight.Listeners).
//
// Cost: OnEvent allocates nothing once a label set has been seen. It hashes
// the event's labels into a map that is read without a lock (an atomic
// load), then adds one to an atomic counter; a label set seen for the first
// time takes a mutex. It also checks that Code has the shape of a code. It
// is far cheaper
// than the call that caused the event, but it is not free: the events of a
// hot path (rejections by an open breaker) each pay it.
func (c *Collector) OnEvent(e watertight.Event) {
	c.events.Inc(eventcount.KeyOf(e))
}

// aggKey is one series of an event metric: several label sets of eventCounts
// may add up into one (events_total has no key, and two sources may report
// retries under one name).
type aggKey struct {
	d  *prometheus.Desc
	n  int
	lv [5]string
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
	c.events.Each(func(k eventcount.Key, v uint64) {
		add(d.events, v, k.Source, k.Kind.String(), k.Name, k.Code)
		switch k.Kind {
		case watertight.EventStateChange:
			if k.Source == "circuit" {
				add(d.circuitTransitions, v, k.Name, k.Key, k.From, k.To, k.Code)
			}
		case watertight.EventRetryScheduled:
			add(d.retryScheduled, v, k.Name, k.Key)
		case watertight.EventRetryExhausted:
			add(d.retryExhausted, v, k.Name, k.Key)
		case watertight.EventRetrySkipped:
			add(d.retrySkipped, v, k.Name, k.Key, k.Code)
		case watertight.EventShed:
			add(d.shed, v, k.Name, k.Key, k.Code)
		case watertight.EventFallbackUsed:
			add(d.fallbackUsed, v, k.Name, k.Key)
		case watertight.EventBadInput:
			add(d.badInput, v, k.Name, k.Key, k.Code)
		}
	})
	for k, v := range sums {
		counter(ch, k.d, float64(v), k.lv[:k.n]...)
	}
	counter(ch, d.eventsOverflow, float64(c.events.Overflow.Load()))
}
