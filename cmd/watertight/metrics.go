package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/watertightotel"
	"github.com/watertight-go/watertight/contrib/watertightprom"
)

// labMetrics exports what the lab's scenarios build, through both adapters
// at once, on one /metrics page: contrib/watertightprom's collector under its
// own names (watertight_…), and contrib/watertightotel's instruments through
// OpenTelemetry's Prometheus exporter, prefixed otel_ so that the two sets
// do not collide (otel_watertight_…). It is a lab.Metrics.
type labMetrics struct {
	prom     *watertightprom.Collector
	otel     *watertightotel.Metrics
	provider *sdkmetric.MeterProvider
	srv      *http.Server
	url      string
	done     chan struct{}
}

// startMetrics listens on addr and serves /metrics until close.
func startMetrics(addr string) (*labMetrics, error) {
	m := &labMetrics{done: make(chan struct{})}
	var err error
	if m.prom, err = watertightprom.NewCollector(watertightprom.Config{}); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.prom, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithNamespace("otel"), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry Prometheus exporter: %w", err)
	}
	m.provider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	if m.otel, err = watertightotel.New(watertightotel.Config{MeterProvider: m.provider}); err != nil {
		m.provider.Shutdown(context.Background())
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		m.otel.Close()
		m.provider.Shutdown(context.Background())
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); host == "" || ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	m.url = "http://" + net.JoinHostPort(host, port) + "/metrics"
	go func() {
		defer close(m.done)
		m.srv.Serve(ln)
	}()
	return m, nil
}

// AddBreaker exports b through both adapters.
func (m *labMetrics) AddBreaker(b *circuit.Breaker) func() {
	r1, r2 := m.prom.AddBreaker(b), m.otel.AddBreaker(b)
	return func() { r1(); r2() }
}

// AddBulkhead exports b through both adapters.
func (m *labMetrics) AddBulkhead(b *bulkhead.Bulkhead) func() {
	r1, r2 := m.prom.AddBulkhead(b), m.otel.AddBulkhead(b)
	return func() { r1(); r2() }
}

// OnEvent counts e in both adapters.
func (m *labMetrics) OnEvent(e watertight.Event) {
	m.prom.OnEvent(e)
	m.otel.OnEvent(e)
}

// callPolicies are the latency histograms of one dependency's calls, one
// per adapter.
func (m *labMetrics) callPolicies(dependency string) []watertight.Policy {
	return []watertight.Policy{m.prom.Latency(dependency), m.otel.Latency(dependency)}
}

// close stops serving and releases the OpenTelemetry pipeline.
func (m *labMetrics) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, m.srv.Close())
	}
	<-m.done
	return errors.Join(err, m.otel.Close(), m.provider.Shutdown(ctx))
}
