// Package watertightotel exports watertight's protections as OpenTelemetry
// metrics (go.opentelemetry.io/otel/metric).
//
// Metrics holds asynchronous instruments — observable gauges, counters and
// up-down counters — and one callback that, at every collection, reads the
// Snapshot of each source it was given: breakers and breaker registries,
// semaphore bulkheads, bulkhead registries and worker pools, retry budgets,
// adaptive throttlers and hedge policies. Watching a protection therefore costs nothing per
// call beyond the counters the protection already keeps.
//
// What snapshots do not hold — retries scheduled, exhausted and skipped,
// shed requests, breaker transitions, fallbacks, bad client input — comes
// from events: Metrics is also a watertight.Listener, to set as the
// Listener of the protections' Configs; it counts events in memory and
// reports the counts through the same callback; the reason attribute of
// the event metrics is the event's Code, copied as it is
// (docs/observability.md lists every code). Call latency is opt-in:
// Metrics.Latency returns a watertight.Policy that records the duration of
// the calls through it into a histogram.
//
// Names follow OpenTelemetry's conventions: watertight.<pattern>.<what>
// ("watertight.circuit.state", "watertight.bulkhead.active"), units in UCUM
// ("s"; "1" for ratios, which are 0 to 1; "{call}" and such for counts), no
// _total suffix, and the instance in the attributes watertight.name and
// watertight.key. The same signals are exported by package watertightprom
// for Prometheus; the table in docs/observability.md lists both, and the
// tests check each package against it.
package watertightotel
