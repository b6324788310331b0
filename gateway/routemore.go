package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/contrib/redisstore"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/watertighthttp"
)

// routeIdemStore returns the idempotency store of route rc: the one it
// had (prev) while the settings stay, else a new one: in memory (this
// instance's), or on Redis (shared by the instances that name the same
// Redis).
func (g *Gateway) routeIdemStore(rc Route, prev *route) (*idemStore, error) {
	im := *rc.Idempotency
	if prev != nil && prev.idem != nil && prev.idem.cfg.Store == im.Store && prev.idem.cfg.Redis == im.Redis {
		return prev.idem, nil
	}
	switch im.Store {
	case "redis":
		client := redis.NewClient(&redis.Options{Addr: im.Redis})
		s, err := redisstore.New(client, redisstore.Config{})
		if err != nil {
			client.Close()
			return nil, err
		}
		return &idemStore{s: s, cfg: im, close: client.Close}, nil
	default:
		s, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
		if err != nil {
			return nil, err
		}
		return &idemStore{s: s, cfg: im, close: func() error { return nil }}, nil
	}
}

// shard sets the Transport's shuffle sharding for route rc: each tenant's
// requests go to a stable subset of Shard.Size hosts of the pool. The key
// is read from the upstream request, whose forwarding headers the gateway
// wrote: its X-Forwarded-For begins with the client's address.
func shard(tc *watertighthttp.TransportConfig, rc Route) {
	if rc.Shard == nil {
		return
	}
	tc.ShardKey, tc.ShardSize, tc.ShardSpill = rc.Shard.Key.upstreamFn(), rc.Shard.Size, rc.Shard.Spill
}

// upstreamFn returns the key of an upstream request that outbound built:
// the same as fn's of the client's request.
func (k KeySpec) upstreamFn() func(*http.Request) string {
	if !k.ClientAddress {
		f := k.fn()
		return func(r *http.Request) string { return f(r, nil) }
	}
	return func(r *http.Request) string {
		if vs := r.Header["X-Forwarded-For"]; len(vs) > 0 {
			first, _, _ := strings.Cut(vs[0], ",")
			return strings.TrimSpace(first)
		}
		return ""
	}
}

// partitioned is the bulkhead.PartitionedConfig of route's tenants.
func (tc *Tenants) partitioned(route string) bulkhead.PartitionedConfig {
	cfg := bulkhead.PartitionedConfig{
		Name: route, MaxConcurrent: tc.MaxConcurrent, DefaultWeight: tc.DefaultShare,
		MaxWait: tc.MaxWait, MaxWaiters: tc.MaxQueue,
	}
	if tc.MaxWait == 0 {
		cfg.MaxWait = bulkhead.NoWait
	}
	for _, name := range slices.Sorted(maps.Keys(tc.Shares)) {
		cfg.Partitions = append(cfg.Partitions, bulkhead.PartitionConfig{Name: name, Weight: tc.Shares[name]})
	}
	return cfg
}

// buildTenants makes the route's tenant shares: a bulkhead.Partitioned
// of Tenants.MaxConcurrent permits, a partition per tenant the file names
// (in the order of their names, so that a reload with the same tenants
// reconfigures it in place, keeping its permits in flight) and one,
// "default", that every other tenant shares.
func (rt *route) buildTenants(g *Gateway, t *table, prev *route) error {
	tc := rt.cfg.Tenants
	if tc == nil {
		return nil
	}
	cfg := tc.partitioned(rt.cfg.Name)
	cfg.Listener = g.lis
	rt.tenantKey = tc.Key.fn()
	if prev != nil && prev.tenants != nil && prev.tenants.Reconfigure(cfg) == nil {
		rt.tenants = prev.tenants
	} else {
		p, err := bulkhead.NewPartitioned(cfg)
		if err != nil {
			return fmt.Errorf("tenants: %w", err)
		}
		rt.tenants = p
	}
	t.metrics["tenants/"+rt.cfg.Name] = g.watched.AddPartitioned(rt.tenants) // /metrics and the dashboard
	return nil
}
