// Package balance spreads calls over a pool of hosts and takes the bad ones
// out of it: the power of two choices over calls in flight (or peak-EWMA
// latency), with passive outlier ejection.
//
// A [Balancer] draws two hosts at random for each call and takes the less
// loaded; [Balancer.Pick] returns it, counted in flight, and the caller
// ends the call with [Host.Done], saying how it ended (a
// [watertight.Outcome]) and how long it took. From those ends the balancer
// ejects a host that
//
//   - failed its last [Config].ConsecutiveErrors calls (5), or
//   - is more than [Config].SlowFactor (3) times slower than the median of
//     the other hosts, judged every [Config].MinSamples (20) of its
//     measured calls (its streaming median estimate and more than half of
//     those calls that much slower): relative to the pool, so a dependency
//     that is slow everywhere ejects nothing, and robust to a call that
//     hung;
//
// for [Config].BaseEjection (30s), doubled for each ejection that follows
// soon after it returned, up to [Config].MaxEjection (5m); never more than
// [Config].MaxEjectedShare (half) of the pool at once, and never a pool's
// last host. Pick draws from the hosts not ejected, so the load stays even
// over them. A retry passes the host of the failed attempt to Pick, which
// avoids it whenever another host can take the call.
//
// Pick and Done are a few atomic operations: no lock, no clock read, no
// allocation, but for the rare Done that judges a host's latency (a mutex,
// once every MinSamples of its calls) or ejects it (a clock read, its
// event, the timer that brings it back). Ejections and returns are EventStateChange events with Source
// "balance" and a stable Code, also their Reason ([CodeConsecutiveErrors]
// "consecutive_errors", [CodeSlow] "slow", [CodeEjectionEnded]
// "ejection_ended"); [Balancer.Snapshot] is the pool's
// state for an admin view.
//
// With many tenants over one pool, [Balancer.Shard] gives each key (a
// tenant) a [Shard]: a small, stable, pseudo-random subset of the hosts
// (rendezvous hashing of the key and each address), whose Pick and Next
// choose only among its hosts not ejected, so that one tenant's harmful
// calls reach few hosts and few other tenants share all of them (shuffle
// sharding). When every host of the shard is ejected, the call fails with
// [ErrShardDown], or, with [ShardConfig].Spill, goes to the rest of the
// pool. docs/balance.md, "Shuffle sharding", gives the overlap
// probabilities by pool and shard size.
//
// A Balancer knows nothing of breakers or retries: a circuit breaker per
// host (package circuit) sits after Pick, and a retry policy (package retry)
// around both; watertighthttp.TransportConfig.Balancer assembles them that
// way for HTTP.
package balance
