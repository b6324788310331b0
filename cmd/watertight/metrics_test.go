package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/lab"
)

var _ lab.Metrics = (*labMetrics)(nil)

// TestMetricsServesBothAdapters: the lab's /metrics page shows a breaker,
// a bulkhead, an event and a call latency under the Prometheus adapter's
// names and under the OpenTelemetry adapter's (prefixed otel_), and the
// server stops on close.
func TestMetricsServesBothAdapters(t *testing.T) {
	m, err := startMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br, err := circuit.New(circuit.Config{Name: "payments", Listener: m})
	if err != nil {
		t.Fatal(err)
	}
	bh, err := bulkhead.New(bulkhead.Config{Name: "payments", MaxConcurrent: 3, Listener: m})
	if err != nil {
		t.Fatal(err)
	}
	m.AddBreaker(br)
	m.AddBulkhead(bh)
	br.ForceOpen() // a state change: an event
	pipe := watertight.MustNew(append([]watertight.Policy{bh}, m.callPolicies("payments")...)...)
	if _, err := watertight.Do(context.Background(), pipe, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(m.url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	for _, want := range []string{
		`watertight_circuit_state{key="",name="payments",state="forced-open"} 1`,
		`watertight_bulkhead_max_concurrent{key="",kind="semaphore",name="payments"} 3`,
		`watertight_call_duration_seconds_count{name="payments",outcome="success"} 1`,
		"watertight_events_total{",
		"otel_watertight_circuit_state",
		"otel_watertight_bulkhead_limit",
		"otel_watertight_call_duration_seconds_count",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(m.url); err == nil {
		t.Fatal("metrics still served after close")
	} else if !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "refused") {
		t.Logf("after close: %v", err)
	}
}
