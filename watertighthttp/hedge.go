package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
)

// HedgeConfig configures a HedgingTransport.
type HedgeConfig struct {
	// Base sends each attempt. If nil, the same default base as a
	// Transport's: a clone of http.DefaultTransport whose dialer gives up
	// after ConnectTimeout (shared with the Transports of that timeout). It
	// may be a Transport, for a breaker and bulkhead per replica (with
	// retries off, TransportConfig.Retry.MaxAttempts 1: hedging inside a
	// retry multiplies the two).
	Base http.RoundTripper
	// ConnectTimeout bounds the dial of a new connection when Base is nil,
	// as TransportConfig.ConnectTimeout does: zero means
	// DefaultConnectTimeout (500 ms), negative means http.DefaultTransport
	// itself, and a positive value with Base set is an error.
	ConnectTimeout time.Duration
	// Policy decides when a hedge is sent, and whether: its delay, its
	// budget, its overload switches. It must not be nil.
	Policy *hedge.Policy
	// Replicas are the hosts ("host" or "host:port") that serve the same
	// content as the request's own: the first attempt goes to the
	// request's URL, and each hedge to another replica, taking them in
	// turn (a replica equal to the request's host is skipped). If empty,
	// hedges go to the request's URL too. The Host header is left as the
	// request sets it.
	Replicas []string
	// Target, if not nil, returns the URL that attempt n (1 for the first)
	// of req is sent to; nil means req.URL. It must not modify req, and
	// replaces Replicas, which must then be empty.
	Target func(req *http.Request, attempt int) *url.URL
}

// HedgingTransport is an http.RoundTripper that hedges requests: when a
// request has not been answered within its policy's delay, it sends a copy
// (to another replica, see HedgeConfig.Replicas) and returns the first
// answer, cancelling the other attempt. See package hedge.
//
// Only requests that are safe to send twice are hedged: GET and HEAD, and
// requests with an Idempotency-Key header or a context marked with
// retry.Idempotent or retry.WithIdempotencyKey (whose key is then sent as
// the Idempotency-Key header), and whose body can be sent again (none, or
// GetBody set). Every other request goes straight to the base transport.
//
// An HTTP answer that counts as a failure (ClassifyStatus: 5xx, 429) does
// not end the request while another attempt runs; when every attempt
// failed, the last answer is returned as the response, with a nil error, as
// the base transport would. Any other answer (2xx, 3xx, 4xx) is final. An
// answer that carries the overloaded signal (IsOverloadedResponse) stops
// the request's hedging, and the policy's for its cool-down.
//
// The bodies of losing answers are drained (up to 64 KiB) and closed; the
// requests of losing attempts still in flight are cancelled, with
// hedge.ErrLost as their context's cause. The returned response's body
// keeps its attempt's context alive until it is closed or read to its end:
// close it, as always. Each attempt carries HeaderAttempt. RoundTrip does
// not modify the request.
//
// A HedgingTransport is safe for concurrent use.
type HedgingTransport struct {
	base     http.RoundTripper
	policy   *hedge.Policy
	replicas []string
	target   func(*http.Request, int) *url.URL
	next     atomic.Uint64 // rotates the replicas of hedges
}

// NewHedgingTransport returns a HedgingTransport for cfg, or an error
// naming the invalid field.
func NewHedgingTransport(cfg HedgeConfig) (*HedgingTransport, error) {
	if cfg.Policy == nil {
		return nil, errors.New("watertighthttp: HedgeConfig.Policy must not be nil")
	}
	if cfg.Target != nil && len(cfg.Replicas) > 0 {
		return nil, errors.New("watertighthttp: HedgeConfig.Replicas must be empty when Target is set")
	}
	if cfg.ConnectTimeout > 0 && cfg.Base != nil {
		return nil, fmt.Errorf("watertighthttp: HedgeConfig.ConnectTimeout (%v) applies only when Base is nil: set the dial timeout of your own transport, or leave ConnectTimeout zero", cfg.ConnectTimeout)
	}
	for _, r := range cfg.Replicas {
		if r == "" {
			return nil, errors.New("watertighthttp: HedgeConfig.Replicas must not hold an empty host")
		}
	}
	t := &HedgingTransport{
		base:     cfg.Base,
		policy:   cfg.Policy,
		replicas: append([]string(nil), cfg.Replicas...),
		target:   cfg.Target,
	}
	if t.base == nil {
		ct := cfg.ConnectTimeout
		if ct == 0 {
			ct = DefaultConnectTimeout
		}
		t.base = defaultBase(ct)
	}
	return t, nil
}

// CloseIdleConnections closes the idle connections of the base transport, if
// it has the method (an *http.Transport, a Transport), so that
// http.Client.CloseIdleConnections reaches through the HedgingTransport.
func (t *HedgingTransport) CloseIdleConnections() { closeIdle(t.base) }

// hedgeable reports whether req may be sent twice.
func hedgeable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead:
		return true
	}
	return req.Header.Get(HeaderIdempotencyKey) != "" || retry.IsIdempotent(req.Context())
}

// RoundTrip implements http.RoundTripper; see HedgingTransport.
func (t *HedgingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !hedgeable(req) {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	if !retry.IsIdempotent(ctx) {
		ctx = retry.Idempotent(ctx) // hedgeable: hedge.Do may send it twice
	}
	// With a Transport whose Balancer picks the host, the attempts share
	// the hosts they went to, so that a hedge never goes where an attempt
	// of its request already is.
	h := &hedgedRequest{t: t, req: req}
	h.inUse.Context = ctx
	ctx = &h.inUse
	if len(t.replicas) > 0 {
		h.start = t.next.Add(1) - 1
	}
	resp, err := hedge.DoDiscard(ctx, t.policy, h.attempt, discardAnswer)
	if err != nil {
		if se := statusOf(err); se != nil {
			return se.Response, nil // every attempt failed: the last answer is the response
		}
		return nil, err
	}
	return resp, nil
}

// hostsInUse is the context of a hedged request's attempts: the hosts a
// Transport's Balancer sent them to (balancedAttempt.do), which the next
// attempts avoid. It is the request's context otherwise.
type hostsInUse struct {
	context.Context
	mu    sync.Mutex
	hosts []*balance.Host
	first [2]*balance.Host // hosts' first array: a request and one hedge
}

type hostsInUseKey struct{}

func (h *hostsInUse) Value(key any) any {
	if key == (hostsInUseKey{}) {
		return h
	}
	return h.Context.Value(key)
}

// hostsInUseFrom returns the hosts in use of ctx's hedged request, or nil.
func hostsInUseFrom(ctx context.Context) *hostsInUse {
	h, _ := ctx.Value(hostsInUseKey{}).(*hostsInUse)
	return h
}

// has reports whether an attempt of the request went to host.
func (h *hostsInUse) has(host *balance.Host) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.hosts, host)
}

func (h *hostsInUse) add(host *balance.Host) {
	h.mu.Lock()
	if h.hosts == nil {
		h.hosts = h.first[:0]
	}
	h.hosts = append(h.hosts, host)
	h.mu.Unlock()
}

// hedgedRequest is one request's state across its attempts.
type hedgedRequest struct {
	t     *HedgingTransport
	req   *http.Request
	start uint64 // the first replica hedges go to
	inUse hostsInUse
}

// url returns the URL of attempt n.
func (h *hedgedRequest) url(n int) *url.URL {
	if h.t.target != nil {
		if u := h.t.target(h.req, n); u != nil {
			return u
		}
		return h.req.URL
	}
	if n == 1 || len(h.t.replicas) == 0 {
		return h.req.URL
	}
	// The hedges of one request take the replicas in turn from start,
	// skipping the request's own host.
	own, others := h.req.URL.Host, 0
	for _, r := range h.t.replicas {
		if r != own {
			others++
		}
	}
	if others == 0 {
		return h.req.URL
	}
	k := int((h.start + uint64(n-2)) % uint64(others))
	for _, r := range h.t.replicas {
		if r == own {
			continue
		}
		if k == 0 {
			u := *h.req.URL
			u.Host = r
			return &u
		}
		k--
	}
	return h.req.URL // not reached
}

// attempt sends attempt n under ctx, the attempt's context, which it keeps
// alive (hedge.DeferCancel) until the answer's body is closed.
func (h *hedgedRequest) attempt(ctx context.Context, n int) (*http.Response, error) {
	release := hedge.DeferCancel(ctx)
	r := h.req.WithContext(ctx)
	r.URL = h.url(n)
	// The first attempt sends req.Body (the base transport closes it); the
	// hedges, a copy from GetBody.
	if n > 1 && h.req.Body != nil && h.req.Body != http.NoBody {
		body, err := h.req.GetBody()
		if err != nil {
			release()
			return nil, errors.New("watertighthttp: GetBody: " + err.Error())
		}
		r.Body = body
	}
	// Each attempt's header is a copy of its own: a hedge reads the
	// request's while the first attempt is sent (a base Transport with
	// OwnsRequests sets its headers in the copy it is given).
	hdr := header(h.req.Header)
	r.Header = hdr
	hdr[HeaderAttempt] = attemptValue(n)
	if hdr.Get(HeaderIdempotencyKey) == "" {
		if k, ok := retry.IdempotencyKey(ctx); ok {
			hdr.Set(HeaderIdempotencyKey, k)
		}
	}
	resp, err := h.t.base.RoundTrip(r)
	if err != nil {
		release()
		return nil, err
	}
	switch resp.Body.(type) {
	case nil:
		release()
	case io.Writer:
		// A 101 Switching Protocols: the body is the connection, left as
		// it is (and its context alive, until the request's ends).
	default:
		resp.Body = &releaseBody{ReadCloser: resp.Body, release: release}
	}
	if o, _ := ClassifyStatus(resp.StatusCode); o == watertight.Failure {
		return nil, &StatusError{Response: resp}
	}
	return resp, nil
}

// discardAnswer releases an answer the hedged request does not return.
func discardAnswer(resp *http.Response, err error) {
	drain(resp)
	if se := statusOf(err); se != nil {
		drain(se.Response)
	}
}

// releaseBody ends its attempt's context when the body is closed or read
// to its end.
type releaseBody struct {
	io.ReadCloser
	release func()
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}
