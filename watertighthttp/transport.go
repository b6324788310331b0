package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/internal/keycache"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/retry"
)

// ErrBodyNotReplayable is the reason of a *retry.SkippedError returned by
// Transport.RoundTrip when a request that would have been retried was not,
// because its body cannot be sent again: it has a Body and no GetBody
// (http.NewRequest sets GetBody for a *bytes.Buffer, *bytes.Reader or
// *strings.Reader body).
var ErrBodyNotReplayable = errors.New("watertighthttp: not retried: the request body cannot be replayed (set GetBody)")

// TransportConfig configures a Transport. The zero value is valid: a clone
// of http.DefaultTransport that dials with a 500 ms timeout, no breaker, no
// bulkhead, no attempt timeout, the retry package's defaults (three
// attempts, full-jitter backoff, a server's Retry-After honoured up to 5 s,
// no budget) and the deadline package's defaults. With registries, each
// endpoint of a host has its own breaker and bulkhead, and the host a
// breaker for failures to connect (see Key).
type TransportConfig struct {
	// Base is the transport that sends each attempt. If nil, a clone of
	// http.DefaultTransport whose dialer gives up after ConnectTimeout,
	// shared by every Transport with the same ConnectTimeout (so that they
	// share one connection pool, as they would share http.DefaultTransport's).
	Base http.RoundTripper
	// ConnectTimeout bounds the dial of a new connection (name resolution
	// and TCP connect, not TLS), apart from the request's own deadline: a
	// host that does not answer its SYNs fails the attempt quickly, as a
	// transient, host-level failure, instead of holding it for
	// http.DefaultTransport's 30 s. It applies only when Base is nil. Zero
	// means DefaultConnectTimeout (500 ms, for a data centre: raise it for
	// hosts across a WAN); negative means http.DefaultTransport itself, with
	// its own dial timeout. A positive value with Base set is an error: set
	// the dialer of your own transport.
	ConnectTimeout time.Duration
	// Key returns the key under which a request finds its breaker and its
	// bulkhead in the registries: a host, a route. Keys should come from a
	// bounded set. If nil, the request's endpoint: its host and the first
	// one or two segments of its path up to the first that looks like an ID
	// ("api.internal:8080/users" for /users/123/orders), at most
	// MaxEndpoints per host (the rest share the key host + "/*"); and, with
	// Breakers set, the host (req.URL.Host) has a breaker of its own in
	// front of its endpoints' that counts only failures to connect (dial
	// errors, connect timeouts), so that a host that cannot be reached trips
	// at once for all its endpoints, while an endpoint that stalls or fails
	// trips alone. See docs/http.md, "Keys".
	Key func(*http.Request) string
	// MaxEndpoints bounds the endpoint keys of one host when Key is nil.
	// Zero means DefaultMaxEndpoints (16); negative means one key per host,
	// req.URL.Host, with no host breaker of its own: every endpoint of a
	// host shares one breaker and one bulkhead.
	MaxEndpoints int
	// Breakers gives each key its circuit breaker. If nil, no breaker. With
	// the breaker's default Classify (watertight.Classify), an HTTP answer
	// counts as ClassifyStatus says: a 4xx other than 429 is ignored, a 5xx
	// and a 429 are failures; a transport error is a failure, a
	// cancellation by the caller is ignored.
	Breakers *circuit.Registry
	// Bulkheads gives each key its bulkhead, which bounds the attempts in
	// flight to that key. If nil, no bulkhead.
	Bulkheads *bulkhead.Registry
	// Limiters gives each key an adaptive concurrency limit (package
	// limit), inside its bulkhead: it bounds the attempts in flight to the
	// key at a limit it learns from their latency, an attempt that ran out
	// of time (AttemptTimeout, or the request's deadline) or was answered as
	// overloaded counting as a drop. Its refusal is limit.ErrLimited, a
	// saturation that is not retried. If nil, no adaptive limit.
	Limiters *limit.Registry
	// Balancer, if not nil, spreads the attempts over a pool of hosts: each
	// attempt goes to the host it picks (balance.Balancer.Pick, avoiding
	// the host of the attempt before, so that a retry goes to another host
	// whenever the pool has one), in place of the request URL's host (the
	// Host header stays as the request sets it), and ends that host's call
	// with the attempt's outcome and the time to its answer's header, so
	// that a host that fails or is slow is ejected. A successful answer's
	// call ends when its body is closed or read to its end, so that the
	// calls in flight count streaming answers. The breakers, bulkheads and
	// limiters are then those of the picked host's keys (Key sees the
	// attempt's request, its URL's host the picked one), taken per
	// attempt: a host whose breaker is open or whose bulkhead or limit is
	// full is passed over for another (every active host is tried once,
	// the previous attempt's last) before the rejection is returned. The
	// retry policy is around the pick; its events carry no Key (the host
	// differs per attempt). The caller's own cancellation or deadline
	// counts against neither a host nor its breaker (a gateway's clients
	// must not open a healthy host's breaker by asking for too little
	// time), unless the deadline's cause is marked watertight.Failure
	// (context.WithTimeoutCause(ctx, d, watertight.Mark(err,
	// watertight.Failure)): a deadline the host is meant to meet); an
	// attempt timeout (AttemptTimeout) counts against both. The time counted starts before the host's protections (a wait
	// in its bulkhead counts), and an answer whose body fails after its
	// header still ends as a success.
	Balancer *balance.Balancer
	// ShardKey, with a Balancer, gives each tenant a shard of the pool
	// (shuffle sharding): it returns the request's tenant (from a header,
	// an API key, the client's address), whose requests then go only to
	// ShardSize hosts of the pool chosen by the key
	// (balance.Balancer.Shard), the same for the same key while the pool
	// holds the same addresses, in every process. A tenant whose requests
	// harm hosts harms its shard's; another tenant's shard is all among
	// them with a probability of 1/C(n, ShardSize) for a pool of n hosts
	// (docs/balance.md, "Shuffle sharding"). Within the shard the Balancer
	// picks, retries avoid the previous attempt's host and refusing hosts
	// are passed over as in the whole pool (a hedge stays in the shard);
	// when every host of the shard is ejected, the request fails with
	// balance.ErrShardDown, and when every one refuses, with the last
	// refusal (both rejections), unless ShardSpill. The empty key means
	// the whole pool. ShardKey is called once per request, on RoundTrip's
	// goroutine. If nil, every request may go to the whole pool. Set
	// without a Balancer, it is an error.
	ShardKey func(*http.Request) string
	// ShardSize is the number of hosts in a tenant's shard (ShardKey).
	// Zero means DefaultShardSize (2); the pool's size or more means the
	// whole pool. Negative, above balance.MaxShardSize (32), or set
	// without ShardKey, it is an error.
	ShardSize int
	// ShardSpill, with ShardKey, sends a request whose shard has no host
	// to take it (every one ejected or refusing) to the rest of the pool.
	// If false, the request fails: the tenant stays in its shard, which is
	// the isolation (a tenant whose requests eject hosts would, spilling,
	// go on to the others). Set without ShardKey, it is an error.
	ShardSpill bool
	// Retry configures the retry policy. The Transport decides per request
	// whether it may be retried, whatever Retry.Idempotent says: requests
	// with an idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), an
	// Idempotency-Key header, or a context marked by retry.Idempotent or
	// retry.WithIdempotencyKey, and whose body can be replayed. If
	// Retry.Retryable is nil, retry.IsTransient decides, which retries
	// 429, 502, 503, 504 and transport errors (see StatusError and
	// ClassifyStatus); a custom Retryable sees *StatusError errors for HTTP
	// answers. MaxAttempts 1 disables retries.
	//
	// A server's Retry-After up to Retry.MaxRetryAfter (5 s by default) is
	// waited before the next attempt (capped by Retry.MaxDelay); a longer
	// one is not waited: RoundTrip returns at once a *retry.RetryAfterError
	// (Wait is the server's wait) that wraps the *StatusError whose Response
	// holds the answer, its body read into memory (up to 64 KiB).
	Retry retry.Config
	// AttemptTimeout bounds each attempt (Envoy's per_try_timeout), from
	// sending the request to the end of the response's body, inside the
	// time left before the request context's deadline (never beyond it:
	// when less is left, the caller's deadline governs). An attempt that
	// times out fails with an error matching ErrAttemptTimeout (and
	// context.DeadlineExceeded; its context's cause is ErrAttemptTimeout), so
	// that the caller can tell it from its own deadline: it counts as a
	// failure on the breaker and is retried as a transient failure
	// (idempotent requests only). Each attempt sends the deadline header for
	// its own timeout. Zero means none: an attempt may take all the time
	// the request has, as with Envoy's per_try_timeout unset (a default
	// would cut long downloads and streams short). Negative is an error.
	AttemptTimeout time.Duration
	// Timeout bounds a request from the start of RoundTrip to the end of
	// its answer's body, every attempt and every wait between attempts
	// included (Envoy's route timeout), inside the request context's
	// deadline. A request that runs out of it fails with an error matching
	// ErrTimeout and context.DeadlineExceeded, which counts as a failure on
	// the breaker and on the Balancer's host: unlike the caller's own
	// deadline, it is the host's to meet. The retry policy sees it as the
	// request's deadline (no retry that cannot finish in the time left).
	// It is enforced by each attempt's context, whose deadline is the
	// nearest of Timeout, AttemptTimeout and the caller's deadline, so that
	// a request costs one timer per attempt, not one more for the whole.
	// Zero means none; negative is an error.
	Timeout time.Duration
	// OwnsRequests says that each request given to RoundTrip was made for
	// that call alone and is dropped by the caller after it, as a reverse
	// proxy's outgoing requests are: the first attempt then sets the
	// Transport's headers on the request's own header map instead of a
	// copy of it, saving the copy (retries still send copies). The caller
	// must not use the request's header during or after RoundTrip. Value
	// slices are never modified.
	OwnsRequests bool
	// GRPC says the upstream speaks gRPC (an HTTP/2 base, such as an
	// http.Transport with Protocols set to unencrypted HTTP/2 for h2c):
	// each attempt sends the time left as grpc-timeout in place of the
	// deadline header, and the status of a trailers-only answer
	// (grpc-status on a 200) is judged as contrib/watertightgrpc judges a
	// call's (ClassifyGRPCStatus: UNAVAILABLE and DEADLINE_EXCEEDED are
	// failures worth retrying, INTERNAL a failure, NOT_FOUND the caller's
	// own), grpc-retry-pushback-ms honoured (a negative one carries the
	// overloaded signal). gRPC calls are POSTs: mark the ones that may be
	// retried with retry.Idempotent. A status in the trailers after a body
	// is passed on as it is.
	GRPC bool
	// Deadline sends the time left before the request context's deadline,
	// minus a margin, on every attempt. If nil,
	// deadline.New(deadline.DefaultConfig()).
	Deadline *deadline.Propagator
	// Name labels the Transport's own events. It may be empty.
	Name string
	// Listener, if not nil, receives the events of the Transport's retry
	// policy (Source "retry", Name Retry.Name: EventRetryScheduled,
	// EventRetryExhausted, EventRetrySkipped), each with Key set to the
	// request's key (Config.Key; none with a Balancer), and the Transport's own: an
	// EventRetrySkipped with Source "http", Name this Name and the Reason
	// "request body cannot be replayed" for a request that would have been
	// retried but whose body cannot be sent again. Retry.Listener, if set,
	// receives the same events. The events of the breakers and bulkheads go
	// to the listeners of their registries' configs. Events are sent in
	// the goroutine of RoundTrip, with no lock held (see
	// watertight.Listener). If both are nil, no events are built, and the
	// Transport keeps one set of pipelines for every key when it has no
	// registries; with a listener, it keeps pipelines (and retry policies)
	// per key, so that the events can carry the key.
	Listener watertight.Listener
}

// Transport is an http.RoundTripper that sends requests through a retry
// policy, a per-key circuit breaker (with the default Key, the host's in
// front of the endpoint's), a per-key bulkhead and an attempt timeout, in
// that order (outermost first). On every attempt it sets HeaderAttempt and, when the
// request context has a deadline, the deadline header (Config.Deadline),
// replacing any value the request carried; and, unless the request sets them
// itself, the Idempotency-Key of a context marked with
// retry.WithIdempotencyKey and the criticality of the context
// (CriticalityFrom) as HeaderCriticality.
//
// What RoundTrip returns:
//
//   - when the final attempt got an HTTP answer, that response and a nil
//     error, whatever its status: a 404 or a 503 reaches the caller as a
//     response (the breaker and the retry policy saw it as an error, a
//     *StatusError). When the retries were exhausted or the retry budget
//     refused one, the response is given HeaderOverloaded: true (if it
//     does not carry the signal already): this layer retried, the layers
//     above should not. A response that carried the overloaded signal
//     (IsOverloadedResponse) is returned as it is, not retried, header kept.
//   - when the server asked for a wait longer than Retry.MaxRetryAfter, a
//     *retry.RetryAfterError that wraps the *StatusError and its response
//     (see TransportConfig.Retry);
//   - otherwise an error: a rejection (open breaker, full bulkhead, no time
//     left: watertight.IsRejection), a *retry.ExhaustedError
//     (watertight.IsOverloaded holds), a *retry.SkippedError, or the
//     transport's error.
//
// The bodies of attempts that were discarded for a retry are drained (up to
// 64 KiB) and closed, so their connections go back to the pool. A request
// with a body is replayed through GetBody; a request whose body cannot be
// replayed is sent once, and if it would have been retried, the error is a
// *retry.SkippedError with the reason ErrBodyNotReplayable (for an HTTP
// answer, the reason goes to Retry.OnEvent as a Skipped event).
//
// RoundTrip does not modify the request, its header or its header's value
// slices, so the caller may reuse it: each attempt is a shallow copy
// (http.Request.WithContext) with a header of its own.
//
// A Transport is safe for concurrent use. It keeps the pipeline it builds
// for each key, so that a request costs no pipeline allocation.
type Transport struct {
	base      http.RoundTripper
	key       func(*http.Request) string
	breakers  *circuit.Registry
	bulkheads *bulkhead.Registry
	limiters  *limit.Registry
	balancer  *balance.Balancer
	outer     *pipes // with a balancer: the retry policies alone
	dl        *deadline.Propagator
	dlHeader  string       // dl's header, in canonical form
	timeouts  timeoutCache // values of the deadline header, or of grpc-timeout with GRPC

	endpoints *endpointTable // the default Key's; nil with Config.Key or MaxEndpoints < 0
	attemptTO time.Duration  // Config.AttemptTimeout; 0: none
	total     time.Duration  // Config.Timeout; 0: none
	owns      bool           // Config.OwnsRequests
	grpc      bool           // Config.GRPC

	idem, once, single *retry.Policy
	retryable          func(error) bool
	retries            bool // MaxAttempts != 1
	onEvent            func(retry.Event)
	listener           watertight.Listener // Listener and Retry.Listener; nil if neither
	rc                 retry.Config        // for the per-key policies when listener is set
	name               string              // Config.Name

	shared *pipes                  // no registries: one set of pipelines for every key
	cache  *keycache.Cache[*pipes] // under the registries' generation (pipes)

	shardKey func(*http.Request) string // Config.ShardKey; nil: the whole pool
	shardCfg balance.ShardConfig        // Config.ShardSize (or its default) and ShardSpill
}

// maxCached bounds the pipelines a Transport keeps; beyond it, the cache is
// cleared and rebuilt as requests come.
const maxCached = 4096

// pipes are the pipelines of one key: retrying, sent once for a request
// that is not idempotent, and sent once for an idempotent request whose
// body cannot be replayed.
type pipes struct {
	key                string           // "" for the shared pipelines
	host               *circuit.Breaker // the host's, with the default Key; or nil
	breaker            *circuit.Breaker
	bulk               *bulkhead.Bulkhead
	lim                *limit.Limiter
	idem, once, single *watertight.Pipeline
	// inner, with a Balancer, is the key's protections without the retry
	// policy, for one attempt to a picked host; nil if it has none.
	inner *watertight.Pipeline
}

// ErrAttemptTimeout is matched (errors.Is) by the error of an attempt that
// ran out of TransportConfig.AttemptTimeout, and is the cause
// (context.Cause) of its context.
var ErrAttemptTimeout = errors.New("watertighthttp: attempt timed out (TransportConfig.AttemptTimeout)")

// DefaultMaxEndpoints is the default of TransportConfig.MaxEndpoints.
const DefaultMaxEndpoints = 16

// DefaultConnectTimeout is the dial timeout of the Transport's default base
// (TransportConfig.ConnectTimeout): a few round trips inside a data centre,
// far below the 30 s of http.DefaultTransport.
const DefaultConnectTimeout = 500 * time.Millisecond

// defaultBases are the clones of http.DefaultTransport made for
// TransportConfig.ConnectTimeout, one per timeout, shared by the Transports
// that ask for it so that they share a connection pool.
var defaultBases struct {
	mu sync.Mutex
	m  map[time.Duration]http.RoundTripper
}

// defaultBase returns the base for a nil TransportConfig.Base: a clone of
// http.DefaultTransport whose dialer times out after connect (if it is an
// *http.Transport; else http.DefaultTransport itself).
func defaultBase(connect time.Duration) http.RoundTripper {
	dt, ok := http.DefaultTransport.(*http.Transport)
	if !ok || connect < 0 {
		return http.DefaultTransport
	}
	defaultBases.mu.Lock()
	defer defaultBases.mu.Unlock()
	if rt, ok := defaultBases.m[connect]; ok {
		return rt
	}
	if len(defaultBases.m) >= 16 { // a program that makes up timeouts: stop sharing
		clear(defaultBases.m)
	}
	c := dt.Clone()
	c.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	if defaultBases.m == nil {
		defaultBases.m = make(map[time.Duration]http.RoundTripper)
	}
	defaultBases.m[connect] = c
	return c
}

// NewTransport returns a Transport for cfg, or an error naming the invalid
// field.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("watertighthttp: TransportConfig.Timeout must be >= 0 (0 means none), got %v", cfg.Timeout)
	}
	if cfg.AttemptTimeout < 0 {
		return nil, fmt.Errorf("watertighthttp: TransportConfig.AttemptTimeout must be >= 0 (0 means none), got %v", cfg.AttemptTimeout)
	}
	if cfg.ConnectTimeout > 0 && cfg.Base != nil {
		return nil, fmt.Errorf("watertighthttp: TransportConfig.ConnectTimeout (%v) applies only when Base is nil: set the dial timeout of your own transport, or leave ConnectTimeout zero", cfg.ConnectTimeout)
	}
	t := &Transport{
		base:      cfg.Base,
		key:       cfg.Key,
		breakers:  cfg.Breakers,
		bulkheads: cfg.Bulkheads,
		limiters:  cfg.Limiters,
		balancer:  cfg.Balancer,
		dl:        cfg.Deadline,
		retries:   cfg.Retry.MaxAttempts != 1,
		onEvent:   cfg.Retry.OnEvent,
		listener:  watertight.Listeners(cfg.Listener, cfg.Retry.Listener),
		name:      cfg.Name,
		retryable: cfg.Retry.Retryable,
		attemptTO: cfg.AttemptTimeout,
		total:     cfg.Timeout,
		owns:      cfg.OwnsRequests,
		grpc:      cfg.GRPC,
	}
	if t.base == nil {
		ct := cfg.ConnectTimeout
		if ct == 0 {
			ct = DefaultConnectTimeout
		}
		t.base = defaultBase(ct)
	}
	if t.key == nil && cfg.MaxEndpoints >= 0 {
		n := cfg.MaxEndpoints
		if n == 0 {
			n = DefaultMaxEndpoints
		}
		t.endpoints = newEndpointTable(n)
	}
	if t.retryable == nil {
		t.retryable = retry.IsTransient
	}
	if t.dl == nil {
		p, err := deadline.New(deadline.DefaultConfig())
		if err != nil {
			return nil, err
		}
		t.dl = p
	}
	t.dlHeader = t.dl.Config().Header
	t.cache = keycache.New[*pipes](maxCached)
	t.rc = cfg.Retry
	t.rc.OnEvent = t.event
	t.rc.Listener = t.listener
	var err error
	if t.idem, t.once, t.single, err = retryPolicies(t.rc); err != nil {
		return nil, fmt.Errorf("watertighthttp: TransportConfig.Retry: %w", err)
	}
	if t.shardCfg, err = shardConfig(cfg); err != nil {
		return nil, err
	}
	t.shardKey = cfg.ShardKey
	if t.balancer != nil {
		t.outer = t.build("", nil, nil, nil, nil)
	}
	if t.breakers == nil && t.bulkheads == nil && t.limiters == nil && t.listener == nil {
		t.shared = t.build("", nil, nil, nil, nil)
	}
	return t, nil
}

// CloseIdleConnections closes the idle connections of the base transport, if
// it has the method (as *http.Transport does), so that
// http.Client.CloseIdleConnections reaches through the Transport. With the
// default base, which Transports with the same ConnectTimeout share, it
// closes their idle connections too, as http.DefaultTransport's would.
func (t *Transport) CloseIdleConnections() { closeIdle(t.base) }

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// retryPolicies builds the three retry policies of a Transport from rc: for
// idempotent requests, for the others, and for idempotent requests whose
// body cannot be replayed (sent once).
func retryPolicies(rc retry.Config) (idem, once, single *retry.Policy, err error) {
	rc.Idempotent = true
	if idem, err = retry.New(rc); err != nil {
		return
	}
	rc.Idempotent = false
	if once, err = retry.New(rc); err != nil {
		return
	}
	rc.MaxAttempts = 1
	single, err = retry.New(rc)
	return
}

// keyedListener sets the Key of the events it passes on.
type keyedListener struct {
	key  string
	next watertight.Listener
}

func (k *keyedListener) Wants(kind watertight.EventKind) bool { return watertight.Wants(k.next, kind) }

func (k *keyedListener) OnEvent(e watertight.Event) {
	if e.Key == "" {
		e.Key = k.key
	}
	k.next.OnEvent(e)
}

// event passes the retry policy's events on to Retry.OnEvent, after
// discarding the body of an attempt that is about to be retried: its
// connection goes back to the pool before the wait.
func (t *Transport) event(ev retry.Event) {
	if ev.Kind == retry.Scheduled {
		var se *StatusError
		if errors.As(ev.Err, &se) {
			se.discard()
		}
	}
	if t.onEvent != nil {
		t.onEvent(ev)
	}
}

func (t *Transport) build(key string, host, b *circuit.Breaker, h *bulkhead.Bulkhead, l *limit.Limiter) *pipes {
	p := &pipes{key: key, host: host, breaker: b, bulk: h, lim: l}
	idem, once, single := t.idem, t.once, t.single
	if t.listener != nil {
		// Policies of the key's own, whose events carry the key. The
		// config was validated by NewTransport, so this cannot fail.
		rc := t.rc
		rc.Listener = &keyedListener{key: key, next: t.listener}
		if i, o, s, err := retryPolicies(rc); err == nil {
			idem, once, single = i, o, s
		}
	}
	var guards []watertight.Policy
	if host != nil {
		guards = append(guards, hostBreaker{host})
	}
	if b != nil {
		guards = append(guards, b)
	}
	if h != nil {
		guards = append(guards, h)
	}
	if l != nil {
		guards = append(guards, l)
	}
	mk := func(r *retry.Policy) *watertight.Pipeline {
		return watertight.MustNew(append([]watertight.Policy{r}, guards...)...)
	}
	p.idem, p.once, p.single = mk(idem), mk(once), mk(single)
	if t.balancer != nil && len(guards) > 0 {
		p.inner = watertight.MustNew(guards...)
	}
	return p
}

// pipes returns the pipelines for req's key, built once per key and kept
// with the registries' generation (see circuit.Registry.Generation). A
// request whose key's pipelines are kept under the current generation costs
// one cache lookup and no registry lookup; after an eviction, the kept
// pipelines are checked against the registries once, and rebuilt if the
// key's breaker or bulkhead was replaced.
func (t *Transport) pipes(req *http.Request) (*pipes, error) {
	return t.pipesFor(req, req.URL.Host)
}

// pipesFor is pipes for req sent to host (a Balancer's pick) in place of
// its URL's host; with Config.Key, req must already carry host.
func (t *Transport) pipesFor(req *http.Request, addr string) (*pipes, error) {
	if t.shared != nil {
		return t.shared, nil
	}
	key, hostKey := t.keyOf(req, addr)
	gen := t.generation() // before the registries' Gets: see Generation
	kept, g, ok := t.cache.Get(key)
	if ok && g == gen {
		return kept, nil
	}
	var host, b *circuit.Breaker
	var h *bulkhead.Bulkhead
	var err error
	if t.breakers != nil {
		if hostKey != "" {
			if host, err = t.breakers.Get(hostKey); err != nil {
				return nil, err
			}
		}
		if b, err = t.breakers.Get(key); err != nil {
			return nil, err
		}
	}
	if t.bulkheads != nil {
		if h, err = t.bulkheads.Get(key); err != nil {
			return nil, err
		}
	}
	var l *limit.Limiter
	if t.limiters != nil {
		if l, err = t.limiters.Get(key); err != nil {
			return nil, err
		}
	}
	p := kept
	if !ok || p.host != host || p.breaker != b || p.bulk != h || p.lim != l {
		p = t.build(key, host, b, h, l)
	}
	t.cache.Put(key, gen, p)
	return p, nil
}

// keyOf returns the key of req sent to addr (Config.Key, or its
// endpoint's) and, with the default Key and breakers, the key of its
// host's breaker ("" for none).
func (t *Transport) keyOf(req *http.Request, addr string) (key, host string) {
	switch {
	case t.key != nil:
		return t.key(req), ""
	case t.endpoints == nil:
		return addr, ""
	}
	key = t.endpoints.key(addr, req.URL.Path)
	if t.breakers != nil {
		host = addr
	}
	return key, host
}

// generation is the sum of the registries' generations: it moves when
// either does (both only grow).
func (t *Transport) generation() uint64 {
	var g uint64
	if t.breakers != nil {
		g += t.breakers.Generation()
	}
	if t.bulkheads != nil {
		g += t.bulkheads.Generation()
	}
	if t.limiters != nil {
		g += t.limiters.Generation()
	}
	return g
}

// headerValue is h.Get(key) for a key in canonical form, as the Header...
// constants are: the first value, or "". It skips Get's canonicalization of
// the key, which costs more than the lookup.
func headerValue(h http.Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// idempotentMethod reports whether method is idempotent (RFC 9110 §9.2.2).
func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// RoundTrip implements http.RoundTripper; see Transport for what it returns.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, total := t.withTotal(req.Context())
	if t.balancer != nil {
		return t.roundTripBalanced(ctx, req, total)
	}
	p, err := t.pipes(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	pipe := p.choose(ctx, req)
	a := attempt{t: t, req: req, total: total}
	resp, err := watertight.Do(ctx, pipe, a.do)
	return t.result(ctx, req, p, pipe, &a, resp, err)
}

// withTotal returns the context a request's pipeline runs under and the
// deadline of TransportConfig.Timeout (zero when there is none, or when
// the caller's own deadline comes first and governs). With a Timeout, the
// context is a deadlineView: the retry policy sees the request's deadline
// in it, and each attempt's context (attempt.do) enforces it.
func (t *Transport) withTotal(ctx context.Context) (context.Context, time.Time) {
	if t.total <= 0 {
		return ctx, time.Time{}
	}
	total := time.Now().Add(t.total)
	if dl, ok := ctx.Deadline(); ok && !total.Before(dl) {
		return ctx, time.Time{}
	}
	return &deadlineView{Context: ctx, dl: total}, total
}

// deadlineView is a context whose Deadline is dl, earlier than its
// parent's, and which is otherwise its parent: it does not end at dl by
// itself. The Transport hands it to its pipelines (whose policies all
// pass their context on as it is), so that the retry policy plans within
// TransportConfig.Timeout; each attempt's context, made from the parent
// (attempt.do), has a deadline no later than dl and ends there. A request
// thus pays for one timer per attempt rather than one more for the whole.
type deadlineView struct {
	context.Context
	dl time.Time
}

func (v *deadlineView) Deadline() (time.Time, bool) { return v.dl, true }

// ErrTimeout is matched (errors.Is) by the error of a request that ran out
// of TransportConfig.Timeout, and is the cause (context.Cause) of its
// attempt's context then. It is marked watertight.Failure: the breaker and
// the Balancer count it against the host.
var ErrTimeout = errTimeout

var errTimeout = watertight.Mark(errors.New("watertighthttp: request timed out (TransportConfig.Timeout)"), watertight.Failure)

// choose returns the pipeline for req: retrying if it is idempotent and its
// body can be replayed, sent once otherwise.
func (p *pipes) choose(ctx context.Context, req *http.Request) *watertight.Pipeline {
	idempotent := idempotentMethod(req.Method) || headerValue(req.Header, HeaderIdempotencyKey) != "" || retry.IsIdempotent(ctx)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	switch {
	case idempotent && replayable:
		return p.idem
	case idempotent:
		return p.single
	}
	return p.once
}

// result turns the pipeline's answer into RoundTrip's.
func (t *Transport) result(ctx context.Context, req *http.Request, p *pipes, pipe *watertight.Pipeline, a *attempt, resp *http.Response, err error) (*http.Response, error) {
	if !a.bodySent {
		closeBody(req)
	}
	if err == nil {
		return resp, nil
	}
	if pipe == p.single && t.retries && ctx.Err() == nil && t.wouldRetry(err) {
		skipped := &retry.SkippedError{Attempts: a.n, Reason: ErrBodyNotReplayable, Err: err}
		if t.onEvent != nil {
			t.onEvent(retry.Event{Name: t.rc.Name, Kind: retry.Skipped, Attempt: a.n, Err: err, Reason: ErrBodyNotReplayable, Code: CodeBodyNotReplayable})
		}
		if t.listener != nil {
			watertight.Emit(t.listener, watertight.Event{
				Kind: watertight.EventRetrySkipped, Source: eventSource, Name: t.name, Key: p.key,
				Attempt: a.n, Reason: "request body cannot be replayed", Err: err, Code: CodeBodyNotReplayable,
			})
		}
		err = skipped
	}
	var rae *retry.RetryAfterError
	if errors.As(err, &rae) {
		// The server asked for a wait beyond Retry.MaxRetryAfter: the
		// caller decides, with the answer in hand (its body buffered, so
		// that the connection goes back to the pool whatever it does).
		if se := statusOf(err); se != nil && se == a.last {
			se.buffer()
		}
		return nil, err
	}
	var se *StatusError
	if errors.As(err, &se) && se == a.last {
		if se.discarded {
			// A retry was scheduled, but the caller's context ended during
			// the wait: the answer was already discarded.
			return nil, fmt.Errorf("%w (while waiting to retry after: %v)", ctx.Err(), err)
		}
		// The final answer is an HTTP response: the caller gets it.
		if watertight.IsOverloaded(err) && !IsOverloadedResponse(se.Response) {
			se.Response.Header.Set(HeaderOverloaded, "true")
		}
		return se.Response, nil
	}
	a.last.discard()
	return nil, err
}

// wouldRetry reports whether the retry policy would retry err.
func (t *Transport) wouldRetry(err error) bool {
	if watertight.IsRejection(err) || watertight.IsOverloaded(err) || errors.Is(err, context.Canceled) {
		return false
	}
	return t.retryable(err)
}

// attempt is one request's state across its attempts. RoundTrip keeps it on
// its stack: do must not let a pointer to it escape (see TestTransportAllocs).
type attempt struct {
	t        *Transport
	req      *http.Request
	addr     string       // the host a Balancer picked, put in the URL of the attempt's request; "": req's own
	total    time.Time    // TransportConfig.Timeout's deadline; zero: none
	n        int          // attempts started
	bodySent bool         // req.Body went to the inner transport
	last     *StatusError // the last attempt's HTTP answer, if it was one
}

// attemptValues are the values of HeaderAttempt for attempts 1 to
// len(attemptValues), built once and shared by every request: each is a
// one-element slice whose capacity is 1, so an append to it copies. They are
// read-only: net/http does not modify the header value slices of a request it
// sends, and an http.RoundTripper must not modify its request.
var attemptValues = func() [][]string {
	const n = 16
	vals := make([]string, n)
	vs := make([][]string, n)
	for i := range vs {
		vals[i] = strconv.Itoa(i + 1)
		vs[i] = vals[i : i+1 : i+1]
	}
	return vs
}()

// attemptValue returns the value slice of HeaderAttempt for attempt n.
func attemptValue(n int) []string {
	if n >= 1 && n <= len(attemptValues) {
		return attemptValues[n-1]
	}
	return []string{strconv.Itoa(n)}
}

// timeoutValue is a value of the deadline header, in a slice of its own.
type timeoutValue struct {
	ms int64
	vs [1]string
}

// timeoutCache keeps recent value slices of the deadline header,
// direct-mapped by milliseconds: requests sent under deadlines of the same
// length send the same few values, which then cost no allocation. An entry
// is never modified once stored; its slice is shared by the requests that
// send it, read-only as attemptValues are, with a capacity of 1.
type timeoutCache [64]atomic.Pointer[timeoutValue]

// get returns a slice holding ms in decimal.
func (c *timeoutCache) get(ms int64) []string { return c.getFormatted(ms, nil) }

// grpcMillis formats milliseconds as a grpc-timeout value.
func grpcMillis(ms int64) string { return formatGRPCTimeout(time.Duration(ms) * time.Millisecond) }

// getFormatted is get with the value formatted by f (nil: decimal). A
// cache holds the values of one format.
func (c *timeoutCache) getFormatted(ms int64, f func(int64) string) []string {
	slot := &c[(uint64(ms)*0x9E3779B97F4A7C15)>>58] // Fibonacci hashing: 64 slots
	if e := slot.Load(); e != nil && e.ms == ms {
		return e.vs[:]
	}
	e := &timeoutValue{ms: ms}
	if f != nil {
		e.vs[0] = f(ms)
	} else {
		e.vs[0] = strconv.FormatInt(ms, 10)
	}
	slot.Store(e)
	return e.vs[:]
}

// criticalityValues are the values of HeaderCriticality for Sheddable to
// CriticalPlus, shared read-only as attemptValues are.
var criticalityValues = func() [][]string {
	var vs [][]string
	for c := Sheddable; c <= CriticalPlus; c++ {
		vs = append(vs, []string{c.String()})
	}
	return vs
}()

// criticalityValue returns the value slice of HeaderCriticality for c.
func criticalityValue(c Criticality) []string {
	if c >= Sheddable && c <= CriticalPlus {
		return criticalityValues[c-Sheddable]
	}
	return []string{c.String()}
}

// addedHeaders is how many headers do may add to the caller's: the attempt,
// the deadline, the Idempotency-Key and the criticality.
const addedHeaders = 4

// header returns a copy of h with room for addedHeaders more entries; see
// copyHeader.
func header(h http.Header) http.Header {
	return copyHeader(h, addedHeaders, nil)
}

// copyHeader returns a copy of h with room for extra more entries, whose
// value slices are copies too (carved from one array, each with its length as
// capacity, as http.Header.Clone does): neither the inner transport nor do
// can change the caller's header. The values go into all if it is not nil
// (it must then hold exactly as many values as h), else into a new array.
func copyHeader(h http.Header, extra int, all []string) http.Header {
	if all == nil {
		if nv := headerValues(h); nv > 0 {
			all = make([]string, nv)
		}
	}
	h2 := make(http.Header, len(h)+extra)
	for k, vs := range h {
		if vs == nil {
			h2[k] = nil // http.Header.Clone keeps a nil value nil
			continue
		}
		n := copy(all, vs)
		h2[k] = all[:n:n]
		all = all[n:]
	}
	return h2
}

// headerValues returns the number of values in h.
func headerValues(h http.Header) int {
	nv := 0
	for _, vs := range h {
		nv += len(vs)
	}
	return nv
}

// inlineValues is how many of the caller's header values an attempt's
// request carries in its own allocation (requestCopy): six, as many names as
// the header map holds in its first group of eight, next to the attempt and
// the deadline. (The request and six strings take a 416-byte block, the
// request alone a 320-byte one.)
const inlineValues = 6

// requestCopy is an attempt's request together with the array of its
// header's values, so that a request whose header holds at most
// inlineValues values costs one allocation for both.
type requestCopy struct {
	r    http.Request
	u    url.URL
	vals [inlineValues]string
}

// copyRequest returns a shallow copy of req under ctx
// (http.Request.WithContext), sent to addr when it is not empty (a copy of
// the URL with that host), whose header is a copy of req's with room for
// extra more entries (see copyHeader), or req's own header when inPlace
// (TransportConfig.OwnsRequests, first attempt). Request, URL and up to
// inlineValues header values take one allocation.
func copyRequest(ctx context.Context, req *http.Request, addr string, extra int, inPlace bool) *http.Request {
	inPlace = inPlace && req.Header != nil
	nv := 0
	if !inPlace {
		nv = headerValues(req.Header)
	}
	if addr == "" && (inPlace || nv == 0 || nv > inlineValues) {
		r := req.WithContext(ctx)
		if !inPlace {
			r.Header = copyHeader(req.Header, extra, nil)
		}
		return r
	}
	c := new(requestCopy)
	// WithContext is inlined and its result does not escape: the copy it
	// makes stays on the stack.
	c.r = *req.WithContext(ctx)
	if addr != "" {
		c.u = *req.URL
		c.u.Host = addr
		c.r.URL = &c.u
	}
	switch {
	case inPlace:
	case nv > 0 && nv <= inlineValues:
		c.r.Header = copyHeader(req.Header, extra, c.vals[:nv:nv])
	default:
		c.r.Header = copyHeader(req.Header, extra, nil)
	}
	return &c.r
}

// statusOf returns the *StatusError in err's chain (statusError wraps it in
// retry.After), without taking the address of anything: errors.As would make
// the attempt escape to the heap.
func statusOf(err error) *StatusError {
	for err != nil {
		if se, ok := err.(*StatusError); ok {
			return se
		}
		err = errors.Unwrap(err)
	}
	return nil
}

// do sends one attempt: a shallow copy of the request under the attempt's
// context (http.Request.WithContext: the URL and the other fields are
// shared, never changed), with a fresh body after the first attempt and a
// header of its own: a copy of the caller's (see copyRequest) with the
// watertight headers. The caller's request, header and value slices are
// never modified, so the caller may reuse the request.
func (a *attempt) do(ctx context.Context) (*http.Response, error) {
	a.n++
	if a.last != nil { // a retry: the previous answer is discarded
		a.last.discard()
		a.last = nil
	}
	// What the header gets, known before it is built so that its map is
	// made with room for exactly that.
	ch := a.req.Header
	extra := 1 // HeaderAttempt
	var key string
	if headerValue(ch, HeaderIdempotencyKey) == "" {
		if k, ok := retry.IdempotencyKey(ctx); ok {
			// The draft's form: a Structured-Field String, quoted.
			key = idempotency.FormatKey(k)
			extra++
		}
	}
	var crit []string
	if headerValue(ch, HeaderCriticality) == "" {
		if c, ok := CriticalityFrom(ctx); ok {
			crit = criticalityValue(c)
			extra++
		}
	}
	var body io.ReadCloser
	if a.n > 1 && a.req.Body != nil && a.req.Body != http.NoBody {
		b, err := a.req.GetBody()
		if err != nil {
			return nil, retry.MarkPermanent(errors.New("watertighthttp: GetBody: " + err.Error()))
		}
		body = b
	}
	// The attempt's deadline: the nearest of the attempt timeout and the
	// request's Timeout, made on the caller's context (never on the
	// deadlineView, whose deadline only says when). When the caller's own
	// deadline comes first, it governs and no context is made.
	actx, cancel := ctx, context.CancelFunc(nil)
	parent := ctx
	if v, ok := ctx.(*deadlineView); ok {
		actx, parent = v.Context, v.Context
	}
	dl, cause := a.total, errTimeout
	if d := a.t.attemptTO; d > 0 {
		if adl := time.Now().Add(d); dl.IsZero() || adl.Before(dl) {
			dl, cause = adl, ErrAttemptTimeout
		}
	}
	if !dl.IsZero() {
		if pdl, ok := parent.Deadline(); !ok || dl.Before(pdl) {
			actx, cancel = context.WithDeadlineCause(parent, dl, cause)
		}
	}
	ms, ok, err := a.t.dl.OutgoingMillis(actx)
	if err != nil {
		if body != nil {
			body.Close()
		}
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	if ok {
		extra++
	}
	r := copyRequest(actx, a.req, a.addr, extra, a.t.owns && a.n == 1)
	if body != nil {
		r.Body = body
	}
	h := r.Header
	h[HeaderAttempt] = attemptValue(a.n)
	if key != "" {
		h.Set(HeaderIdempotencyKey, key)
	}
	if crit != nil {
		h[HeaderCriticality] = crit
	}
	if ok {
		if a.t.grpc {
			h[headerGRPCTimeout] = a.t.timeouts.getFormatted(ms, grpcMillis)
		} else {
			h[a.t.dlHeader] = a.t.timeouts.get(ms)
		}
	}
	if a.n == 1 {
		a.bodySent = true
	}
	resp, err := a.t.base.RoundTrip(r)
	if cancel != nil {
		if err != nil {
			cause := context.Cause(actx)
			live := parent.Err() == nil
			cancel()
			switch {
			case live && cause == ErrAttemptTimeout:
				return nil, &attemptTimeoutError{d: a.t.attemptTO, err: err}
			case live && cause == errTimeout:
				return nil, &timeoutError{d: a.t.total, err: err}
			}
		} else {
			releaseWith(resp, cancel)
		}
	}
	if err != nil {
		return nil, transportError(ctx, err)
	}
	judge := statusError
	if a.t.grpc {
		judge = grpcStatusError
	}
	if err := judge(resp); err != nil {
		a.last = statusOf(err)
		return nil, err
	}
	return resp, nil
}

// attemptTimeoutError is the error of an attempt that ran out of
// TransportConfig.AttemptTimeout: it matches ErrAttemptTimeout,
// context.DeadlineExceeded and the inner transport's error, and is
// transient, like any timeout.
type attemptTimeoutError struct {
	d   time.Duration
	err error
}

func (e *attemptTimeoutError) Error() string {
	s := "watertighthttp: attempt timed out after " + e.d.String() + " (TransportConfig.AttemptTimeout)"
	if e.err.Error() != ErrAttemptTimeout.Error() {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *attemptTimeoutError) Unwrap() []error {
	return []error{ErrAttemptTimeout, context.DeadlineExceeded, e.err}
}
func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Transient() bool { return true }

// timeoutError is the error of a request that ran out of
// TransportConfig.Timeout: it matches ErrTimeout (and so counts as the
// host's Failure), context.DeadlineExceeded and the inner transport's
// error.
type timeoutError struct {
	d   time.Duration
	err error
}

func (e *timeoutError) Error() string {
	s := "watertighthttp: request timed out after " + e.d.String() + " (TransportConfig.Timeout)"
	if e.err.Error() != errTimeout.Error() {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *timeoutError) Unwrap() []error { return []error{errTimeout, context.DeadlineExceeded, e.err} }
func (e *timeoutError) Timeout() bool   { return true }

// releaseWith has resp's body call release when it is closed or read to its
// end, so that the attempt's context lives as long as its body. A body that
// is the connection (a 101 Switching Protocols) is left as it is; its
// context ends with its timeout.
func releaseWith(resp *http.Response, release context.CancelFunc) {
	switch resp.Body.(type) {
	case nil:
		release()
	case io.Writer:
	default:
		resp.Body = &releaseBody{ReadCloser: resp.Body, release: release}
	}
}

// hostBreaker is a host's breaker in the pipelines of its endpoints (the
// default Key): it counts an attempt's success, and a failure only when it is
// a failure to connect (connectFailure), which says the host cannot be
// reached whatever the endpoint. Any other failure (a status, a timeout, a
// reset) is Ignored here: the endpoint's own breaker counts it.
type hostBreaker struct{ b *circuit.Breaker }

func (h hostBreaker) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return h.b.Enter(ctx)
}

func (h hostBreaker) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if err != nil && !connectFailure(err) {
		h.b.Exit(ctx, t, watertight.Mark(err, watertight.Ignored))
		return err
	}
	return h.b.Exit(ctx, t, err)
}

// connectFailure reports whether err is a failure to open a connection:
// refused, unreachable, a connect timeout, a name that does not resolve.
// Nothing of the request reached the host, so it is the host's failure,
// not an endpoint's. (A reset after the request was written is not: a
// handler that crashes resets its own requests only.)
func connectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// maxHosts bounds the hosts an endpointTable keeps; beyond it, the table
// starts again empty (the keys it hands out again are equal strings, so the
// registries find the same breakers).
const maxHosts = 1024

// endpointTable gives requests their endpoint keys (the default Key): per
// host, a map from a path prefix (endpointPrefix) to the key host+prefix,
// at most max of them, the rest sharing host+"/*". Both levels are
// immutable maps behind atomic pointers, replaced under mu when a key is
// added: a request whose endpoint is known costs two map lookups with
// substrings of its URL, no allocation and no lock.
type endpointTable struct {
	max   int
	mu    sync.Mutex
	hosts atomic.Pointer[map[string]*hostEndpoints]
}

// hostEndpoints are the endpoint keys of one host.
type hostEndpoints struct {
	other string // host + "/*": the key of the endpoints beyond max
	eps   atomic.Pointer[map[string]string]
}

func newEndpointTable(max int) *endpointTable {
	e := &endpointTable{max: max}
	e.hosts.Store(&map[string]*hostEndpoints{})
	return e
}

// key returns the endpoint key of a request to host with path.
func (e *endpointTable) key(host, path string) string {
	prefix := endpointPrefix(path)
	he := (*e.hosts.Load())[host]
	if he != nil {
		m := *he.eps.Load()
		if k, ok := m[prefix]; ok {
			return k
		}
		if len(m) >= e.max {
			return he.other
		}
	}
	return e.add(host, prefix)
}

// add records host's endpoint prefix, if there is room, and returns its key.
func (e *endpointTable) add(host, prefix string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	hosts := *e.hosts.Load()
	he := hosts[host]
	if he == nil {
		he = &hostEndpoints{other: host + "/*"}
		he.eps.Store(&map[string]string{})
		next := make(map[string]*hostEndpoints, len(hosts)+1)
		if len(hosts) < maxHosts {
			maps.Copy(next, hosts)
		}
		next[host] = he
		e.hosts.Store(&next)
	}
	m := *he.eps.Load()
	if k, ok := m[prefix]; ok {
		return k
	}
	if len(m) >= e.max {
		return he.other
	}
	next := make(map[string]string, len(m)+1)
	maps.Copy(next, m)
	k := host + prefix
	next[prefix] = k
	he.eps.Store(&next)
	return k
}

// endpointSegments is how many leading path segments make an endpoint.
const endpointSegments = 2

// endpointPrefix returns the endpoint part of a URL path, a prefix of it:
// its first endpointSegments segments, up to (not including) the first
// that is empty or looks like an identifier (idSegment), or "/" if there is
// none. "/users/123/orders" gives "/users", "/api/v1/search" "/api/v1",
// "/healthy" "/healthy", "/8f14e45f-ceea-467f-a0e6-1c5d7e3b9b8a" "/".
func endpointPrefix(p string) string {
	if len(p) < 2 || p[0] != '/' {
		return "/"
	}
	end, i := 0, 1
	for range endpointSegments {
		seg := p[i:]
		j := strings.IndexByte(seg, '/')
		if j >= 0 {
			seg = seg[:j]
		}
		if seg == "" || idSegment(seg) {
			break
		}
		end = i + len(seg)
		if j < 0 {
			break
		}
		i += j + 1
	}
	if end == 0 {
		return "/"
	}
	return p[:end]
}

// maxWordSegment is the longest path segment taken as a word, not an ID.
const maxWordSegment = 32

// idSegment reports whether a path segment looks like an identifier rather
// than a word naming a resource: longer than maxWordSegment, or holding a
// digit (numbers, UUIDs, hashes, dates) other than a version such as "v1",
// or any byte outside letters, digits, '-', '_' and '.' (an e-mail, a
// base64 token, an encoded name).
func idSegment(s string) bool {
	if len(s) > maxWordSegment {
		return true
	}
	digits := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_', c == '.':
		default:
			return true
		}
	}
	return digits && !versionSegment(s)
}

// versionSegment reports whether s is an API version: "v" or "V" and one to
// three digits.
func versionSegment(s string) bool {
	if len(s) < 2 || len(s) > 4 || (s[0] != 'v' && s[0] != 'V') {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
