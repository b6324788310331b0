package watertightprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
)

// epoch is the fixed instant that Latency measures from: time.Since of it
// reads the monotonic clock only, about half the cost of time.Now.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// Latency is a watertight.Policy that observes the duration of every call
// through it into watertight_call_duration_seconds{name, outcome}, the
// outcome being the call's error classified by Config.Classify. It never
// refuses a call and returns the call's error unchanged. Build it with
// Collector.Latency; it is safe for concurrent use.
//
// A call that a protection rejected (watertight.IsRejection: an open
// breaker, a full bulkhead, an exhausted budget, a shed request) is not
// observed, wherever the policy sits: it did not run, so it has no duration,
// and the protection's rejection counter (watertight_circuit_rejected_total,
// watertight_bulkhead_rejected_total, ...) already counts it.
//
// What it measures depends on where it sits in the pipeline: innermost
// (just before the call, inside the attempt timeout) it times the
// dependency, one observation per attempt; outermost it times what the
// caller waits, retries and waits for permits included. The histogram's
// _count is also the number of calls that ran, by outcome.
//
// Outermost, note that a call whose retry the budget refused ends in a
// rejection (retry.SkippedError for retry.ErrNoBudget), and is not observed
// although its attempts ran; innermost, each attempt is observed as it ended.
//
// Cost per call: two reads of the monotonic clock, the classification of a
// non-nil error, and one histogram observation (atomic adds); no allocation
// of its own (the default classification of a failure allocates in
// errors.As). A rejection costs one walk of its error chain and nothing else.
type Latency struct {
	c    *Collector
	name string
	obs  [4]prometheus.Observer // by watertight.Outcome
}

// Latency returns a policy that observes call durations under name. Policies
// made with the same name share their series.
func (c *Collector) Latency(name string) *Latency {
	l := &Latency{c: c, name: name}
	for o := range l.obs {
		l.obs[o] = c.calls.WithLabelValues(name, watertight.Outcome(o).String())
	}
	return l
}

// Enter implements watertight.Policy: it notes the start of the call.
func (l *Latency) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{Start: nanotime()}, nil
}

// Exit implements watertight.Policy: it observes the call's duration under
// its outcome, unless err is a rejection, and returns err unchanged.
func (l *Latency) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if err != nil && isRejection(err) {
		return err
	}
	d := float64(nanotime()-t.Start) / float64(time.Second)
	o := l.c.classify(ctx, err)
	if int(o) < len(l.obs) {
		l.obs[o].Observe(d)
	} else {
		l.c.calls.WithLabelValues(l.name, o.String()).Observe(d)
	}
	return err
}
