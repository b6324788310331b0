package gateway

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/watertightconfig"
	"github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

// Options are what a Gateway takes beside its Config.
type Options struct {
	// Logger receives the gateway's log: listeners, state changes,
	// refused reloads. If nil, slog.Default().
	Logger *slog.Logger
	// Listener, if not nil, receives every protection's events too.
	Listener watertight.Listener
	// DrainTimeout bounds how long Run waits for requests in flight once
	// its context ends. Default 30s.
	DrainTimeout time.Duration
	// ConfigPath, if not empty, is the file Run reloads on SIGHUP and when
	// it changes (see Reload).
	ConfigPath string
	// WatchInterval is how often Run looks at ConfigPath for a change.
	// Default 2s; negative: only on SIGHUP.
	WatchInterval time.Duration

	// testBase, if not nil, replaces every upstream's transport (tests
	// and benchmarks: export_test.go).
	testBase http.RoundTripper
}

// Gateway is `watertight proxy`: the listeners of a Config, each request
// matched to a route and sent to the route's upstream pool through the
// library's protections. Build it with New; serve it with Run, or mount
// Handler and Admin in servers of your own.
type Gateway struct {
	opts Options
	log  *slog.Logger
	lis  watertight.Listener
	reg  *watertightconfig.Registry
	prom *watertightprom.Collector
	// watched is every protection of the gateway, registered once for
	// /metrics and the dashboard.
	watched *watch.Set
	dash    *dashboard.Dashboard
	tab     atomic.Pointer[table]
	mu      sync.Mutex // one Reload at a time

	stamp            string // Options.ConfigPath's fileStamp when New ran
	ready            atomic.Bool
	reloads, refused atomic.Int64
	lastRefusal      atomic.Pointer[string]
}

// table is one configuration, built: what a request reads, swapped whole
// by Reload.
type table struct {
	cfg       *Config
	ups       map[string]*upstream
	routes    []*route
	listeners map[string]*listenerRoute
	metrics   map[string]func() // the sources added to the collector, to remove the ones a reload drops
}

type upstream struct {
	cfg      Upstream
	bal      *balance.Balancer
	breakers *circuit.Registry // nil: no breaker
	limiters *limit.Registry   // nil: no adaptive limit per host
	base     http.RoundTripper
}

// listenerRoute is what a route needs of the listener a request came in
// on: the proxies it trusts.
type listenerRoute struct {
	name    string
	trusted []netip.Prefix
}

// trusts reports whether the client address is one of the listener's
// trusted proxies.
func (l *listenerRoute) trusts(client string) bool {
	if len(l.trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(client)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// New builds a Gateway for cfg: every instance of the library's sections,
// a Balancer per upstream and the protections of every route. It dials
// nothing and listens nowhere; Run does.
func New(cfg *Config, opts Options) (*Gateway, error) {
	g := &Gateway{opts: opts, log: opts.Logger}
	if opts.ConfigPath != "" {
		g.stamp = fileStamp(opts.ConfigPath)
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.opts.DrainTimeout <= 0 {
		g.opts.DrainTimeout = 30 * time.Second
	}
	if g.opts.WatchInterval == 0 {
		g.opts.WatchInterval = 2 * time.Second
	}
	g.watched = new(watch.Set)
	prom, err := watertightprom.NewCollector(watertightprom.Config{Sources: g.watched})
	if err != nil {
		return nil, err
	}
	g.prom = prom
	g.dash, err = dashboard.New(dashboard.Config{Sources: g.watched, Title: "watertight proxy"})
	if err != nil {
		return nil, err
	}
	g.lis = watertight.Listeners(prom, g.dash, opts.Listener, stateLog{g})
	reg, err := watertightconfig.NewRegistry(cfg.Library, watertightconfig.Options{Listener: g.lis})
	if err != nil {
		return nil, err
	}
	g.reg = reg
	tab, err := g.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	g.tab.Store(tab)
	return g, nil
}

// build makes the table for cfg, keeping from old what did not change: an
// upstream's Balancer (its hosts' ejections and counts) when its hosts
// and balancing settings are the same, its connections when its connect
// timeout is, and a route's default retry budget (its balance).
func (g *Gateway) build(cfg *Config, old *table) (*table, error) {
	t := &table{cfg: cfg, ups: map[string]*upstream{}, metrics: map[string]func(){}, listeners: map[string]*listenerRoute{}}
	for name, l := range cfg.Listeners {
		t.listeners[name] = &listenerRoute{name: name, trusted: l.TrustedProxies}
	}
	for name, u := range cfg.Upstreams {
		var prev *upstream
		if old != nil {
			prev = old.ups[name]
		}
		up := &upstream{cfg: u}
		if prev != nil && slices.Equal(prev.cfg.Hosts, u.Hosts) && reflect.DeepEqual(prev.cfg.Balance, u.Balance) {
			up.bal = prev.bal
		} else {
			bc := u.Balance
			bc.Hosts, bc.Name, bc.Listener = u.Hosts, name, g.lis
			bal, err := balance.New(bc)
			if err != nil {
				return nil, fmt.Errorf("gateway: upstream %s: %w", name, err)
			}
			up.bal = bal
		}
		t.metrics["balancer/"+name] = g.watched.AddBalancer(up.bal)
		if g.opts.testBase != nil {
			up.base = g.opts.testBase
		} else if prev != nil && prev.cfg.ConnectTimeout == u.ConnectTimeout && prev.cfg.ServerName == u.ServerName && prev.cfg.Protocol == u.Protocol {
			up.base = prev.base
		} else {
			tr := &http.Transport{
				Proxy:                 nil, // only the configured hosts are ever dialled
				DialContext:           (&net.Dialer{Timeout: u.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:          1024,
				MaxIdleConnsPerHost:   256,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   5 * time.Second,
				ExpectContinueTimeout: time.Second,
				// The client's Accept-Encoding goes through as it is: no
				// gzip asked for on its behalf and undone here.
				DisableCompression: true,
			}
			if u.ServerName != "" {
				tr.TLSClientConfig = &tls.Config{ServerName: u.ServerName}
			}
			switch u.Protocol {
			case "h2c":
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			case "h2":
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetHTTP2(true)
			}
			up.base = tr
		}
		if u.Breaker != "" {
			var err error
			if up.breakers, err = g.reg.CircuitRegistry(u.Breaker); err != nil {
				return nil, fmt.Errorf("gateway: upstream %s: %w", name, err)
			}
			t.metrics["breakers/"+u.Breaker] = g.prom.AddBreakerRegistry(u.Breaker, up.breakers) // upstreams may share it
		}
		if u.Limiter != "" {
			var err error
			if up.limiters, err = g.reg.LimiterRegistry(u.Limiter); err != nil {
				return nil, fmt.Errorf("gateway: upstream %s: %w", name, err)
			}
			t.metrics["limiters/"+u.Limiter] = g.watched.AddLimiterRegistry(u.Limiter, up.limiters)
		}
		t.ups[name] = up
	}
	for _, rc := range cfg.Routes {
		var prev *route
		if old != nil {
			for _, r := range old.routes {
				if r.cfg.Name == rc.Name {
					prev = r
				}
			}
		}
		rt, err := g.newRoute(t, rc, prev)
		if err != nil {
			return nil, fmt.Errorf("gateway: route %s: %w", rc.Name, err)
		}
		t.routes = append(t.routes, rt)
	}
	return t, nil
}

// Reload replaces the configuration with the file at path, keeping the
// state of what did not change: the library's instances as
// watertightconfig.Registry.Reload keeps them (an open breaker stays
// open, a bulkhead's permits in flight count against its new limit), an
// upstream's Balancer, a route's retry budget. Requests in flight finish
// on the configuration they started with; the next ones take the new.
// A file that is invalid, or that changes a listener's address or the
// admin listener (which need a restart), is refused whole: the old
// configuration stays, the refusal is logged and counted (State).
func (g *Gateway) Reload(path string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.reload(path)
	if err != nil {
		g.refused.Add(1)
		msg := err.Error()
		g.lastRefusal.Store(&msg)
		g.log.Error("reload refused: the old configuration stays", "file", path, "error", err)
		return err
	}
	g.reloads.Add(1)
	return nil
}

func (g *Gateway) reload(path string) error {
	cfg, err := Load(path)
	if err != nil {
		return err
	}
	old := g.tab.Load()
	if !reflect.DeepEqual(listenAddresses(cfg), listenAddresses(old.cfg)) {
		return fmt.Errorf("%s: the listeners or the admin listener changed (addresses, timeouts, limits, TLS, trusted proxies): restart the gateway for those", path)
	}
	ch, err := g.reg.Reload(cfg.Library)
	if err != nil {
		return err
	}
	t, err := g.build(cfg, old)
	if err != nil {
		return err
	}
	g.tab.Store(t)
	for k, remove := range old.metrics {
		if _, kept := t.metrics[k]; !kept {
			remove() // gone from the file: gone from /metrics
		}
	}
	for name, up := range old.ups {
		if nu, ok := t.ups[name]; !ok || nu.base != up.base {
			closeIdle(up.base)
		}
	}
	kept := map[*idemStore]bool{}
	for _, rt := range t.routes {
		kept[rt.idem] = true
	}
	for _, rt := range old.routes {
		if rt.idem != nil && !kept[rt.idem] {
			rt.idem.close() // a request still using it fails closed (503)
		}
	}
	g.log.Info("reloaded", "file", path, "library", ch.String(), "routes", len(t.routes), "upstreams", len(t.ups))
	return nil
}

// listenAddresses are what a reload cannot change: the listeners, every
// setting of them, and the admin listener.
func listenAddresses(c *Config) map[string]any {
	m := map[string]any{"admin": c.Admin}
	for n, l := range c.Listeners {
		m["listener "+n] = l
	}
	return m
}

// stateLog is the listener that logs the state changes of every
// protection, and wants no other event.
type stateLog struct{ g *Gateway }

func (l stateLog) Wants(k watertight.EventKind) bool { return k == watertight.EventStateChange }

func (l stateLog) OnEvent(e watertight.Event) { l.g.logEvent(e) }

// logEvent logs the state changes of every protection.
func (g *Gateway) logEvent(e watertight.Event) {
	if e.Kind != watertight.EventStateChange {
		return
	}
	g.log.Info("state change", "source", e.Source, "name", e.Name, "key", e.Key, "from", e.From, "to", e.To, "reason", e.Reason)
}

// Handler returns the handler of the public listener named listener: it
// matches each request to a route and serves it. A request no route
// matches gets 404.
func (g *Gateway) Handler(listener string) http.Handler {
	return &front{g: g, name: listener}
}

// front is a public listener's handler.
type front struct {
	g    *Gateway
	name string
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := f.g.tab.Load()
	rt := t.match(f.name, r)
	if rt == nil {
		http.Error(w, "watertight: proxy: no route for "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	rt.serve(w, r, t.listeners[f.name])
}

// match returns the route for r: of those whose listener, host, method
// and path prefix match, the most specific (moreSpecific).
func (t *table) match(listener string, r *http.Request) *route {
	host := strings.ToLower(r.Host)
	if strings.IndexByte(host, ':') >= 0 {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	var best *route
	for _, rt := range t.routes {
		c := &rt.cfg
		if rt.lis != nil && !rt.lis[listener] {
			continue
		}
		if c.Host != "" && c.Host != host {
			continue
		}
		if len(c.Methods) > 0 && !slices.Contains(c.Methods, r.Method) {
			continue
		}
		if !prefixMatch(c.PathPrefix, r.URL.Path) {
			continue
		}
		if best == nil || moreSpecific(c, &best.cfg) {
			best = rt
		}
	}
	return best
}

// moreSpecific reports whether route a beats route b when both match: a
// route for the request's host beats one for any host (as a virtual host
// does), then the longer path prefix, then a route for listed methods
// beats one for any; on a tie the first in the file (b) stays.
func moreSpecific(a, b *Route) bool {
	if (a.Host != "") != (b.Host != "") {
		return a.Host != ""
	}
	if len(a.PathPrefix) != len(b.PathPrefix) {
		return len(a.PathPrefix) > len(b.PathPrefix)
	}
	return len(a.Methods) > 0 && len(b.Methods) == 0
}

// prefixMatch: "/api/" matches below it; "/api" matches /api and below
// /api/, not /apix.
func prefixMatch(prefix, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || len(path) == len(prefix) || path[len(prefix)] == '/'
}

// cleanPath reports whether p has no ".", ".." or empty segments (a
// trailing slash aside), decoded: routes match on it, and an upstream that
// resolved /public/../private itself would serve what no route sent it.
func cleanPath(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	p = strings.TrimSuffix(p[1:], "/")
	for {
		i := strings.IndexByte(p, '/')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		if i < 0 {
			return true
		}
		p = p[i+1:]
	}
}

// exchange is the ResponseWriter the guards and proxy see: the client's,
// recording the status and the bytes of the answer for the access log,
// and carrying the listener the request came in on. Unwrap lets
// http.ResponseController reach the connection (flushes, read deadlines,
// an Upgrade's hijack). Exchanges are pooled: nothing keeps one after its
// request's serve returns.
type exchange struct {
	http.ResponseWriter
	status int
	bytes  int64
	lis    *listenerRoute
}

var exchanges = sync.Pool{New: func() any { return new(exchange) }}

func (x *exchange) WriteHeader(code int) {
	if x.status == 0 || x.status < 200 {
		x.status = code
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.status = http.StatusOK
	}
	n, err := x.ResponseWriter.Write(p)
	x.bytes += int64(n)
	return n, err
}

// Unwrap returns the ResponseWriter it wraps.
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// Flush flushes the answer, for handlers that assert http.Flusher.
func (x *exchange) Flush() {
	if f, ok := x.ResponseWriter.(http.Flusher); ok {
		f.Flush()
		return
	}
	http.NewResponseController(x.ResponseWriter).Flush()
}

// Close closes the idle connections to the upstreams and ends the
// dashboard's open pages. Run does it when it returns; call it when you
// serve Handler and Admin yourself and are done.
func (g *Gateway) Close() {
	t := g.tab.Load()
	for _, up := range t.ups {
		closeIdle(up.base)
	}
	for _, rt := range t.routes {
		if rt.idem != nil {
			rt.idem.close()
		}
	}
	g.dash.Close()
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
