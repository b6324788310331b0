package watertighthttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
)

// HeaderIdempotentReplayed, with the value "true" on a response, says that
// the response is a replay: the stored answer to an earlier request with
// the same Idempotency-Key, which was not run again.
const HeaderIdempotentReplayed = "Idempotent-Replayed"

// Defaults of IdempotencyConfig.
const (
	// DefaultIdempotencyTTL is how long results are kept when
	// IdempotencyConfig.TTL is zero: 24 hours, as Stripe does.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultIdempotencyLockTTL is the lifetime of a claim when
	// IdempotencyConfig.LockTTL is zero.
	DefaultIdempotencyLockTTL = 30 * time.Second
	// DefaultIdempotencyMaxBytes is the request and the response body limit
	// when IdempotencyConfig.MaxRequestBytes or MaxResponseBytes is zero:
	// 1 MiB.
	DefaultIdempotencyMaxBytes = 1 << 20
	// DefaultIdempotencyStoreTimeout bounds each store call when
	// IdempotencyConfig.StoreTimeout is zero.
	DefaultIdempotencyStoreTimeout = 2 * time.Second
)

// IdempotencyConfig configures the Idempotency middleware. Scope must be
// set; every other field has a default.
type IdempotencyConfig struct {
	// Name labels the middleware's events. It may be empty.
	Name string
	// Store keeps claims and results. If nil, a new in-memory store with
	// the default bounds (idempotency.MemoryStore), which deduplicates only
	// the requests that reach this process: a service that runs as several
	// instances needs one store shared by all of them (contrib/redisstore).
	Store idempotency.Store
	// Scope returns the caller a request belongs to — the authenticated
	// user, tenant or API key — and keys are kept per scope, so that a
	// caller can never read another's stored response, by guessing a key or
	// by reusing one. It must be set: Idempotency fails without it. The
	// scope is hashed (SHA-256) before it reaches the store, so it may be a
	// secret. Requests whose Scope is "" share one scope.
	//
	// Prefer the authenticated principal (from your authentication
	// middleware, which runs before this one) over a credential: with
	// ScopeHeader("Authorization"), a client whose access token is renewed
	// between two attempts lands in a new scope, and its retry runs again.
	// SharedScope puts every caller in one scope, for services whose
	// callers trust each other.
	Scope func(*http.Request) string
	// Methods lists the methods the middleware handles; requests with
	// other methods pass through untouched, key or not. If nil, POST and
	// PATCH (the methods that are not idempotent).
	Methods []string
	// Required reports whether a request must carry a key: a request for
	// which it returns true and that has none gets 400, and is not run. If
	// nil, the key is optional: a request without one runs as usual, with
	// no deduplication.
	Required func(*http.Request) bool
	// Fingerprint identifies a request, so that a key reused for another
	// request is refused with 422. body is the whole request body. If nil,
	// idempotency.Fingerprint(r.Method, r.URL.RequestURI(), body): the
	// method, the escaped path with the query, and the body byte for byte.
	Fingerprint func(r *http.Request, body []byte) string
	// TTL is how long a result is kept, and replayed, after the request
	// that made it — and how long a key whose outcome is unknown is
	// answered so, from its claim. Zero means DefaultIdempotencyTTL (24h).
	// It must not be negative. Publish it to your clients (the draft asks
	// for it): a retry later than TTL runs the operation again.
	TTL time.Duration
	// LockTTL is how long a claim lasts if its request never finishes —
	// the process died, or the store failed while the response was saved —
	// after which the key answers "outcome unknown" (500) until TTL has
	// passed since the claim: it is never run again meanwhile. It must be
	// longer than the handler ever runs: the handler's context ends (with
	// the cause idempotency.ErrLockExpiring) when nine tenths of it have
	// passed, because past it the response can no longer be stored. Zero
	// means DefaultIdempotencyLockTTL (30s). It must not be negative.
	LockTTL time.Duration
	// MaxKeyLength bounds the key, in bytes. Zero means
	// idempotency.DefaultMaxKeyLength (255). It must not be negative.
	MaxKeyLength int
	// MaxRequestBytes bounds the request body the middleware reads to
	// fingerprint a keyed request; a larger one gets 413, and is not run.
	// Zero means DefaultIdempotencyMaxBytes (1 MiB); a negative value
	// means no limit.
	MaxRequestBytes int64
	// MaxResponseBytes bounds the response body the middleware buffers to
	// store. A response that grows past it is streamed to the client as
	// usual, but not stored: the key is marked "outcome unknown" (a retry
	// gets 500, never a second run), and the Logger and the Listener are
	// told.
	// Zero means DefaultIdempotencyMaxBytes (1 MiB); a negative value means
	// no limit.
	MaxResponseBytes int64
	// WaitInFlight makes a request that finds its key in flight wait for
	// the result and get it replayed, instead of 409 Conflict at once. It
	// polls the store, with backoff, until the result is there, or until
	// MaxWait, or the request's context, ends, and then answers 409; if the
	// claim is released meanwhile, it runs the request itself, and if the
	// claim's lock ends without a result, it answers "outcome unknown".
	WaitInFlight bool
	// MaxWait bounds the wait of WaitInFlight. Zero means LockTTL. It must
	// not be negative.
	MaxWait time.Duration
	// Release, if not nil, is asked after the handler returns whether the
	// request's key should be released instead of its response stored, so
	// that a retry runs the handler again: return true only when the
	// handler did nothing that must not be done twice (a 503 sent before
	// any work began). By default every response is stored, errors too:
	// the operation runs at most once per key. A handler can also release
	// its own key with ReleaseIdempotencyKey.
	Release func(r *http.Request, status int) bool
	// FailOpen, if not nil, is asked when the store fails, and if it
	// returns true the request runs without deduplication. Return true
	// only for routes where running a request twice is harmless. By
	// default the middleware fails closed: 503 with Retry-After: 1, a body
	// that says it is safe to retry with the same key, and nothing runs.
	FailOpen func(*http.Request) bool
	// StoreTimeout bounds each store call. Zero means
	// DefaultIdempotencyStoreTimeout (2s); a negative value means none
	// beyond the request's context (and none at all for the calls made
	// after the handler returned).
	StoreTimeout time.Duration
	// DocURL, if not empty, is the page that documents your idempotency
	// rules: error responses name it as their problem type and in a Link
	// header (rel="describedby"), as the draft suggests.
	DocURL string
	// Listener receives the middleware's events (Source "idempotency"). If
	// nil, no events.
	Listener watertight.Listener
	// Logger receives warnings: a response not stored, a store that failed
	// after the handler ran, a fail-open. If nil, slog.Default().
	Logger *slog.Logger
}

// SharedScope is an IdempotencyConfig.Scope that puts every request in one
// scope: any caller that knows (or guesses) a key gets its stored response.
// Use it only when the callers trust each other (one internal client).
func SharedScope(*http.Request) string { return "" }

// ScopeHeader returns an IdempotencyConfig.Scope that scopes keys by the
// value of the request header name (an API key header). Requests without
// the header share one scope. The value is hashed before it reaches the
// store. See IdempotencyConfig.Scope for why a credential that changes
// (a bearer token) is a poor scope.
func ScopeHeader(name string) func(*http.Request) string {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// Idempotency returns next wrapped in the server side of idempotency keys
// (draft-ietf-httpapi-idempotency-key-header). Place it after
// authentication (Scope needs the caller) and after admission: in the
// documented order, Handler(Idempotency(app)).
//
// For a request with a method of Config.Methods (POST and PATCH by
// default) that carries an Idempotency-Key, it:
//
//  1. reads the key (idempotency.ParseKeyMax: a Structured-Field String,
//     or leniently a bare token) and the body (up to MaxRequestBytes), and
//     computes the request's fingerprint;
//  2. claims the key, scoped by Scope, in the Store;
//  3. if it got the claim, runs next with the body, buffers the response
//     (up to MaxResponseBytes), stores it for TTL, and sends it;
//  4. if the key has a result, replays it: same status, headers and body,
//     plus Idempotent-Replayed: true; nothing runs;
//  5. if the key is in flight, answers 409 Conflict with Retry-After: 1, or
//     with WaitInFlight waits for the result and replays it.
//
// # Answers of its own
//
// Each is an RFC 9457 problem (application/problem+json, with a "title" and
// a "detail" that says what to do), Cache-Control: no-store, and an
// EventRejected whose Err matches the idempotency error in brackets:
//
//   - 400 Bad Request: the key is missing where Required, malformed, too
//     long, or sent twice [ErrKeyMissing, ErrInvalidKey];
//   - 409 Conflict, Retry-After: 1: a request with the key is in flight
//     [ErrInFlight]; retry later with the same key;
//   - 413 Content Too Large: the body is over MaxRequestBytes
//     [ErrRequestTooLarge];
//   - 422 Unprocessable Content: the key was used for a different request
//     (fingerprint) [ErrMismatch]; nothing ran;
//   - 503 Service Unavailable, Retry-After: 1: the store failed, so nothing
//     ran (fail closed, unless FailOpen) [ErrStoreUnavailable]; the body
//     says it is safe to retry with the same key. It does not carry
//     HeaderOverloaded: a Transport retries it.
//   - 500 Internal Server Error, Idempotency-Outcome: unknown: an earlier
//     request with the key may have been applied, and its outcome was not
//     recorded [ErrOutcomeUnknown]; nothing ran for this request. The body
//     says to check the resource (GET it) before sending the request again
//     with a new key; the same key gets the same answer until TTL has
//     passed since the first request.
//   - 410 Gone, Idempotency-Outcome: forgotten: the key's response was
//     dropped early to make room in the store, so it cannot be replayed
//     [ErrForgotten]; nothing ran.
//
// # What is stored
//
// The status, the headers as they were when the handler wrote the status
// (less hop-by-hop fields, Content-Length, Date and trailers) and the body,
// whatever the status: a 500 is replayed like a 201, because the draft asks
// it and because a handler that failed half-way may have done something
// that must not be done twice.
//
// At most once per key: once the handler has started, its key is never
// handed to another request while the key is remembered (TTL). A key is
// released, so that a retry runs again, only on the handler's word: when it
// calls ReleaseIdempotencyKey or Release says so. When the response cannot
// be stored — it outgrew MaxResponseBytes, the store refused it as too
// large or full, or the handler panicked (the panic goes on) — the key is
// marked "outcome unknown" instead; when the store fails while the response
// is saved, the response still goes to the client and the claim is left
// held: a retry gets 409 until LockTTL, then "outcome unknown". See
// docs/idempotency.md.
//
// The response is buffered, so the client receives it after the handler
// returns and its result is stored (Flush does nothing until the response
// outgrows MaxResponseBytes). Hijacking is not supported.
//
// The returned handler is safe for concurrent use. NewIdempotencyHandler
// fails, naming the field, when next is nil, Scope is nil, or a field is
// invalid.
func NewIdempotencyHandler(next http.Handler, cfg IdempotencyConfig) (http.Handler, error) {
	if next == nil {
		return nil, errors.New("watertighthttp: NewIdempotencyHandler: next must not be nil")
	}
	mw, err := NewIdempotencyMiddleware(cfg)
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}

// NewIdempotencyMiddleware is NewIdempotencyHandler in the shape of the
// standard middleware chains: it validates cfg once, up front, and returns a
// function that wraps a handler and cannot fail. Every handler it wraps
// shares one Store (with Store nil, one new in-memory store for all of
// them). The function panics if given a nil handler, as http.Handle does.
func NewIdempotencyMiddleware(cfg IdempotencyConfig) (func(http.Handler) http.Handler, error) {
	if cfg.Scope == nil {
		return nil, errors.New("watertighthttp: IdempotencyConfig.Scope must be set: it keeps each caller's keys apart, so that no caller reads another's stored responses; " +
			"return the authenticated user, tenant or API key, or use SharedScope when every caller may see every response")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
		zero string
	}{{"TTL", cfg.TTL, "24h"}, {"LockTTL", cfg.LockTTL, "30s"}, {"MaxWait", cfg.MaxWait, "LockTTL"}} {
		if f.d < 0 {
			return nil, fmt.Errorf("watertighthttp: IdempotencyConfig.%s must be >= 0 (0 means %s), got %v", f.name, f.zero, f.d)
		}
	}
	if cfg.MaxKeyLength < 0 {
		return nil, fmt.Errorf("watertighthttp: IdempotencyConfig.MaxKeyLength must be >= 0 (0 means %d), got %d", idempotency.DefaultMaxKeyLength, cfg.MaxKeyLength)
	}
	h := &idemHandler{
		name:        cfg.Name,
		store:       cfg.Store,
		scope:       cfg.Scope,
		required:    cfg.Required,
		fingerprint: cfg.Fingerprint,
		ttl:         cfg.TTL,
		lockTTL:     cfg.LockTTL,
		maxKey:      cfg.MaxKeyLength,
		maxReq:      cfg.MaxRequestBytes,
		maxResp:     cfg.MaxResponseBytes,
		wait:        cfg.WaitInFlight,
		maxWait:     cfg.MaxWait,
		release:     cfg.Release,
		failOpen:    cfg.FailOpen,
		storeTO:     cfg.StoreTimeout,
		docURL:      cfg.DocURL,
		listener:    cfg.Listener,
		logger:      cfg.Logger,
	}
	if h.store == nil {
		s, err := idempotency.NewMemoryStore(idempotency.DefaultMemoryConfig())
		if err != nil {
			return nil, fmt.Errorf("watertighthttp: IdempotencyConfig.Store: default store: %w", err)
		}
		h.store = s
	}
	if cfg.Methods == nil {
		h.methods = []string{http.MethodPost, http.MethodPatch}
	} else {
		for _, m := range cfg.Methods {
			if m == "" {
				return nil, errors.New("watertighthttp: IdempotencyConfig.Methods must not hold an empty method")
			}
		}
		h.methods = append([]string(nil), cfg.Methods...)
	}
	if h.fingerprint == nil {
		h.fingerprint = func(r *http.Request, body []byte) string {
			return idempotency.Fingerprint(r.Method, r.URL.RequestURI(), body)
		}
	}
	if h.ttl == 0 {
		h.ttl = DefaultIdempotencyTTL
	}
	if h.lockTTL == 0 {
		h.lockTTL = DefaultIdempotencyLockTTL
	}
	if h.maxWait == 0 {
		h.maxWait = h.lockTTL
	}
	if h.maxKey == 0 {
		h.maxKey = idempotency.DefaultMaxKeyLength
	}
	if h.maxReq == 0 {
		h.maxReq = DefaultIdempotencyMaxBytes
	}
	if h.maxResp == 0 {
		h.maxResp = DefaultIdempotencyMaxBytes
	}
	if h.storeTO == 0 {
		h.storeTO = DefaultIdempotencyStoreTimeout
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("watertighthttp: the middleware of NewIdempotencyMiddleware was given a nil handler")
		}
		h2 := *h
		h2.next = next
		return &h2
	}, nil
}

type idemHandler struct {
	next        http.Handler
	name        string
	store       idempotency.Store
	scope       func(*http.Request) string
	methods     []string
	required    func(*http.Request) bool
	fingerprint func(*http.Request, []byte) string
	ttl         time.Duration
	lockTTL     time.Duration
	maxKey      int
	maxReq      int64 // < 0: no limit
	maxResp     int64 // < 0: no limit
	wait        bool
	maxWait     time.Duration
	release     func(*http.Request, int) bool
	failOpen    func(*http.Request) bool
	storeTO     time.Duration // < 0: none
	docURL      string
	listener    watertight.Listener
	logger      *slog.Logger
}

func (h *idemHandler) handles(method string) bool {
	for _, m := range h.methods {
		if m == method {
			return true
		}
	}
	return false
}

// storeCtx returns the context of a store call made for a request whose
// context is parent: bounded by StoreTimeout.
func (h *idemHandler) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if h.storeTO < 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, h.storeTO)
}

func (h *idemHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.handles(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	vals := r.Header.Values(HeaderIdempotencyKey)
	if len(vals) == 0 {
		if h.required != nil && h.required(r) {
			h.problem(w, r, http.StatusBadRequest, idempotency.CodeKeyMissing, "Idempotency-Key is missing",
				"This operation requires an Idempotency-Key header. Make one random key per operation (a UUID), "+
					`send it as a quoted string, for example Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324", `+
					"and send the same key on every retry of that operation.",
				idempotency.ErrKeyMissing, false)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	if len(vals) > 1 {
		h.problem(w, r, http.StatusBadRequest, idempotency.CodeInvalidKey, "Idempotency-Key is invalid",
			fmt.Sprintf("The request carries %d Idempotency-Key header fields; send exactly one.", len(vals)),
			idempotency.ErrInvalidKey, false)
		return
	}
	key, err := idempotency.ParseKeyMax(vals[0], h.maxKey)
	if err != nil {
		h.problem(w, r, http.StatusBadRequest, idempotency.CodeInvalidKey, "Idempotency-Key is invalid",
			strings.TrimPrefix(err.Error(), "idempotency: ")+".",
			fmt.Errorf("%w: %w", idempotency.ErrInvalidKey, err), false)
		return
	}
	body, err := h.readBody(r)
	if err != nil {
		if errors.Is(err, idempotency.ErrRequestTooLarge) {
			h.problem(w, r, http.StatusRequestEntityTooLarge, idempotency.CodeRequestTooLarge, "Request body too large",
				fmt.Sprintf("A request with an Idempotency-Key may have a body of at most %d bytes.", h.maxReq), err, false)
			return
		}
		h.problem(w, r, http.StatusBadRequest, idempotency.CodeBodyUnreadable, "Request body could not be read",
			"The request body could not be read; nothing was done.", err, false)
		return
	}
	r = r.WithContext(r.Context()) // a shallow copy, not to change the caller's request
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp := h.fingerprint(r, body)
	skey := idempotency.ScopedKey(h.scope(r), key)

	c, err := h.claim(r.Context(), skey, fp)
	if err == nil && c.State == idempotency.InFlight && h.wait && c.Fingerprint == fp {
		c, err = h.waitInFlight(r.Context(), skey, fp)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone: nothing ran, and nobody to tell
		}
		h.storeFailed(w, r, err)
		return
	}
	switch idempotency.Resolve(c, fp) {
	case idempotency.Run:
		h.run(w, r, key, skey, fp, c.Token)
	case idempotency.Replay:
		writeRecord(w, c.Record, true)
		watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventReplayed, Source: "idempotency", Name: h.name, Key: defaultRoute(r),
			Reason: "replayed the stored response (status " + strconv.Itoa(c.Record.Status) + ")"})
	case idempotency.Mismatch:
		h.mismatch(w, r)
	case idempotency.Wait:
		detail := "A request with the same Idempotency-Key is still being processed. Retry later with the same key to get its result."
		if h.wait {
			detail = "A request with the same Idempotency-Key is still being processed; this request waited for its result and gave up. Retry later with the same key to get it."
		}
		h.problem(w, r, http.StatusConflict, idempotency.CodeInFlight, "A request is outstanding for this Idempotency-Key", detail, idempotency.ErrInFlight, true)
	case idempotency.AnswerUnknown:
		w.Header().Set(idempotency.HeaderOutcome, idempotency.OutcomeUnknown)
		h.problem(w, r, http.StatusInternalServerError, idempotency.CodeOutcomeUnknown, "Outcome unknown for this Idempotency-Key", unknownDetail, idempotency.ErrOutcomeUnknown, false)
	case idempotency.AnswerForgotten:
		w.Header().Set(idempotency.HeaderOutcome, idempotency.OutcomeForgotten)
		h.problem(w, r, http.StatusGone, idempotency.CodeForgotten, "Idempotency-Key too old to be replayed",
			"This Idempotency-Key is too old to be replayed: its request was processed, but its stored response was dropped early to make room; "+
				"this request was not processed: nothing was done. Check the resource (for example, GET it) for the outcome; "+
				"use a new key only for a new operation.",
			idempotency.ErrForgotten, false)
	default:
		if c.State == idempotency.Completed && c.Record == nil {
			h.storeFailed(w, r, errors.New("the store answered completed without a record"))
			return
		}
		h.storeFailed(w, r, fmt.Errorf("the store answered an unknown claim state %d", c.State))
	}
}

// unknownDetail is the detail of the answer to a key whose outcome is
// unknown.
const unknownDetail = "A request with this Idempotency-Key may have been applied, but its outcome was not recorded " +
	"(the server failed while saving it), so it cannot be replayed; this request was not processed: nothing was done. " +
	"Check the resource (for example, GET it) before sending the request again, and if it was not applied, send it with a NEW Idempotency-Key: " +
	"the same key gets this answer again."

func (h *idemHandler) mismatch(w http.ResponseWriter, r *http.Request) {
	h.problem(w, r, http.StatusUnprocessableEntity, idempotency.CodeMismatch, "Idempotency-Key is already used",
		"This Idempotency-Key was used for a different request (another method, path or body); nothing was done. "+
			"Use a new key for a new operation, and the same request for the same key.",
		idempotency.ErrMismatch, false)
}

// readBody reads the request body, up to MaxRequestBytes.
func (h *idemHandler) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if h.maxReq >= 0 && r.ContentLength > h.maxReq {
		return nil, idempotency.ErrRequestTooLarge
	}
	rd := io.Reader(r.Body)
	if h.maxReq >= 0 {
		rd = io.LimitReader(r.Body, h.maxReq+1)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(rd); err != nil {
		return nil, err
	}
	if h.maxReq >= 0 && int64(buf.Len()) > h.maxReq {
		return nil, idempotency.ErrRequestTooLarge
	}
	return buf.Bytes(), nil
}

func (h *idemHandler) claim(ctx context.Context, skey, fp string) (idempotency.Claim, error) {
	ctx, cancel := h.storeCtx(ctx)
	defer cancel()
	return h.store.Claim(ctx, skey, fp, h.lockTTL, h.ttl)
}

// waitInFlight polls the store, with exponential backoff and jitter (5ms
// doubling up to 250ms), until the key is no longer in flight, MaxWait has
// passed, or ctx ends; it then returns the last claim (in flight if it gave
// up) (idempotency.WaitWhileInFlight).
func (h *idemHandler) waitInFlight(ctx context.Context, skey, fp string) (idempotency.Claim, error) {
	return idempotency.WaitWhileInFlight(ctx, time.Now().Add(h.maxWait), fp, func(ctx context.Context) (idempotency.Claim, error) {
		return h.claim(ctx, skey, fp)
	})
}

// storeFailed answers a request whose claim failed: fail closed (503), or
// run it without deduplication when FailOpen says so.
func (h *idemHandler) storeFailed(w http.ResponseWriter, r *http.Request, err error) {
	if h.failOpen != nil && h.failOpen(r) {
		h.logger.Warn("watertighthttp: idempotency store failed; running the request without deduplication (FailOpen)",
			"name", h.name, "route", defaultRoute(r), "error", err)
		watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventFallbackUsed, Source: "idempotency", Name: h.name, Key: defaultRoute(r),
			Reason: "fail open: the store failed, the request ran without deduplication", Err: fmt.Errorf("%w: %w", idempotency.ErrStoreUnavailable, err),
			Code: idempotency.CodeFailOpen})
		h.next.ServeHTTP(w, r)
		return
	}
	h.problem(w, r, http.StatusServiceUnavailable, idempotency.CodeStoreUnavailable, "Idempotency store unavailable",
		"The server could not check the Idempotency-Key, so the request was not processed: nothing was done. "+
			"It is safe to retry the request with the same Idempotency-Key.",
		fmt.Errorf("%w: %w", idempotency.ErrStoreUnavailable, err), true)
}

// idemState is what the middleware puts on the context of a request it
// runs: the key, and whether the handler asked to release it.
type idemState struct {
	key     string
	release atomic.Bool
}

type idemStateKey struct{}

// IdempotencyKeyFrom returns the Idempotency-Key of the request whose
// context is ctx, when the Idempotency middleware is running it under a
// claim: a handler can pass it on to its own dependencies (a payment
// provider's idempotency key).
func IdempotencyKeyFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(idemStateKey{}).(*idemState)
	if !ok {
		return "", false
	}
	return s.key, true
}

// ReleaseIdempotencyKey asks the Idempotency middleware, from the handler
// of a request it runs under a claim (ctx is the request's context), to
// release the key when the handler returns instead of storing the response:
// the response still goes to the client, and a retry with the key runs the
// handler again. Call it only when the handler did nothing that must not be
// done twice — it failed before starting the work (a dependency was down).
// It reports whether ctx belongs to such a request.
func ReleaseIdempotencyKey(ctx context.Context) bool {
	s, ok := ctx.Value(idemStateKey{}).(*idemState)
	if ok {
		s.release.Store(true)
	}
	return ok
}

// run runs the handler under the claim tok and stores its response. Once
// the handler has started, the claim is never released but on the
// handler's word (ReleaseIdempotencyKey, Release): the response is stored,
// or the marker "outcome unknown" (idempotency.Save), or, when the store
// fails, the claim is left to end as Unknown.
func (h *idemHandler) run(w http.ResponseWriter, r *http.Request, key, skey, fp, tok string) {
	st := &idemState{key: key}
	ctx := context.WithValue(r.Context(), idemStateKey{}, st)
	ctx, cancel := context.WithTimeoutCause(ctx, h.lockTTL-h.lockTTL/10, idempotency.ErrLockExpiring)
	defer cancel()
	rec := &idemRecorder{w: w, header: make(http.Header), max: h.maxResp}

	finished := false
	defer func() {
		if !finished { // a panic (or runtime.Goexit): the handler may have done its work
			h.save(r, key, skey, fp, tok, nil, "the handler panicked")
		}
	}()
	h.next.ServeHTTP(rec, r.WithContext(ctx))
	finished = true

	rec.finish()
	if rec.streamed {
		rec.flushTrailers()
		h.save(r, key, skey, fp, tok, nil, fmt.Sprintf("the response body was larger than MaxResponseBytes (%d bytes): sent, not stored", h.maxResp))
		return
	}
	if st.release.Load() || (h.release != nil && h.release(r, rec.status)) {
		h.releaseClaim(r, skey, tok, "the handler asked for the key to be released (status "+strconv.Itoa(rec.status)+")", nil)
		rec.send()
		return
	}
	stored := idempotency.Record{
		Fingerprint: fp,
		Status:      rec.status,
		Header:      storedHeader(rec.snap),
		Body:        rec.buf.Bytes(),
		Created:     time.Now(),
	}
	h.save(r, key, skey, fp, tok, &stored, "")
	rec.send()
}

// save stores the handler's result, or the marker "outcome unknown" when
// stored is nil (why says why) or the store refuses it, and logs and emits
// what was not stored.
func (h *idemHandler) save(r *http.Request, key, skey, fp, tok string, stored *idempotency.Record, why string) {
	ctx, cancel := h.storeCtx(context.WithoutCancel(r.Context()))
	saved, err := idempotency.Save(ctx, h.store, skey, tok, fp, stored, h.ttl)
	cancel()
	attrs := []any{"name", h.name, "route", defaultRoute(r), "key", key}
	if why != "" {
		attrs = append(attrs, "reason", why)
	}
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	var to, reason string
	switch saved {
	case idempotency.SavedResult:
		return
	case idempotency.SavedUnknown:
		to, reason = "unknown", "the response was not stored (outcome unknown): "
		if why == "" {
			why = "the store refused the response"
		}
		h.logger.Warn("watertighthttp: idempotency response not stored; the key answers \"outcome unknown\" until its TTL ends", attrs...)
	case idempotency.NotSaved:
		to, reason = "unsaved", "the store failed after the handler ran; the key stays claimed, then reads unknown: "
		if why == "" {
			why = "the store could not keep the response"
		}
		h.logger.Error("watertighthttp: idempotency response not stored, the store failed: the key is held until its LockTTL, then answers \"outcome unknown\"", attrs...)
	case idempotency.LockLost:
		to, reason = "expired", "the claim's lock ended before the handler finished; the response was not stored: "
		if why == "" {
			why = "raise LockTTL above the handler's longest run"
		}
		h.logger.Error("watertighthttp: idempotency claim's lock ended before the handler finished: the response was not stored and the key answers \"outcome unknown\"; raise LockTTL above the handler's longest run",
			append(attrs, "lock_ttl", h.lockTTL)...)
	}
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventStateChange, Source: "idempotency", Name: h.name, Key: defaultRoute(r),
		From: "claimed", To: to, Reason: reason + why, Err: err, Code: saved.Code()})
}

// releaseClaim releases the claim tok, and logs and emits why: only when
// the handler said it did nothing that must not be done twice.
func (h *idemHandler) releaseClaim(r *http.Request, skey, tok, why string, cause error) {
	ctx, cancel := h.storeCtx(context.WithoutCancel(r.Context()))
	err := h.store.Release(ctx, skey, tok)
	cancel()
	attrs := []any{"name", h.name, "route", defaultRoute(r), "reason", why}
	if cause != nil {
		attrs = append(attrs, "error", cause)
	}
	if err != nil && !errors.Is(err, idempotency.ErrNotOwner) {
		attrs = append(attrs, "release_error", err)
		h.logger.Warn("watertighthttp: idempotency key not released: a retry gets 409 until the claim's LockTTL passes, then \"outcome unknown\"", attrs...)
	} else {
		h.logger.Warn("watertighthttp: idempotency key released without a stored response: a retry runs again", attrs...)
	}
	if cause == nil {
		cause = err
	}
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventStateChange, Source: "idempotency", Name: h.name, Key: defaultRoute(r),
		From: "claimed", To: "released", Reason: why, Err: cause, Code: idempotency.CodeReleased})
}

// problem writes an RFC 9457 problem and emits the rejection.
func (h *idemHandler) problem(w http.ResponseWriter, r *http.Request, status int, code, title, detail string, err error, retryAfter bool) {
	hd := w.Header()
	hd.Set("Content-Type", "application/problem+json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if h.docURL != "" {
		hd.Set("Link", "<"+h.docURL+`>; rel="describedby"`)
	}
	if retryAfter {
		hd.Set("Retry-After", "1")
	}
	body, _ := json.Marshal(struct {
		Type   string `json:"type,omitempty"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{h.docURL, title, status, detail})
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventRejected, Source: "idempotency", Name: h.name, Key: defaultRoute(r),
		Reason: title, Err: err, Code: code})
}

// writeRecord sends a stored response.
func writeRecord(w http.ResponseWriter, rec *idempotency.Record, replayed bool) {
	hd := w.Header()
	for k, vs := range rec.Header {
		hd[k] = vs
	}
	if replayed {
		hd.Set(HeaderIdempotentReplayed, "true")
	}
	if bodyAllowed(rec.Status) {
		hd.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	if bodyAllowed(rec.Status) {
		_, _ = w.Write(rec.Body)
	}
}

// bodyAllowed reports whether a response with status may have a body
// (RFC 9110: not 1xx, 204 or 304).
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}

// storedHeader returns the part of h that is replayed: without hop-by-hop
// fields, framing (Content-Length, Transfer-Encoding), Date (each response
// gets its own) and trailers.
func storedHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	drop := map[string]bool{}
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				drop[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	for k, vs := range h {
		switch k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer",
			"Content-Length", "Date", HeaderIdempotentReplayed:
			continue
		}
		if drop[k] || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		out[k] = vs
	}
	return out
}

// idemRecorder buffers a handler's response. The handler writes its
// headers into a map of its own; the status and a copy of the headers are
// taken at WriteHeader, as net/http does. When the body outgrows max, what
// was buffered is sent and the rest streams through (streamed).
type idemRecorder struct {
	w        http.ResponseWriter
	header   http.Header
	max      int64 // < 0: no limit
	status   int   // 0 until the status is written
	snap     http.Header
	buf      bytes.Buffer
	streamed bool
}

func (rec *idemRecorder) Header() http.Header { return rec.header }

func (rec *idemRecorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	if rec.status != 0 {
		return // superfluous
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational response (103 Early Hints) goes out at once,
		// and is not stored.
		hd := rec.w.Header()
		for k, vs := range rec.header {
			hd[k] = vs
		}
		rec.w.WriteHeader(code)
		return
	}
	rec.status = code
	rec.snap = rec.header.Clone()
}

func (rec *idemRecorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(rec.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if rec.streamed {
		return rec.w.Write(p)
	}
	if rec.max >= 0 && int64(rec.buf.Len()+len(p)) > rec.max {
		rec.stream()
		return rec.w.Write(p)
	}
	return rec.buf.Write(p)
}

// Flush sends nothing while the response is buffered (it is sent when the
// handler returns and the result is stored); once it streams, it flushes.
func (rec *idemRecorder) Flush() {
	if rec.streamed {
		_ = http.NewResponseController(rec.w).Flush()
	}
}

// SetReadDeadline lets http.ResponseController reach the connection's
// read deadline.
func (rec *idemRecorder) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(rec.w).SetReadDeadline(t)
}

// SetWriteDeadline lets http.ResponseController reach the connection's
// write deadline.
func (rec *idemRecorder) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(rec.w).SetWriteDeadline(t)
}

// stream sends the status, the headers and what was buffered, and lets
// the rest of the body through.
func (rec *idemRecorder) stream() {
	rec.streamed = true
	hd := rec.w.Header()
	for k, vs := range rec.snap {
		hd[k] = vs
	}
	rec.w.WriteHeader(rec.status)
	_, _ = rec.w.Write(rec.buf.Bytes())
	rec.buf = bytes.Buffer{}
}

// finish completes the response after the handler returned: the status
// (200 if none was written) and the Content-Type net/http would have sniffed.
func (rec *idemRecorder) finish() {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.streamed {
		return
	}
	if _, ok := rec.snap["Content-Type"]; !ok && rec.buf.Len() > 0 && rec.snap.Get("Transfer-Encoding") == "" && bodyAllowed(rec.status) {
		b := rec.buf.Bytes()
		rec.snap.Set("Content-Type", http.DetectContentType(b[:min(len(b), 512)]))
	}
}

// send sends the buffered response to the client, then the trailers.
func (rec *idemRecorder) send() {
	hd := rec.w.Header()
	for k, vs := range rec.snap {
		hd[k] = vs
	}
	if bodyAllowed(rec.status) && rec.snap.Get("Transfer-Encoding") == "" {
		hd.Set("Content-Length", strconv.Itoa(rec.buf.Len()))
	}
	rec.w.WriteHeader(rec.status)
	if rec.buf.Len() > 0 {
		_, _ = rec.w.Write(rec.buf.Bytes())
	}
	rec.flushTrailers()
}

// flushTrailers passes on the trailers the handler set: the fields its
// Trailer header announced, and those named with http.TrailerPrefix.
func (rec *idemRecorder) flushTrailers() {
	hd := rec.w.Header()
	for _, v := range rec.snap.Values("Trailer") {
		for f := range strings.SplitSeq(v, ",") {
			if f = http.CanonicalHeaderKey(strings.TrimSpace(f)); f != "" {
				if vs, ok := rec.header[f]; ok {
					hd[f] = vs
				}
			}
		}
	}
	for k, vs := range rec.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			hd[k] = vs
		}
	}
}

// EnsureIdempotencyKey returns req marked as one logical operation: a new
// random key (idempotency.NewKey) in its Idempotency-Key header, in the
// draft's quoted form, and on its context (retry.WithIdempotencyKey), so
// that a Transport, and any retry policy around the call, retry it, and the
// server runs it once. A request whose header has a key is returned as it
// is; one whose context has a key (retry.WithIdempotencyKey) gets that key
// in its header.
//
// The rule: one key per logical operation, the same key on every attempt.
// Call EnsureIdempotencyKey once per operation and send the returned request
// (or requests carrying its key) for every attempt; calling it again for a
// retry makes the retry a new operation. The returned request shares
// everything with req but its header, which is a copy, and its context.
func EnsureIdempotencyKey(req *http.Request) *http.Request {
	if req.Header.Get(HeaderIdempotencyKey) != "" {
		return req
	}
	ctx := req.Context()
	key, ok := retry.IdempotencyKey(ctx)
	if !ok {
		key = idempotency.NewKey()
		ctx = retry.WithIdempotencyKey(ctx, key)
	}
	r2 := req.WithContext(ctx)
	r2.Header = req.Header.Clone()
	if r2.Header == nil {
		r2.Header = make(http.Header)
	}
	r2.Header.Set(HeaderIdempotencyKey, idempotency.FormatKey(key))
	return r2
}
