package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/internal/keycache"
	"github.com/watertight-go/watertight/retry"
)

// ErrBodyNotReplayable is the reason of a *retry.SkippedError returned by
// Transport.RoundTrip when a request that would have been retried was not,
// because its body cannot be sent again: it has a Body and no GetBody
// (http.NewRequest sets GetBody for a *bytes.Buffer, *bytes.Reader or
// *strings.Reader body).
var ErrBodyNotReplayable = errors.New("watertighthttp: not retried: the request body cannot be replayed (set GetBody)")

// TransportConfig configures a Transport. The zero value is valid: the
// default transport, no breaker, no bulkhead, the retry package's defaults
// (three attempts, full-jitter backoff, no budget) and the deadline
// package's defaults.
type TransportConfig struct {
	// Base is the transport that sends each attempt. If nil,
	// http.DefaultTransport.
	Base http.RoundTripper
	// Key returns the key under which a request finds its breaker and its
	// bulkhead in the registries: a host, a route. If nil, req.URL.Host.
	// Keys should come from a bounded set.
	Key func(*http.Request) string
	// Breakers gives each key its circuit breaker. If nil, no breaker. With
	// the breaker's default Classify (watertight.Classify), an HTTP answer
	// counts as ClassifyStatus says: a 4xx other than 429 is ignored, a 5xx
	// and a 429 are failures; a transport error is a failure, a
	// cancellation by the caller is ignored.
	Breakers *circuit.Registry
	// Bulkheads gives each key its bulkhead, which bounds the attempts in
	// flight to that key. If nil, no bulkhead.
	Bulkheads *bulkhead.Registry
	// Retry configures the retry policy. The Transport decides per request
	// whether it may be retried, whatever Retry.Idempotent says: requests
	// with an idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), an
	// Idempotency-Key header, or a context marked by retry.Idempotent or
	// retry.WithIdempotencyKey, and whose body can be replayed. If
	// Retry.Retryable is nil, retry.IsTransient decides, which retries
	// 429, 502, 503, 504 and transport errors (see StatusError and
	// ClassifyStatus); a custom Retryable sees *StatusError errors for HTTP
	// answers. MaxAttempts 1 disables retries.
	Retry retry.Config
	// Deadline sends the time left before the request context's deadline,
	// minus a margin, on every attempt. If nil,
	// deadline.New(deadline.DefaultConfig()).
	Deadline *deadline.Propagator
	// Name labels the Transport's own events. It may be empty.
	Name string
	// Listener, if not nil, receives the events of the Transport's retry
	// policy (Source "retry", Name Retry.Name: EventRetryScheduled,
	// EventRetryExhausted, EventRetrySkipped), each with Key set to the
	// request's key (Config.Key), and the Transport's own: an
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
// policy, a per-key circuit breaker and a per-key bulkhead, in that order
// (outermost first). On every attempt it sets HeaderAttempt and, when the
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
	dl        *deadline.Propagator
	dlHeader  string // dl's header, in canonical form
	timeouts  timeoutCache

	idem, once, single *retry.Policy
	retryable          func(error) bool
	retries            bool // MaxAttempts != 1
	onEvent            func(retry.Event)
	listener           watertight.Listener // Listener and Retry.Listener; nil if neither
	rc                 retry.Config        // for the per-key policies when listener is set
	name               string              // Config.Name

	shared *pipes                  // no registries: one set of pipelines for every key
	cache  *keycache.Cache[*pipes] // under the registries' generation (pipes)
}

// maxCached bounds the pipelines a Transport keeps; beyond it, the cache is
// cleared and rebuilt as requests come.
const maxCached = 4096

// pipes are the pipelines of one key: retrying, sent once for a request
// that is not idempotent, and sent once for an idempotent request whose
// body cannot be replayed.
type pipes struct {
	key                string // "" for the shared pipelines
	breaker            *circuit.Breaker
	bulk               *bulkhead.Bulkhead
	idem, once, single *watertight.Pipeline
}

// NewTransport returns a Transport for cfg, or an error naming the invalid
// field.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	t := &Transport{
		base:      cfg.Base,
		key:       cfg.Key,
		breakers:  cfg.Breakers,
		bulkheads: cfg.Bulkheads,
		dl:        cfg.Deadline,
		retries:   cfg.Retry.MaxAttempts != 1,
		onEvent:   cfg.Retry.OnEvent,
		listener:  watertight.Listeners(cfg.Listener, cfg.Retry.Listener),
		name:      cfg.Name,
		retryable: cfg.Retry.Retryable,
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.key == nil {
		t.key = func(r *http.Request) string { return r.URL.Host }
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
	if t.breakers == nil && t.bulkheads == nil && t.listener == nil {
		t.shared = t.build("", nil, nil)
	}
	return t, nil
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

func (t *Transport) build(key string, b *circuit.Breaker, h *bulkhead.Bulkhead) *pipes {
	p := &pipes{key: key, breaker: b, bulk: h}
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
	mk := func(r *retry.Policy) *watertight.Pipeline {
		pols := []watertight.Policy{r}
		if b != nil {
			pols = append(pols, b)
		}
		if h != nil {
			pols = append(pols, h)
		}
		return watertight.MustNew(pols...)
	}
	p.idem, p.once, p.single = mk(idem), mk(once), mk(single)
	return p
}

// pipes returns the pipelines for req's key, built once per key and kept
// with the registries' generation (see circuit.Registry.Generation). A
// request whose key's pipelines are kept under the current generation costs
// one cache lookup and no registry lookup; after an eviction, the kept
// pipelines are checked against the registries once, and rebuilt if the
// key's breaker or bulkhead was replaced.
func (t *Transport) pipes(req *http.Request) (*pipes, error) {
	if t.shared != nil {
		return t.shared, nil
	}
	key := t.key(req)
	gen := t.generation() // before the registries' Gets: see Generation
	kept, g, ok := t.cache.Get(key)
	if ok && g == gen {
		return kept, nil
	}
	var b *circuit.Breaker
	var h *bulkhead.Bulkhead
	var err error
	if t.breakers != nil {
		if b, err = t.breakers.Get(key); err != nil {
			return nil, err
		}
	}
	if t.bulkheads != nil {
		if h, err = t.bulkheads.Get(key); err != nil {
			return nil, err
		}
	}
	p := kept
	if !ok || p.breaker != b || p.bulk != h {
		p = t.build(key, b, h)
	}
	t.cache.Put(key, gen, p)
	return p, nil
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
	ctx := req.Context()
	p, err := t.pipes(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	idempotent := idempotentMethod(req.Method) || headerValue(req.Header, HeaderIdempotencyKey) != "" || retry.IsIdempotent(ctx)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	pipe := p.once
	switch {
	case idempotent && replayable:
		pipe = p.idem
	case idempotent:
		pipe = p.single
	}
	a := attempt{t: t, req: req}
	resp, err := watertight.Do(ctx, pipe, a.do)
	if !a.bodySent {
		closeBody(req)
	}
	if err == nil {
		return resp, nil
	}
	if pipe == p.single && t.retries && ctx.Err() == nil && t.wouldRetry(err) {
		skipped := &retry.SkippedError{Attempts: a.n, Reason: ErrBodyNotReplayable, Err: err}
		if t.onEvent != nil {
			t.onEvent(retry.Event{Name: t.rc.Name, Kind: retry.Skipped, Attempt: a.n, Err: err, Reason: ErrBodyNotReplayable})
		}
		if t.listener != nil {
			watertight.Emit(t.listener, watertight.Event{
				Kind: watertight.EventRetrySkipped, Source: eventSource, Name: t.name, Key: p.key,
				Attempt: a.n, Reason: "request body cannot be replayed", Err: err,
			})
		}
		err = skipped
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
func (c *timeoutCache) get(ms int64) []string {
	slot := &c[(uint64(ms)*0x9E3779B97F4A7C15)>>58] // Fibonacci hashing: 64 slots
	if e := slot.Load(); e != nil && e.ms == ms {
		return e.vs[:]
	}
	e := &timeoutValue{ms: ms}
	e.vs[0] = strconv.FormatInt(ms, 10)
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
	vals [inlineValues]string
}

// copyRequest returns a shallow copy of req under ctx
// (http.Request.WithContext) whose header is a copy of req's with room for
// extra more entries (see copyHeader).
func copyRequest(ctx context.Context, req *http.Request, extra int) *http.Request {
	nv := headerValues(req.Header)
	if nv == 0 || nv > inlineValues {
		r := req.WithContext(ctx)
		r.Header = copyHeader(req.Header, extra, nil)
		return r
	}
	c := new(requestCopy)
	// WithContext is inlined and its result does not escape: the copy it
	// makes stays on the stack.
	c.r = *req.WithContext(ctx)
	c.r.Header = copyHeader(req.Header, extra, c.vals[:nv:nv])
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
	ms, ok, err := a.t.dl.OutgoingMillis(ctx)
	if err != nil {
		if body != nil {
			body.Close()
		}
		return nil, err
	}
	if ok {
		extra++
	}
	r := copyRequest(ctx, a.req, extra)
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
		h[a.t.dlHeader] = a.t.timeouts.get(ms)
	}
	if a.n == 1 {
		a.bodySent = true
	}
	resp, err := a.t.base.RoundTrip(r)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if err := statusError(resp); err != nil {
		a.last = statusOf(err)
		return nil, err
	}
	return resp, nil
}
