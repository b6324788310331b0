package gateway

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/contrib/watertightconfig"
)

// Config is a gateway's configuration file: the library's sections
// (breakers, bulkheads, retries, budgets... as contrib/watertightconfig
// reads them) and the gateway's own, listeners, admin, upstreams and
// routes. Build it with Load or Parse.
type Config struct {
	// Library holds the library's sections, by instance name.
	Library *watertightconfig.File
	// Listeners are the public listeners, by name.
	Listeners map[string]Listener
	// Admin is the admin listener.
	Admin Admin
	// Upstreams are the pools of hosts, by name.
	Upstreams map[string]Upstream
	// Routes are the routes, in the file's order. Of the routes that
	// match a request, a route for its host beats one for any host, then
	// the longest path prefix wins, then a route for listed methods beats
	// one for any, then the first in the file.
	Routes []Route
}

// Listener is a public listener.
type Listener struct {
	// Name is the listener's name.
	Name string `json:"name"`
	// Address is host:port to listen on.
	Address string `json:"address"`
	// ReadHeaderTimeout bounds the reading of a request's header, against
	// slow clients. Default 5s.
	ReadHeaderTimeout time.Duration `json:"read_header_timeout"`
	// IdleTimeout closes keep-alive connections idle that long. Default 60s.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// MaxHeaderBytes bounds a request's header (net/http reads 4 KiB
	// more before it answers 431). Default 64 KiB.
	MaxHeaderBytes int `json:"max_header_bytes"`
	// TrustedProxies are the networks whose X-Forwarded-For the gateway
	// keeps (and appends the client's address to); from any other client
	// it is replaced by the client's address.
	TrustedProxies []netip.Prefix `json:"trusted_proxies,omitempty"`
	// TLSCert and TLSKey, both or neither, are PEM files: the listener
	// serves HTTPS (and HTTP/2) with them.
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
}

// Admin is the admin listener: metrics, health, the effective
// configuration and the state of every protection.
type Admin struct {
	// Address is host:port; default 127.0.0.1:9901. It must not be a
	// public listener's address.
	Address string `json:"address"`
}

// Upstream is a pool of hosts behind one Balancer.
type Upstream struct {
	// Name is the upstream's name.
	Name string `json:"name"`
	// Hosts are the pool's host:port addresses: the only addresses the
	// gateway dials for it.
	Hosts []string `json:"hosts"`
	// Scheme is http (default) or https.
	Scheme string `json:"scheme"`
	// Balance configures the choice of host and outlier ejection (Hosts
	// and Name are filled in from the upstream's).
	Balance balance.Config `json:"-"`
	// Breaker names the breakers: entry each host gets its own breaker
	// from; empty for none.
	Breaker string `json:"breaker,omitempty"`
	// ConnectTimeout bounds a connection's dial. Default 500ms.
	ConnectTimeout time.Duration `json:"connect_timeout"`
	// ServerName, with Scheme https, is the name the hosts' certificates
	// are checked against (and sent as SNI); default the host part of
	// each address, which for an IP address needs the IP in the
	// certificate.
	ServerName string `json:"server_name,omitempty"`
	// Protocol is http1 (default: HTTP/1.1, or HTTP/2 when a TLS host
	// offers it), h2c (HTTP/2 in clear, with prior knowledge, as gRPC
	// servers speak) or h2 (HTTP/2 over TLS only).
	Protocol string `json:"protocol"`
	// Limiter names the limiters: entry from which each host gets an
	// adaptive concurrency limit; empty for none.
	Limiter string `json:"limiter,omitempty"`
}

// Fallback is a route's static answer when its upstream is unavailable
// (every host refused, failed or is behind an open breaker).
type Fallback struct {
	Status      int    `json:"status"`
	Body        string `json:"body"`
	ContentType string `json:"content_type"`
}

// Route sends the requests it matches to an upstream.
type Route struct {
	// Name is the route's name.
	Name string `json:"name"`
	// Listeners are the listeners the route serves; empty for all.
	Listeners []string `json:"listeners,omitempty"`
	// Host, if not empty, is the request host the route matches (without
	// port; case-insensitive).
	Host string `json:"host,omitempty"`
	// PathPrefix is the path prefix the route matches; default "/". A
	// prefix ending in "/" matches what is below it; one that does not
	// also matches itself ("/api" matches /api and /api/x, not /apix).
	PathPrefix string `json:"path_prefix"`
	// Methods are the methods the route matches; empty for all.
	Methods []string `json:"methods,omitempty"`
	// Upstream names the pool the route sends to.
	Upstream string `json:"upstream"`
	// Timeout bounds a request from the gateway's admission to the end of
	// its answer, retries included, and is the deadline the upstream is
	// told of. Default 30s; 0 (written off) for none, for routes that
	// stream (server-sent events, WebSocket).
	Timeout time.Duration `json:"timeout"`
	// PerTryTimeout bounds each attempt; 0 for none.
	PerTryTimeout time.Duration `json:"per_try_timeout,omitempty"`
	// Retry names the retries: entry; empty for the default: two attempts
	// of idempotent requests (and those with an Idempotency-Key) on
	// transient failures, under a retry budget of 10% of the route's
	// requests.
	Retry string `json:"retry,omitempty"`
	// Bulkhead names the bulkheads: entry that bounds the route's
	// requests in flight, with its queue and max wait; empty for none.
	Bulkhead string `json:"bulkhead,omitempty"`
	// MaxBodyBytes bounds a request's body. Default 10 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// RetryBodyBytes is how much of a request's body the gateway keeps so
	// that it can send it again on a retry; a longer body is streamed and
	// its request not retried. Default 64 KiB.
	RetryBodyBytes int64 `json:"retry_body_bytes"`
	// Fallback, if not nil, answers when the upstream is unavailable.
	Fallback *Fallback `json:"fallback,omitempty"`
	// AccessLog is the share of the route's requests logged (slog,
	// message "access"); answers of 500 and above are all logged, up to
	// 10 a second. Default 1%; 0 logs only those.
	AccessLog float64 `json:"access_log"`
	// Tenants, if not nil, gives each tenant its own queue and a fair
	// share of the route's capacity (in place of Bulkhead).
	Tenants *Tenants `json:"tenants,omitempty"`
	// Cells, if not nil, sends tenants to upstreams of their own.
	Cells *Cells `json:"cells,omitempty"`
	// Shard, if not nil, gives each tenant a subset of the hosts.
	Shard *Shard `json:"shard,omitempty"`
	// Hedge names the hedges: entry whose policy hedges the route's
	// idempotent requests; empty for none.
	Hedge string `json:"hedge,omitempty"`
	// Idempotency, if not nil, runs a request with an Idempotency-Key
	// upstream once.
	Idempotency *Idempotency `json:"idempotency,omitempty"`
	// Limiter names the limiters: entry that bounds the route's requests
	// in flight at a limit it learns (in place of Bulkhead).
	Limiter string `json:"limiter,omitempty"`
	// Chaos, if not nil, injects faults into the route's requests.
	Chaos *Chaos `json:"chaos,omitempty"`
	// GRPC, if not nil, makes the route a gRPC one.
	GRPC *GRPC `json:"grpc,omitempty"`

	cellNodes *yaml.Node // for checkRouteMore's errors
}

// Defaults of the fields a file leaves out.
const (
	DefaultAdminAddress      = "127.0.0.1:9901"
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultRouteTimeout      = 30 * time.Second
	DefaultMaxBodyBytes      = 10 << 20
	DefaultRetryBodyBytes    = 64 << 10
	DefaultConnectTimeout    = 500 * time.Millisecond
	DefaultAccessLog         = 0.01
)

var off = map[string]time.Duration{"off": -1}

// Load reads and validates the gateway configuration at path; the error
// lists every problem as FILE:LINE: path: rule.
func Load(path string) (*Config, error) {
	c := new(Config)
	f, err := watertightconfig.LoadWith(path, c.sections())
	if err != nil {
		return nil, err
	}
	c.Library = f
	return c, nil
}

// Parse is Load for a file's contents; name names it in the errors.
func Parse(name string, data []byte) (*Config, error) {
	c := new(Config)
	f, err := watertightconfig.ParseWith(name, data, c.sections())
	if err != nil {
		return nil, err
	}
	c.Library = f
	return c, nil
}

func (c *Config) sections() map[string]watertightconfig.Section {
	return map[string]watertightconfig.Section{
		"listeners": c.readListeners,
		"admin":     c.readAdmin,
		"upstreams": c.readUpstreams,
		"routes":    c.readRoutes,
	}
}

func checkAddress(d *watertightconfig.Decoder, n *yaml.Node, path, addr string) bool {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		d.Fail(n, path, "must be host:port (127.0.0.1:8080, :8080), got %q", addr)
		return false
	}
	return true
}

func (c *Config) readListeners(d *watertightconfig.Decoder, n *yaml.Node) {
	c.Listeners = map[string]Listener{}
	if n == nil {
		d.FailLine(0, "listeners", "the file needs at least one listener (listeners: {public: {address: 127.0.0.1:8080}})")
		return
	}
	es, _ := d.Mapping(n, "listeners")
	if len(es) == 0 {
		d.Fail(n, "listeners", "give at least one listener")
	}
	addrs := map[string]string{}
	for _, e := range es {
		path := "listeners." + e.Key
		l := Listener{Name: e.Key, ReadHeaderTimeout: DefaultReadHeaderTimeout, IdleTimeout: DefaultIdleTimeout, MaxHeaderBytes: DefaultMaxHeaderBytes}
		var addrNode *yaml.Node
		d.Fields(e.Value, path, []string{"address", "read_header_timeout", "idle_timeout", "max_header_bytes", "trusted_proxies", "tls_cert", "tls_key"}, func(f watertightconfig.Entry, p string) {
			switch f.Key {
			case "address":
				if a, ok := d.String(f.Value, p); ok && checkAddress(d, f.Value, p, a) {
					l.Address, addrNode = a, f.Value
				}
			case "read_header_timeout":
				l.ReadHeaderTimeout, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "idle_timeout":
				l.IdleTimeout, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "max_header_bytes":
				v, _ := d.Int(f.Value, p, 1024, 16<<20)
				l.MaxHeaderBytes = int(v)
			case "trusted_proxies":
				ss, _ := d.Strings(f.Value, p)
				for _, s := range ss {
					pfx, err := netip.ParsePrefix(s)
					if err != nil {
						a, aerr := netip.ParseAddr(s)
						if aerr != nil {
							d.Fail(f.Value, p, "must list networks (10.0.0.0/8) or addresses, got %q", s)
							continue
						}
						pfx = netip.PrefixFrom(a, a.BitLen())
					}
					l.TrustedProxies = append(l.TrustedProxies, pfx.Masked())
				}
			case "tls_cert":
				l.TLSCert, _ = d.String(f.Value, p)
			case "tls_key":
				l.TLSKey, _ = d.String(f.Value, p)
			}
		})
		if l.Address == "" && addrNode == nil {
			d.FailLine(e.Line, path+".address", "a listener needs an address (host:port)")
		}
		if (l.TLSCert == "") != (l.TLSKey == "") {
			d.FailLine(e.Line, path, "give both tls_cert and tls_key, or neither")
		}
		if prev, dup := addrs[l.Address]; dup && l.Address != "" {
			d.Fail(addrNode, path+".address", "listener %s already listens on %s", prev, l.Address)
		}
		addrs[l.Address] = e.Key
		c.Listeners[e.Key] = l
	}
}

func (c *Config) readAdmin(d *watertightconfig.Decoder, n *yaml.Node) {
	c.Admin = Admin{Address: DefaultAdminAddress}
	var at *yaml.Node
	d.Fields(n, "admin", []string{"address"}, func(f watertightconfig.Entry, p string) {
		if a, ok := d.String(f.Value, p); ok && checkAddress(d, f.Value, p, a) {
			c.Admin.Address, at = a, f.Value
		}
	})
	d.After(func() {
		for _, l := range c.Listeners {
			if !sameSocket(l.Address, c.Admin.Address) {
				continue
			}
			if at != nil {
				d.Fail(at, "admin.address", "is listener %s's address too: the admin listener must never be a public one", l.Name)
			} else {
				d.FailLine(0, "admin.address", "the default, %s, is listener %s's address: give the admin listener another (admin: {address: ...})", DefaultAdminAddress, l.Name)
			}
		}
	})
}

// sameSocket reports whether two listen addresses would take the same port
// of the same address: equal, or the same port with either on every
// address (":9901", "0.0.0.0:9901").
func sameSocket(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb {
		return a == b
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || any(ha) || any(hb)
}

func (c *Config) readUpstreams(d *watertightconfig.Decoder, n *yaml.Node) {
	c.Upstreams = map[string]Upstream{}
	es, _ := d.Mapping(n, "upstreams")
	for _, e := range es {
		path := "upstreams." + e.Key
		u := Upstream{Name: e.Key, Scheme: "http", ConnectTimeout: DefaultConnectTimeout, Protocol: "http1"}
		u.Balance.Name = e.Key
		var hostsNode *yaml.Node
		d.Fields(e.Value, path, append([]string{"hosts", "scheme", "strategy", "consecutive_errors", "slow_factor", "max_ejected", "base_ejection", "max_ejection", "breaker", "connect_timeout", "server_name"}, upstreamMoreFields...), func(f watertightconfig.Entry, p string) {
			if slices.Contains(upstreamMoreFields, f.Key) {
				readUpstreamMore(d, &u, f, p)
				return
			}
			switch f.Key {
			case "hosts":
				hostsNode = f.Value
				hs, _ := d.Strings(f.Value, p)
				for _, h := range hs {
					if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
						d.Fail(f.Value, p, "must list host:port addresses, got %q", h)
						continue
					}
					if slices.Contains(u.Hosts, h) {
						d.Fail(f.Value, p, "lists %s twice", h)
						continue
					}
					u.Hosts = append(u.Hosts, h)
				}
			case "scheme":
				if s, ok := d.String(f.Value, p); ok {
					if s != "http" && s != "https" {
						d.Fail(f.Value, p, "must be http or https, got %q", s)
					}
					u.Scheme = s
				}
			case "strategy":
				if s, ok := d.String(f.Value, p); ok {
					switch s {
					case "least_in_flight":
						u.Balance.Strategy = balance.LeastInFlight
					case "peak_ewma":
						u.Balance.Strategy = balance.PeakEWMA
					default:
						d.Fail(f.Value, p, "must be least_in_flight or peak_ewma, got %q", s)
					}
				}
			case "consecutive_errors":
				if s, _ := d.String(f.Value, p); s == "off" {
					u.Balance.ConsecutiveErrors = -1
				} else if v, ok := d.Int(f.Value, p, 1, 1000); ok {
					u.Balance.ConsecutiveErrors = int(v)
				}
			case "slow_factor":
				if s, _ := d.String(f.Value, p); s == "off" {
					u.Balance.SlowFactor = -1
				} else if v, ok := d.Float(f.Value, p); ok {
					if v < 1.5 {
						d.Fail(f.Value, p, "must be at least 1.5 (or off), got %v", v)
					}
					u.Balance.SlowFactor = v
				}
			case "max_ejected":
				if v, ok := d.Rate(f.Value, p); ok {
					if v == 0 {
						d.Fail(f.Value, p, "must be above 0 (leave it out for 50%%; consecutive_errors: off and slow_factor: off turn ejection off)")
					}
					u.Balance.MaxEjectedShare = v
				}
			case "base_ejection":
				u.Balance.BaseEjection, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "max_ejection":
				u.Balance.MaxEjection, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "breaker":
				if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "breakers", name) {
					u.Breaker = name
				}
			case "connect_timeout":
				u.ConnectTimeout, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "server_name":
				u.ServerName, _ = d.String(f.Value, p)
			}
		})
		if len(u.Hosts) == 0 && hostsNode == nil {
			d.FailLine(e.Line, path+".hosts", "an upstream needs hosts (a list of host:port)")
		}
		if u.Protocol == "h2" && u.Scheme != "https" {
			d.FailLine(e.Line, path+".protocol", "h2 is HTTP/2 over TLS: give scheme: https, or protocol: h2c for HTTP/2 in clear")
		}
		if len(u.Hosts) > 0 {
			u.Balance.Hosts = u.Hosts
			if _, err := balance.New(u.Balance); err != nil {
				d.FailLine(e.Line, path, "%v", strings.TrimPrefix(err.Error(), "balance: invalid config "+fmt.Sprintf("%q", e.Key)+": "))
			}
		}
		c.Upstreams[e.Key] = u
	}
}

var routeFields = []string{"listeners", "host", "path_prefix", "methods", "upstream", "timeout", "per_try_timeout", "retry", "bulkhead", "max_body_bytes", "retry_body_bytes", "fallback", "access_log"}

func (c *Config) readRoutes(d *watertightconfig.Decoder, n *yaml.Node) {
	es, _ := d.Mapping(n, "routes")
	if n == nil || len(es) == 0 {
		d.Fail(n, "routes", "the file needs at least one route (routes: {all: {upstream: NAME}})")
	}
	for _, e := range es {
		path := "routes." + e.Key
		r := Route{Name: e.Key, PathPrefix: "/", Timeout: DefaultRouteTimeout, MaxBodyBytes: DefaultMaxBodyBytes, RetryBodyBytes: DefaultRetryBodyBytes, AccessLog: DefaultAccessLog}
		var upNode *yaml.Node
		d.Fields(e.Value, path, append(slices.Clone(routeFields), routeMoreFields...), func(f watertightconfig.Entry, p string) {
			if slices.Contains(routeMoreFields, f.Key) {
				readRouteMore(d, &r, f, p)
				return
			}
			switch f.Key {
			case "listeners":
				r.Listeners, _ = d.Strings(f.Value, p)
			case "host":
				if h, ok := d.String(f.Value, p); ok {
					r.Host = strings.ToLower(h)
				}
			case "path_prefix":
				if s, ok := d.String(f.Value, p); ok {
					if !strings.HasPrefix(s, "/") {
						d.Fail(f.Value, p, "must start with /, got %q", s)
					}
					r.PathPrefix = s
				}
			case "methods":
				ms, _ := d.Strings(f.Value, p)
				for _, m := range ms {
					if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t/") {
						d.Fail(f.Value, p, "must list methods in capitals (GET, POST), got %q", m)
						continue
					}
					r.Methods = append(r.Methods, m)
				}
			case "upstream":
				r.Upstream, _ = d.Name(f.Value, p)
				upNode = f.Value
			case "timeout":
				if v, ok := d.Duration(f.Value, p, time.Millisecond, off); ok {
					r.Timeout = max(v, 0)
				}
			case "per_try_timeout":
				r.PerTryTimeout, _ = d.Duration(f.Value, p, time.Millisecond, nil)
			case "retry":
				if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "retries", name) {
					r.Retry = name
				}
			case "bulkhead":
				if name, ok := d.Name(f.Value, p); ok && d.Ref(f.Value, p, "bulkheads", name) {
					r.Bulkhead = name
				}
			case "max_body_bytes":
				r.MaxBodyBytes, _ = d.Int(f.Value, p, 0, 1<<40)
			case "retry_body_bytes":
				r.RetryBodyBytes, _ = d.Int(f.Value, p, 0, 64<<20)
			case "access_log":
				r.AccessLog, _ = d.Rate(f.Value, p)
			case "fallback":
				fb := &Fallback{Status: http.StatusServiceUnavailable, ContentType: "text/plain; charset=utf-8"}
				d.Fields(f.Value, p, []string{"status", "body", "content_type"}, func(g watertightconfig.Entry, q string) {
					switch g.Key {
					case "status":
						v, _ := d.Int(g.Value, q, 200, 599)
						fb.Status = int(v)
					case "body":
						fb.Body, _ = d.String(g.Value, q)
					case "content_type":
						fb.ContentType, _ = d.String(g.Value, q)
					}
				})
				r.Fallback = fb
			}
		})
		if r.Upstream == "" && upNode == nil {
			d.FailLine(e.Line, path+".upstream", "a route needs an upstream")
		}
		if r.PerTryTimeout > 0 && r.Timeout > 0 && r.PerTryTimeout > r.Timeout {
			d.FailLine(e.Line, path+".per_try_timeout", "is %v, more than the route's timeout %v: lower it, or raise timeout", r.PerTryTimeout, r.Timeout)
		}
		if r.RetryBodyBytes > r.MaxBodyBytes && r.MaxBodyBytes > 0 {
			r.RetryBodyBytes = r.MaxBodyBytes
		}
		c.Routes = append(c.Routes, r)
		i := len(c.Routes) - 1
		d.After(func() { c.checkRoute(d, i, e.Line, upNode) })
	}
}

// checkRoute checks what route i names in the other gateway sections.
func (c *Config) checkRoute(d *watertightconfig.Decoder, i, line int, upNode *yaml.Node) {
	r := &c.Routes[i]
	path := "routes." + r.Name
	if r.Upstream != "" {
		d.Missing(upNode, path+".upstream", "upstream", "upstreams", r.Upstream, slices.Sorted(maps.Keys(c.Upstreams)))
	}
	for _, l := range r.Listeners {
		if _, ok := c.Listeners[l]; !ok {
			d.FailLine(line, path+".listeners", "no listener named %q (listeners: %s)", l, strings.Join(slices.Sorted(maps.Keys(c.Listeners)), ", "))
		}
	}
	c.checkRouteMore(d, r, line)
}
