package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/chaos"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// A route's request goes, outermost first: the access log; the
// server-side guards (incoming deadlines, dead requests shed,
// criticality); proxy (a normalised path, the body bounded and the part a
// retry needs kept, the route's admission: its bulkhead, its tenants' fair
// shares or its adaptive limiter); chaos, when the route has it; the
// idempotency middleware, when the route has it; forward (the cell's
// target, the upstream request, the Transport: hedging, retries under the
// budget, the balancer, a breaker and a limiter per host, the attempt and
// route timeouts).

type route struct {
	cfg       Route
	up        *upstream // the route's own upstream
	main      *target   // the route's own upstream's target
	cells     map[string]*target
	cellKey   keyFunc
	guarded   http.Handler // the guards, then proxy
	inner     http.Handler // chaos and idempotency around forward, or forward
	log       *accessLog
	latency   ewma // of the route's answers, for Retry-After
	bulk      *bulkhead.Bulkhead
	limiter   *limit.Limiter
	budget    *budget.Budget
	hedge     *hedge.Policy   // the route's own policy (hedges: entry without a budget), kept across reloads
	idem      *idemStore      // kept across reloads while its settings stay
	grpc      map[string]bool // the retryable methods of a gRPC route
	lis       map[string]bool // nil: every listener
	tenants   *bulkhead.Partitioned
	tenantKey keyFunc
}

// target is an upstream a route sends to, and the Transport that sends
// there (a HedgingTransport around it when the route hedges).
type target struct {
	up *upstream
	tr http.RoundTripper
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
	hp, err := g.routeHedge(t, rc, rcfg, prev, rt)
	if err != nil {
		return nil, err
	}
	if rt.main, err = g.newTarget(rt.up, rc, rcfg, hp); err != nil {
		return nil, err
	}
	if rc.Cells != nil {
		rt.cellKey = rc.Cells.Key.fn()
		rt.cells = map[string]*target{}
		for k, name := range rc.Cells.Pools {
			up := t.ups[name]
			if up == nil {
				return nil, fmt.Errorf("cell %s: no upstream %q", k, name)
			}
			if rt.cells[k], err = g.newTarget(up, rc, rcfg, hp); err != nil {
				return nil, fmt.Errorf("cell %s: %w", k, err)
			}
		}
	}
	if rc.GRPC != nil {
		rt.grpc = map[string]bool{}
		for _, m := range rc.GRPC.Retryable {
			rt.grpc[m] = true
		}
	}
	switch {
	case rc.Bulkhead != "":
		if rt.bulk, err = g.reg.Bulkhead(rc.Bulkhead); err != nil {
			return nil, err
		}
		t.metrics["bulkhead/"+rc.Bulkhead] = g.prom.AddBulkhead(rt.bulk)
	case rc.Limiter != "":
		if rt.limiter, err = g.reg.Limiter(rc.Limiter); err != nil {
			return nil, err
		}
		t.metrics["limiter/"+rc.Limiter] = g.watched.AddLimiter(rt.limiter)
	}
	if err := rt.buildTenants(g, t, prev); err != nil {
		return nil, err
	}
	if rt.inner, err = g.innerHandler(t, rt, prev); err != nil {
		return nil, err
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

// newTarget builds the Transport of route rc to upstream up.
func (g *Gateway) newTarget(up *upstream, rc Route, rcfg retry.Config, hp *hedge.Policy) (*target, error) {
	tc := watertighthttp.TransportConfig{
		Base: up.base, Balancer: up.bal, Breakers: up.breakers, Limiters: up.limiters, MaxEndpoints: -1,
		Retry: rcfg, AttemptTimeout: rc.PerTryTimeout, Timeout: rc.Timeout, OwnsRequests: true,
		GRPC: rc.GRPC != nil, Name: rc.Name, Listener: g.lis,
	}
	shard(&tc, rc)
	tr, err := watertighthttp.NewTransport(tc)
	if err != nil {
		return nil, err
	}
	tg := &target{up: up, tr: tr}
	if hp != nil {
		// Each hedge is a request of its own through the Transport (its
		// retries, a breaker per host), never to a host an attempt of the
		// same request went to; a hedge attempt's header is its own copy.
		if tg.tr, err = watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Base: tr, Policy: hp}); err != nil {
			return nil, err
		}
	}
	return tg, nil
}

// routeHedge returns the hedging policy of route rc, or nil: the hedges:
// entry's, when it names a budget; else a policy of the route's own with
// that entry's settings, charged to the route's retry budget (rcfg's), kept
// across reloads while the settings stay.
func (g *Gateway) routeHedge(t *table, rc Route, rcfg retry.Config, prev, rt *route) (*hedge.Policy, error) {
	if rc.Hedge == "" {
		return nil, nil
	}
	entry, ok := t.cfg.Library.Hedges[rc.Hedge]
	if !ok {
		return nil, fmt.Errorf("no hedges: entry %q", rc.Hedge)
	}
	if entry.Budget != "" || rcfg.Budget == nil {
		return g.reg.Hedge(rc.Hedge)
	}
	hc := entry.Config
	hc.Name, hc.Budget, hc.Listener = rc.Name, rcfg.Budget, g.lis
	if entry.Breaker != "" {
		b, err := g.reg.Breaker(entry.Breaker)
		if err != nil {
			return nil, err
		}
		hc.Breaker = b
	}
	if entry.Bulkhead != "" {
		b, err := g.reg.Bulkhead(entry.Bulkhead)
		if err != nil {
			return nil, err
		}
		hc.Bulkhead = b
	}
	if prev != nil && prev.hedge != nil && reflect.DeepEqual(prev.hedge.Config(), hc) {
		rt.hedge = prev.hedge // its tracked latencies stay
	} else {
		p, err := hedge.New(hc)
		if err != nil {
			return nil, err
		}
		rt.hedge = p
	}
	t.metrics["hedge/"+rc.Name] = g.watched.AddHedge(rt.hedge)
	return rt.hedge, nil
}

// innerHandler is what runs once the route admitted a request: forward,
// inside the idempotency middleware and the fault injection the route has.
func (g *Gateway) innerHandler(t *table, rt *route, prev *route) (http.Handler, error) {
	rc := rt.cfg
	var h http.Handler = http.HandlerFunc(rt.forward)
	if im := rc.Idempotency; im != nil {
		store, err := g.routeIdemStore(rc, prev)
		if err != nil {
			return nil, err
		}
		rt.idem = store
		scope := watertighthttp.SharedScope
		if !im.SharedScope {
			key := im.Scope.fn()
			scope = func(r *http.Request) string { return key(r, nil) }
		}
		var required func(*http.Request) bool
		if im.Required {
			required = func(*http.Request) bool { return true }
		}
		h, err = watertighthttp.NewIdempotencyHandler(h, watertighthttp.IdempotencyConfig{
			Name: rc.Name, Store: store.s, Scope: scope, Required: required, TTL: im.TTL,
			WaitInFlight: im.Wait, MaxWait: rc.Timeout, MaxRequestBytes: rc.MaxBodyBytes,
			Listener: g.lis, Logger: g.log,
		})
		if err != nil {
			return nil, err
		}
	}
	if ch := rc.Chaos; ch != nil {
		inj, err := chaos.New(chaos.Config{
			Name: rc.Name, Enabled: true, Listener: g.lis,
			Rules: map[string]chaos.Rule{rc.Name: {
				LatencyRate: ch.LatencyRate, Latency: ch.Latency,
				ErrorRate: ch.AbortRate, Status: ch.AbortStatus,
				Err: errors.New("watertight: proxy: chaos: an injected abort of route " + rc.Name),
			}},
		})
		if err != nil {
			return nil, err
		}
		name := rc.Name
		h = chaos.Handler(h, inj, func(*http.Request) string { return name })
	}
	return h, nil
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

// listenerOf returns the listener of the request whose ResponseWriter is
// w (nil: not known, no proxy trusted).
func listenerOf(w http.ResponseWriter) *listenerRoute {
	if x, ok := w.(*exchange); ok {
		return x.lis
	}
	return nil
}

// proxy admits a request the guards let through: a normalised path, its
// body bounded and the part a retry needs kept, a permit of the route's
// admission (its bulkhead, its tenant's share or its adaptive limiter);
// then the route's inner handler answers it.
func (rt *route) proxy(w http.ResponseWriter, r *http.Request) {
	if !cleanPath(r.URL.Path) {
		http.Error(w, "watertight: proxy: the path has . or .. segments or empty ones: send it normalised", http.StatusBadRequest)
		return
	}
	// The route's timeout is the Transport's (TransportConfig.Timeout):
	// the host's to meet, its expiry counting on the host's breaker,
	// while a shorter deadline of the client's does not. It starts when
	// the request is sent; the body is read and the admission's wait is
	// bounded before that, by the route's timeout and the max wait.
	ctx := r.Context()
	if r.Body != nil && r.Body != http.NoBody {
		var ok bool
		if r, ok = rt.readBody(w, r); !ok {
			return
		}
	}
	switch {
	case rt.bulk != nil:
		if err := rt.bulk.Acquire(ctx); err != nil {
			rt.refuseAdmission(w, r, err)
			return
		}
		defer rt.bulk.Release()
	case rt.limiter != nil:
		p, err := rt.limiter.Acquire(ctx)
		if err != nil {
			rt.refuseAdmission(w, r, err)
			return
		}
		start := time.Now()
		defer func() { rt.judge(p, w, r, time.Since(start)) }()
	case rt.tenants != nil:
		i := rt.tenants.Index(rt.tenantKey(r, listenerOf(w)))
		if err := rt.tenants.Acquire(ctx, i); err != nil {
			rt.refuseAdmission(w, r, err)
			return
		}
		defer rt.tenants.Release(i)
	}
	rt.inner.ServeHTTP(w, r)
}

// judge tells the route's adaptive limiter how a request it admitted went:
// a drop when the upstream was overloaded or too slow (503, 504, the
// overloaded signal), nothing when the client went away, else its latency.
func (rt *route) judge(p limit.Permit, w http.ResponseWriter, r *http.Request, lat time.Duration) {
	status := http.StatusOK
	if x, ok := w.(*exchange); ok && x.status != 0 {
		status = x.status
	}
	switch {
	case errors.Is(r.Context().Err(), context.Canceled):
		p.Ignore()
	case status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout, status == http.StatusTooManyRequests:
		p.Drop()
	default:
		p.Done(lat)
	}
}

// forward sends r to the route's upstream (or its cell's) and answers with
// the upstream's answer, the route's fallback, or an error that says what
// happened.
func (rt *route) forward(w http.ResponseWriter, r *http.Request) {
	lis := listenerOf(w)
	ctx := r.Context()
	tg := rt.main
	if rt.cells != nil {
		if c, ok := rt.cells[rt.cellKey(r, lis)]; ok {
			tg = c
		}
	}
	if rt.grpc != nil && rt.grpc[r.URL.Path] {
		ctx = retry.Idempotent(ctx) // a method the file marks retryable
	}
	out, err := rt.outbound(ctx, r, lis, tg.up)
	if err != nil {
		http.Error(w, "watertight: proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := tg.tr.RoundTrip(out)
	if err != nil {
		if watertight.IsRejection(err) {
			// Nothing was sent: an idempotency key may be used again.
			watertighthttp.ReleaseIdempotencyKey(ctx)
		}
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
// deadline is the route's timeout from now while the body is read; it
// stays on a body longer than the part kept, which is streamed to the
// upstream, and is cleared after a body read whole. (A read deadline that
// passes also ends the request's context, as a client that went away
// does: for a streamed body that is the route's end anyway.) It answers
// the client itself, and returns false, when the body is over the limit,
// too slow or broken.
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

// refuseAdmission answers a request the route's admission (bulkhead,
// tenant share, limiter) did not admit: 503 with the overloaded signal
// and a Retry-After when it was full or its wait ran out, 504 when the
// request's deadline passed while it waited, nothing when the client went
// away.
func (rt *route) refuseAdmission(w http.ResponseWriter, r *http.Request, err error) {
	switch cerr := r.Context().Err(); {
	case errors.Is(cerr, context.Canceled):
		return // the client went away while it waited: nobody reads an answer
	case cerr != nil:
		http.Error(w, "watertight: proxy: route "+rt.cfg.Name+": the request's deadline passed while it waited to be admitted", http.StatusGatewayTimeout)
		return
	}
	w.Header().Set(watertighthttp.HeaderOverloaded, "true")
	w.Header().Set("Retry-After", retryAfterValue(rt.drainTime()))
	http.Error(w, "watertight: proxy: route "+rt.cfg.Name+" is at its limit: "+err.Error(), http.StatusServiceUnavailable)
}

// errorHandler answers a request the upstream could not: the route's
// fallback when it has one, else watertighthttp.ProxyErrorHandler's
// status (503 with the overloaded signal and a Retry-After for an open
// breaker or a refusal, 504 for a deadline, 502 otherwise).
func (rt *route) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(r.Context().Err(), context.Canceled) {
		return // the client went away: nobody reads an answer
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		http.Error(w, fmt.Sprintf("watertight: proxy: request body is over the route's limit of %d bytes", mb.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	fb := rt.cfg.Fallback
	if fb == nil && (watertight.IsRejection(err) || watertight.IsOverloaded(err)) {
		w.Header().Set("Retry-After", retryAfterValue(rt.upstreamBack(err)))
	}
	if fb != nil {
		w.Header().Set("Content-Type", fb.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(fb.Body)))
		w.Header().Set("X-Watertight-Fallback", rt.cfg.Name)
		w.WriteHeader(fb.Status)
		io.WriteString(w, fb.Body)
		return
	}
	watertighthttp.ProxyErrorHandler(w, r, err)
}

// keyFunc returns a request's key (a tenant, a cell), at most maxKeyLen
// bytes; lis is the listener it came in on (nil: not known).
type keyFunc func(r *http.Request, lis *listenerRoute) string

// fn returns the KeySpec's keyFunc.
func (k KeySpec) fn() keyFunc {
	cut := func(s string) string {
		if len(s) > maxKeyLen {
			return s[:maxKeyLen]
		}
		return s
	}
	switch {
	case k.Header != "":
		h := k.Header
		return func(r *http.Request, _ *listenerRoute) string {
			if vs := r.Header[h]; len(vs) > 0 {
				return cut(vs[0])
			}
			return ""
		}
	case k.ClientAddress:
		return func(r *http.Request, lis *listenerRoute) string { return cut(clientAddress(r, lis)) }
	case k.APIKey:
		return func(r *http.Request, _ *listenerRoute) string {
			if vs := r.Header["X-Api-Key"]; len(vs) > 0 && vs[0] != "" {
				return cut(vs[0])
			}
			if vs := r.Header["Authorization"]; len(vs) > 0 && len(vs[0]) > 7 && strings.EqualFold(vs[0][:7], "bearer ") {
				return cut(strings.TrimSpace(vs[0][7:]))
			}
			return ""
		}
	}
	return func(*http.Request, *listenerRoute) string { return "" }
}

// clientAddress returns the client's address: the connection's, or the
// first X-Forwarded-For entry when the connection is from one of the
// listener's trusted proxies.
func clientAddress(r *http.Request, lis *listenerRoute) string {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	if lis != nil && lis.trusts(addr) {
		if vs := r.Header["X-Forwarded-For"]; len(vs) > 0 {
			first, _, _ := strings.Cut(vs[0], ",")
			if first = strings.TrimSpace(first); first != "" {
				return first
			}
		}
	}
	return addr
}

// idemStore is a route's idempotency store, and how to let it go.
type idemStore struct {
	s     idempotency.Store
	cfg   Idempotency
	close func() error
}
