// Package latency keeps a cheap, concurrent record of recent latencies and
// answers quantile questions about them ("what is the p95 of the last ten
// seconds?"). The hedge policy uses it for its percentile delay; the sizing
// advice for bulkheads and timeouts can use it too.
//
// A Tracker is a log-linear histogram — 16 buckets per power of two, so a
// bucket is at most 6.25% wide and a quantile, reported at its bucket's
// middle, is within 1/32 (3.125%) of the exact one — held in a small ring of
// time slices. Record is one clock read, a few shifts and one atomic add,
// with no allocation and no lock; a slice that has fallen out of the window
// is cleared by the first Record that needs it again (under a mutex, once per
// slice period). Quantile and Count scan the buckets of the slices still in
// the window.
//
// It is not API: the package is internal to watertight.
package latency
