package gateway

import (
	"errors"
	"net/http"
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

// errNotBuilt refuses a file that uses a part of the configuration this
// build does not have yet.
var errNotBuilt = errors.New("is not built yet")

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

// buildTenants makes the route's tenant shares.
func (rt *route) buildTenants(g *Gateway, t *table, prev *route) error {
	if rt.cfg.Tenants != nil {
		return errNotBuilt
	}
	return nil
}

// admitTenant takes a permit of the request's tenant's share.
func (rt *route) admitTenant(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	return nil, bulkhead.ErrFull
}
