// Package sizing turns what a dependency was seen doing — its call rate and
// its latency percentiles — into sizes for the protections in front of it:
// how many permits its bulkhead needs, how long a caller should wait for
// one, and how long an attempt may take before it times out.
//
// The bulkhead size comes from Little's law: calls in flight L = rate ×
// latency, taken at a high percentile (p99) so that a slow minute does not
// exhaust the permits. Because calls arrive at random, not evenly, L permits
// would still refuse a share of calls; Suggest returns the fewest permits
// that Erlang's loss formula says refuse at most Config.Blocking of them
// with L offered, after multiplying L by a growth headroom. The timeout sits
// above the observed p99.9, so healthy calls almost never hit it.
//
// A Recorder collects the observation: put its Record on the dependency's
// calls (it costs a clock read and a few atomic adds), and call Observe and
// Suggest when you want advice — `watertight lab storefront` prints it next
// to the sizes it configured.
//
// Sizes are only as good as the observation: measure during normal load,
// over a window long enough to hold many calls (Config.MinSamples), and
// re-run the advice when the traffic changes.
package sizing
