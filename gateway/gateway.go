package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/watertightconfig"
	"github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
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
	tab  atomic.Pointer[table]
	mu   sync.Mutex // one Reload at a time

	stamp            string // Options.ConfigPath's fileStamp when New ran
	ready            atomic.Bool
	reloads, refused atomic.Int64
	lastRefusal      atomic.Pointer[string]
}

// table is one configuration, built: what a request reads, swapped whole
// by Reload.
type table struct {
	cfg     *Config
	ups     map[string]*upstream
	routes  []*route
	metrics map[string]func() // the sources added to the collector, to remove the ones a reload drops
}

type upstream struct {
	cfg      Upstream
	bal      *balance.Balancer
	breakers *circuit.Registry // nil: no breaker
	base     *http.Transport
}

type route struct {
	cfg     Route
	up      *upstream
	handler http.Handler
	bulk    *bulkhead.Bulkhead
	budget  *budget.Budget
	lis     map[string]bool // nil: every listener
	trusted map[string][]netip.Prefix
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
	prom, err := watertightprom.NewCollector(watertightprom.Config{})
	if err != nil {
		return nil, err
	}
	g.prom = prom
	g.lis = watertight.Listeners(prom, opts.Listener, watertight.ListenerFunc(g.logEvent))
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
	t := &table{cfg: cfg, ups: map[string]*upstream{}, metrics: map[string]func(){}}
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
		if prev != nil && prev.cfg.ConnectTimeout == u.ConnectTimeout && prev.cfg.ServerName == u.ServerName {
			up.base = prev.base
		} else {
			up.base = &http.Transport{
				Proxy:                 nil, // only the configured hosts are ever dialled
				DialContext:           (&net.Dialer{Timeout: u.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:          1024,
				MaxIdleConnsPerHost:   256,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   5 * time.Second,
				ExpectContinueTimeout: time.Second,
			}
			if u.ServerName != "" {
				up.base.TLSClientConfig = &tls.Config{ServerName: u.ServerName}
			}
		}
		if u.Breaker != "" {
			var err error
			if up.breakers, err = g.reg.CircuitRegistry(u.Breaker); err != nil {
				return nil, fmt.Errorf("gateway: upstream %s: %w", name, err)
			}
			t.metrics["breakers/"+u.Breaker] = g.prom.AddBreakerRegistry(u.Breaker, up.breakers) // upstreams may share it
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

func (g *Gateway) newRoute(t *table, rc Route, prev *route) (*route, error) {
	lis := g.lis
	rt := &route{cfg: rc, up: t.ups[rc.Upstream], trusted: map[string][]netip.Prefix{}}
	if rt.up == nil {
		return nil, fmt.Errorf("no upstream %q", rc.Upstream)
	}
	if len(rc.Listeners) > 0 {
		rt.lis = map[string]bool{}
		for _, l := range rc.Listeners {
			rt.lis[l] = true
		}
	}
	for name, l := range t.cfg.Listeners {
		rt.trusted[name] = l.TrustedProxies
	}
	var rcfg retry.Config
	if rc.Retry != "" {
		var err error
		if rcfg, err = g.reg.RetryConfig(rc.Retry); err != nil {
			return nil, err
		}
	} else {
		if prev != nil && prev.budget != nil {
			rt.budget = prev.budget
		} else {
			b, err := budget.New(budget.Config{Name: rc.Name, Listener: lis})
			if err != nil {
				return nil, err
			}
			rt.budget = b
		}
		t.metrics["budget/"+rc.Name] = g.prom.AddBudget(rc.Name, rt.budget)
		rcfg = retry.Config{Name: rc.Name, MaxAttempts: 2, Budget: rt.budget}
	}
	rcfg.Listener = lis
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
		Base: rt.up.base, Balancer: rt.up.bal, Breakers: rt.up.breakers, MaxEndpoints: -1,
		Retry: rcfg, AttemptTimeout: rc.PerTryTimeout, Name: rc.Name, Listener: lis,
	})
	if err != nil {
		return nil, err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:      rt.rewrite,
		Transport:    tr,
		ErrorHandler: rt.errorHandler,
		ErrorLog:     slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BufferPool:   bufferPool{},
	}
	var h http.Handler = proxy
	if rc.Bulkhead != "" {
		if rt.bulk, err = g.reg.Bulkhead(rc.Bulkhead); err != nil {
			return nil, err
		}
		t.metrics["bulkhead/"+rc.Bulkhead] = g.prom.AddBulkhead(rt.bulk)
		h = rt.bulkheaded(h)
	}
	h = rt.limited(h)
	// The server-side guards: incoming deadlines (ours, grpc-timeout,
	// Envoy's), dead requests shed, criticality.
	guarded, err := watertighthttp.NewHandler(h, watertighthttp.HandlerConfig{
		Name: rc.Name, MaxConcurrent: -1, Logger: g.log, Listener: lis,
		Route: func(*http.Request) string { return rc.Name },
	})
	if err != nil {
		return nil, err
	}
	rt.handler = (&accessLog{log: g.log, route: rc.Name, rate: rc.AccessLog}).wrap(guarded)
	return rt, nil
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
			up.base.CloseIdleConnections()
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

// logEvent logs the state changes of every protection.
func (g *Gateway) logEvent(e watertight.Event) {
	if e.Kind != watertight.EventStateChange {
		return
	}
	g.log.Info("state change", "source", e.Source, "name", e.Name, "key", e.Key, "from", e.From, "to", e.To, "reason", e.Reason)
}

// listenerKey is the context key of the listener a request came in on.
type listenerKey struct{}

// Handler returns the handler of the public listener named listener: it
// matches each request to a route and serves it. A request no route
// matches gets 404.
func (g *Gateway) Handler(listener string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := g.tab.Load().match(listener, r)
		if rt == nil {
			http.Error(w, "watertight: proxy: no route for "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), listenerKey{}, listener))
		rt.handler.ServeHTTP(w, r)
	})
}

// match returns the route for r: of those whose listener, host, method
// and path prefix match, the most specific (moreSpecific).
func (t *table) match(listener string, r *http.Request) *route {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
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

// limited bounds the request's body, keeps what a retry needs of it, and
// sets the route's timeout.
func (rt *route) limited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &rt.cfg
		if !cleanPath(r.URL.Path) {
			http.Error(w, "watertight: proxy: the path has . or .. segments or empty ones: send it normalised", http.StatusBadRequest)
			return
		}
		if c.Timeout > 0 {
			// The route's timeout is the host's to meet (its expiry counts
			// on the host's breaker); a shorter deadline of the client's
			// is not (watertighthttp.TransportConfig.Balancer).
			ctx, cancel := context.WithTimeoutCause(r.Context(), c.Timeout, errRouteTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if r.Body != nil && r.Body != http.NoBody {
			if c.MaxBodyBytes > 0 {
				if r.ContentLength > c.MaxBodyBytes {
					http.Error(w, fmt.Sprintf("watertight: proxy: request body of %d bytes is over the route's limit of %d", r.ContentLength, c.MaxBodyBytes), http.StatusRequestEntityTooLarge)
					return
				}
				r.Body = http.MaxBytesReader(w, r.Body, c.MaxBodyBytes)
			}
			// The part of the body kept for retries is read within the
			// route's time: a client that trickles it cannot hold the
			// route. (The deadline is cleared after: a read deadline that
			// passes also ends the request's context, as a client that
			// went away does.)
			rc := http.NewResponseController(w)
			if c.Timeout > 0 {
				rc.SetReadDeadline(time.Now().Add(c.Timeout))
			}
			err := replayable(r, c.RetryBodyBytes)
			if c.Timeout > 0 {
				rc.SetReadDeadline(time.Time{})
			}
			if err != nil {
				var mb *http.MaxBytesError
				var ne net.Error
				switch {
				case errors.As(err, &mb):
					http.Error(w, fmt.Sprintf("watertight: proxy: request body is over the route's limit of %d bytes", c.MaxBodyBytes), http.StatusRequestEntityTooLarge)
				case errors.As(err, &ne) && ne.Timeout():
					http.Error(w, "watertight: proxy: the request body did not arrive within the route's timeout", http.StatusRequestTimeout)
				default:
					http.Error(w, "watertight: proxy: reading the request body: "+err.Error(), http.StatusBadRequest)
				}
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// errRouteTimeout is the cause of a route's context when its timeout
// passes: marked Failure, so that the host's breaker counts it.
var errRouteTimeout = watertight.Mark(fmt.Errorf("watertight: proxy: the route's timeout passed: %w", context.DeadlineExceeded), watertight.Failure)

// cleanPath reports whether p has no ".", ".." or empty segments (a
// trailing slash aside), decoded: routes match on it, and an upstream that
// resolved /public/../private itself would serve what no route sent it.
func cleanPath(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p[1:], "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// replayable reads up to limit bytes of r's body: a body that ends within
// them is kept, and r gets a GetBody so that a retry can send it again; a
// longer one is streamed on (what was read, then the rest), not
// replayable, so the request is sent once.
func replayable(r *http.Request, limit int64) error {
	if limit <= 0 {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return err
	}
	if int64(len(buf)) <= limit {
		r.Body.Close()
		r.ContentLength = int64(len(buf))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		r.Body, _ = r.GetBody()
		return nil
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	return nil
}

// bulkheaded admits the route's requests through its bulkhead: one that
// is full (or whose wait ends) answers 503 with the overloaded signal.
func (rt *route) bulkheaded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rt.bulk.Acquire(r.Context()); err != nil {
			switch cerr := r.Context().Err(); {
			case errors.Is(cerr, context.Canceled):
				return // the client went away while it waited: nobody reads an answer
			case cerr != nil:
				http.Error(w, "watertight: proxy: route "+rt.cfg.Name+": the request's deadline passed while it waited for the route's bulkhead", http.StatusGatewayTimeout)
				return
			}
			w.Header().Set(watertighthttp.HeaderOverloaded, "true")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "watertight: proxy: route "+rt.cfg.Name+" is at its limit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer rt.bulk.Release()
		next.ServeHTTP(w, r)
	})
}

// rewrite makes the upstream request: the upstream's scheme and logical
// name (the Transport's Balancer puts a host of the pool in its place on
// every attempt), the client's Host kept, X-Forwarded-For appended to only
// when the client is a trusted proxy.
func (rt *route) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = rt.up.cfg.Scheme
	pr.Out.URL.Host = rt.up.cfg.Name
	pr.Out.Host = pr.In.Host
	client, _, err := net.SplitHostPort(pr.In.RemoteAddr)
	if err != nil {
		client = pr.In.RemoteAddr
	}
	xff := client
	if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 && rt.trusts(pr.In, client) {
		xff = strings.Join(prior, ", ") + ", " + client
	}
	pr.Out.Header.Set("X-Forwarded-For", xff)
	if pr.In.Header.Get("X-Forwarded-Host") == "" || !rt.trusts(pr.In, client) {
		pr.Out.Header.Set("X-Forwarded-Host", pr.In.Host)
	} else {
		pr.Out.Header.Set("X-Forwarded-Host", pr.In.Header.Get("X-Forwarded-Host"))
	}
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	pr.Out.Header.Set("X-Forwarded-Proto", proto)
}

// trusts reports whether the client address is one of the listener's
// trusted proxies.
func (rt *route) trusts(r *http.Request, client string) bool {
	name, _ := r.Context().Value(listenerKey{}).(string)
	nets := rt.trusted[name]
	if len(nets) == 0 {
		return false
	}
	a, err := netip.ParseAddr(client)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// errorHandler answers a request the upstream could not: the route's
// fallback when it has one, else watertighthttp.ProxyErrorHandler's
// status (503 with the overloaded signal for an open breaker or a
// refusal, 504 for a deadline, 502 otherwise).
func (rt *route) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(r.Context().Err(), context.Canceled) {
		return // the client went away: nobody reads an answer
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		http.Error(w, fmt.Sprintf("watertight: proxy: request body is over the route's limit of %d bytes", mb.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	if fb := rt.cfg.Fallback; fb != nil {
		w.Header().Set("Content-Type", fb.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(fb.Body)))
		w.Header().Set("X-Watertight-Fallback", rt.cfg.Name)
		w.WriteHeader(fb.Status)
		io.WriteString(w, fb.Body)
		return
	}
	watertighthttp.ProxyErrorHandler(w, r, err)
}

// bufferPool lends ReverseProxy its 32 KiB copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// Close closes the idle connections to the upstreams. Run does it when it
// returns; call it when you serve Handler yourself and are done.
func (g *Gateway) Close() {
	for _, up := range g.tab.Load().ups {
		up.base.CloseIdleConnections()
	}
}
