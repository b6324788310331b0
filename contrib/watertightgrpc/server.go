package watertightgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/internal/admission"
	"github.com/watertight-go/watertight/internal/keyed"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watertighthttp"
)

// Defaults of ServerConfig.
const (
	// DefaultMethodMaxConcurrent is the per-method in-flight limit used when
	// ServerConfig.MaxConcurrent is zero.
	DefaultMethodMaxConcurrent = 100
	// DefaultMaxMethods is the method bound used when
	// ServerConfig.MaxMethods is zero.
	DefaultMaxMethods = 1000
	// DefaultMaxClients is the client bound used when
	// ServerConfig.MaxClients is zero.
	DefaultMaxClients = admission.DefaultMaxClients
)

// OtherMethods is the admission key shared by the methods that found the
// method table full (see ServerConfig.MaxMethods).
const OtherMethods = "(other methods)"

// Errors of the server interceptors, seen in the Err of their EventShed
// events (wrapped: compare with errors.Is). Each is a rejection
// (watertight.IsRejection holds) and, but ErrQueueGaveUp, a saturation
// (watertight.IsSaturation). A request shed
// because its deadline is too short gets deadline.ErrTooShort instead.
var (
	// ErrMethodFull: the method had MaxConcurrent requests in flight and
	// MaxQueue waiting, or the request waited MaxWait, or it was of a
	// sheddable criticality and found no place free at once.
	ErrMethodFull = watertight.NewSaturation("watertightgrpc: method at its limit")
	// ErrQueueGaveUp: the request's context ended (its deadline passed or
	// the client went away) while it waited in the queue; it was not run.
	// It is not a saturation: the caller gave up (watertight.Classify says
	// Ignored), as for a semaphore bulkhead's Acquire.
	ErrQueueGaveUp = watertight.NewRejection("watertightgrpc: request ended while queued")
	// ErrDisplaced: the request waited in a full queue and was removed to
	// make room for a request of higher criticality; it was not run. It is
	// answered like ErrMethodFull: RejectCode and the negative pushback.
	ErrDisplaced = watertight.NewSaturation("watertightgrpc: displaced from the queue by a request of higher criticality")
	// ErrClientLimit: the request's client (ServerConfig.Client) already
	// had MaxPerClient requests in the server, running or queued, and the
	// request was turned away at once, before admission. It is answered
	// with RESOURCE_EXHAUSTED whatever RejectCode says (that client sent
	// too many; the server is not necessarily full) and the negative
	// pushback.
	ErrClientLimit = watertight.NewSaturation("watertightgrpc: client at its limit of requests in flight")
	// ErrClientOverflow: the server already counted MaxClients clients, all
	// with requests in flight, so the request's client shares one overflow
	// count with every other client that found no room; that count had
	// MaxPerClient requests in the server, and the request was turned away
	// at once, answered like ErrClientLimit (RESOURCE_EXHAUSTED and the
	// negative pushback).
	ErrClientOverflow = watertight.NewSaturation("watertightgrpc: too many clients busy, and the clients beyond them at their shared limit of requests in flight")
)

// ServerConfig configures UnaryServerInterceptor, StreamServerInterceptor
// and ServerInterceptors. The zero value is valid: the default deadline
// propagator (no minimum time), methods keyed by full name, 100 requests in
// flight and 100 queued per method, no per-client limit, RESOURCE_EXHAUSTED
// for rejections.
type ServerConfig struct {
	// Name labels the interceptors' events (watertight.Event.Name). It may
	// be empty.
	Name string
	// Deadline sets the least time a request must have left to be started
	// (its Config.MinRemaining: zero sheds only requests whose deadline has
	// passed) and the longest deadline accepted (Config.Max: a longer
	// grpc-timeout is cut to it). gRPC itself sets the request's deadline
	// from grpc-timeout. If nil, deadline.New(deadline.DefaultConfig())
	// with this config's Name, Logger and Listener.
	Deadline *deadline.Propagator
	// Method returns the admission key of a call from its full method name
	// ("/package.Service/Method"): each key has its own in-flight limit and
	// queue. If nil, the full method name. Keys are bounded by MaxMethods.
	Method func(fullMethod string) string
	// Limit, if not nil, makes each key's in-flight limit adaptive: a
	// limit.Controller per key (Name the key) moves it from the latency of
	// the unary calls it admits, measured around the handler, with the time
	// each had left before its deadline; a call whose deadline ran out, or
	// that the handler answered as overloaded (watertight.IsOverloaded), is
	// a drop, one its client cancelled says nothing. Streams hold places but
	// are not measured (their length is not a latency). Limit.InitialLimit
	// zero means MaxConcurrent; MaxWait, MaxWaiters and QueueOrder are
	// ignored (the key's queue is MaxQueue's). A key evicted from the table
	// (see MaxMethods) starts again from the initial limit. No effect when
	// MaxConcurrent is negative. See package limit.
	Limit *limit.Config
	// MaxConcurrent is how many requests of one key run the handler at
	// once; a stream counts until its handler returns. Zero means
	// DefaultMethodMaxConcurrent (100); a negative value means no admission limit
	// at all (deadline shedding only).
	MaxConcurrent int
	// MaxQueue is how many requests of one key may wait for a place when
	// MaxConcurrent are in flight. Zero means MaxConcurrent; a negative
	// value means no queue: a request that finds the key full is rejected
	// at once. MaxConcurrent + MaxQueue must not exceed
	// bulkhead.MaxConcurrentLimit.
	MaxQueue int
	// MaxWait bounds the time a request waits in the queue. Zero or a
	// negative value means no bound of its own: a queued request waits
	// until a place is free or its context ends (its deadline passes, the
	// client goes away).
	MaxWait time.Duration
	// MaxMethods bounds the number of keys that have a limit of their own.
	// When the table is full, a new key makes room by dropping an idle one;
	// when none is idle, the request is admitted through one limit shared
	// by all such keys, named OtherMethods. Zero means DefaultMaxMethods
	// (1000); a negative value means no bound.
	MaxMethods int
	// Client, if not nil, returns the identity of a call's client (an API
	// key's ID, a tenant, an authenticated user, read from the incoming
	// metadata, the peer or its auth info), under which MaxPerClient
	// applies: one client cannot hold more than its share of the server,
	// whatever the methods it calls. It runs after the deadline shedding
	// step, before admission, with the request's context and full method
	// name. An empty identity is not limited. The identity is never written
	// into an answer or an event: it may be a secret.
	Client func(ctx context.Context, fullMethod string) string
	// MaxPerClient is how many requests of one client may be in the server
	// at once, running or waiting in a method's queue; a stream counts
	// until its handler returns. The unary and the stream interceptor share
	// the count when built together by ServerInterceptors; built apart,
	// each counts its own. A request beyond it is rejected at once
	// with codes.ResourceExhausted, whatever RejectCode says, and the
	// negative pushback (reason ErrClientLimit). It must be positive when
	// Client is set, and is ignored when Client is nil.
	MaxPerClient int
	// MaxClients bounds the number of clients whose counts are kept. When
	// the table is full, a new client makes room by dropping the least
	// recently seen idle one (nothing in flight); when none is idle, that
	// is when this many clients all have requests in flight, the new
	// client's request is counted in one overflow count shared by every
	// client that finds no room, limited to MaxPerClient like one client:
	// beyond it, RESOURCE_EXHAUSTED with reason ErrClientOverflow. Opening
	// more clients than the table holds never lifts the limit. Zero means
	// DefaultMaxClients (10000); a negative value means no bound.
	MaxClients int
	// RejectCode is the status code of a request turned away by admission:
	// codes.ResourceExhausted or codes.Unavailable. Zero (codes.OK) means
	// codes.ResourceExhausted. A request shed for its deadline always gets
	// codes.Unavailable. Both come with the trailer
	// grpc-retry-pushback-ms: -1, "overloaded, don't retry".
	RejectCode codes.Code
	// Listener receives an EventShed, with Source "grpc", Key the admission
	// key and Reason and Err saying why (Err matches ErrMethodFull,
	// ErrQueueGaveUp, ErrDisplaced, ErrClientLimit, ErrClientOverflow or
	// deadline.ErrTooShort),
	// for every request shed or rejected without running the handler; and
	// an EventBadInput, with Source "grpc", Key MetadataCriticality and
	// Reason watertighthttp.ReasonUnknownCriticality, for every request
	// whose x-criticality value is unknown (the log line is written once,
	// the events are not limited). It is called in the request's
	// goroutine, never under a lock. If nil, no events.
	Listener watertight.Listener
	// Logger receives the interceptors' warnings (the first unknown
	// x-criticality value they see). If nil, slog.Default().
	Logger *slog.Logger
}

// UnaryServerInterceptor returns an interceptor that guards a server's
// unary handlers, outermost first:
//
//  1. read the criticality (MetadataCriticality) and put it on the context
//     (watertighthttp.WithCriticality), so that the client interceptors and
//     watertighthttp's Transport forward it; an unknown value counts as
//     critical, is logged once and is counted every time (an
//     EventBadInput to ServerConfig.Listener);
//  2. cut a deadline longer than the Propagator's Max;
//  3. shed a request whose deadline has passed or leaves less than the
//     Propagator's MinRemaining: UNAVAILABLE;
//  4. with ServerConfig.Client set, reject a request whose client already
//     has MaxPerClient requests in the server (running or queued, on any
//     method): RESOURCE_EXHAUSTED whatever RejectCode says, since that
//     client sent too many and the server is not necessarily full (as
//     watertighthttp.Handler's 429). Neither the message nor the event
//     names the client. The request counts against its client from here
//     until its handler returns, or until admission refuses it; the
//     clients beyond MaxClients busy ones share one such count
//     (ErrClientOverflow);
//  5. admission: at most MaxConcurrent requests per method run at once and
//     at most MaxQueue wait, up to MaxWait, in watertighthttp.Handler's
//     queue discipline (below); requests below critical (sheddable,
//     sheddable-plus) never wait: they run only if a place is free at once
//     and nobody is queued. A refused request gets RejectCode
//     (RESOURCE_EXHAUSTED); one that waited until too little time was left
//     is shed as in step 3;
//  6. the handler. When its error carries the overloaded signal
//     (watertight.IsOverloaded: a client of another service that exhausted
//     its retries, or got the negative pushback), the answer gets the
//     negative pushback too, so that the callers upstream do not retry what
//     was retried already; an error without a gRPC status then gets
//     UNAVAILABLE. A rejection without a gRPC status (an open breaker the
//     handler used directly) gets UNAVAILABLE, RESOURCE_EXHAUSTED for a
//     saturation, DEADLINE_EXCEEDED for a deadline too short.
//
// Every shed or rejected request is answered with the trailer
// grpc-retry-pushback-ms: -1 ("overloaded, don't retry", gRFC A6), and a
// message that says what happened; never UNKNOWN or PERMISSION_DENIED.
//
// # Queue discipline: adaptive LIFO
//
// The same as watertighthttp.Handler's, from one implementation: a request
// of higher criticality (critical-plus) is always let in before one of lower
// criticality (critical); among equals, the queue of a method is FIFO while
// it is at most half full and LIFO when it is more than half full (the
// oldest requests are the likeliest to have been given up by their
// callers). A queued request whose context ends is removed at once, and
// one that waited MaxWait is removed with ErrMethodFull. When the queue is
// full, a newcomer displaces the oldest queued request of the lowest
// criticality below its own, which is answered with RejectCode and
// ErrDisplaced; else the newcomer is rejected with ErrMethodFull.
//
// It fails, naming the field, when cfg is invalid.
func UnaryServerInterceptor(cfg ServerConfig) (grpc.UnaryServerInterceptor, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	return s.unary, nil
}

// StreamServerInterceptor returns the streaming form of
// UnaryServerInterceptor: the same steps, the handler's stream seeing the
// context they made. A stream holds its admission place until its handler
// returns, and counts against its client (ServerConfig.Client) until then.
func StreamServerInterceptor(cfg ServerConfig) (grpc.StreamServerInterceptor, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	return s.stream, nil
}

// ServerInterceptors returns the unary and the stream interceptor of cfg
// built together: they share one state, so that a client's unary calls and
// streams count against one MaxPerClient, and the methods' limits and their
// table (MaxMethods) are one. UnaryServerInterceptor and
// StreamServerInterceptor, called apart, each keep a state of their own: a
// client may then have MaxPerClient unary calls and MaxPerClient streams in
// the server at once. It fails, naming the field, when cfg is invalid.
func ServerInterceptors(cfg ServerConfig) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, nil, err
	}
	return s.unary, s.stream, nil
}

type server struct {
	name       string
	dl         *deadline.Propagator
	max        time.Duration
	method     func(string) string
	rejectCode codes.Code
	listener   watertight.Listener
	logger     *slog.Logger
	badCrit    atomic.Bool

	// Per-client limit: nil when ServerConfig.Client is nil.
	client      func(context.Context, string) string
	clients     *admission.Clients
	clientErr   error // the event's Err of a request over its client's limit
	overflowErr error // the same for the clients sharing the overflow count

	// Admission: nil when disabled. One queue per key, kept while it is
	// held (see admission.Refs); other for the keys that found the table
	// full.
	methods *keyed.Map[*method]
	other   *method
	maxWait time.Duration // ServerConfig.MaxWait; 0: no bound
}

// method is the in-flight limit and queue of one admission key, with the
// count of the requests holding it in the table.
type method struct {
	admission.Queue                // embedded: one allocation; its last word changes on every request
	refs            admission.Refs // next to that word, on its cache line
	_               [56]byte       // the hot words above share no cache line with what follows
	key             string
	ctl             *limit.Controller // nil: a static limit
}

// newMethod returns the admission of one key; lc, if not nil, makes its
// limit adaptive (lc was checked by newServer).
func newMethod(key string, maxConcurrent, maxQueue int, lc *limit.Config) *method {
	m := &method{key: key}
	m.Init(key, maxConcurrent, maxQueue)
	if lc != nil {
		c := *lc
		c.Name = key
		m.ctl, _ = limit.NewController(c, &m.Queue)
	}
	return m
}

// sample tells the key's Controller how a unary call admitted at start
// ended (see ServerConfig.Limit).
func (m *method) sample(ctx context.Context, start time.Time, err error) {
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.DeadlineExceeded), cerr == nil && watertight.IsOverloaded(err):
		m.ctl.Drop()
	case cerr == nil:
		var left time.Duration
		if dl, ok := ctx.Deadline(); ok {
			left = dl.Sub(start)
		}
		m.ctl.Sample(time.Since(start), left)
	}
}

// errTableFull is keyed.Map.Get's answer when the table is full of busy keys.
var errTableFull = errors.New("watertightgrpc: method table full")

func newServer(cfg ServerConfig) (*server, error) {
	s := &server{
		name:       cfg.Name,
		dl:         cfg.Deadline,
		method:     cfg.Method,
		rejectCode: cfg.RejectCode,
		listener:   cfg.Listener,
		logger:     cfg.Logger,
	}
	if s.dl == nil {
		dc := deadline.DefaultConfig()
		dc.Name, dc.Logger, dc.Listener = cfg.Name, cfg.Logger, cfg.Listener
		p, err := deadline.New(dc)
		if err != nil {
			return nil, err
		}
		s.dl = p
	}
	s.max = s.dl.Config().Max
	switch s.rejectCode {
	case codes.OK:
		s.rejectCode = codes.ResourceExhausted
	case codes.ResourceExhausted, codes.Unavailable:
	default:
		return nil, fmt.Errorf("watertightgrpc: ServerConfig.RejectCode must be codes.ResourceExhausted or codes.Unavailable (0 means codes.ResourceExhausted), got %v", cfg.RejectCode)
	}
	if cfg.Client != nil {
		if cfg.MaxPerClient <= 0 {
			return nil, fmt.Errorf("watertightgrpc: ServerConfig.MaxPerClient must be > 0 when Client is set, got %d", cfg.MaxPerClient)
		}
		s.client = cfg.Client
		s.clients = admission.NewClients(cfg.MaxPerClient, cfg.MaxClients)
		n := "1 request"
		if cfg.MaxPerClient != 1 {
			n = strconv.Itoa(cfg.MaxPerClient) + " requests"
		}
		s.clientErr = fmt.Errorf("%w: this client already has %s in the server, running or queued", ErrClientLimit, n)
		s.overflowErr = fmt.Errorf("%w: the server is busy with as many clients as it tracks; the clients beyond them share a limit of %s in the server, reached", ErrClientOverflow, n)
	}
	if cfg.MaxConcurrent < 0 {
		return s, nil
	}
	maxc := cfg.MaxConcurrent
	if maxc == 0 {
		maxc = DefaultMethodMaxConcurrent
	}
	maxq := cfg.MaxQueue
	switch {
	case maxq == 0:
		maxq = maxc
	case maxq < 0:
		maxq = 0
	}
	if maxc > bulkhead.MaxConcurrentLimit || maxq > bulkhead.MaxConcurrentLimit-maxc {
		return nil, fmt.Errorf("watertightgrpc: ServerConfig.MaxConcurrent + MaxQueue must be <= %d, got %d + %d", bulkhead.MaxConcurrentLimit, maxc, maxq)
	}
	if cfg.MaxWait > 0 {
		s.maxWait = cfg.MaxWait
	}
	maxKeys := cfg.MaxMethods
	switch {
	case maxKeys == 0:
		maxKeys = DefaultMaxMethods
	case maxKeys < 0:
		maxKeys = -1
	}
	var lc *limit.Config
	if cfg.Limit != nil {
		c := *cfg.Limit
		if c.InitialLimit == 0 {
			c.InitialLimit = maxc
		}
		if _, err := limit.NewController(c, admission.New("", maxc, 0)); err != nil {
			return nil, fmt.Errorf("watertightgrpc: ServerConfig.Limit: %w", err)
		}
		lc = &c
	}
	s.methods = keyed.New(maxKeys,
		func(key string) (*method, error) { return newMethod(key, maxc, maxq, lc), nil },
		func(m *method) bool { return m.refs.Evict() }) // idle: nothing in flight or queued
	s.other = newMethod(OtherMethods, maxc, maxq, lc)
	return s, nil
}

// admission returns the queue of key, held (release it with put), or the
// shared one when the table is full of busy keys.
func (s *server) admission(key string) *method {
	for {
		m, err := s.methods.Get(key, errTableFull)
		if err != nil {
			m = s.other // never evicted
		}
		if m.refs.Ref() {
			return m
		}
		// Evicted between the lookup and the Ref: the table drops it
		// at once (under its lock), and the next lookup finds a live one.
		runtime.Gosched()
	}
}

// put lets go of a queue returned by admission.
func (m *method) put() { m.refs.Put() }

// acquire takes a place; see UnaryServerInterceptor.
func (m *method) acquire(ctx context.Context, crit watertighthttp.Criticality, maxWait time.Duration) error {
	if crit < watertighthttp.Critical {
		if !m.TryAcquire() {
			return fmt.Errorf("%w: no place free for a request of criticality %s, which does not wait", ErrMethodFull, crit)
		}
		return nil
	}
	err := m.AcquireWait(ctx, int(crit), maxWait)
	switch {
	case err == nil:
		return nil
	case err == admission.ErrDisplaced:
		return ErrDisplaced
	case err == admission.ErrMaxWait:
		return fmt.Errorf("%w: waited the longest time allowed in the queue", ErrMethodFull)
	case errors.Is(err, admission.ErrGaveUp):
		return fmt.Errorf("%w: %w", ErrQueueGaveUp, context.Cause(ctx))
	default: // admission.ErrFull
		return fmt.Errorf("%w: %d in flight and %d queued", ErrMethodFull, m.MaxConcurrent(), m.MaxQueue())
	}
}

// release gives back the place acquire took and lets go of the queue; it
// does nothing for a nil method.
func (m *method) release() {
	if m != nil {
		m.Release()
		m.put()
	}
}

// criticality reads the request's criticality and puts it on ctx.
func (s *server) criticality(ctx context.Context) (context.Context, watertighthttp.Criticality) {
	vs := metadata.ValueFromIncomingContext(ctx, MetadataCriticality)
	if len(vs) == 0 {
		return ctx, watertighthttp.Critical
	}
	c, err := watertighthttp.ParseCriticality(vs[0])
	if err != nil {
		s.badCriticality(err)
	}
	return watertighthttp.WithCriticality(ctx, c), c
}

// badCriticality logs the first unknown criticality value and sends an
// EventBadInput for each.
func (s *server) badCriticality(err error) {
	if s.badCrit.CompareAndSwap(false, true) {
		l := s.logger
		if l == nil {
			l = slog.Default()
		}
		l.Warn("watertightgrpc: unknown criticality, taken as critical (logged once)", "metadata", MetadataCriticality, "error", err)
	}
	watertight.Emit(s.listener, watertight.Event{
		Kind: watertight.EventBadInput, Source: "grpc", Name: s.name, Key: MetadataCriticality, Reason: watertighthttp.ReasonUnknownCriticality,
		Code: watertighthttp.CodeUnknownCriticality,
	})
}

// held is what a request admitted by guard holds until its handler
// returns: its admission place (nil when admission is off) and its client's
// count (nil when it is not counted).
type held struct {
	m *method
	c *admission.ClientCount
}

// release gives back what the request held.
func (h held) release() {
	h.m.release()
	if h.c != nil {
		h.c.Leave()
	}
}

// guard runs steps 1 to 5 of UnaryServerInterceptor. It returns the
// context for the handler, what the request holds (release it when the
// handler returns), the cancel func of the context (nil when there is none)
// and, when the request is not to be run, the answer to send instead (then
// it holds nothing); trailer sets the trailer of that answer.
func (s *server) guard(ctx context.Context, fullMethod string, trailer func(metadata.MD)) (_ context.Context, h held, cancel context.CancelFunc, _ error) {
	ctx, crit := s.criticality(ctx)
	if left, ok := deadline.Remaining(ctx); ok && left > s.max {
		ctx, cancel = context.WithTimeout(ctx, s.max)
	}
	key := fullMethod
	if s.method != nil {
		key = s.method(fullMethod)
	}
	if err := s.dl.Check(ctx); err != nil {
		return ctx, held{}, cancel, s.shed(key, codes.Unavailable, "the request's deadline is too short to start it: ", err, trailer)
	}
	if s.client != nil {
		if id := s.client(ctx, fullMethod); id != "" {
			c, overflow, ok := s.clients.Enter(id)
			if !ok {
				// The client's fault, not the server's: RESOURCE_EXHAUSTED
				// whatever RejectCode says. Neither the message nor the
				// event names the client.
				err := s.clientErr
				if overflow {
					err = s.overflowErr
				}
				return ctx, held{}, cancel, s.shed(key, codes.ResourceExhausted, "", err, trailer)
			}
			h.c = c
		}
	}
	if s.methods == nil {
		return ctx, h, cancel, nil
	}
	m := s.admission(key)
	if err := m.acquire(ctx, crit, s.maxWait); err != nil {
		m.put()
		h.release()
		return ctx, held{}, cancel, s.shed(m.key, s.rejectCode, "", err, trailer)
	}
	h.m = m
	// The request may have waited: shed it if what is left is too short.
	if err := s.dl.Check(ctx); err != nil {
		h.release()
		return ctx, held{}, cancel, s.shed(m.key, codes.Unavailable, "the request's deadline became too short to start it while it waited in the queue: ", err, trailer)
	}
	return ctx, h, cancel, nil
}

// shed emits the event and returns the answer to a request that is not
// run: code, the message, and the negative pushback in the trailer.
func (s *server) shed(key string, code codes.Code, msg string, err error, trailer func(metadata.MD)) error {
	trailer(metadata.Pairs(MetadataPushback, PushbackOverloaded))
	reason := msg + err.Error()
	watertight.Emit(s.listener, watertight.Event{Kind: watertight.EventShed, Source: "grpc", Name: s.name, Key: key, Reason: reason, Err: err, Code: shedCode(err)})
	return status.Error(code, "watertight: shed: "+reason+" (method "+strconv.Quote(key)+")")
}

// answer passes the handler's error on: see step 6 of
// UnaryServerInterceptor.
func (s *server) answer(err error, trailer func(metadata.MD)) error {
	if err == nil {
		return nil
	}
	if watertight.IsOverloaded(err) {
		trailer(metadata.Pairs(MetadataPushback, PushbackOverloaded))
		if !hasStatus(err) {
			if watertight.IsRejection(err) {
				return withStatus(err)
			}
			return &rejectionError{err: err, st: status.New(codes.Unavailable, err.Error())}
		}
		return err
	}
	return withStatus(err)
}

func (s *server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	trailer := func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }
	hctx, a, cancel, err := s.guard(ctx, info.FullMethod, trailer)
	if err == nil {
		var resp any
		resp, err = s.run(hctx, req, handler, a)
		if err == nil {
			if cancel != nil {
				cancel()
			}
			return resp, nil
		}
		err = s.answer(err, trailer)
	}
	if cancel != nil {
		cancel()
	}
	return nil, err
}

// run calls the handler and gives back what the request holds (its
// admission place, its client's count) when it returns, even when it
// panics.
func (s *server) run(ctx context.Context, req any, handler grpc.UnaryHandler, a held) (_ any, err error) {
	defer a.release()
	if a.m != nil && a.m.ctl != nil {
		start := time.Now()
		defer func() { a.m.sample(ctx, start, err) }()
	}
	return handler(ctx, req)
}

func (s *server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	hctx, a, cancel, err := s.guard(ctx, info.FullMethod, ss.SetTrailer)
	if cancel != nil {
		defer cancel()
	}
	if err != nil {
		return err
	}
	defer a.release()
	if hctx != ctx {
		ss = &serverStream{ServerStream: ss, ctx: hctx}
	}
	return s.answer(handler(srv, ss), ss.SetTrailer)
}

// serverStream is a grpc.ServerStream with the context the guards made.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with the criticality and the cut
// deadline.
func (s *serverStream) Context() context.Context { return s.ctx }
