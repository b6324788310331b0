package watertightgrpc

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/watertight-go/watertight/watertighthttp"
)

// Defaults of ServerConfig.
const (
	// DefaultMaxConcurrent is the per-method in-flight limit used when
	// ServerConfig.MaxConcurrent is zero.
	DefaultMaxConcurrent = 100
	// DefaultMaxMethods is the method bound used when
	// ServerConfig.MaxMethods is zero.
	DefaultMaxMethods = 1000
)

// OtherMethods is the admission key shared by the methods that found the
// method table full (see ServerConfig.MaxMethods).
const OtherMethods = "(other methods)"

// Errors of the server interceptors, seen in the Err of their EventShed
// events (wrapped: compare with errors.Is). Each is a saturation
// (watertight.IsRejection and watertight.IsSaturation hold). A request shed
// because its deadline is too short gets deadline.ErrTooShort instead.
var (
	// ErrMethodFull: the method had MaxConcurrent requests in flight and
	// MaxQueue waiting, or the request waited MaxWait, or it was of a
	// sheddable criticality and found no place free at once.
	ErrMethodFull = watertight.NewSaturation("watertightgrpc: method at its limit")
	// ErrQueueGaveUp: the request's context ended (its deadline passed or
	// the client went away) while it waited in the queue; it was not run.
	ErrQueueGaveUp = watertight.NewSaturation("watertightgrpc: request ended while queued")
)

// ServerConfig configures UnaryServerInterceptor and
// StreamServerInterceptor. The zero value is valid: the default deadline
// propagator (no minimum time), methods keyed by full name, 100 requests in
// flight and 100 queued per method, RESOURCE_EXHAUSTED for rejections.
type ServerConfig struct {
	// Name labels the interceptors' events (watertight.Event.Name). It may
	// be empty.
	Name string
	// Deadline sets the least time a request must have left to be started
	// (its Config.MinRemaining: zero sheds only requests whose deadline has
	// passed) and the longest deadline accepted (Config.Max: a longer
	// grpc-timeout is cut to it). gRPC itself sets the request's deadline
	// from grpc-timeout. If nil, deadline.New(deadline.DefaultConfig()).
	Deadline *deadline.Propagator
	// Method returns the admission key of a call from its full method name
	// ("/package.Service/Method"): each key has its own in-flight limit and
	// queue. If nil, the full method name. Keys are bounded by MaxMethods.
	Method func(fullMethod string) string
	// MaxConcurrent is how many requests of one key run the handler at
	// once; a stream counts until its handler returns. Zero means
	// DefaultMaxConcurrent (100); a negative value means no admission limit
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
	// RejectCode is the status code of a request turned away by admission:
	// codes.ResourceExhausted or codes.Unavailable. Zero (codes.OK) means
	// codes.ResourceExhausted. A request shed for its deadline always gets
	// codes.Unavailable. Both come with the trailer
	// grpc-retry-pushback-ms: -1, "overloaded, don't retry".
	RejectCode codes.Code
	// Listener receives an EventShed, with Source "grpc", Key the admission
	// key and Reason and Err saying why, for every request shed or rejected
	// without running the handler. It is called in the request's goroutine,
	// never under a lock. If nil, no events.
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
//     critical and is logged once;
//  2. cut a deadline longer than the Propagator's Max;
//  3. shed a request whose deadline has passed or leaves less than the
//     Propagator's MinRemaining: UNAVAILABLE;
//  4. admission: at most MaxConcurrent requests per method run at once and
//     at most MaxQueue wait, first come first served, up to MaxWait;
//     requests below critical (sheddable, sheddable-plus) never wait: they
//     run only if a place is free at once and nobody is queued. A refused
//     request gets RejectCode (RESOURCE_EXHAUSTED); one that waited until
//     too little time was left is shed as in step 3;
//  5. the handler. When its error carries the overloaded signal
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
// returns.
func StreamServerInterceptor(cfg ServerConfig) (grpc.StreamServerInterceptor, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	return s.stream, nil
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

	// Admission: nil when disabled. A request takes a ticket (in flight or
	// queued: MaxConcurrent + MaxQueue, never waits), then a place
	// (MaxConcurrent, waits up to MaxWait).
	tickets, places *bulkhead.Registry
	other           admission // for keys that found the registries full
}

// admission is the pair of bulkheads of one key.
type admission struct {
	key     string
	tickets *bulkhead.Bulkhead
	places  *bulkhead.Bulkhead
	queue   int // MaxQueue, resolved
}

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
		p, err := deadline.New(deadline.DefaultConfig())
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
	if cfg.MaxConcurrent < 0 {
		return s, nil
	}
	maxc := cfg.MaxConcurrent
	if maxc == 0 {
		maxc = DefaultMaxConcurrent
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
	maxWait := cfg.MaxWait
	if maxWait <= 0 {
		maxWait = -1 // until the context ends
	}
	if maxq == 0 {
		maxWait = 0
	}
	maxKeys := cfg.MaxMethods
	if maxKeys == 0 {
		maxKeys = DefaultMaxMethods
	}
	tc := bulkhead.Config{MaxConcurrent: maxc + maxq}
	pc := bulkhead.Config{MaxConcurrent: maxc, MaxWait: maxWait}
	var err error
	if s.tickets, err = bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: tc, MaxKeys: maxKeys}); err != nil {
		return nil, err
	}
	if s.places, err = bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: pc, MaxKeys: maxKeys}); err != nil {
		return nil, err
	}
	s.other.key, s.other.queue = OtherMethods, maxq
	tc.Name, pc.Name = OtherMethods, OtherMethods
	if s.other.tickets, err = bulkhead.New(tc); err != nil {
		return nil, err
	}
	if s.other.places, err = bulkhead.New(pc); err != nil {
		return nil, err
	}
	return s, nil
}

// admission returns the bulkheads of key, or the shared ones when the
// registries are full.
func (s *server) admission(key string) admission {
	t, err := s.tickets.Get(key)
	if err != nil {
		return s.other
	}
	p, err := s.places.Get(key)
	if err != nil {
		return s.other
	}
	return admission{key: key, tickets: t, places: p, queue: s.other.queue}
}

// acquire takes a ticket and a place; see UnaryServerInterceptor.
func (a admission) acquire(ctx context.Context, crit watertighthttp.Criticality) error {
	if !a.tickets.TryAcquire() {
		return fmt.Errorf("%w: %d in flight and %d queued", ErrMethodFull, a.places.Snapshot().MaxConcurrent, a.queue)
	}
	if crit < watertighthttp.Critical {
		if !a.places.TryAcquire() {
			a.tickets.Release()
			return fmt.Errorf("%w: no place free for a request of criticality %s, which does not wait", ErrMethodFull, crit)
		}
		return nil
	}
	if err := a.places.Acquire(ctx); err != nil {
		a.tickets.Release()
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrQueueGaveUp, context.Cause(ctx))
		}
		return fmt.Errorf("%w: waited the longest time allowed in the queue", ErrMethodFull)
	}
	return nil
}

// release gives back what acquire took; it does nothing for the zero
// admission.
func (a admission) release() {
	if a.places != nil {
		a.places.Release()
		a.tickets.Release()
	}
}

// criticality reads the request's criticality and puts it on ctx.
func (s *server) criticality(ctx context.Context) (context.Context, watertighthttp.Criticality) {
	vs := metadata.ValueFromIncomingContext(ctx, MetadataCriticality)
	if len(vs) == 0 {
		return ctx, watertighthttp.Critical
	}
	c, err := watertighthttp.ParseCriticality(vs[0])
	if err != nil && s.badCrit.CompareAndSwap(false, true) {
		l := s.logger
		if l == nil {
			l = slog.Default()
		}
		l.Warn("watertightgrpc: unknown criticality, taken as critical (logged once)", "metadata", MetadataCriticality, "error", err)
	}
	return watertighthttp.WithCriticality(ctx, c), c
}

// guard runs steps 1 to 4 of UnaryServerInterceptor. It returns the
// context for the handler, the admission place taken (release it when the
// handler returns), the cancel func of the context (nil when there is none)
// and, when the request is not to be run, the answer to send instead; trailer
// sets the trailer of that answer.
func (s *server) guard(ctx context.Context, fullMethod string, trailer func(metadata.MD)) (_ context.Context, _ admission, cancel context.CancelFunc, _ error) {
	ctx, crit := s.criticality(ctx)
	if left, ok := deadline.Remaining(ctx); ok && left > s.max {
		ctx, cancel = context.WithTimeout(ctx, s.max)
	}
	key := fullMethod
	if s.method != nil {
		key = s.method(fullMethod)
	}
	if err := s.dl.Check(ctx); err != nil {
		return ctx, admission{}, cancel, s.shed(key, codes.Unavailable, "the request's deadline is too short to start it: ", err, trailer)
	}
	if s.tickets == nil {
		return ctx, admission{}, cancel, nil
	}
	a := s.admission(key)
	if err := a.acquire(ctx, crit); err != nil {
		return ctx, admission{}, cancel, s.shed(a.key, s.rejectCode, "", err, trailer)
	}
	// The request may have waited: shed it if what is left is too short.
	if err := s.dl.Check(ctx); err != nil {
		a.release()
		return ctx, admission{}, cancel, s.shed(a.key, codes.Unavailable, "the request's deadline became too short to start it while it waited in the queue: ", err, trailer)
	}
	return ctx, a, cancel, nil
}

// shed emits the event and returns the answer to a request that is not
// run: code, the message, and the negative pushback in the trailer.
func (s *server) shed(key string, code codes.Code, msg string, err error, trailer func(metadata.MD)) error {
	trailer(metadata.Pairs(MetadataPushback, PushbackOverloaded))
	reason := msg + err.Error()
	watertight.Emit(s.listener, watertight.Event{Kind: watertight.EventShed, Source: "grpc", Name: s.name, Key: key, Reason: reason, Err: err})
	return status.Error(code, "watertight: shed: "+reason+" (method "+strconv.Quote(key)+")")
}

// answer passes the handler's error on: see step 5 of
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

// run calls the handler and gives the admission place back when it returns,
// even when it panics.
func (s *server) run(ctx context.Context, req any, handler grpc.UnaryHandler, a admission) (any, error) {
	defer a.release()
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
