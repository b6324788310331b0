// Package watertightprom exports watertight's protections as Prometheus
// metrics (github.com/prometheus/client_golang).
//
// A Collector is a prometheus.Collector: register it with a
// prometheus.Registry, then tell it what to watch — breakers and breaker
// registries, semaphore bulkheads, bulkhead registries and worker pools,
// retry budgets, adaptive throttlers and hedge policies. At every scrape it reads each
// source's Snapshot and turns it into metrics, so watching a protection costs
// nothing per call beyond the counters the protection already keeps.
//
// What snapshots do not hold — retries scheduled, exhausted and skipped,
// shed requests, breaker transitions, fallbacks, bad client input — comes
// from events: the Collector is also a watertight.Listener, to set as the
// Listener of the protections' Configs (see OnEvent for its cost). The
// reason label of the event metrics is the event's Code, copied as it is
// (docs/observability.md lists every code). Call
// latency is opt-in: Collector.Latency returns a watertight.Policy that
// observes the duration of the calls through it into a histogram.
//
// Every metric is named watertight_<pattern>_<what> after Prometheus's
// naming practices: base units, counters end in _total, durations in
// _seconds, and ratios in _ratio with values from 0 to 1. The instance is in
// the labels name (Config.Name, or the name given for a registry) and key (a
// registry's key; empty for a single instance). The full list, next to the
// OpenTelemetry names of package watertightotel and with PromQL alerts, is
// the table in docs/observability.md, which the tests check the Collector
// against.
//
// Handler serves a Collector on an HTTP endpoint, and Serve starts a server
// for it, for a command that runs for a while (`watertight lab storefront
// --metrics :9090`).
package watertightprom
