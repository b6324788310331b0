package watertightprom_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

func TestEvents(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	var l watertight.Listener = c
	emit := func(n int, e watertight.Event) {
		for range n {
			watertight.Emit(l, e)
		}
	}
	emit(2, watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "hosts", Key: "eu", From: "closed", To: "open", Code: circuit.CodeFailureRate})
	emit(1, watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "hosts", Key: "eu", From: "open", To: "half-open", Code: circuit.CodeTimer})
	emit(3, watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "payments", Attempt: 1})
	emit(2, watertight.Event{Kind: watertight.EventRetryScheduled, Source: "http", Name: "payments"}) // adds up with the above
	emit(1, watertight.Event{Kind: watertight.EventRetryExhausted, Source: "retry", Name: "payments", Code: retry.CodeMaxAttempts})
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Code: retry.CodeNoTime, Err: &retry.SkippedError{Reason: retry.ErrNoTime, Err: errBoom}})
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Code: retry.CodeNotIdempotent, Reason: "not idempotent"})
	emit(2, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Code: retry.CodeNoBudget})
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "http", Name: "payments", Code: watertighthttp.CodeBodyNotReplayable})
	// No code: "other", whatever the words and the error say.
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Reason: "not idempotent", Err: retry.ErrNotIdempotent})
	emit(4, watertight.Event{Kind: watertight.EventHedgeSent, Source: "hedge", Name: "search", Attempt: 2})
	emit(1, watertight.Event{Kind: watertight.EventHedgeWon, Source: "hedge", Name: "search"})
	emit(2, watertight.Event{Kind: watertight.EventHedgeSuppressed, Source: "hedge", Name: "search", Reason: "budget", Code: hedge.CodeBudget})
	emit(1, watertight.Event{Kind: watertight.EventHedgeSuppressed, Source: "hedge", Name: "search", Reason: "the moon", Code: "the moon"}) // not a code
	emit(2, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /items", Code: watertighthttp.CodeRouteFull})
	emit(1, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /items", Code: watertighthttp.CodeDisplaced})
	emit(1, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /items", Code: watertighthttp.CodeQueueGaveUp})
	emit(1, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /items", Code: watertighthttp.CodeDeadline, Err: deadline.ErrTooShort})
	emit(1, watertight.Event{Kind: watertight.EventShed, Source: "grpc", Name: "api", Key: "GET /items", Code: watertighthttp.CodeQueueGaveUp})
	emit(1, watertight.Event{Kind: watertight.EventFallbackUsed, Source: "fallback", Name: "recommendations", Code: "stale", Err: errBoom})
	emit(5, watertight.Event{Kind: watertight.EventRejected, Source: "circuit", Name: "hosts", Key: "eu", Code: circuit.CodeOpen})
	emit(1, watertight.Event{Kind: watertight.EventStateChange, Source: "lab", Name: "machine", From: "a", To: "b"})
	emit(3, watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Code: deadline.CodeMalformed})
	emit(1, watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "Grpc-Timeout", Code: deadline.CodeAbsurd})
	emit(2, watertight.Event{Kind: watertight.EventBadInput, Source: "http", Name: "api", Key: "X-Criticality", Code: watertighthttp.CodeUnknownCriticality})
	emit(1, watertight.Event{Kind: watertight.EventBadInput, Source: "grpc", Name: "api", Key: "x-criticality", Code: watertighthttp.CodeUnknownCriticality})
	emit(2, watertight.Event{Kind: watertight.EventBadInput, Source: "http", Name: "api", Key: "X-Criticality", Reason: "unknown_criticality"}) // words, no code

	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_circuit_transitions_total{from="closed",key="eu",name="hosts",reason="failure_rate",to="open"}`: 2,
		`watertight_circuit_transitions_total{from="open",key="eu",name="hosts",reason="timer",to="half-open"}`:     1,
		`watertight_retry_scheduled_total{key="",name="payments"}`:                                                  5,
		`watertight_retry_exhausted_total{key="",name="payments"}`:                                                  1,
		`watertight_retry_skipped_total{key="",name="payments",reason="no_time"}`:                                   1,
		`watertight_retry_skipped_total{key="",name="payments",reason="not_idempotent"}`:                            1,
		`watertight_retry_skipped_total{key="",name="payments",reason="no_budget"}`:                                 2,
		`watertight_retry_skipped_total{key="",name="payments",reason="body_not_replayable"}`:                       1,
		`watertight_retry_skipped_total{key="",name="payments",reason="other"}`:                                     1,
		`watertight_events_total{event="hedge_sent",name="search",reason="",source="hedge"}`:                        4,
		`watertight_events_total{event="hedge_won",name="search",reason="",source="hedge"}`:                         1,
		`watertight_events_total{event="hedge_suppressed",name="search",reason="budget",source="hedge"}`:            2,
		`watertight_events_total{event="hedge_suppressed",name="search",reason="other",source="hedge"}`:             1,
		`watertight_shed_total{key="GET /items",name="api",reason="route_full"}`:                                    2,
		`watertight_shed_total{key="GET /items",name="api",reason="displaced"}`:                                     1,
		`watertight_shed_total{key="GET /items",name="api",reason="queue_gave_up"}`:                                 2,
		`watertight_shed_total{key="GET /items",name="api",reason="deadline"}`:                                      1,
		`watertight_fallback_used_total{key="",name="recommendations"}`:                                             1,
		`watertight_events_total{event="fallback_used",name="recommendations",reason="stale",source="fallback"}`:    1,
		`watertight_events_total{event="rejected",name="hosts",reason="open",source="circuit"}`:                     5,
		`watertight_events_total{event="state_change",name="hosts",reason="failure_rate",source="circuit"}`:         2,
		`watertight_events_total{event="state_change",name="hosts",reason="timer",source="circuit"}`:                1,
		`watertight_events_total{event="retry_scheduled",name="payments",reason="",source="retry"}`:                 3,
		`watertight_events_total{event="retry_scheduled",name="payments",reason="",source="http"}`:                  2,
		`watertight_events_total{event="retry_exhausted",name="payments",reason="max_attempts",source="retry"}`:     1,
		`watertight_events_total{event="shed",name="api",reason="route_full",source="http"}`:                        2,
		`watertight_events_total{event="shed",name="api",reason="queue_gave_up",source="grpc"}`:                     1,
		`watertight_events_total{event="state_change",name="machine",reason="",source="lab"}`:                       1,
		`watertight_bad_input_total{header="X-Request-Timeout-Ms",name="api",reason="malformed"}`:                   3,
		`watertight_bad_input_total{header="Grpc-Timeout",name="api",reason="absurd"}`:                              1,
		`watertight_bad_input_total{header="X-Criticality",name="api",reason="unknown_criticality"}`:                2,
		`watertight_bad_input_total{header="x-criticality",name="api",reason="unknown_criticality"}`:                1,
		`watertight_bad_input_total{header="X-Criticality",name="api",reason="other"}`:                              2,
		`watertight_events_total{event="bad_input",name="api",reason="malformed",source="deadline"}`:                3,
		`watertight_events_total{event="bad_input",name="api",reason="other",source="http"}`:                        2,
		`watertight_events_overflow_total{}`:                                                                        0,
	})
	absent(t, got, `watertight_circuit_transitions_total{from="a"`) // not a breaker
	absent(t, got, `watertight_hedge_`)                             // hedges come from AddHedge's snapshots
}

func TestEventSeriesBound(t *testing.T) {
	c := newCollector(t, watertightprom.Config{MaxEventSeries: 3})
	for i := range 10 {
		for range 2 {
			c.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: fmt.Sprint("/route", i)})
		}
	}
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_shed_total{key="/route0",name="api",reason="other"}`:                2,
		`watertight_shed_total{key="/route2",name="api",reason="other"}`:                2,
		`watertight_events_total{event="shed",name="api",reason="other",source="http"}`: 6,
		`watertight_events_overflow_total{}`:                                            14,
	})
	absent(t, got, `watertight_shed_total{key="/route3"`)

	unbounded := newCollector(t, watertightprom.Config{MaxEventSeries: -1})
	for i := range 5000 {
		unbounded.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Key: fmt.Sprint(i)})
	}
	got = scrape(t, unbounded)
	want(t, got, map[string]float64{
		`watertight_events_total{event="shed",name="",reason="other",source="http"}`: 5000,
		`watertight_events_overflow_total{}`:                                         0,
	})
}

func TestOnEventAllocatesNothing(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	events := []watertight.Event{
		{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Key: "eu"},
		{Kind: watertight.EventStateChange, Source: "circuit", Name: "payments", From: "closed", To: "open"},
		{Kind: watertight.EventShed, Source: "http", Name: "api", Code: watertighthttp.CodeRouteFull},
		{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "p", Code: retry.CodeNoTime},
		{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Code: deadline.CodeMalformed},
		{Kind: watertight.EventBadInput, Source: "http", Name: "api", Key: "X-Criticality", Code: "not a label"},
	}
	for _, e := range events {
		c.OnEvent(e) // first sight of each label set
		c.OnEvent(e)
		if n := testing.AllocsPerRun(100, func() { c.OnEvent(e) }); n != 0 {
			t.Errorf("OnEvent(%v) allocates %v times per call", e.Kind, n)
		}
	}
}

func TestInvalidUTF8Labels(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	// Keys taken from requests may hold any bytes; two that differ only in
	// their invalid bytes stay two series.
	c.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "/a\xff"})
	c.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "/a\xfe"})
	r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r.Get("t\xff")
	c.AddBulkheadRegistry("tenants", r)
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_shed_total{key="/a\\xff",name="api",reason="other"}`:                   1,
		`watertight_shed_total{key="/a\\xfe",name="api",reason="other"}`:                   1,
		`watertight_bulkhead_active{key="t\\xff",kind="semaphore",name="tenants"}`:         0,
		`watertight_bulkhead_max_concurrent{key="t\\xff",kind="semaphore",name="tenants"}`: 25,
	})
}

// labMetrics is what the lab asks of a metrics sink (see the report on the
// storefront wiring): both adapters provide it.
type labMetrics interface {
	AddBreaker(*circuit.Breaker) (remove func())
	AddBulkhead(*bulkhead.Bulkhead) (remove func())
	watertight.Listener
}

var (
	_ labMetrics           = (*watertightprom.Collector)(nil)
	_ prometheus.Collector = (*watertightprom.Collector)(nil)
	_ watertight.Policy    = (*watertightprom.Latency)(nil)
)
