package watertightgrpc

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/internal/keycache"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// ClientConfig configures UnaryClientInterceptor and
// StreamClientInterceptor. The zero value is valid: no breaker, no bulkhead,
// the retry package's defaults (three attempts, full-jitter backoff, no
// budget) for calls marked idempotent by their context only, and the deadline
// package's default margin (a tenth of the time left, from 1ms to 100ms).
type ClientConfig struct {
	// Name labels the interceptor's events (watertight.Event.Name) and its
	// retry policy's (retry.Event.Name, when Retry.Name is empty). It may be
	// empty.
	Name string
	// Key returns the key under which a call finds its breaker and its
	// bulkhead in the registries, and which labels its events. If nil,
	// KeyByMethod: one breaker and one bulkhead per full method name. Use
	// KeyByTarget for one per ClientConn target. Keys should come from a
	// bounded set.
	Key func(method string, cc *grpc.ClientConn) string
	// Breakers gives each key its circuit breaker. If nil, no breaker. With
	// the breaker's default Classify (watertight.Classify), a status counts
	// as ClassifyCode says, the pushback applied.
	Breakers *circuit.Registry
	// Bulkheads gives each key its bulkhead, which bounds the attempts (and
	// the streams) in flight under that key. If nil, no bulkhead.
	Bulkheads *bulkhead.Registry
	// Retry configures the retry policy of unary calls, except those of
	// the methods named in Methods; streams are never retried. Whatever
	// Retry.Idempotent says, a call is retried only when it is idempotent:
	// its method is listed in Idempotent (or Methods), its context is
	// marked by retry.Idempotent or retry.WithIdempotencyKey, or its
	// outgoing metadata carries MetadataIdempotencyKey. If Retry.Retryable is
	// nil, retry.IsTransient decides, which follows ClassifyCode and the
	// pushback. Retry.Budget, shared by every client of one dependency,
	// bounds the retries across them. MaxAttempts 1 disables retries.
	// Retry.OnEvent, if set, sees the policy's events as they come.
	Retry retry.Config
	// RetryThrottle, if not nil, is gRPC's retry throttling (gRFC A6; the
	// retryThrottling of a service config: see ParseRetryThrottling), over
	// the unary calls' attempts, under Retry and Methods alike: each attempt
	// that fails in a way its policy would retry (and each answer whose
	// pushback says not to retry) takes a token, each call that succeeds
	// gives TokenRatio back, and while it holds half its MaxTokens or less
	// no call is retried (the attempt's error is returned as it is, as in
	// grpc-go). Hedged calls and streams are not counted. Share one throttle
	// between the interceptors of one ClientConn, as gRPC keeps one per
	// channel. If nil, no throttling.
	RetryThrottle *budget.RetryThrottle
	// Idempotent lists the methods that are safe to repeat, in the style of
	// a gRPC service config's method names: a full method name
	// "/package.Service/Method", or "/package.Service/*" (or
	// "/package.Service/") for every method of a service. Other entries are
	// an error.
	Idempotent []string
	// Methods gives methods retry settings of their own, in the manner of
	// a gRPC service config's methodConfig table (ParseServiceConfig reads
	// one): a method named by an entry is idempotent and its unary calls
	// are retried under the entry's Retry; a full method name beats a
	// service entry, which beats "*". Calls of methods that no entry names
	// use Retry, as without Methods. If nil, Retry serves every method.
	Methods []MethodConfig
	// Hedge, if not nil, hedges idempotent unary calls instead of retrying
	// them: when an attempt has not answered within the policy's delay, a
	// copy is sent, and the first success wins (see package hedge). Each
	// attempt, the first and every hedge, goes through the key's breaker
	// and bulkhead and runs under the margin deadline; the hedges carry
	// MetadataAttempt. The reply of a call must be a proto.Message (each
	// hedge decodes into a message of its own, copied into the caller's
	// when it wins); a call whose reply is not one is retried instead.
	// Calls that are not idempotent are never hedged. The policy's own
	// Breaker and Bulkhead fields, if set, switch hedging off while they
	// are open or full; its Budget bounds the extra requests.
	Hedge *hedge.Policy
	// Deadline gives the margin and the maximum of the deadline sent on:
	// each attempt sends the caller's remaining time less the margin (a
	// share of it, at most Margin: see deadline.Propagator.MarginFor),
	// capped at Max, as grpc-timeout, so that the server gives up before the caller
	// does and its answer can come back; the attempt itself waits until the
	// caller's context ends, as watertighthttp's Transport does. A
	// DEADLINE_EXCEEDED that comes back after the time sent is the caller's
	// own and is not retried. An attempt that would send less than a
	// millisecond fails fast with an error matching deadline.ErrTooShort
	// (DEADLINE_EXCEEDED). A call without a deadline is sent without one.
	// If nil, deadline.New(deadline.DefaultConfig()), whose margin is a
	// tenth of the time left, from 1ms to 100ms.
	Deadline *deadline.Propagator
	// Listener receives the interceptor's events, with Source "grpc" and Key
	// the call's key: EventRejected for a call refused by an open breaker, a
	// full bulkhead or a deadline too short, and the retry policy's
	// decisions (EventRetryScheduled, EventRetryExhausted,
	// EventRetrySkipped). If nil, no events.
	Listener watertight.Listener
}

// KeyByMethod keys calls by their full method name
// ("/package.Service/Method"): the default of ClientConfig.Key.
func KeyByMethod(method string, _ *grpc.ClientConn) string { return method }

// KeyByTarget keys calls by the target of their ClientConn
// (grpc.ClientConn.Target): one breaker and one bulkhead per dependency.
func KeyByTarget(_ string, cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// UnaryClientInterceptor returns an interceptor that runs each unary call
// through a retry policy (ClientConfig.Retry, or that of the method's entry
// in ClientConfig.Methods), the key's breaker and the key's bulkhead, in that
// order (outermost first), each attempt under the caller's deadline less the
// margin (see ClientConfig).
//
// What the call returns: nil on success; else the last attempt's error,
// which keeps its gRPC status (status.Code works on it) and carries the
// overloaded signal (watertight.IsOverloaded) when the server sent a negative
// pushback; a *retry.ExhaustedError or *retry.SkippedError wrapping it when
// retries ran out, were refused by the budget (both carry the overloaded
// signal: this layer retried, the layers above must not) or were not allowed
// (a call that is not idempotent); or a rejection by the client's own
// protections (watertight.IsRejection: an open breaker, a full bulkhead, a
// deadline too short), given the status UNAVAILABLE, RESOURCE_EXHAUSTED or
// DEADLINE_EXCEEDED.
//
// Each attempt after the first carries MetadataAttempt. The idempotency key
// of a context marked with retry.WithIdempotencyKey is sent as
// MetadataIdempotencyKey, and the criticality of the context
// (watertighthttp.CriticalityFrom) as MetadataCriticality, unless the
// outgoing metadata has them already.
//
// With ClientConfig.Hedge, idempotent calls are hedged instead of retried.
//
// Do not enable gRPC's own retries (a retryPolicy in the service config) on
// the same channel: each layer would multiply the other's attempts; use
// grpc.WithDisableRetry.
//
// It fails, naming the field, when cfg is invalid. The interceptor is safe
// for concurrent use; it keeps the pipeline it builds for each key.
func UnaryClientInterceptor(cfg ClientConfig) (grpc.UnaryClientInterceptor, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return c.unary, nil
}

// StreamClientInterceptor returns an interceptor that takes the key's
// breaker permit and bulkhead permit when a stream is created and gives them
// back when the stream ends: when RecvMsg returns an error (io.EOF is a
// success), when the single answer of a client-streaming call arrives, when
// Header or SendMsg fails, when the caller's context ends, or when the
// ClientConn is closed. The stream's final status is recorded by the
// breaker, except the caller's own cancellation or deadline, which a stream
// may use to end a watch. Streams are never retried. A stream sends the
// caller's remaining time less the margin, as unary calls do, and one with
// too little time left is refused at once; the permits are taken before
// the stream is created, so a bulkhead with MaxWait may make creation wait.
//
// As with any gRPC stream, the caller must end it (read to an error, cancel
// its context, or close the ClientConn) or the permits are held forever.
//
// A breaker with SlowCallDuration measures a stream's whole life: give
// streams a registry of their own (a second interceptor) if that is not
// what you want.
func StreamClientInterceptor(cfg ClientConfig) (grpc.StreamClientInterceptor, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return c.stream, nil
}

// maxCached bounds the pipelines a client keeps; beyond it, the cache is
// cleared and rebuilt as calls come.
const maxCached = 4096

type client struct {
	name      string
	key       func(string, *grpc.ClientConn) string
	breakers  *circuit.Registry
	bulkheads *bulkhead.Registry
	retry     retry.Config // validated, with the interceptor's name
	throttle  *budget.RetryThrottle
	hedge     *hedge.Policy
	listener  watertight.Listener
	dl        *deadline.Propagator
	max       time.Duration
	idem      methodSet    // ClientConfig.Idempotent
	methods   *methodTable // ClientConfig.Methods; nil if none

	cache *keycache.Cache[*pipes] // with the registries' generation (see pipes)
}

// pipes are the pipelines of one key: retrying (for idempotent calls), sent
// once (retries not allowed: SkippedError for a transient failure), and, with
// a hedge policy, the breaker and bulkhead alone, for each hedged attempt.
// With ClientConfig.Methods, entries holds the retrying pipeline of each
// entry, built on the first call that needs it (see entryPipe).
type pipes struct {
	breaker          *circuit.Breaker
	bulk             *bulkhead.Bulkhead
	idem, once, bare *watertight.Pipeline
	entries          []atomic.Pointer[watertight.Pipeline] // per ClientConfig.Methods entry; nil if none
}

func newClient(cfg ClientConfig) (*client, error) {
	c := &client{
		name:      cfg.Name,
		key:       cfg.Key,
		breakers:  cfg.Breakers,
		bulkheads: cfg.Bulkheads,
		retry:     cfg.Retry,
		throttle:  cfg.RetryThrottle,
		hedge:     cfg.Hedge,
		listener:  cfg.Listener,
		dl:        cfg.Deadline,
		cache:     keycache.New[*pipes](maxCached),
	}
	if c.key == nil {
		c.key = KeyByMethod
	}
	if c.retry.Name == "" {
		c.retry.Name = cfg.Name
	}
	if _, err := retry.New(c.retry); err != nil {
		return nil, fmt.Errorf("watertightgrpc: ClientConfig.Retry: %w", err)
	}
	if c.dl == nil {
		p, err := deadline.New(deadline.DefaultConfig())
		if err != nil {
			return nil, err
		}
		c.dl = p
	}
	dc := c.dl.Config()
	c.max = dc.Max
	for i, m := range cfg.Idempotent {
		if err := c.idem.add(m); err != nil {
			return nil, fmt.Errorf("watertightgrpc: ClientConfig.Idempotent[%d] %w, got %q", i, err, m)
		}
	}
	if len(cfg.Methods) > 0 {
		t, err := newMethodTable(cfg.Methods, cfg.Name)
		if err != nil {
			return nil, err
		}
		c.methods = t
	}
	return c, nil
}

// idempotentMethod reports whether ClientConfig.Idempotent lists method.
func (c *client) idempotentMethod(method string) bool { return c.idem.has(method) }

// pipes returns the pipelines of key, built once per key and kept with the
// registries' generation (see circuit.Registry.Generation). A call whose
// key's pipelines are kept under the current generation costs one cache
// lookup and no registry lookup; after an eviction, the kept pipelines are
// checked against the registries once, and rebuilt if the key's breaker or
// bulkhead was replaced.
func (c *client) pipes(key string) (*pipes, error) {
	gen := c.generation() // before the registries' Gets: see Generation
	kept, g, ok := c.cache.Get(key)
	if ok && g == gen {
		return kept, nil
	}
	var b *circuit.Breaker
	var h *bulkhead.Bulkhead
	var err error
	if c.breakers != nil {
		if b, err = c.breakers.Get(key); err != nil {
			return nil, err
		}
	}
	if c.bulkheads != nil {
		if h, err = c.bulkheads.Get(key); err != nil {
			return nil, err
		}
	}
	p := kept
	if !ok || p.breaker != b || p.bulk != h {
		if p, err = c.build(key, b, h); err != nil {
			return nil, err
		}
	}
	c.cache.Put(key, gen, p)
	return p, nil
}

// generation is the sum of the registries' generations: it moves when
// either does (both only grow).
func (c *client) generation() uint64 {
	var g uint64
	if c.breakers != nil {
		g += c.breakers.Generation()
	}
	if c.bulkheads != nil {
		g += c.bulkheads.Generation()
	}
	return g
}

func (c *client) build(key string, b *circuit.Breaker, h *bulkhead.Bulkhead) (*pipes, error) {
	p := &pipes{breaker: b, bulk: h}
	var err error
	if p.idem, err = c.retryPipe(key, c.retry, true, b, h); err != nil {
		return nil, fmt.Errorf("watertightgrpc: ClientConfig.Retry: %w", err)
	}
	if p.once, err = c.retryPipe(key, c.retry, false, b, h); err != nil {
		return nil, fmt.Errorf("watertightgrpc: ClientConfig.Retry: %w", err)
	}
	if c.hedge != nil {
		// hedge → breaker → bulkhead → attempt: the hedge runs outside.
		var b2 watertight.Policy
		var h2 watertight.Policy
		if b != nil {
			b2 = b
		}
		if h != nil {
			h2 = h
		}
		p.bare = watertight.MustNew(b2, h2)
	}
	if c.methods != nil {
		p.entries = make([]atomic.Pointer[watertight.Pipeline], len(c.methods.retry))
	}
	return p, nil
}

// entryPipe returns the retrying pipeline of key p for entry e of
// ClientConfig.Methods, building it on the first call that needs it. Two
// calls that build it at once both use a valid pipeline; one is kept.
func (c *client) entryPipe(key string, p *pipes, e int) (*watertight.Pipeline, error) {
	if pipe := p.entries[e].Load(); pipe != nil {
		return pipe, nil
	}
	pipe, err := c.retryPipe(key, c.methods.retry[e], true, p.breaker, p.bulk)
	if err != nil { // not reached: newMethodTable checked the configuration
		return nil, fmt.Errorf("watertightgrpc: ClientConfig.Methods[%d].Retry: %w", e, err)
	}
	if !p.entries[e].CompareAndSwap(nil, pipe) {
		pipe = p.entries[e].Load()
	}
	return pipe, nil
}

// retryPipe returns the pipeline retry (rc, with idempotent) → breaker →
// bulkhead for key, the retry policy's events sent to the client's
// listener as well.
func (c *client) retryPipe(key string, rc retry.Config, idempotent bool, b *circuit.Breaker, h *bulkhead.Bulkhead) (*watertight.Pipeline, error) {
	if user, l := rc.OnEvent, c.listener; l != nil {
		name := c.name
		rc.OnEvent = func(ev retry.Event) {
			if user != nil {
				user(ev)
			}
			e := watertight.Event{Source: "grpc", Name: name, Key: key, Attempt: ev.Attempt, Err: ev.Err, Code: ev.Code}
			switch ev.Kind {
			case retry.Scheduled:
				e.Kind, e.Delay = watertight.EventRetryScheduled, ev.Delay
			case retry.Exhausted:
				e.Kind = watertight.EventRetryExhausted
			default:
				e.Kind = watertight.EventRetrySkipped
				if ev.Reason != nil {
					e.Reason = ev.Reason.Error()
				}
			}
			watertight.Emit(l, e)
		}
	}
	if t := c.throttle; t != nil {
		// gRPC's order: a failure costs a token only when its code is
		// retryable, and costs it before the attempts are counted.
		retryable := rc.Retryable
		if retryable == nil {
			retryable = retry.IsTransient
		}
		rc.Retryable = func(err error) bool { return retryable(err) && t.Failed() }
	}
	rc.Idempotent = idempotent
	r, err := retry.New(rc)
	if err != nil {
		return nil, err
	}
	pols := []watertight.Policy{r}
	if b != nil {
		pols = append(pols, b)
	}
	if h != nil {
		pols = append(pols, h)
	}
	return watertight.New(pols...)
}

// reject gives a rejection by the client's own protections its gRPC status
// and emits it. A context error without a status (the caller's context
// ended while it waited for a bulkhead permit or before a retry: the
// caller gave up) gets CANCELLED or DEADLINE_EXCEEDED, as grpc-go gives a
// call whose context ends, and no event. Other errors are returned as they
// are.
func (c *client) reject(key string, err error) error {
	if err == nil || hasStatus(err) {
		return err
	}
	if !watertight.IsRejection(err) {
		return withContextStatus(err)
	}
	watertight.Emit(c.listener, watertight.Event{Kind: watertight.EventRejected, Source: "grpc", Name: c.name, Key: key, Err: err, Code: rejectCode(err)})
	return withStatus(err)
}

// outgoing adds the idempotency key and the criticality of ctx to its
// outgoing metadata, unless the metadata has them already, and reports
// whether the metadata (then) carries an idempotency key. It reads the
// metadata (a copy) only when it has something to add or idem is false.
func outgoing(ctx context.Context, idem bool) (context.Context, bool) {
	k, hasKey := retry.IdempotencyKey(ctx)
	crit, hasCrit := watertighthttp.CriticalityFrom(ctx)
	if !hasKey && !hasCrit && idem {
		return ctx, false
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	keyInMD := len(md[MetadataIdempotencyKey]) > 0
	var kv [4]string
	n := 0
	if hasKey && !keyInMD {
		kv[0], kv[1] = MetadataIdempotencyKey, k
		n = 2
		keyInMD = true
	}
	if hasCrit && len(md[MetadataCriticality]) == 0 {
		kv[n], kv[n+1] = MetadataCriticality, crit.String()
		n += 2
	}
	if n > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv[:n]...)
	}
	return ctx, keyInMD
}

// sendContext returns the context an attempt is sent under: ctx, with a
// deadline less the margin and capped at the Propagator's Max from now (see
// marginContext), which gRPC sends as grpc-timeout, and that deadline (zero
// when ctx has none, or when neither the margin nor the cap changes it: then
// ctx itself is returned). It fails, with deadline.ErrTooShort, when less
// than a millisecond would be sent.
//
// The context is made in buf when buf is not nil (a caller that has room for
// one saves an allocation), on the heap otherwise.
func (c *client) sendContext(ctx context.Context, buf *marginContext) (context.Context, time.Time, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, time.Time{}, nil
	}
	// time.Until reads only the monotonic clock (dl, from a context
	// deadline, carries it): half the cost of time.Now. The margin scales
	// with the time left, by the Propagator's rule (MarginFor).
	whole := time.Until(dl)
	margin := c.dl.MarginFor(whole)
	left := whole - margin
	if left < time.Millisecond {
		_, _, err := c.dl.OutgoingMillis(ctx) // the same error as the HTTP adapter's
		if err == nil {                       // the clock moved between the two reads
			err = fmt.Errorf("%w: %v left, nothing after the %v margin", deadline.ErrTooShort, whole, margin)
		}
		return ctx, time.Time{}, err
	}
	at := dl.Add(-margin)
	if left > c.max {
		at = time.Now().Add(c.max)
	} else if margin == 0 {
		return ctx, dl, nil
	}
	if buf == nil {
		buf = new(marginContext)
	}
	*buf = marginContext{Context: ctx, at: at}
	return buf, at, nil
}

// marginContext is a context whose Deadline is earlier than its parent's,
// by the margin: gRPC reads Deadline to send grpc-timeout, and that is all
// the margin is for. Its Done, Err and Cause are the parent's: the call ends
// when the caller's context does, not at the earlier deadline, so that the
// server's own answer to its shorter deadline can come back in the margin
// (and the call costs no timer of its own). A context that gRPC, or an
// interceptor further in, derives from it with context.WithDeadline for a
// later time reports the earlier deadline and, like this one, ends when the
// caller's context does.
type marginContext struct {
	context.Context
	at time.Time
}

// Deadline returns the deadline sent on: the parent's less the margin.
func (c *marginContext) Deadline() (time.Time, bool) { return c.at, true }

// ownDeadline reports whether an attempt sent under deadline at, which
// ended with err, ended at the caller's own deadline: the caller's context
// has ended, or the answer is a DEADLINE_EXCEEDED that came no earlier than
// at (the server honoured the deadline it was sent).
func ownDeadline(ctx context.Context, at time.Time, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	return !at.IsZero() && status.Code(err) == codes.DeadlineExceeded && !time.Now().Before(at)
}

func (c *client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	key := c.key(method, cc)
	p, err := c.pipes(key)
	if err != nil {
		return c.reject(key, err)
	}
	entry := -1 // the method's entry in ClientConfig.Methods
	if c.methods != nil {
		entry = c.methods.lookup(method)
	}
	idem := entry >= 0 || c.idempotentMethod(method) || retry.IsIdempotent(ctx)
	ctx, keyInMD := outgoing(ctx, idem)
	pipe := p.once
	if idem || keyInMD {
		if c.hedge != nil {
			if m, ok := reply.(proto.Message); ok {
				return c.hedged(ctx, key, p, method, req, m, cc, invoker, opts)
			}
		}
		pipe = p.idem
		if entry >= 0 {
			if pipe, err = c.entryPipe(key, p, entry); err != nil {
				return err
			}
		}
	}
	// u stays on the stack; what gRPC gets pointers to is in s, one
	// allocation. One trailer and one option list for every attempt: the
	// trailer carries the server's pushback. The list is built in s when it
	// fits.
	s := new(sent)
	u := unaryCall{c: c, method: method, req: req, reply: reply, cc: cc, invoker: invoker, sent: s}
	if len(opts) < len(s.optBuf) {
		s.opts = append(s.optBuf[:0], opts...)
	} else {
		s.opts = opts[:len(opts):len(opts)]
	}
	s.opts = append(s.opts, grpc.Trailer(&s.trailer))
	_, err = watertight.Do(ctx, pipe, u.do)
	if err == nil {
		return nil
	}
	return c.reject(key, err)
}

// unaryCall is one unary call's state across its attempts.
type unaryCall struct {
	c       *client
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	n       int // attempts started
	*sent
}

// sent is the part of a unaryCall that gRPC gets pointers to (the trailer,
// the options, the first attempt's context), so on the heap: apart from the
// rest, which can stay on the caller's stack, to keep the allocation small.
type sent struct {
	opts    []grpc.CallOption // the caller's, and grpc.Trailer(&trailer)
	trailer metadata.MD
	optBuf  [4]grpc.CallOption // backs opts when they fit
	first   marginContext      // the first attempt's context; never changed once sent
}

// do sends one attempt.
func (u *unaryCall) do(ctx context.Context) (struct{}, error) {
	u.n++
	var buf *marginContext
	if u.n == 1 {
		buf = &u.first
	}
	actx, at, err := u.c.sendContext(ctx, buf)
	if err != nil {
		return struct{}{}, err
	}
	if u.n > 1 {
		actx = metadata.AppendToOutgoingContext(actx, MetadataAttempt, strconv.Itoa(u.n))
	}
	u.trailer = nil
	err = u.invoker(actx, u.method, u.req, u.reply, u.cc, u.opts...)
	if err == nil {
		u.c.throttle.Success()
		return struct{}{}, nil
	}
	err = classifyAttempt(err, u.trailer, ownDeadline(ctx, at, err))
	if u.c.throttle != nil && watertight.IsOverloaded(err) {
		u.c.throttle.Failed() // a pushback that says not to retry counts, as in grpc-go
	}
	return struct{}{}, err
}

// hedged runs an idempotent call through the hedge policy: every attempt
// goes through the key's breaker and bulkhead (p.bare). The first attempt
// decodes into the caller's reply; each hedge into a message of its own,
// copied into the reply when it wins.
func (c *client) hedged(ctx context.Context, key string, p *pipes, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if !retry.IsIdempotent(ctx) {
		ctx = retry.Idempotent(ctx) // for the hedge policy, which asks the context
	}
	h := hedgedCall{c: c, pipe: p.bare, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
	won, err := hedge.Do(ctx, c.hedge, h.attempt)
	if err != nil {
		return c.reject(key, err)
	}
	if won != nil {
		proto.Reset(reply)
		proto.Merge(reply, won)
	}
	return nil
}

// hedgedCall is one hedged call; attempt runs concurrently for its attempts.
type hedgedCall struct {
	c       *client
	pipe    *watertight.Pipeline
	method  string
	req     any
	reply   proto.Message
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption
}

// attempt sends attempt n (1 for the first) and returns the message it
// decoded into: nil for the first, which uses the caller's reply.
func (h *hedgedCall) attempt(ctx context.Context, n int) (proto.Message, error) {
	var out proto.Message
	var reply any = h.reply
	if n > 1 {
		out = h.reply.ProtoReflect().New().Interface()
		reply = out
	}
	u := unaryCall{c: h.c, method: h.method, req: h.req, reply: reply, cc: h.cc, invoker: h.invoker, n: n - 1, sent: new(sent)}
	u.opts = append(h.opts[:len(h.opts):len(h.opts)], grpc.Trailer(&u.trailer))
	_, err := watertight.Do(ctx, h.pipe, u.do)
	return out, err
}
