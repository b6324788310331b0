// Package watch is the set of protections a program shows: its breakers,
// bulkheads (partitioned ones too), worker pools, budgets, throttlers,
// hedge policies, adaptive limiters and balancers, each under a name. A
// program fills one Set once and hands it to every reader: the Prometheus
// collector (contrib/watertightprom), the OpenTelemetry metrics
// (contrib/watertightotel) and the live page (package dashboard) each read
// the snapshots of what the Set holds when they collect, so a protection
// registered once is exported and shown everywhere.
//
// A Set holds pointers only: adding a protection costs nothing on its hot
// path, and a reader calls its Snapshot method at collection time.
//
// The package sits on the adapters' floor (shared/DESIGN.md §2): it imports
// the pattern packages and is imported by the exporters and the dashboard,
// never by a pattern.
package watch
