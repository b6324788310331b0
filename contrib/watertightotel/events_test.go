package watertightotel_test

import (
	"fmt"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

func TestEvents(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	var l watertight.Listener = h.m
	emit := func(n int, e watertight.Event) {
		for range n {
			watertight.Emit(l, e)
		}
	}
	emit(2, watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "hosts", Key: "eu", From: "closed", To: "open", Code: circuit.CodeConsecutiveFailures})
	emit(3, watertight.Event{Kind: watertight.EventRetryScheduled, Source: "retry", Name: "payments"})
	emit(2, watertight.Event{Kind: watertight.EventRetryScheduled, Source: "http", Name: "payments"})
	emit(1, watertight.Event{Kind: watertight.EventRetryExhausted, Source: "retry", Name: "payments", Code: retry.CodeMaxAttempts})
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Code: retry.CodeNoBudget, Err: &retry.SkippedError{Reason: retry.ErrNoBudget, Err: errBoom}})
	emit(1, watertight.Event{Kind: watertight.EventRetrySkipped, Source: "retry", Name: "payments", Err: &retry.SkippedError{Reason: retry.ErrNoBudget, Err: errBoom}}) // no code: other
	emit(2, watertight.Event{Kind: watertight.EventHedgeSent, Source: "hedge", Name: "search"})
	emit(1, watertight.Event{Kind: watertight.EventHedgeWon, Source: "hedge", Name: "search"})
	emit(1, watertight.Event{Kind: watertight.EventHedgeSuppressed, Source: "hedge", Name: "search", Reason: "overload", Code: hedge.CodeOverload})
	emit(3, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /x", Code: watertighthttp.CodeRouteFull})
	emit(1, watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "GET /x", Code: watertighthttp.CodeDeadline, Err: deadline.ErrTooShort})
	emit(1, watertight.Event{Kind: watertight.EventFallbackUsed, Source: "fallback", Name: "recs", Code: "default"})
	emit(3, watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Code: deadline.CodeMalformed})
	emit(1, watertight.Event{Kind: watertight.EventBadInput, Source: "http", Name: "api", Key: "X-Criticality", Code: watertighthttp.CodeUnknownCriticality})
	emit(2, watertight.Event{Kind: watertight.EventBadInput, Source: "http", Name: "api", Key: "X-Criticality", Code: "words of a client"})

	got, kinds := h.collect(t)
	want(t, got, map[string]float64{
		`watertight.circuit.transitions{from="closed",reason="consecutive_failures",to="open",watertight.key="eu",watertight.name="hosts"}`: 2,
		`watertight.retry.scheduled{watertight.key="",watertight.name="payments"}`:                                                          5,
		`watertight.retry.exhausted{watertight.key="",watertight.name="payments"}`:                                                          1,
		`watertight.retry.skipped{reason="no_budget",watertight.key="",watertight.name="payments"}`:                                         1,
		`watertight.retry.skipped{reason="other",watertight.key="",watertight.name="payments"}`:                                             1,
		`watertight.events{event="hedge_sent",reason="",source="hedge",watertight.name="search"}`:                                           2,
		`watertight.events{event="hedge_won",reason="",source="hedge",watertight.name="search"}`:                                            1,
		`watertight.events{event="hedge_suppressed",reason="overload",source="hedge",watertight.name="search"}`:                             1,
		`watertight.shed{reason="route_full",watertight.key="GET /x",watertight.name="api"}`:                                                3,
		`watertight.shed{reason="deadline",watertight.key="GET /x",watertight.name="api"}`:                                                  1,
		`watertight.fallback.used{watertight.key="",watertight.name="recs"}`:                                                                1,
		`watertight.events{event="fallback_used",reason="default",source="fallback",watertight.name="recs"}`:                                1,
		`watertight.events{event="retry_scheduled",reason="",source="retry",watertight.name="payments"}`:                                    3,
		`watertight.events{event="retry_scheduled",reason="",source="http",watertight.name="payments"}`:                                     2,
		`watertight.events{event="retry_exhausted",reason="max_attempts",source="retry",watertight.name="payments"}`:                        1,
		`watertight.events{event="shed",reason="route_full",source="http",watertight.name="api"}`:                                           3,
		`watertight.events{event="shed",reason="deadline",source="http",watertight.name="api"}`:                                             1,
		`watertight.bad_input{header="X-Request-Timeout-Ms",reason="malformed",watertight.name="api"}`:                                      3,
		`watertight.bad_input{header="X-Criticality",reason="unknown_criticality",watertight.name="api"}`:                                   1,
		`watertight.bad_input{header="X-Criticality",reason="other",watertight.name="api"}`:                                                 2,
		`watertight.events{event="bad_input",reason="malformed",source="deadline",watertight.name="api"}`:                                   3,
		`watertight.events{event="bad_input",reason="other",source="http",watertight.name="api"}`:                                           2,
		`watertight.events_overflow{}`: 0,
	})
	if k := kinds["watertight.shed"]; k.kind != "counter" || k.unit != "{request}" {
		t.Errorf("watertight.shed is %+v", k)
	}
	if k := kinds["watertight.bad_input"]; k.kind != "counter" || k.unit != "{value}" {
		t.Errorf("watertight.bad_input is %+v", k)
	}
}

func TestEventSeriesBound(t *testing.T) {
	h := newHarness(t, watertightotel.Config{MaxEventSeries: 2})
	for i := range 5 {
		h.m.OnEvent(watertight.Event{Kind: watertight.EventFallbackUsed, Source: "fallback", Name: fmt.Sprint("h", i)})
	}
	got, _ := h.collect(t)
	want(t, got, map[string]float64{
		`watertight.fallback.used{watertight.key="",watertight.name="h0"}`: 1,
		`watertight.fallback.used{watertight.key="",watertight.name="h1"}`: 1,
		`watertight.events_overflow{}`:                                     3,
	})
	absent(t, got, `watertight.fallback.used{watertight.key="",watertight.name="h2"}`)
}

func TestOnEventAllocatesNothing(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	for _, e := range []watertight.Event{
		{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Key: "eu"},
		{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-Request-Timeout-Ms", Code: deadline.CodeMalformed},
		{Kind: watertight.EventShed, Source: "http", Name: "api", Code: "not a code"},
	} {
		h.m.OnEvent(e)
		h.m.OnEvent(e)
		if n := testing.AllocsPerRun(100, func() { h.m.OnEvent(e) }); n != 0 {
			t.Errorf("OnEvent(%v) allocates %v times per call", e.Kind, n)
		}
	}
}

func TestBreakerEventsFromARealBreaker(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	b, err := circuit.New(circuit.Config{Name: "payments", WindowSize: 4, MinCalls: 2, Listener: h.m})
	if err != nil {
		t.Fatal(err)
	}
	h.m.AddBreaker(b)
	fail(b, 2)
	b.Allow()
	got, _ := h.collect(t)
	want(t, got, map[string]float64{
		`watertight.circuit.transitions{from="closed",reason="failure_rate",to="open",watertight.key="",watertight.name="payments"}`: 1,
		`watertight.circuit.state{state="open",watertight.key="",watertight.name="payments"}`:                                        1,
		`watertight.events{event="rejected",reason="open",source="circuit",watertight.name="payments"}`:                              1,
		`watertight.circuit.rejections{watertight.key="",watertight.name="payments"}`:                                                1,
	})
}

func TestInvalidUTF8Attributes(t *testing.T) {
	h := newHarness(t, watertightotel.Config{})
	h.m.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "/a\xff"})
	h.m.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "/a\xfe"})
	b, _ := circuit.New(circuit.Config{Name: "n\xff"})
	h.m.AddBreaker(b)
	got, _ := h.collect(t)
	want(t, got, map[string]float64{
		`watertight.shed{reason="other",watertight.key="/a\\xff",watertight.name="api"}`:      1,
		`watertight.shed{reason="other",watertight.key="/a\\xfe",watertight.name="api"}`:      1,
		`watertight.circuit.state{state="closed",watertight.key="",watertight.name="n\\xff"}`: 1,
	})
}

// labMetrics is what the lab asks of a metrics sink: both adapters provide
// it.
type labMetrics interface {
	AddBreaker(*circuit.Breaker) (remove func())
	AddBulkhead(*bulkhead.Bulkhead) (remove func())
	watertight.Listener
}

var (
	_ labMetrics        = (*watertightotel.Metrics)(nil)
	_ watertight.Policy = (*watertightotel.Latency)(nil)
)
