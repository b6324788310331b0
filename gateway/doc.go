// Package gateway is `watertight proxy`: a reverse proxy that puts the
// library's protections in front of services written in anything, from one
// configuration file and no code.
//
// The file is contrib/watertightconfig's (named breakers, bulkheads,
// retries, budgets, timeouts...) with four sections of the gateway's own:
//
//	listeners:           # the public listeners
//	  public: {address: 127.0.0.1:8080}
//	admin:               # metrics, health, config and state; 127.0.0.1 only by default
//	  address: 127.0.0.1:9901
//	upstreams:           # pools of hosts: the only addresses ever dialled
//	  catalog:
//	    hosts: [127.0.0.1:9001, 127.0.0.1:9002]
//	    breaker: per-host          # a breakers: entry; one breaker per host
//	routes:              # matched on host, path prefix and method
//	  catalog:
//	    path_prefix: /catalog
//	    upstream: catalog
//	    timeout: 2s
//	    per_try_timeout: 500ms
//	    bulkhead: catalog          # a bulkheads: entry: the route's limit and queue
//	    fallback: {status: 503, body: "catalog unavailable"}
//
// Each request is matched to a route (the longest path prefix among those
// whose host and method match), passes the server-side guards of
// watertighthttp.Handler (incoming deadlines, dead requests shed,
// criticality), the route's path check, timeout and body limit, its
// bulkhead, and
// is sent by watertighthttp.Transport with a balance.Balancer over the
// upstream's hosts: the power of two choices, outlier ejection, a breaker
// per host, retries of transient failures of idempotent requests (or
// those with an Idempotency-Key) on another host, under a retry budget,
// each attempt within the time left. docs/gateway.md is the reference.
package gateway
