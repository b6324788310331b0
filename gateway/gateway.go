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
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watch"
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
	base     http.RoundTripper
}

type route struct {
	cfg     Route
	up      *upstream
	tr      *watertighthttp.Transport
	guarded http.Handler // the server-side guards, then proxy
	log     *accessLog
	latency ewma // of the route's answers, for Retry-After
	bulk    *bulkhead.Bulkhead
	budget  *budget.Budget
	lis     map[string]bool // nil: every listener
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
		} else if prev != nil && prev.cfg.ConnectTimeout == u.ConnectTimeout && prev.cfg.ServerName == u.ServerName {
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
			}
			if u.ServerName != "" {
				tr.TLSClientConfig = &tls.Config{ServerName: u.ServerName}
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
	rt := &route{cfg: rc, up: t.ups[rc.Upstream]}
	if rt.up == nil {
		return nil, fmt.Errorf("no upstream %q", rc.Upstream)
	}
	if len(rc.Listeners) > 0 {
		rt.lis = map[string]bool{}
		for _, l := range rc.Listeners {
			rt.lis[l] = true
		}
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
		Retry: rcfg, AttemptTimeout: rc.PerTryTimeout, Timeout: rc.Timeout, OwnsRequests: true,
		Name: rc.Name, Listener: lis,
	})
	if err != nil {
		return nil, err
	}
	rt.tr = tr
	if rc.Bulkhead != "" {
		if rt.bulk, err = g.reg.Bulkhead(rc.Bulkhead); err != nil {
			return nil, err
		}
		t.metrics["bulkhead/"+rc.Bulkhead] = g.prom.AddBulkhead(rt.bulk)
	}
	// The server-side guards: incoming deadlines (ours, grpc-timeout,
	// Envoy's), dead requests shed, criticality.
	rt.guarded, err = watertighthttp.NewHandler(http.HandlerFunc(rt.proxy), watertighthttp.HandlerConfig{
		Name: rc.Name, MaxConcurrent: -1, Logger: g.log, Listener: lis,
		Route: func(*http.Request) string { return rc.Name },
	})
	if err != nil {
		return nil, err
	}
	rt.log = &accessLog{log: g.log, route: rc.Name, rate: rc.AccessLog}
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
			closeIdle(up.base)
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

// serve is a request's way through its route: the access log around the
// server-side guards around proxy. The exchange that carries its status
// and listener is lent from a pool.
func (rt *route) serve(w http.ResponseWriter, r *http.Request, lis *listenerRoute) {
	x := exchanges.Get().(*exchange)
	x.ResponseWriter, x.lis = w, lis
	start := time.Now()
	rt.guarded.ServeHTTP(x, r)
	rt.latency.observe(time.Since(start))
	rt.log.done(x, r, start)
	*x = exchange{}
	exchanges.Put(x)
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

// proxy sends a request admitted by the guards to the upstream: it bounds
// its body, keeps what a retry needs of it, sets the route's timeout,
// takes a permit of the route's bulkhead, and answers with the upstream's
// answer, the route's fallback, or an error that says what happened.
func (rt *route) proxy(w http.ResponseWriter, r *http.Request) {
	var lis *listenerRoute
	if x, ok := w.(*exchange); ok {
		lis = x.lis
	}
	if !cleanPath(r.URL.Path) {
		http.Error(w, "watertight: proxy: the path has . or .. segments or empty ones: send it normalised", http.StatusBadRequest)
		return
	}
	// The route's timeout is the Transport's (TransportConfig.Timeout):
	// the host's to meet, its expiry counting on the host's breaker,
	// while a shorter deadline of the client's does not. It starts when
	// the request is sent; the body is read and the bulkhead's wait is
	// bounded before that, by the route's timeout and max_wait.
	ctx := r.Context()
	if r.Body != nil && r.Body != http.NoBody {
		var ok bool
		if r, ok = rt.readBody(w, r); !ok {
			return
		}
	}
	if rt.bulk != nil {
		if err := rt.bulk.Acquire(ctx); err != nil {
			rt.refuseAdmission(w, r, ctx, err)
			return
		}
		defer rt.bulk.Release()
	}
	out, err := rt.outbound(ctx, r, lis)
	if err != nil {
		http.Error(w, "watertight: proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := rt.tr.RoundTrip(out)
	if err != nil {
		rt.errorHandler(w, r, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		if err := switchProtocols(ctx, w, upgradeType(out.Header), res); err != nil {
			watertighthttp.ProxyErrorHandler(w, r, err)
		}
		return
	}
	respond(w, res)
}

// readBody bounds r's body by the route's limit and reads the part a
// retry needs (Route.RetryBodyBytes) within the route's time: a client
// that trickles its body cannot hold the route. The connection's read
// deadline is the route's deadline while the body is read; it stays on a
// body longer than the part kept, which is streamed to the upstream, and
// is cleared after a body read whole. (A read deadline that passes also
// ends the request's context, as a client that went away does: for a
// streamed body that is the route's end anyway.) It answers the client
// itself, and returns false, when the body is over the limit, too slow or
// broken.
func (rt *route) readBody(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	c := &rt.cfg
	if c.MaxBodyBytes > 0 {
		if r.ContentLength > c.MaxBodyBytes {
			http.Error(w, fmt.Sprintf("watertight: proxy: request body of %d bytes is over the route's limit of %d", r.ContentLength, c.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return r, false
		}
	}
	r2 := new(http.Request)
	*r2 = *r
	r = r2
	if c.MaxBodyBytes > 0 {
		r.Body = http.MaxBytesReader(w, r.Body, c.MaxBodyBytes)
	}
	rc := http.NewResponseController(w)
	timed := c.Timeout > 0
	if timed {
		rc.SetReadDeadline(time.Now().Add(c.Timeout))
	}
	whole, err := replayable(r, c.RetryBodyBytes)
	if timed && whole {
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
		return r, false
	}
	return r, true
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

// replayable reads up to limit bytes of r's body: a body that ends within
// them is kept (whole is true), and r gets a GetBody so that a retry can
// send it again; a longer one is streamed on (what was read, then the
// rest), not replayable, so the request is sent once. limit 0 reads
// nothing.
func replayable(r *http.Request, limit int64) (whole bool, err error) {
	if limit <= 0 {
		return false, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return false, err
	}
	if int64(len(buf)) <= limit {
		r.Body.Close()
		r.ContentLength = int64(len(buf))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		r.Body, _ = r.GetBody()
		return true, nil
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	return false, nil
}

// refuseAdmission answers a request the route's bulkhead did not admit:
// 503 with the overloaded signal and a Retry-After when it was full or
// its wait ran out, 504 when the request's deadline passed while it
// waited, nothing when the client went away.
func (rt *route) refuseAdmission(w http.ResponseWriter, r *http.Request, ctx context.Context, err error) {
	switch cerr := ctx.Err(); {
	case errors.Is(r.Context().Err(), context.Canceled):
		return // the client went away while it waited: nobody reads an answer
	case cerr != nil:
		http.Error(w, "watertight: proxy: route "+rt.cfg.Name+": the request's deadline passed while it waited for the route's bulkhead", http.StatusGatewayTimeout)
		return
	}
	w.Header().Set(watertighthttp.HeaderOverloaded, "true")
	w.Header().Set("Retry-After", retryAfterValue(rt.drainTime()))
	http.Error(w, "watertight: proxy: route "+rt.cfg.Name+" is at its limit: "+err.Error(), http.StatusServiceUnavailable)
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
	if fb := rt.cfg.Fallback; fb == nil && (watertight.IsRejection(err) || watertight.IsOverloaded(err)) {
		w.Header().Set("Retry-After", retryAfterValue(rt.upstreamBack(err)))
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
	for _, up := range g.tab.Load().ups {
		closeIdle(up.base)
	}
	g.dash.Close()
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
