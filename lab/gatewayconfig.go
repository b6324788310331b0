package lab

// The gateway scenario's configuration files, one per run, written as a
// user would write them for `watertight proxy --config FILE`.

import (
	"fmt"
	"strings"
	"time"

	"github.com/watertight-go/watertight/sizing"
)

// gwHeader is the part every file of the scenario shares: the listener, the
// admin listener, and a retry policy of one attempt (no retries), so that
// each run shows the protections it names and nothing else.
func gwHeader(b *strings.Builder, listen, admin string) {
	fmt.Fprintf(b, "retries:\n  none: {max_attempts: 1}\n")
	fmt.Fprintf(b, "listeners:\n  public: {address: %s}\n", listen)
	fmt.Fprintf(b, "admin:\n  address: %s\n", admin)
}

// gwSizing is the protected storefront file's bulkhead and timeout of one
// route, from its nominal load.
type gwSizing struct {
	permits int
	maxWait time.Duration
	timeout time.Duration
}

// gwSize sizes route i of the storefront for p: a bulkhead of the fewest
// permits that Erlang's loss formula says refuse at most 1 in 10,000 calls
// when rate × latency are in flight (Little's law), a wait for a permit of
// at most 50 ms, and a timeout of twice the latency, at least 250 ms (a
// pause of a shared machine, where five processes take turns on the
// cores, is not the upstream's failure).
func gwSize(p gwParams, i int) gwSizing {
	lat := sfRoutes[i].latency
	return gwSizing{
		permits: sizing.ErlangSize(p.rate*lat.Seconds(), 1e-4),
		maxWait: 50 * time.Millisecond,
		timeout: max(2*lat, 250*time.Millisecond),
	}
}

// gwStorefrontConfig is the file of a storefront run: the three routes,
// each to its own upstream. Unprotected, the routes alone: no timeout
// (timeout: off), no retries, no bulkhead, no breaker, no fallback.
// Protected, each route has a bulkhead and a timeout sized by gwSize, each
// host a breaker, and recommendations fall back to an empty list.
func gwStorefrontConfig(p gwParams, protected bool, ups [3]string) func(listen, admin string) string {
	return func(listen, admin string) string {
		var b strings.Builder
		if !protected {
			b.WriteString("# The storefront's routes and nothing else: no timeout, no retries, no bulkhead, no breaker, no fallback.\n")
		} else {
			b.WriteString("# The storefront's routes with the protections: a bulkhead and a timeout per route, a breaker per host, a fallback for recommendations.\n")
			b.WriteString("breakers:\n  per-host: {window_size: 20, min_calls: 10, failure_rate_threshold: 50%, open_duration: 1s, half_open_calls: 3}\n")
			b.WriteString("bulkheads:\n")
			for i, rt := range sfRoutes {
				s := gwSize(p, i)
				fmt.Fprintf(&b, "  %s: {max_concurrent: %d, max_wait: %v}\n", rt.name, s.permits, s.maxWait)
			}
		}
		gwHeader(&b, listen, admin)
		b.WriteString("upstreams:\n")
		for i, rt := range sfRoutes {
			breaker := ""
			if protected {
				breaker = ", breaker: per-host"
			}
			fmt.Fprintf(&b, "  %s: {hosts: [%s]%s}\n", rt.name, ups[i], breaker)
		}
		b.WriteString("routes:\n")
		for i, rt := range sfRoutes {
			fmt.Fprintf(&b, "  %s:\n    path_prefix: /%s\n    upstream: %s\n    retry: none\n    access_log: 0\n", rt.name, rt.name, rt.name)
			if !protected {
				b.WriteString("    timeout: off\n")
				continue
			}
			fmt.Fprintf(&b, "    timeout: %v\n    bulkhead: %s\n", gwSize(p, i).timeout, rt.name)
			if i == sfRecommendation {
				fmt.Fprintf(&b, "    fallback: {status: 200, body: '%s', content_type: application/json}\n", sfFallbackBody)
			}
		}
		return b.String()
	}
}

// gwTenantsConfig is the file of a tenants run: one route to the tiered
// service. With tenants, the tiers share the route's capacity by weight
// (premium 3, free 1, and every other tier together 1, the default share),
// told apart by the X-Tier header; without, one bulkhead of the same
// capacity and wait (tenants' default max_wait, 100 ms) serves every tier
// in turn.
func gwTenantsConfig(p gwParams, up string, tenants bool) func(listen, admin string) string {
	return func(listen, admin string) string {
		var b strings.Builder
		if tenants {
			b.WriteString("# One route whose capacity the tiers share: premium 3, free 1 (and any other tier 1).\n")
		} else {
			b.WriteString("# One route whose capacity every tier takes in turn: one bulkhead.\n")
			fmt.Fprintf(&b, "bulkheads:\n  tiers: {max_concurrent: %d, max_wait: 100ms}\n", p.tenantCap)
		}
		gwHeader(&b, listen, admin)
		fmt.Fprintf(&b, "upstreams:\n  tiers: {hosts: [%s]}\n", up)
		fmt.Fprintf(&b, "routes:\n  tiers:\n    path_prefix: /tiers\n    upstream: tiers\n    timeout: %v\n    retry: none\n    access_log: 0\n", p.tenantDeadline)
		if tenants {
			fmt.Fprintf(&b, "    tenants: {key: header %s, max_concurrent: %d, shares: {premium: 3, free: 1}}\n", gwTierHeader, p.tenantCap)
		} else {
			b.WriteString("    bulkhead: tiers\n")
		}
		return b.String()
	}
}

// gwHedgeConfig is the file of the hedging run: two routes to the same
// pool of two hosts, one hedging its reads at the tracked p97 of its
// latency (no sooner than 10 ms), one not.
func gwHedgeConfig(p gwParams, hosts [2]string) func(listen, admin string) string {
	return func(listen, admin string) string {
		var b strings.Builder
		b.WriteString("# Two routes to one pool of two hosts: one hedges its reads, one does not.\n")
		fmt.Fprintf(&b, "hedges:\n  reads: {percentile: %v, min_delay: %v}\n", p.hedgePercentile, p.hedgeMinDelay)
		fmt.Fprintf(&b, "listeners:\n  public: {address: %s}\nadmin:\n  address: %s\n", listen, admin)
		fmt.Fprintf(&b, "upstreams:\n  pool: {hosts: [%s, %s]}\n", hosts[0], hosts[1])
		b.WriteString("routes:\n")
		fmt.Fprintf(&b, "  hedged: {path_prefix: /hedged, upstream: pool, hedge: reads, timeout: %v, access_log: 0}\n", p.hedgeDeadline)
		fmt.Fprintf(&b, "  plain: {path_prefix: /plain, upstream: pool, timeout: %v, access_log: 0}\n", p.hedgeDeadline)
		return b.String()
	}
}
