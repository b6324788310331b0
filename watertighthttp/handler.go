package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
	admq "github.com/watertight-go/watertight/internal/admission"
	"github.com/watertight-go/watertight/limit"
)

// Defaults of HandlerConfig.
const (
	// DefaultRouteMaxConcurrent is the per-route in-flight limit used when
	// HandlerConfig.MaxConcurrent is zero.
	DefaultRouteMaxConcurrent = 100
	// DefaultMaxRoutes is the route bound used when HandlerConfig.MaxRoutes
	// is zero.
	DefaultMaxRoutes = 1000
	// DefaultMaxClients is the client bound used when
	// HandlerConfig.MaxClients is zero.
	DefaultMaxClients = admq.DefaultMaxClients
)

// OtherRoutes is the route name of the admission limit shared by the routes
// that found the route table full (see HandlerConfig.MaxRoutes).
const OtherRoutes = "(other routes)"

// Errors the Handler passes to HandlerConfig.OnShed. Each is a rejection
// (watertight.IsRejection holds) and, but ErrQueueGaveUp, a saturation
// (watertight.IsSaturation); the errors
// passed to OnShed wrap them with the route: compare with errors.Is. A
// request shed because its deadline is too short gets deadline's error
// (deadline.ErrTooShort) instead.
var (
	// ErrRouteFull: the route had MaxConcurrent requests in flight and
	// MaxQueue waiting (or no queue), and the request was turned away at
	// once.
	ErrRouteFull = watertight.NewSaturation("watertighthttp: route at its limit")
	// ErrDisplaced: the request waited in a full queue and was removed to
	// make room for a request of higher criticality.
	ErrDisplaced = watertight.NewSaturation("watertighthttp: displaced from the queue by a request of higher criticality")
	// ErrQueueGaveUp: the request's context ended (its deadline passed or
	// the client went away) while it waited in the queue; it was not run.
	// The error passed to OnShed also matches the context's error. It is
	// not a saturation: the caller gave up (watertight.Classify says
	// Ignored), as for a semaphore bulkhead's Acquire; a queue too slow for
	// its requests' deadlines shows as many of these, so watch their rate.
	ErrQueueGaveUp = watertight.NewRejection("watertighthttp: request ended while queued")
	// ErrClientLimit: the request's client (HandlerConfig.Client) already
	// had MaxPerClient requests in the Handler, running or queued, and the
	// request was turned away at once, with 429 Too Many Requests.
	ErrClientLimit = watertight.NewSaturation("watertighthttp: client at its limit of requests in flight")
	// ErrClientOverflow: the Handler already counted MaxClients clients,
	// all with requests in flight, so the request's client shares one
	// overflow count with every other client that found no room; that
	// count had MaxPerClient requests in the Handler, and the request was
	// turned away at once, with 429 Too Many Requests, like a client over
	// its limit.
	ErrClientOverflow = watertight.NewSaturation("watertighthttp: too many clients busy, and the clients beyond them at their shared limit of requests in flight")
)

// HandlerConfig configures Handler. The zero value is valid: the default
// deadline propagator, routes keyed by ServeMux pattern or method and path,
// 100 requests in flight and 100 queued per route.
type HandlerConfig struct {
	// Deadline reads the incoming deadline (HeaderTimeout by default),
	// clamps it and checks it leaves enough time to start. If nil, the
	// Handler uses deadline.New(deadline.DefaultConfig()) with this
	// config's Name, Logger and Listener, so that its warnings about
	// malformed or absurd timeout headers reach them (as EventBadInput
	// events, see Listener). A Propagator given here keeps its own.
	Deadline *deadline.Propagator
	// Route returns the admission key of a request: each route has its own
	// in-flight limit and queue. If nil, the key is r.Pattern when a
	// ServeMux set it (the Handler wraps a handler registered on the mux),
	// else r.Method + " " + r.URL.Path. Keys are bounded by MaxRoutes.
	Route func(*http.Request) string
	// MaxConcurrent is how many requests of one route run the next handler
	// at once. Zero means DefaultRouteMaxConcurrent (100); a negative value means
	// no admission limit at all (deadline shedding only).
	MaxConcurrent int
	// Limit, if not nil, makes each route's in-flight limit adaptive: a
	// limit.Controller per route (Name the route) moves it from the
	// latency of the requests it admits, measured from admission to the end
	// of the next handler, with the time each had left before its deadline;
	// a request whose deadline ran out in the next handler is a drop, one
	// its client cancelled says nothing. Limit.InitialLimit zero means
	// MaxConcurrent; MaxWait, MaxWaiters and QueueOrder are ignored (the
	// route's queue is MaxQueue's). A route evicted from the table (see
	// MaxRoutes) starts again from the initial limit. It has no effect when
	// MaxConcurrent is negative. The limits show in the OnShed messages and
	// in each route's Controller; see package limit.
	Limit *limit.Config
	// MaxQueue is how many requests of one route may wait for a place when
	// MaxConcurrent are in flight. Zero means MaxConcurrent; a negative
	// value means no queue: a request that finds the route full is rejected
	// at once.
	MaxQueue int
	// MaxRoutes bounds the number of routes that have a limit of their own.
	// When the table is full, a new route makes room by dropping the idle
	// routes (nothing in flight or queued); when none is idle, the request is
	// admitted through one limit shared by all such routes, named
	// OtherRoutes. Zero means DefaultMaxRoutes (1000); a negative value
	// means no bound.
	MaxRoutes int
	// Client, if not nil, returns the identity of a request's client (an
	// API key's ID, a tenant, an authenticated user; the remote address
	// only when no proxy sits in front), under which MaxPerClient applies:
	// one client cannot hold more than its share of the server, whatever
	// the routes it calls. It runs after the deadline is read, before
	// admission. An empty identity is not limited. The identity is never
	// written into a response or an event: it may be a secret.
	Client func(*http.Request) string
	// MaxPerClient is how many requests of one client may be in the
	// Handler at once, running or waiting in a route's queue. A request
	// beyond it is rejected at once with 429 Too Many Requests,
	// HeaderOverloaded and Retry-After: 1 (reason ErrClientLimit). It must
	// be positive when Client is set, and is ignored when Client is nil.
	MaxPerClient int
	// MaxClients bounds the number of clients whose counts are kept. When
	// the table is full, a new client makes room by dropping the least
	// recently seen idle one (nothing in flight); when none is idle, that
	// is when this many clients all have requests in flight, the new
	// client's request is counted in one overflow count shared by every
	// client that finds no room, limited to MaxPerClient like one client:
	// beyond it, 429 with reason ErrClientOverflow. Opening more clients
	// than the table holds never lifts the limit. Zero means
	// DefaultMaxClients (10000); a negative value means no bound.
	MaxClients int
	// OnShed, if not nil, is called for every request the Handler sheds or
	// rejects without running the next handler, with the reason (an error
	// matching ErrRouteFull, ErrDisplaced, ErrQueueGaveUp, ErrClientLimit,
	// ErrClientOverflow or deadline.ErrTooShort). It is called in the request's goroutine, after
	// the response has been written, never under a lock; it must not use
	// the ResponseWriter.
	OnShed func(r *http.Request, reason error)
	// Logger receives the Handler's warnings: the first unknown
	// HeaderCriticality value it sees and, when Deadline is nil, the
	// default Propagator's warnings about malformed timeout headers
	// (rate-limited: see deadline.Config.WarnInterval). If nil,
	// slog.Default().
	Logger *slog.Logger
	// Name labels the Handler's events. It may be empty.
	Name string
	// Listener, if not nil, receives an EventShed for every request the
	// Handler sheds or rejects, with Source "http", Name this Name, Key the
	// request's route (see Route; for the routes that found the table full,
	// OtherRoutes), Reason the line the response's body says, and Err the
	// reason OnShed gets. It is called after OnShed, in the request's
	// goroutine, after the response has been written, never under a lock.
	// Requests are shed in bursts under overload: it should return quickly
	// (see watertight.Listener).
	//
	// It also receives an EventBadInput, with Source "http", Name this
	// Name, Key HeaderCriticality and Reason ReasonUnknownCriticality, for
	// every request whose HeaderCriticality value is unknown (the log line
	// is written once, the events are not limited), in the request's
	// goroutine before the request goes on; and, when Deadline is nil, the
	// default Propagator's EventBadInput for every malformed or absurd
	// timeout value (Source "deadline", Key the header; see
	// deadline.Config.Listener). If nil, no events are built.
	Listener watertight.Listener
}

// ReasonUnknownCriticality is the Reason of the EventBadInput emitted for a
// criticality value that names no criticality (see ParseCriticality), by
// the Handler and by watertightgrpc's server interceptors: a stable label,
// for metrics.
const ReasonUnknownCriticality = "unknown_criticality"

// eventSource is the Source of the package's events.
const eventSource = "http"

// Handler returns next wrapped in watertight's server-side guards, outermost
// first:
//
//  1. read the deadline: the caller's remaining time (HeaderTimeout) is set
//     on the request context, clamped by the Propagator's Max and kept
//     earlier than any deadline the context already has; a malformed header
//     is ignored;
//  2. read the criticality (HeaderCriticality) and put it on the context
//     (CriticalityFrom), so that a Transport forwards it; an unknown value
//     counts as Critical, is logged once and is counted every time (an
//     EventBadInput to HandlerConfig.Listener);
//  3. shed a request whose deadline has passed or leaves less than the
//     Propagator's MinRemaining: it cannot be served in time;
//  4. with HandlerConfig.Client set, reject a request whose client already
//     has MaxPerClient requests in the Handler (running or queued); the
//     clients beyond MaxClients busy ones share one such count;
//  5. admission: at most MaxConcurrent requests per route run at once, and
//     at most MaxQueue wait; a queued request whose context ends (deadline
//     passed, client gone) is dropped without running, and one that is let
//     in with too little time left is shed as in step 3;
//  6. next, with the request's context derived from r.Context(), so that a
//     client that goes away cancels the work.
//
// # Responses
//
// Every shed or rejected request gets 503 Service Unavailable with
// HeaderOverloaded: "true" (the "overloaded, don't retry" signal: the caller
// should not retry here, and its Transport passes the signal on as
// watertight.ErrOverloaded), Cache-Control: no-store and a one-line
// text/plain body that says what happened. When waiting would help (the
// route is full), Retry-After: 1 is added. A request shed for its deadline
// also gets 503 and the overloaded signal, without Retry-After: a retry
// within the same deadline cannot help, and 504 Gateway Timeout would wrongly
// say an upstream timed out. A request over its client's limit
// (ErrClientLimit, or ErrClientOverflow for the clients sharing the
// overflow count) gets 429 Too Many Requests instead, with the same headers
// and Retry-After: 1: that client sent too many, the server is not
// necessarily full. Neither its body nor its event names the client.
//
// # Queue discipline: adaptive LIFO
//
// The queue of a route is FIFO while it is at most half full and LIFO when it
// is more than half full, as in Facebook's "Fail at Scale" (2015): under light
// queueing, first come first served is fair; when a queue builds up, the
// oldest requests are the ones whose callers are most likely to have given
// up, so serving the newest first keeps the goodput up while the old ones
// age out. Requests never linger past their deadline: a queued request whose
// context ends is removed at once, and the dispatcher skips any it finds
// dead. Within that order, a request of higher criticality is always let in
// before one of lower criticality; when the queue is full, a newcomer
// displaces the oldest queued request of the lowest criticality below its
// own (which gets ErrDisplaced), else it is rejected.
//
// The returned handler is safe for concurrent use. NewHandler fails, naming
// the field, when cfg is invalid or next is nil.
func NewHandler(next http.Handler, cfg HandlerConfig) (http.Handler, error) {
	if next == nil {
		return nil, errors.New("watertighthttp: NewHandler: next must not be nil")
	}
	c, err := newHandlerCore(cfg)
	if err != nil {
		return nil, err
	}
	return &handler{handlerCore: c, next: next}, nil
}

// NewMiddleware is NewHandler in the shape of the standard middleware chains
// (chi's Use, alice, plain wrapping): it validates cfg once, up front, and
// returns a function that wraps a handler and cannot fail. Every handler it
// wraps shares one state: the route queues, the per-client counts and the
// rate limits of the warnings, as if the wrapped handlers were one server.
// Call NewMiddleware once per independent server. The function panics if
// given a nil handler, as http.Handle does.
func NewMiddleware(cfg HandlerConfig) (func(http.Handler) http.Handler, error) {
	c, err := newHandlerCore(cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("watertighthttp: the middleware of NewMiddleware was given a nil handler")
		}
		return &handler{handlerCore: c, next: next}
	}, nil
}

// newHandlerCore validates cfg and builds the state of NewHandler and
// NewMiddleware.
func newHandlerCore(cfg HandlerConfig) (*handlerCore, error) {
	p := cfg.Deadline
	if p == nil {
		dc := deadline.DefaultConfig()
		dc.Name, dc.Logger, dc.Listener = cfg.Name, cfg.Logger, cfg.Listener
		var err error
		p, err = deadline.New(dc)
		if err != nil {
			return nil, fmt.Errorf("watertighthttp: HandlerConfig.Deadline: default propagator: %w", err)
		}
	}
	h := &handlerCore{
		deadline: p,
		route:    cfg.Route,
		onShed:   cfg.OnShed,
		logger:   cfg.Logger,
		name:     cfg.Name,
		listener: cfg.Listener,
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	if cfg.Client != nil {
		if cfg.MaxPerClient <= 0 {
			return nil, fmt.Errorf("watertighthttp: HandlerConfig.MaxPerClient must be > 0 when Client is set, got %d", cfg.MaxPerClient)
		}
		h.client = cfg.Client
		h.clients = admq.NewClients(cfg.MaxPerClient, cfg.MaxClients)
	}
	if cfg.MaxConcurrent >= 0 {
		maxc := cfg.MaxConcurrent
		if maxc == 0 {
			maxc = DefaultRouteMaxConcurrent
		}
		maxq := cfg.MaxQueue
		switch {
		case maxq == 0:
			maxq = maxc
		case maxq < 0:
			maxq = 0
		}
		maxr := cfg.MaxRoutes
		switch {
		case maxr == 0:
			maxr = DefaultMaxRoutes
		case maxr < 0:
			maxr = -1
		}
		h.routes = newRouteTable(maxc, maxq, maxr)
		if cfg.Limit != nil {
			lc := *cfg.Limit
			if lc.InitialLimit == 0 {
				lc.InitialLimit = maxc
			}
			if _, err := limit.NewController(lc, admq.New("", maxc, 0)); err != nil {
				return nil, fmt.Errorf("watertighthttp: HandlerConfig.Limit: %w", err)
			}
			h.routes.limit = &lc
			h.routes.other = newAdmission(OtherRoutes, maxc, maxq, &lc)
		}
	}
	return h, nil
}

// defaultRoute is the name of r's route when HandlerConfig.Route is nil;
// handler.routeKey gives its key without building it.
func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.Path
}

// routeKey is the route table's key of a request: the route name without
// building it. whole: the name is a alone (a route from HandlerConfig.Route,
// or a ServeMux pattern without a space); else it is a + " " + b, with no
// space in a. Two keys are equal exactly when their names are.
type routeKey struct {
	a, b  string
	whole bool
}

func (k routeKey) name() string {
	if k.whole {
		return k.a
	}
	return k.a + " " + k.b
}

// routeKey returns the key of r's route (see HandlerConfig.Route).
func (h *handler) routeKey(r *http.Request) routeKey {
	if h.route != nil {
		return routeKey{a: h.route(r), whole: true}
	}
	if r.Pattern != "" {
		// Split at the first space, so that the key of pattern "GET /x"
		// equals that of method GET and path /x, as their names do.
		if i := strings.IndexByte(r.Pattern, ' '); i >= 0 {
			return routeKey{a: r.Pattern[:i], b: r.Pattern[i+1:]}
		}
		return routeKey{a: r.Pattern, whole: true}
	}
	return routeKey{a: r.Method, b: r.URL.Path}
}

// handler is what NewHandler returns: the shared state and the handler it
// wraps.
type handler struct {
	*handlerCore
	next http.Handler
}

// handlerCore is the state of a NewHandler or NewMiddleware, shared by every
// handler a middleware wraps.
type handlerCore struct {
	deadline *deadline.Propagator
	route    func(*http.Request) string // nil: routeKey's default
	routes   *routeTable                // nil: no admission limit
	client   func(*http.Request) string // nil: no per-client limit
	clients  *admq.Clients
	onShed   func(*http.Request, error)
	logger   *slog.Logger
	name     string
	listener watertight.Listener
	badCrit  atomic.Bool // an unknown criticality was logged
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Everything below derives from r.Context(): when the client goes away,
	// net/http cancels it, and with it the queue wait and the next handler.
	ctx, cancel := h.deadline.WithIncoming(r.Context(), r.Header)
	defer cancel()

	crit := Critical
	if v := r.Header.Get(HeaderCriticality); v != "" {
		c, err := ParseCriticality(v)
		if err != nil {
			h.badCriticality(err)
		}
		crit = c
		ctx = WithCriticality(ctx, crit)
	}
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}

	if err := h.deadline.Check(ctx); err != nil {
		h.shed(w, r, "", err, "the request's deadline is too short to start it: "+err.Error(), false)
		return
	}

	if h.client != nil {
		if id := h.client(r); id != "" {
			c, overflow, ok := h.clients.Enter(id)
			if !ok {
				h.shedClient(w, r, overflow)
				return
			}
			defer c.Leave()
		}
	}

	if h.routes != nil {
		a := h.routes.get(h.routeKey(r))
		err := a.acquire(ctx, crit)
		if err != nil {
			h.routes.put(a)
			h.shedAdmission(w, r, a, err)
			return
		}
		var start time.Time
		if a.ctl != nil {
			start = time.Now()
		}
		defer func() {
			if a.ctl != nil {
				a.sample(ctx, start)
			}
			a.release()
			h.routes.put(a)
		}()
		// The request may have waited: shed it if what is left is too short.
		if err := h.deadline.Check(ctx); err != nil {
			h.shed(w, r, a.name, err, "the request's deadline became too short to start it while it waited in the queue of route "+shedLine(a.name)+": "+err.Error(), false)
			return
		}
	}
	h.next.ServeHTTP(w, r)
}

// badCriticality logs the first unknown criticality value and sends an
// EventBadInput for each.
func (h *handler) badCriticality(err error) {
	if h.badCrit.CompareAndSwap(false, true) {
		h.logger.Warn("watertighthttp: unknown criticality, taken as critical (logged once)",
			"header", HeaderCriticality, "error", err)
	}
	if h.listener != nil {
		watertight.Emit(h.listener, watertight.Event{
			Kind: watertight.EventBadInput, Source: eventSource, Name: h.name, Key: HeaderCriticality, Reason: ReasonUnknownCriticality,
			Code: CodeUnknownCriticality,
		})
	}
}

// shedAdmission answers a request that admission refused.
func (h *handler) shedAdmission(w http.ResponseWriter, r *http.Request, a *admission, err error) {
	route := shedLine(a.name)
	switch {
	case errors.Is(err, ErrDisplaced):
		h.shed(w, r, a.name, err, fmt.Sprintf("route %s is at its limit and the request was displaced from its queue by one of higher criticality", route), true)
	case errors.Is(err, ErrQueueGaveUp):
		h.shed(w, r, a.name, err, fmt.Sprintf("the request ended while it waited in the queue of route %s: %v", route, context.Cause(r.Context())), false)
	default:
		h.shed(w, r, a.name, err, fmt.Sprintf("route %s is at its limit of %s in flight and %d queued", route, plural(a.MaxConcurrent(), "request"), a.MaxQueue()), true)
	}
}

// shedClient answers a request whose client is at its limit: 429, with the
// overloaded signal (this client should not retry at once, nor should the
// layers above it) and Retry-After, since its own requests finishing is
// what makes room. Neither the body nor the event names the client.
// overflow: the client shares the overflow count, which is at the limit.
func (h *handler) shedClient(w http.ResponseWriter, r *http.Request, overflow bool) {
	if overflow {
		h.shedStatus(w, r, http.StatusTooManyRequests, "", ErrClientOverflow,
			fmt.Sprintf("the server is busy with as many clients as it tracks; the clients beyond them share a limit of %s in flight, reached", plural(h.clients.Max(), "request")), true)
		return
	}
	h.shedStatus(w, r, http.StatusTooManyRequests, "", ErrClientLimit,
		fmt.Sprintf("this client already has %s in flight, its limit", plural(h.clients.Max(), "request")), true)
}

// shed writes the 503 answer and calls OnShed and the Listener. route is the
// request's route name, or "" when the request was shed before its route
// was looked up.
func (h *handler) shed(w http.ResponseWriter, r *http.Request, route string, reason error, msg string, retryAfter bool) {
	h.shedStatus(w, r, http.StatusServiceUnavailable, route, reason, msg, retryAfter)
}

// shedStatus is shed with the status code given.
func (h *handler) shedStatus(w http.ResponseWriter, r *http.Request, status int, route string, reason error, msg string, retryAfter bool) {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	hd.Set(HeaderOverloaded, "true")
	if retryAfter {
		hd.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "watertight: shed: "+shedLine(msg)+"\n")
	if h.onShed != nil {
		h.onShed(r, reason)
	}
	if h.listener != nil {
		if route == "" {
			route = h.routeName(r)
		}
		watertight.Emit(h.listener, watertight.Event{
			Kind: watertight.EventShed, Source: eventSource, Name: h.name, Key: route, Reason: msg, Err: reason,
			Code: shedCode(reason),
		})
	}
}

// routeName returns the name of r's route (see HandlerConfig.Route).
func (h *handler) routeName(r *http.Request) string {
	if h.route != nil {
		return h.route(r)
	}
	return defaultRoute(r)
}

// shedLine makes s safe for a one-line plain-text body: control characters
// (a route can come from the URL path) become '?'.
func shedLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// routeTable holds the admission controller of each route, bounded by
// maxRoutes. Looking up a route that has a controller takes no lock: m is a
// sync.Map, and a request holds a controller by counting itself in its refs
// with an atomic add. A controller is only evicted when nobody holds it: eviction
// (under mu) swaps refs from 0 to evicted, after which nobody can take it, and
// drops it from m. So a route never has two controllers in use at once: a
// request that loaded an evicted controller fails to count itself in it and
// looks again under mu, where m holds only live controllers.
type routeTable struct {
	maxConcurrent, maxQueue, maxRoutes int
	limit                              *limit.Config // nil: static limits

	m     sync.Map   // routeKey -> *admission; stored and deleted under mu
	other *admission // shared by the routes that found the table full

	mu         sync.Mutex
	n          int                // entries of m; guarded by mu
	queuedHook func(route string) // for tests; guarded by mu
}

func newRouteTable(maxConcurrent, maxQueue, maxRoutes int) *routeTable {
	return &routeTable{
		maxConcurrent: maxConcurrent,
		maxQueue:      maxQueue,
		maxRoutes:     maxRoutes,
		other:         newAdmission(OtherRoutes, maxConcurrent, maxQueue, nil),
	}
}

// setQueuedHook sets, for tests, a func every admission controller of t
// calls (outside its lock) when a request joins its queue.
func (t *routeTable) setQueuedHook(f func(route string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queuedHook = f
	t.other.SetQueuedHook(f)
	t.m.Range(func(_, v any) bool {
		v.(*admission).SetQueuedHook(f)
		return true
	})
}

// get returns the controller of route k, held: the caller must put it.
func (t *routeTable) get(k routeKey) *admission {
	if v, ok := t.m.Load(k); ok {
		if a := v.(*admission); a.ref() {
			return a
		}
		// Evicted since: look again under mu.
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m.Load(k); ok {
		if a := v.(*admission); a.ref() { // always: m holds no evicted controller under mu
			return a
		}
	}
	if t.maxRoutes >= 0 && t.n >= t.maxRoutes {
		t.m.Range(func(k, v any) bool {
			if v.(*admission).refs.Evict() { // idle: evict
				t.m.Delete(k)
				t.n--
			}
			return true
		})
	}
	a := t.other
	if t.maxRoutes < 0 || t.n < t.maxRoutes {
		a = newAdmission(k.name(), t.maxConcurrent, t.maxQueue, t.limit)
		a.SetQueuedHook(t.queuedHook)
		t.m.Store(k, a)
		t.n++
	}
	a.ref() // never fails: a is live
	return a
}

// put lets go of a controller returned by get.
func (t *routeTable) put(a *admission) {
	a.refs.Put()
}

// admission is the in-flight limit and queue of one route (an
// admission.Queue: see Handler for the queue discipline), with the count of
// the requests holding it in the routeTable.
type admission struct {
	admq.Queue           // embedded: one allocation; its last word, active, changes on every request
	refs       admq.Refs // requests holding the controller (routeTable): next to active, on its cache line
	_          [56]byte  // the hot words above share no cache line with what follows
	name       string
	ctl        *limit.Controller // nil: a static limit
}

// newAdmission returns the admission of one route; lc, if not nil, makes
// its limit adaptive (lc was checked by NewHandler).
func newAdmission(name string, maxConcurrent, maxQueue int, lc *limit.Config) *admission {
	a := &admission{name: name}
	a.Init(name, maxConcurrent, maxQueue)
	if lc != nil {
		c := *lc
		c.Name = name
		a.ctl, _ = limit.NewController(c, &a.Queue)
	}
	return a
}

// sample tells the route's Controller how a request admitted at start
// ended: its latency, a drop if its deadline ran out, nothing if its client
// went away.
func (a *admission) sample(ctx context.Context, start time.Time) {
	switch err := ctx.Err(); {
	case err == nil:
		var left time.Duration
		if dl, ok := ctx.Deadline(); ok {
			left = dl.Sub(start)
		}
		a.ctl.Sample(time.Since(start), left)
	case errors.Is(err, context.DeadlineExceeded):
		a.ctl.Drop()
	}
}

// ref counts one more holder of a, unless a was evicted: one atomic add. A
// failed ref leaves refs negative and needs no put.
func (a *admission) ref() bool {
	return a.refs.Ref()
}

// acquire takes a place for a request of criticality crit, waiting in the
// queue if need be until let in, displaced, or ctx ends. On success the
// caller must call release. Its errors are routeErrors.
func (a *admission) acquire(ctx context.Context, crit Criticality) error {
	if err := a.Acquire(ctx, int(crit)); err != nil {
		return a.refused(ctx, err)
	}
	return nil
}

// refused maps the Queue's error to the Handler's.
func (a *admission) refused(ctx context.Context, err error) error {
	switch {
	case err == admq.ErrDisplaced:
		return &routeError{route: a.name, errs: []error{ErrDisplaced}}
	case errors.Is(err, admq.ErrGaveUp):
		return a.gaveUp(ctx)
	default: // admq.ErrFull
		return a.full()
	}
}

// release gives back a place taken by acquire and lets the next waiter in.
func (a *admission) release() { a.Release() }

func (a *admission) full() error {
	return &routeError{route: a.name, errs: []error{ErrRouteFull}}
}

func (a *admission) gaveUp(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	errs := []error{ErrQueueGaveUp, cause}
	if err := ctx.Err(); err != nil && err != cause {
		errs = append(errs, err)
	}
	return &routeError{route: a.name, errs: errs}
}

// routeError is an admission error labelled with its route.
type routeError struct {
	route string
	errs  []error // the sentinel first
}

func (e *routeError) Error() string {
	s := e.errs[0].Error() + ": " + shedQuote(e.route)
	if len(e.errs) > 1 {
		s += " (" + e.errs[1].Error() + ")"
	}
	return s
}

func (e *routeError) Unwrap() []error { return e.errs }

// plural returns "1 request" or "n requests".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
