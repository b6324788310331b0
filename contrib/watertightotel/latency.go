package watertightotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight-go/watertight"
)

// epoch is the fixed instant that Latency measures from: time.Since of it
// reads the monotonic clock only, about half the cost of time.Now.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// Latency is a watertight.Policy that records the duration of every call
// through it into the histogram watertight.call.duration (unit s, attributes
// watertight.name and outcome), the outcome being the call's error
// classified by Config.Classify. It never refuses a call and returns the
// call's error unchanged. Build it with Metrics.Latency; it is safe for
// concurrent use.
//
// A call that a protection rejected (watertight.IsRejection: an open
// breaker, a full bulkhead, an exhausted budget, a shed request) is not
// recorded, wherever the policy sits: it did not run, so it has no
// duration, and the protection's rejection counter
// (watertight.circuit.rejections, watertight.bulkhead.rejections, ...)
// already counts it.
//
// What it measures depends on where it sits in the pipeline: innermost it
// times the dependency, one record per attempt; outermost it times what the
// caller waits, retries and waits for permits included.
//
// Outermost, note that a call whose retry the budget refused ends in a
// rejection (retry.SkippedError for retry.ErrNoBudget), and is not recorded
// although its attempts ran; innermost, each attempt is recorded as it ended.
//
// Cost per call: two reads of the monotonic clock, the classification of a
// non-nil error and one synchronous histogram record with a prepared
// attribute set; see the package benchmarks for the SDK's share. A rejection
// costs one walk of its error chain and nothing else.
type Latency struct {
	m    *Metrics
	name string
	opts [4][]metric.RecordOption // by watertight.Outcome
}

// Latency returns a policy that records call durations under name. Policies
// made with the same name share their data points.
func (m *Metrics) Latency(name string) *Latency {
	l := &Latency{m: m, name: name}
	for o := range l.opts {
		l.opts[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			AttrName.String(name), attrOutcome.String(watertight.Outcome(o).String())))}
	}
	return l
}

// Enter implements watertight.Policy: it notes the start of the call.
func (l *Latency) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{Start: nanotime()}, nil
}

// Exit implements watertight.Policy: it records the call's duration under
// its outcome, unless err is a rejection, and returns err unchanged.
func (l *Latency) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if err != nil && isRejection(err) {
		return err
	}
	d := float64(nanotime()-t.Start) / float64(time.Second)
	o := l.m.classify(ctx, err)
	if int(o) < len(l.opts) {
		l.m.calls.Record(ctx, d, l.opts[o]...)
	} else {
		l.m.calls.Record(ctx, d, metric.WithAttributes(AttrName.String(l.name), attrOutcome.String(o.String())))
	}
	return err
}
