package gateway

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/contrib/watertightconfig"
)

// The parts of a route and an upstream beyond the core: tenants, cells,
// hedging, idempotency keys, adaptive limits, chaos and gRPC.

// KeySpec says where a request's key comes from: a tenant, a tier, a
// partner. In a file it is one of "header NAME", "client_address" and
// "api_key".
type KeySpec struct {
	// Header, if not empty, is the (canonical) header whose first value is
	// the key.
	Header string `json:"header,omitempty"`
	// ClientAddress takes the client's address: the connection's, or the
	// first X-Forwarded-For entry when the connection is from one of the
	// listener's trusted proxies.
	ClientAddress bool `json:"client_address,omitempty"`
	// APIKey takes the request's API key: the X-Api-Key header, else the
	// token of an "Authorization: Bearer" header.
	APIKey bool `json:"api_key,omitempty"`
}

// String is the spec as a file writes it.
func (k KeySpec) String() string {
	switch {
	case k.Header != "":
		return "header " + k.Header
	case k.ClientAddress:
		return "client_address"
	case k.APIKey:
		return "api_key"
	}
	return ""
}

// maxKeyLen bounds a request's key: a longer one is cut (keys pick shares,
// cells and shards; they never name a series or an entry of their own).
const maxKeyLen = 256

// readKeySpec reads a KeySpec from its string form.
func readKeySpec(d *watertightconfig.Decoder, n *yaml.Node, path string) (KeySpec, bool) {
	s, ok := d.String(n, path)
	if !ok {
		return KeySpec{}, false
	}
	f := strings.Fields(s)
	switch {
	case len(f) == 2 && f[0] == "header":
		if !validHeaderName(f[1]) {
			d.Fail(n, path, "%q is not a header name", f[1])
			return KeySpec{}, false
		}
		return KeySpec{Header: http.CanonicalHeaderKey(f[1])}, true
	case len(f) == 1 && f[0] == "client_address":
		return KeySpec{ClientAddress: true}, true
	case len(f) == 1 && f[0] == "api_key":
		return KeySpec{APIKey: true}, true
	}
	d.Fail(n, path, `must be "header NAME", "client_address" or "api_key", got %q`, s)
	return KeySpec{}, false
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Tenants gives each tenant of a route its own queue and a fair share of
// the route's capacity, which tenants under their share lend to others
// (bulkhead.Partitioned).
type Tenants struct {
	// Key says which tenant a request is.
	Key KeySpec `json:"key"`
	// MaxConcurrent is the route's capacity the tenants share.
	MaxConcurrent int `json:"max_concurrent"`
	// MaxWait bounds a request's wait in its tenant's queue. Default
	// 100ms.
	MaxWait time.Duration `json:"max_wait"`
	// MaxQueue bounds each tenant's queue. Default MaxConcurrent.
	MaxQueue int `json:"max_queue"`
	// Shares are the weights of the tenants the file names.
	Shares map[string]float64 `json:"shares"`
	// DefaultShare is the weight of the partition every other tenant
	// shares. Default 1.
	DefaultShare float64 `json:"default_share"`
}

// Cells sends each tenant to an upstream pool of its own (seed 000's
// cells), the route's upstream taking every other.
type Cells struct {
	// Key says which cell a request belongs to.
	Key KeySpec `json:"key"`
	// Pools maps a key to the name of its upstream.
	Pools map[string]string `json:"pools"`
}

// Shard gives each tenant a small, stable, pseudo-random subset of the
// upstream's hosts (shuffle sharding).
type Shard struct {
	// Key says which tenant a request is.
	Key KeySpec `json:"key"`
	// Size is the number of hosts in each tenant's shard.
	Size int `json:"size"`
	// Spill sends a tenant whose shard's hosts are all ejected or refusing
	// to the rest of the pool; by default it fails, which is the isolation.
	Spill bool `json:"spill,omitempty"`
}

// Idempotency makes a request with an Idempotency-Key run upstream once:
// a duplicate in flight waits or gets 409, a finished one is replayed, a
// different payload under the same key gets 422.
type Idempotency struct {
	// Store is "memory" (default: this gateway instance's) or "redis"
	// (shared by several instances).
	Store string `json:"store"`
	// Redis is the Redis address (host:port) when Store is redis.
	Redis string `json:"redis,omitempty"`
	// TTL is how long a finished request is replayed. Default 24h.
	TTL time.Duration `json:"ttl"`
	// Wait makes a duplicate of a request in flight wait for its answer
	// (up to the route's timeout) instead of getting 409.
	Wait bool `json:"wait,omitempty"`
	// Required answers 400 to a request of the route's methods without a
	// key.
	Required bool `json:"required,omitempty"`
	// Scope says whose keys a request's key is among, so that a client
	// can never be answered with another's stored response: a KeySpec
	// (default api_key: requests without one share a scope), or shared
	// (one scope for every client, for clients that trust each other).
	Scope KeySpec `json:"scope"`
	// SharedScope puts every client in one scope.
	SharedScope bool `json:"shared_scope,omitempty"`
}

// Chaos injects faults into a route's requests, for game days: off unless
// the route has it.
type Chaos struct {
	// Latency delays LatencyRate of the requests.
	Latency     time.Duration `json:"latency,omitempty"`
	LatencyRate float64       `json:"latency_rate,omitempty"`
	// AbortStatus answers AbortRate of the requests without sending them.
	// Default 503.
	AbortStatus int     `json:"abort_status,omitempty"`
	AbortRate   float64 `json:"abort_rate,omitempty"`
}

// GRPC marks a route as gRPC: grpc-timeout is read and sent with the time
// left, the gRPC status (grpc-status, in the header of a trailers-only
// answer or in the trailers) is what breakers and retries judge, and only
// the methods listed are retried.
type GRPC struct {
	// Retryable are the methods ("/package.Service/Method") whose calls
	// may be retried and hedged.
	Retryable []string `json:"retryable,omitempty"`
}

var routeMoreFields = []string{"tenants", "cells", "shard", "hedge", "idempotency", "limiter", "chaos", "grpc"}

// readRouteMore reads the field f of route r, one of routeMoreFields.
func readRouteMore(d *watertightconfig.Decoder, r *Route, f watertightconfig.Entry, p string) {
	switch f.Key {
	case "tenants":
		t := &Tenants{MaxWait: 100 * time.Millisecond, DefaultShare: 1}
		var keyNode *yaml.Node
		d.Fields(f.Value, p, []string{"key", "max_concurrent", "max_wait", "max_queue", "shares", "default_share"}, func(g watertightconfig.Entry, q string) {
			switch g.Key {
			case "key":
				keyNode = g.Value
				t.Key, _ = readKeySpec(d, g.Value, q)
			case "max_concurrent":
				v, _ := d.Int(g.Value, q, 1, 1<<20)
				t.MaxConcurrent = int(v)
			case "max_wait":
				t.MaxWait, _ = d.Duration(g.Value, q, 0, nil)
			case "max_queue":
				v, _ := d.Int(g.Value, q, 0, 1<<20)
				t.MaxQueue = int(v)
			case "shares":
				es, _ := d.Mapping(g.Value, q)
				t.Shares = map[string]float64{}
				for _, s := range es {
					if v, ok := d.Float(s.Value, q+"."+s.Key); ok {
						if v <= 0 {
							d.Fail(s.Value, q+"."+s.Key, "must be above 0 (a weight), got %v", v)
						}
						t.Shares[s.Key] = v
					}
				}
			case "default_share":
				if v, ok := d.Float(g.Value, q); ok {
					if v <= 0 {
						d.Fail(g.Value, q, "must be above 0 (a weight), got %v", v)
					}
					t.DefaultShare = v
				}
			}
		})
		if keyNode == nil {
			d.FailLine(f.Line, p+".key", `tenants need a key ("header X-Tenant", "client_address" or "api_key")`)
		}
		if t.MaxConcurrent == 0 {
			d.FailLine(f.Line, p+".max_concurrent", "tenants need the route's capacity they share (max_concurrent: N)")
		}
		if t.MaxQueue == 0 {
			t.MaxQueue = t.MaxConcurrent
		}
		r.Tenants = t
	case "cells":
		c := &Cells{Pools: map[string]string{}}
		var keyNode, poolsNode *yaml.Node
		d.Fields(f.Value, p, []string{"key", "pools"}, func(g watertightconfig.Entry, q string) {
			switch g.Key {
			case "key":
				keyNode = g.Value
				c.Key, _ = readKeySpec(d, g.Value, q)
			case "pools":
				poolsNode = g.Value
				es, _ := d.Mapping(g.Value, q)
				for _, s := range es {
					if name, ok := d.Name(s.Value, q+"."+s.Key); ok {
						c.Pools[s.Key] = name
					}
				}
			}
		})
		if keyNode == nil {
			d.FailLine(f.Line, p+".key", `cells need a key ("header X-Partner", ...)`)
		}
		if len(c.Pools) == 0 && poolsNode == nil {
			d.FailLine(f.Line, p+".pools", "cells need pools: {KEY: UPSTREAM, ...}")
		}
		r.Cells = c
		r.cellNodes = poolsNode
	case "shard":
		s := &Shard{}
		var keyNode *yaml.Node
		d.Fields(f.Value, p, []string{"key", "size", "spill"}, func(g watertightconfig.Entry, q string) {
			switch g.Key {
			case "key":
				keyNode = g.Value
				s.Key, _ = readKeySpec(d, g.Value, q)
			case "size":
				v, _ := d.Int(g.Value, q, 1, balance.MaxShardSize)
				s.Size = int(v)
			case "spill":
				s.Spill, _ = d.Bool(g.Value, q)
			}
		})
		if keyNode == nil {
			d.FailLine(f.Line, p+".key", `a shard needs a key ("header X-Tenant", ...)`)
		}
		if s.Size == 0 {
			d.FailLine(f.Line, p+".size", "a shard needs a size (hosts per tenant)")
		}
		r.Shard = s
	case "hedge":
		if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "hedges", name) {
			r.Hedge = name
		}
	case "limiter":
		if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "limiters", name) {
			r.Limiter = name
		}
	case "idempotency":
		im := &Idempotency{Store: "memory", TTL: 24 * time.Hour, Scope: KeySpec{APIKey: true}}
		d.Fields(f.Value, p, []string{"store", "redis", "ttl", "wait", "required", "scope"}, func(g watertightconfig.Entry, q string) {
			switch g.Key {
			case "scope":
				if s, _ := d.String(g.Value, q); s == "shared" {
					im.Scope, im.SharedScope = KeySpec{}, true
				} else {
					im.Scope, _ = readKeySpec(d, g.Value, q)
				}
			case "store":
				if s, ok := d.String(g.Value, q); ok {
					if s != "memory" && s != "redis" {
						d.Fail(g.Value, q, "must be memory or redis, got %q", s)
					}
					im.Store = s
				}
			case "redis":
				if a, ok := d.String(g.Value, q); ok && checkAddress(d, g.Value, q, a) {
					im.Redis = a
				}
			case "ttl":
				im.TTL, _ = d.Duration(g.Value, q, time.Second, nil)
			case "wait":
				im.Wait, _ = d.Bool(g.Value, q)
			case "required":
				im.Required, _ = d.Bool(g.Value, q)
			}
		})
		if im.Store == "redis" && im.Redis == "" {
			d.FailLine(f.Line, p+".redis", "store: redis needs the Redis address (redis: host:port)")
		}
		r.Idempotency = im
	case "chaos":
		ch := &Chaos{AbortStatus: http.StatusServiceUnavailable}
		d.Fields(f.Value, p, []string{"latency", "latency_rate", "abort_status", "abort_rate"}, func(g watertightconfig.Entry, q string) {
			switch g.Key {
			case "latency":
				ch.Latency, _ = d.Duration(g.Value, q, time.Millisecond, nil)
			case "latency_rate":
				ch.LatencyRate, _ = d.Rate(g.Value, q)
			case "abort_status":
				v, _ := d.Int(g.Value, q, 400, 599)
				ch.AbortStatus = int(v)
			case "abort_rate":
				ch.AbortRate, _ = d.Rate(g.Value, q)
			}
		})
		if ch.LatencyRate > 0 && ch.Latency == 0 {
			d.FailLine(f.Line, p+".latency", "latency_rate needs a latency")
		}
		if ch.LatencyRate == 0 && ch.AbortRate == 0 {
			d.FailLine(f.Line, p, "chaos that injects nothing: give latency and latency_rate, or abort_rate")
		}
		r.Chaos = ch
	case "grpc":
		g := &GRPC{}
		d.Fields(f.Value, p, []string{"retryable"}, func(e watertightconfig.Entry, q string) {
			ms, _ := d.Strings(e.Value, q)
			for _, m := range ms {
				if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") {
					d.Fail(e.Value, q, `must list methods as "/package.Service/Method", got %q`, m)
					continue
				}
				g.Retryable = append(g.Retryable, m)
			}
		})
		r.GRPC = g
	}
}

// checkRouteMore checks what the parts beyond the core name in other
// sections, and how they combine.
func (c *Config) checkRouteMore(d *watertightconfig.Decoder, r *Route, line int) {
	path := "routes." + r.Name
	if r.Cells != nil {
		for _, k := range slices.Sorted(maps.Keys(r.Cells.Pools)) {
			d.Missing(r.cellNodes, path+".cells.pools."+k, "upstream", "upstreams", r.Cells.Pools[k], slices.Sorted(maps.Keys(c.Upstreams)))
		}
	}
	if r.Tenants != nil && r.Tenants.MaxConcurrent > 0 {
		if _, err := bulkhead.NewPartitioned(r.Tenants.partitioned(r.Name)); err != nil {
			d.FailLine(line, path+".tenants", "%v", strings.TrimPrefix(err.Error(), "bulkhead: "))
		}
	}
	if r.Tenants != nil && r.Bulkhead != "" {
		d.FailLine(line, path+".tenants", "a route has a bulkhead or tenants (which are a bulkhead shared by fair shares), not both")
	}
	if r.Limiter != "" && (r.Bulkhead != "" || r.Tenants != nil) {
		d.FailLine(line, path+".limiter", "an adaptive limiter takes the place of the route's bulkhead or tenants: give one of them")
	}
	if r.Shard != nil {
		for _, name := range r.upstreams() {
			if u, ok := c.Upstreams[name]; ok && r.Shard.Size > len(u.Hosts) {
				d.FailLine(line, path+".shard.size", "is %d, more than upstream %s's %d hosts", r.Shard.Size, name, len(u.Hosts))
			}
		}
	}
	if r.GRPC != nil {
		for _, name := range r.upstreams() {
			if u, ok := c.Upstreams[name]; ok && u.Protocol == "http1" {
				d.FailLine(line, path+".grpc", "gRPC needs HTTP/2 to the upstream: give upstream %s protocol: h2c (or h2 with scheme: https)", name)
			}
		}
	}
}

// upstreams are the names of every upstream r sends to: its own and its
// cells'.
func (r *Route) upstreams() []string {
	names := []string{r.Upstream}
	if r.Cells != nil {
		for _, k := range slices.Sorted(maps.Keys(r.Cells.Pools)) {
			names = append(names, r.Cells.Pools[k])
		}
	}
	return names
}

var upstreamMoreFields = []string{"protocol", "limiter"}

// readUpstreamMore reads the field f of upstream u, one of
// upstreamMoreFields.
func readUpstreamMore(d *watertightconfig.Decoder, u *Upstream, f watertightconfig.Entry, p string) {
	switch f.Key {
	case "protocol":
		if s, ok := d.String(f.Value, p); ok {
			switch s {
			case "http1", "h2c", "h2":
				u.Protocol = s
			default:
				d.Fail(f.Value, p, "must be http1, h2c (HTTP/2 in clear, as gRPC servers speak) or h2 (HTTP/2 over TLS), got %q", s)
			}
		}
	case "limiter":
		if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "limiters", name) {
			u.Limiter = name
		}
	}
}
