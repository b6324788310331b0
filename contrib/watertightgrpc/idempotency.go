package watertightgrpc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/watertighthttp"
)

// MetadataIdempotentReplayed, with the value "true" in the header and the
// trailer of an answer, says that the answer is a replay: the stored answer
// to an earlier call with the same idempotency key, which was not run
// again. It is the gRPC form of watertighthttp.HeaderIdempotentReplayed.
const MetadataIdempotentReplayed = "idempotent-replayed"

// PushbackRetrySoon is the value of MetadataPushback that the idempotency
// interceptor sends when it asks for the call to be retried with the same
// key a little later: the store was unavailable, or (with
// IdempotencyConfig.InFlightCode codes.Unavailable) a call with the key was
// still running. It is the gRPC form of the HTTP middleware's
// Retry-After: 1.
const PushbackRetrySoon = "1000"

// IdempotencyConfig configures IdempotencyUnaryServerInterceptor. Scope must
// be set; every other field has a default. The interceptor keeps the
// semantics of watertighthttp.Idempotency, mapped to gRPC status codes (see
// IdempotencyUnaryServerInterceptor).
type IdempotencyConfig struct {
	// Name labels the interceptor's events. It may be empty.
	Name string
	// Store keeps claims and results. If nil, a new in-memory store with
	// the default bounds (idempotency.MemoryStore), which deduplicates only
	// the calls that reach this process: a service that runs as several
	// instances needs one store shared by all of them (contrib/redisstore). A
	// store may be shared with watertighthttp.Idempotency: a key used over
	// HTTP and over gRPC is one key, and the second use is refused as a
	// different request.
	Store idempotency.Store
	// Scope returns the caller a call belongs to — the authenticated user,
	// tenant or API key, which an authentication interceptor placed before
	// this one put on the context — and keys are kept per scope, so that a
	// caller can never read another's stored answer, by guessing a key or
	// by reusing one. It must be set: the constructor fails without it.
	// The scope is hashed (SHA-256) before it reaches the store, as
	// watertighthttp does, so it may be a secret. Calls whose Scope is ""
	// share one scope. ScopeMetadata scopes by a metadata value (an API
	// key); SharedScope puts every caller in one scope. Avoid the peer's
	// address: a client that reconnects for its retry arrives from another
	// port, or another address, and its retry runs again.
	Scope func(ctx context.Context) string
	// Methods lists the methods the interceptor handles, in the style of a
	// gRPC service config (as ClientConfig.Idempotent): a full method name
	// "/package.Service/Method", or "/package.Service/*" (or
	// "/package.Service/") for every method of a service. Calls to other
	// methods pass through untouched, key or not. If nil (and Handles is
	// nil), every unary method: a call that carries a key is deduplicated,
	// one without runs as usual unless Required says otherwise. An empty,
	// non-nil list handles no method.
	Methods []string
	// Handles, if not nil, decides instead of Methods which methods the
	// interceptor handles, from the full method name. Set Methods or
	// Handles, not both.
	Handles func(fullMethod string) bool
	// Required reports whether a call must carry a key: a call of a handled
	// method for which it returns true and that has none is answered
	// INVALID_ARGUMENT, and not run. If nil, the key is optional: a call
	// without one runs as usual, with no deduplication.
	Required func(ctx context.Context, fullMethod string) bool
	// Fingerprint identifies a call, so that a key reused for another call
	// is refused with FAILED_PRECONDITION. If nil, DefaultFingerprint: the
	// full method and the request message in proto's deterministic
	// encoding, which needs the request to be a proto.Message.
	Fingerprint func(fullMethod string, req any) (string, error)
	// TTL is how long a result is kept, and replayed, after the call that
	// made it — and how long a key whose outcome is unknown is answered
	// so, from its claim. Zero means watertighthttp.DefaultIdempotencyTTL (24h). It
	// must not be negative. Publish it to your clients: a retry later than
	// TTL runs the operation again.
	TTL time.Duration
	// LockTTL is how long a claim lasts if its call never finishes — the
	// process died, or the store failed while the result was saved — after
	// which the key answers "outcome unknown" (DATA_LOSS) until TTL has
	// passed since the claim: it is never run again meanwhile. It must be
	// longer than the handler ever runs: the handler's context ends (with
	// the cause idempotency.ErrLockExpiring) when nine tenths of it have
	// passed, because past it the result can no longer be stored. Zero means watertighthttp.DefaultIdempotencyLockTTL (30s). It
	// must not be negative.
	LockTTL time.Duration
	// MaxKeyLength bounds the key, in bytes. Zero means
	// idempotency.DefaultMaxKeyLength (255). It must not be negative.
	MaxKeyLength int
	// MaxResponseBytes bounds the stored result: the reply message (or the
	// error's status) and, with KeepMetadata, the metadata. A larger one is
	// sent to the client as usual, but not stored: the key is marked
	// "outcome unknown" (a retry gets DATA_LOSS, never a second run), and
	// the Logger and the Listener are told. Zero
	// means watertighthttp.DefaultIdempotencyMaxBytes (1 MiB); a negative
	// value means no limit.
	MaxResponseBytes int
	// InFlightCode is the status code of a call that finds its key held by
	// a call still running (and, with WaitInFlight, waited in vain):
	// codes.Aborted or codes.Unavailable. Zero (codes.OK) means
	// codes.Aborted, the gRPC mapping of HTTP's 409 Conflict, which no
	// layer retries by itself (ClassifyCode: the client should retry "at a
	// higher level", with the same key). codes.Unavailable comes with the
	// trailer grpc-retry-pushback-ms: 1000, so that a retrying client
	// (watertight's, or gRPC's own retry policy) retries it after a
	// second, with the same key, and gets the result.
	InFlightCode codes.Code
	// WaitInFlight makes a call that finds its key in flight wait for the
	// result and get it replayed, instead of InFlightCode at once. It polls
	// the store, with backoff, until the result is there, or until MaxWait,
	// or the call's context, ends, and then answers InFlightCode; if the
	// claim is released meanwhile, it runs the call itself, and if the
	// claim's lock ends without a result, it answers "outcome unknown".
	WaitInFlight bool
	// MaxWait bounds the wait of WaitInFlight. Zero means LockTTL. It must
	// not be negative.
	MaxWait time.Duration
	// Release, if not nil, is asked after the handler returns (err is its
	// error, nil on success) whether the key should be released instead of
	// the result stored, so that a retry runs the handler again: return
	// true only when the handler did nothing that must not be done twice
	// (an UNAVAILABLE returned before any work began). By default every
	// result is stored, errors too: the operation runs at most once per
	// key. A handler can also release its own key with
	// ReleaseIdempotencyKey.
	Release func(ctx context.Context, fullMethod string, err error) bool
	// FailOpen, if not nil, is asked when the store fails, and if it
	// returns true the call runs without deduplication. Return true only
	// for methods where running a call twice is harmless. By default the
	// interceptor fails closed: UNAVAILABLE with the pushback
	// PushbackRetrySoon, a message that says it is safe to retry with the
	// same key, and nothing runs.
	FailOpen func(ctx context.Context, fullMethod string) bool
	// KeepMetadata makes the interceptor record the header and trailer
	// metadata that the handler sets (grpc.SetHeader, grpc.SendHeader,
	// grpc.SetTrailer) with the result, and replay them. It does so by
	// wrapping the call's grpc.ServerTransportStream, which makes
	// grpc.SetSendCompressor and grpc.ClientSupportedCompressors fail in
	// the handler. If false, a replay carries the reply (or the status,
	// with its details) and MetadataIdempotentReplayed, and none of the
	// first answer's metadata.
	KeepMetadata bool
	// StoreTimeout bounds each store call. Zero means
	// watertighthttp.DefaultIdempotencyStoreTimeout (2s); a negative value
	// means none beyond the call's context (and none at all for the calls
	// made after the handler returned).
	StoreTimeout time.Duration
	// Listener receives the interceptor's events, with Source "grpc", Name
	// this Name and Key the full method: EventReplayed for a replay,
	// EventRejected for a call refused without running (Err matches an
	// idempotency error, or says why the request could not be
	// fingerprinted or the stored result decoded), EventStateChange from
	// "claimed" to "released" (the handler's word), "unknown" (the result
	// not kept, the marker stored), "unsaved" (the store failed) or
	// "expired" (the lock ended first), EventFallbackUsed for a fail-open. If
	// nil, no events.
	Listener watertight.Listener
	// Logger receives warnings: a result not stored, a store that failed
	// after the handler ran, a fail-open. If nil, slog.Default().
	Logger *slog.Logger
}

// SharedScope is an IdempotencyConfig.Scope that puts every call in one
// scope: any caller that knows (or guesses) a key gets its stored answer.
// Use it only when the callers trust each other (one internal client).
func SharedScope(context.Context) string { return "" }

// ScopeMetadata returns an IdempotencyConfig.Scope that scopes keys by the
// first value of the incoming metadata key (an API key: "x-api-key"); calls
// without it share one scope. The value is hashed before it reaches the
// store. A credential that changes between attempts (a bearer token that is
// renewed) is a poor scope: the retry lands in a new scope and runs again;
// prefer the authenticated principal.
func ScopeMetadata(key string) func(context.Context) string {
	key = strings.ToLower(key)
	return func(ctx context.Context) string {
		if vs := metadata.ValueFromIncomingContext(ctx, key); len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
}

// fingerprintMethod is the method argument of idempotency.Fingerprint for
// gRPC calls: not an HTTP method token (':' is not a tchar), so that no
// HTTP request's fingerprint can equal a gRPC call's in a shared store.
const fingerprintMethod = "grpc:unary"

// DefaultFingerprint is the default IdempotencyConfig.Fingerprint:
// idempotency.Fingerprint of the full method and the request message
// marshalled with proto.MarshalOptions{Deterministic: true}, so that one
// message gives one fingerprint, whatever the order of its map entries. It
// fails when req is not a proto.Message (a service with another codec
// needs a Fingerprint of its own).
func DefaultFingerprint(fullMethod string, req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", fmt.Errorf("watertightgrpc: the request of %s is a %T, not a proto.Message: set IdempotencyConfig.Fingerprint", fullMethod, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("watertightgrpc: the request of %s cannot be marshalled: %w", fullMethod, err)
	}
	return idempotency.Fingerprint(fingerprintMethod, fullMethod, b), nil
}

// IdempotencyUnaryServerInterceptor returns the server side of idempotency
// keys for unary calls: the gRPC form of watertighthttp.Idempotency, with
// the same Store. Place it after authentication (Scope needs the caller)
// and after UnaryServerInterceptor (admission): in the documented order,
//
//	grpc.ChainUnaryInterceptor(auth, guard, idem)
//
// For a call of a handled method (IdempotencyConfig.Methods) that carries
// the metadata idempotency-key (MetadataIdempotencyKey; the client
// interceptors send the key of retry.WithIdempotencyKey there), it:
//
//  1. reads the key (idempotency.ParseKeyMax: a bare key, or a quoted
//     Structured-Field String) and computes the call's fingerprint (by
//     default the method and the request message, see DefaultFingerprint);
//  2. claims the key, scoped by Scope, in the Store;
//  3. if it got the claim, runs the handler, under a context that ends at
//     nine tenths of LockTTL, stores its result — the reply message (with
//     its full name, so that a replay can rebuild it from
//     protoregistry.GlobalTypes) or the error's status (code, message and
//     details) — for TTL, and returns it;
//  4. if the key has a result, replays it: the same reply, or the same
//     status, with MetadataIdempotentReplayed: true in the header and the
//     trailer; nothing runs;
//  5. if the key is in flight, answers InFlightCode (ABORTED), or with
//     WaitInFlight waits for the result and replays it.
//
// # Answers of its own
//
// Each comes with a message that says what to do, and an EventRejected
// whose Err matches the idempotency error in brackets (so does the returned
// error, for errors.Is; the status is what the client sees):
//
//   - INVALID_ARGUMENT: the key is missing where Required, malformed, too
//     long, or sent more than once [idempotency.ErrKeyMissing,
//     idempotency.ErrInvalidKey];
//   - ABORTED (or UNAVAILABLE with the pushback "1000", see InFlightCode): a
//     call with the key is in flight [idempotency.ErrInFlight]; retry
//     later with the same key;
//   - FAILED_PRECONDITION: the key was used for a different call (another
//     method or request message) [idempotency.ErrMismatch]; nothing ran;
//   - UNAVAILABLE, grpc-retry-pushback-ms: 1000: the store failed, so
//     nothing ran (fail closed, unless FailOpen)
//     [idempotency.ErrStoreUnavailable]; it is safe to retry with the same
//     key;
//   - INTERNAL: the request could not be fingerprinted (not a
//     proto.Message), or a stored result cannot be decoded (its message
//     type is not linked into this binary); nothing ran;
//   - DATA_LOSS, trailer idempotency-outcome: unknown: an earlier call with
//     the key may have been applied, and its outcome was not recorded
//     [idempotency.ErrOutcomeUnknown]; nothing ran for this call. Check the
//     resource before sending the call again with a new key; the same key
//     gets the same answer until TTL has passed since the first call;
//   - FAILED_PRECONDITION, trailer idempotency-outcome: forgotten: the
//     key's result was dropped early to make room in the store, so it
//     cannot be replayed [idempotency.ErrForgotten]; nothing ran.
//
// # What is stored
//
// Every result, whatever its status: an error is replayed like a reply,
// because a handler that failed half-way may have done something that must
// not be done twice. A handler error without a status is stored as gRPC
// sends it (UNKNOWN, or CANCELLED and DEADLINE_EXCEEDED for the context's
// errors; a watertight rejection gets the status UnaryServerInterceptor
// gives it), and a replayed error that carried the overloaded signal
// carries it again.
//
// At most once per key: once the handler has started, its key is never
// handed to another call while the key is remembered (TTL). A key is
// released, so that a retry runs again, only on the handler's word: when it
// calls ReleaseIdempotencyKey or Release says so. When the result cannot be
// stored — too large, not a proto.Message, refused by the store as too
// large or full, or the handler panicked (the panic goes on) — the key is
// marked "outcome unknown" instead; when the store fails while the result is
// saved, the result still goes to the client and the claim is left held: a
// retry is answered as in flight until LockTTL, then "outcome unknown".
//
// Streaming calls are not handled: this is a unary interceptor, and a
// stream with a key runs as usual. A stream's messages can be neither
// buffered nor replayed the way a unary reply can.
//
// The interceptor is safe for concurrent use. It fails, naming the field,
// when Scope is nil or a field is invalid.
func IdempotencyUnaryServerInterceptor(cfg IdempotencyConfig) (grpc.UnaryServerInterceptor, error) {
	h, err := newIdem(cfg)
	if err != nil {
		return nil, err
	}
	return h.unary, nil
}

type idemServer struct {
	name        string
	store       idempotency.Store
	scope       func(context.Context) string
	methods     *methodSet // nil: every method (unless handles)
	handles     func(string) bool
	required    func(context.Context, string) bool
	fingerprint func(string, any) (string, error)
	ttl         time.Duration
	lockTTL     time.Duration
	maxKey      int
	maxResp     int // < 0: no limit
	inFlight    codes.Code
	wait        bool
	maxWait     time.Duration
	release     func(context.Context, string, error) bool
	failOpen    func(context.Context, string) bool
	keepMD      bool
	storeTO     time.Duration // < 0: none
	listener    watertight.Listener
	logger      *slog.Logger
}

func newIdem(cfg IdempotencyConfig) (*idemServer, error) {
	if cfg.Scope == nil {
		return nil, errors.New("watertightgrpc: IdempotencyConfig.Scope must be set: it keeps each caller's keys apart, so that no caller reads another's stored answers; " +
			"return the authenticated user, tenant or API key, or use SharedScope when every caller may see every answer")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
		zero string
	}{{"TTL", cfg.TTL, "24h"}, {"LockTTL", cfg.LockTTL, "30s"}, {"MaxWait", cfg.MaxWait, "LockTTL"}} {
		if f.d < 0 {
			return nil, fmt.Errorf("watertightgrpc: IdempotencyConfig.%s must be >= 0 (0 means %s), got %v", f.name, f.zero, f.d)
		}
	}
	if cfg.MaxKeyLength < 0 {
		return nil, fmt.Errorf("watertightgrpc: IdempotencyConfig.MaxKeyLength must be >= 0 (0 means %d), got %d", idempotency.DefaultMaxKeyLength, cfg.MaxKeyLength)
	}
	if cfg.Methods != nil && cfg.Handles != nil {
		return nil, errors.New("watertightgrpc: IdempotencyConfig.Methods and Handles must not both be set")
	}
	h := &idemServer{
		name:        cfg.Name,
		store:       cfg.Store,
		scope:       cfg.Scope,
		handles:     cfg.Handles,
		required:    cfg.Required,
		fingerprint: cfg.Fingerprint,
		ttl:         cfg.TTL,
		lockTTL:     cfg.LockTTL,
		maxKey:      cfg.MaxKeyLength,
		maxResp:     cfg.MaxResponseBytes,
		inFlight:    cfg.InFlightCode,
		wait:        cfg.WaitInFlight,
		maxWait:     cfg.MaxWait,
		release:     cfg.Release,
		failOpen:    cfg.FailOpen,
		keepMD:      cfg.KeepMetadata,
		storeTO:     cfg.StoreTimeout,
		listener:    cfg.Listener,
		logger:      cfg.Logger,
	}
	switch h.inFlight {
	case codes.OK:
		h.inFlight = codes.Aborted
	case codes.Aborted, codes.Unavailable:
	default:
		return nil, fmt.Errorf("watertightgrpc: IdempotencyConfig.InFlightCode must be codes.Aborted or codes.Unavailable (0 means codes.Aborted), got %v", cfg.InFlightCode)
	}
	if cfg.Methods != nil {
		h.methods = &methodSet{}
		for i, m := range cfg.Methods {
			if err := h.methods.add(m); err != nil {
				return nil, fmt.Errorf("watertightgrpc: IdempotencyConfig.Methods[%d] %w, got %q", i, err, m)
			}
		}
	}
	if h.store == nil {
		s, err := idempotency.NewMemoryStore(idempotency.DefaultMemoryConfig())
		if err != nil {
			return nil, fmt.Errorf("watertightgrpc: IdempotencyConfig.Store: default store: %w", err)
		}
		h.store = s
	}
	if h.fingerprint == nil {
		h.fingerprint = DefaultFingerprint
	}
	if h.ttl == 0 {
		h.ttl = watertighthttp.DefaultIdempotencyTTL
	}
	if h.lockTTL == 0 {
		h.lockTTL = watertighthttp.DefaultIdempotencyLockTTL
	}
	if h.maxWait == 0 {
		h.maxWait = h.lockTTL
	}
	if h.maxKey == 0 {
		h.maxKey = idempotency.DefaultMaxKeyLength
	}
	if h.maxResp == 0 {
		h.maxResp = watertighthttp.DefaultIdempotencyMaxBytes
	}
	if h.storeTO == 0 {
		h.storeTO = watertighthttp.DefaultIdempotencyStoreTimeout
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	return h, nil
}

// methodSet is a set of full method names and of services (every method),
// read from service-config-style entries.
type methodSet struct {
	methods  map[string]struct{} // "/package.Service/Method"
	services map[string]struct{} // "/package.Service/"
}

// add records one entry: "/package.Service/Method", "/package.Service/*"
// or "/package.Service/".
func (s *methodSet) add(m string) error {
	bad := errors.New(`must be "/package.Service/Method" or "/package.Service/*"`)
	if len(m) < 3 || m[0] != '/' || strings.ContainsAny(m, " \t\r\n") {
		return bad
	}
	i := strings.LastIndexByte(m, '/')
	if i <= 1 || strings.IndexByte(m[1:i], '/') >= 0 {
		return bad
	}
	switch rest := m[i+1:]; rest {
	case "", "*":
		if s.services == nil {
			s.services = make(map[string]struct{})
		}
		s.services[m[:i+1]] = struct{}{}
	default:
		if strings.ContainsRune(rest, '*') {
			return bad
		}
		if s.methods == nil {
			s.methods = make(map[string]struct{})
		}
		s.methods[m] = struct{}{}
	}
	return nil
}

// has reports whether the set holds method.
func (s *methodSet) has(method string) bool {
	if _, ok := s.methods[method]; ok {
		return true
	}
	if len(s.services) == 0 {
		return false
	}
	i := strings.LastIndexByte(method, '/')
	if i <= 0 {
		return false
	}
	_, ok := s.services[method[:i+1]]
	return ok
}

func (h *idemServer) handled(method string) bool {
	switch {
	case h.handles != nil:
		return h.handles(method)
	case h.methods != nil:
		return h.methods.has(method)
	}
	return true
}

// storeCtx returns the context of a store call made for a call whose
// context is parent: bounded by StoreTimeout.
func (h *idemServer) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if h.storeTO < 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, h.storeTO)
}

func (h *idemServer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	if !h.handled(method) {
		return handler(ctx, req)
	}
	vals := metadata.ValueFromIncomingContext(ctx, MetadataIdempotencyKey)
	if len(vals) == 0 {
		if h.required != nil && h.required(ctx, method) {
			return nil, h.reject(ctx, method, idempotency.CodeKeyMissing, codes.InvalidArgument,
				"idempotency-key is missing: this method requires an idempotency key. Make one random key per operation (a UUID), "+
					`send it as the metadata "idempotency-key" on every attempt of that operation (with watertightgrpc's client `+
					"interceptor: retry.WithIdempotencyKey(ctx, idempotency.NewKey())); nothing was done",
				idempotency.ErrKeyMissing, "")
		}
		return handler(ctx, req)
	}
	if len(vals) > 1 {
		return nil, h.reject(ctx, method, idempotency.CodeInvalidKey, codes.InvalidArgument,
			fmt.Sprintf("idempotency-key is invalid: the call carries %d idempotency-key values; send exactly one; nothing was done", len(vals)),
			idempotency.ErrInvalidKey, "")
	}
	key, err := idempotency.ParseKeyMax(vals[0], h.maxKey)
	if err != nil {
		return nil, h.reject(ctx, method, idempotency.CodeInvalidKey, codes.InvalidArgument,
			"idempotency-key is invalid: "+strings.TrimPrefix(strings.TrimPrefix(err.Error(), "idempotency: "), "Idempotency-Key is ")+"; nothing was done",
			fmt.Errorf("%w: %w", idempotency.ErrInvalidKey, err), "")
	}
	fp, err := h.fingerprint(method, req)
	if err != nil {
		watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventRejected, Source: "grpc", Name: h.name, Key: method,
			Reason: "the request could not be fingerprinted", Err: err, Code: CodeFingerprintFailed})
		return nil, status.Error(codes.Internal, "the server could not fingerprint the request to check its idempotency-key: "+err.Error()+"; nothing was done")
	}
	skey := idempotency.ScopedKey(h.scope(ctx), key)

	c, err := h.claim(ctx, skey, fp)
	if err == nil && c.State == idempotency.InFlight && h.wait && c.Fingerprint == fp {
		c, err = h.waitInFlight(ctx, skey, fp)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err() // the client is gone: nothing ran
		}
		return h.storeFailed(ctx, req, method, handler, err)
	}
	switch idempotency.Resolve(c, fp) {
	case idempotency.Run:
		return h.run(ctx, req, method, handler, key, skey, fp, c.Token)
	case idempotency.Replay:
		return h.replay(ctx, method, c.Record)
	case idempotency.Mismatch:
		return nil, h.mismatch(ctx, method)
	case idempotency.Wait:
		msg := "a call with the same idempotency-key is still being processed; retry later with the same key to get its result"
		if h.wait {
			msg = "a call with the same idempotency-key is still being processed; this call waited for its result and gave up; retry later with the same key to get it"
		}
		pushback := ""
		if h.inFlight == codes.Unavailable {
			pushback = PushbackRetrySoon
		}
		return nil, h.reject(ctx, method, idempotency.CodeInFlight, h.inFlight, msg, idempotency.ErrInFlight, pushback)
	case idempotency.AnswerUnknown:
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataIdempotencyOutcome, idempotency.OutcomeUnknown))
		return nil, h.reject(ctx, method, idempotency.CodeOutcomeUnknown, codes.DataLoss, unknownMessage, idempotency.ErrOutcomeUnknown, "")
	case idempotency.AnswerForgotten:
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataIdempotencyOutcome, idempotency.OutcomeForgotten))
		return nil, h.reject(ctx, method, idempotency.CodeForgotten, codes.FailedPrecondition,
			"the call with this idempotency-key was processed, but its stored result was dropped early to make room, so it cannot be replayed: "+
				"the key is too old; this call was not processed: nothing was done. Check the resource for the outcome; use a new key only for a new operation",
			idempotency.ErrForgotten, "")
	}
	if c.State == idempotency.Completed && c.Record == nil {
		return h.storeFailed(ctx, req, method, handler, errors.New("the store answered completed without a record"))
	}
	return h.storeFailed(ctx, req, method, handler, fmt.Errorf("the store answered an unknown claim state %d", c.State))
}

// MetadataIdempotencyOutcome is the trailer that tells a client, with the
// value "unknown" (idempotency.OutcomeUnknown) or "forgotten"
// (idempotency.OutcomeForgotten), that its key's outcome is not known or no
// longer replayable: the gRPC form of the HTTP header Idempotency-Outcome
// (idempotency.HeaderOutcome).
const MetadataIdempotencyOutcome = "idempotency-outcome"

// unknownMessage is the message of the answer to a key whose outcome is
// unknown.
const unknownMessage = "a call with this idempotency-key may have been applied, but its outcome was not recorded " +
	"(the server failed while saving it), so it cannot be replayed; this call was not processed: nothing was done. " +
	"Check the resource (read it) before sending the call again, and if it was not applied, send it with a NEW idempotency-key: " +
	"the same key gets this answer again"

// reject emits an EventRejected and returns the answer to a call refused
// without running: code and msg, and the pushback trailer when pushback is
// not empty. The error unwraps to err.
func (h *idemServer) reject(ctx context.Context, method, evCode string, code codes.Code, msg string, err error, pushback string) error {
	if pushback != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(MetadataPushback, pushback))
	}
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventRejected, Source: "grpc", Name: h.name, Key: method, Reason: msg, Err: err, Code: evCode})
	return &rejectionError{err: err, st: status.New(code, msg)}
}

func (h *idemServer) mismatch(ctx context.Context, method string) error {
	return h.reject(ctx, method, idempotency.CodeMismatch, codes.FailedPrecondition,
		"idempotency-key was already used for a different call (another method or request message); nothing was done. "+
			"Use a new key for a new operation, and the same request for the same key",
		idempotency.ErrMismatch, "")
}

// storeFailed answers a call whose claim failed: fail closed (UNAVAILABLE),
// or run it without deduplication when FailOpen says so.
func (h *idemServer) storeFailed(ctx context.Context, req any, method string, handler grpc.UnaryHandler, err error) (any, error) {
	err = fmt.Errorf("%w: %w", idempotency.ErrStoreUnavailable, err)
	if h.failOpen != nil && h.failOpen(ctx, method) {
		h.logger.Warn("watertightgrpc: idempotency store failed; running the call without deduplication (FailOpen)",
			"name", h.name, "method", method, "error", err)
		watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventFallbackUsed, Source: "grpc", Name: h.name, Key: method,
			Reason: "fail open: the store failed, the call ran without deduplication", Err: err, Code: idempotency.CodeFailOpen})
		return handler(ctx, req)
	}
	return nil, h.reject(ctx, method, idempotency.CodeStoreUnavailable, codes.Unavailable,
		"the server could not check the idempotency-key (its store is unavailable), so the call was not processed: nothing was done. "+
			"It is safe to retry the call with the same idempotency-key",
		err, PushbackRetrySoon)
}

func (h *idemServer) claim(ctx context.Context, skey, fp string) (idempotency.Claim, error) {
	ctx, cancel := h.storeCtx(ctx)
	defer cancel()
	return h.store.Claim(ctx, skey, fp, h.lockTTL, h.ttl)
}

// waitInFlight polls the store, with exponential backoff and jitter (5ms
// doubling up to 250ms), until the key is no longer in flight, MaxWait has
// passed, or ctx ends; it then returns the last claim (in flight if it gave
// up) (idempotency.WaitWhileInFlight).
func (h *idemServer) waitInFlight(ctx context.Context, skey, fp string) (idempotency.Claim, error) {
	return idempotency.WaitWhileInFlight(ctx, time.Now().Add(h.maxWait), fp, func(ctx context.Context) (idempotency.Claim, error) {
		return h.claim(ctx, skey, fp)
	})
}

// idemState is what the interceptor puts on the context of a call it runs:
// the key, and whether the handler asked to release it.
type idemState struct {
	key     string
	release atomic.Bool
}

type idemStateKey struct{}

// IdempotencyKeyFrom returns the idempotency key of the call whose context
// is ctx, when IdempotencyUnaryServerInterceptor is running it under a
// claim: a handler can pass it on to its own dependencies (a payment
// provider's idempotency key).
func IdempotencyKeyFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(idemStateKey{}).(*idemState)
	if !ok {
		return "", false
	}
	return s.key, true
}

// ReleaseIdempotencyKey asks IdempotencyUnaryServerInterceptor, from the
// handler of a call it runs under a claim (ctx is the handler's context), to
// release the key when the handler returns instead of storing the result:
// the result still goes to the client, and a retry with the key runs the
// handler again. Call it only when the handler did nothing that must not be
// done twice — it failed before starting the work (a dependency was down).
// It reports whether ctx belongs to such a call.
func ReleaseIdempotencyKey(ctx context.Context) bool {
	s, ok := ctx.Value(idemStateKey{}).(*idemState)
	if ok {
		s.release.Store(true)
	}
	return ok
}

// run runs the handler under the claim tok and stores its result.
func (h *idemServer) run(ctx context.Context, req any, method string, handler grpc.UnaryHandler, key, skey, fp, tok string) (any, error) {
	st := &idemState{key: key}
	hctx := context.WithValue(ctx, idemStateKey{}, st)
	hctx, cancel := context.WithTimeoutCause(hctx, h.lockTTL-h.lockTTL/10, idempotency.ErrLockExpiring)
	defer cancel()
	var mdc *mdCapture
	if h.keepMD {
		if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
			mdc = &mdCapture{ServerTransportStream: ts}
			hctx = grpc.NewContextWithServerTransportStream(hctx, mdc)
		}
	}

	finished := false
	defer func() {
		if !finished { // a panic (or runtime.Goexit): the handler may have done its work
			h.save(ctx, method, key, skey, fp, tok, nil, "the handler panicked")
		}
	}()
	resp, herr := handler(hctx, req)
	finished = true
	if herr != nil && !hasStatus(herr) {
		// Answer with the status that is stored, so that the first
		// answer and its replays agree.
		herr = &statusError{err: herr, st: errorStatus(herr)}
	}

	if st.release.Load() || (h.release != nil && h.release(ctx, method, herr)) {
		h.releaseClaim(ctx, method, skey, tok, "the handler asked for the key to be released ("+status.Code(herr).String()+")", nil)
		return resp, herr
	}
	rec, err := encodeResult(fp, resp, herr, mdc)
	if err == nil && h.maxResp >= 0 && rec.Size() > h.maxResp {
		err = fmt.Errorf("the result takes %d bytes, more than MaxResponseBytes (%d): sent, not stored", rec.Size(), h.maxResp)
	}
	if err != nil {
		h.save(ctx, method, key, skey, fp, tok, nil, err.Error())
		return resp, herr
	}
	h.save(ctx, method, key, skey, fp, tok, &rec, "")
	return resp, herr
}

// save stores the handler's result, or the marker "outcome unknown" when
// rec is nil (why says why) or the store refuses it, and logs and emits
// what was not stored (idempotency.Save). It never releases the claim.
func (h *idemServer) save(ctx context.Context, method, key, skey, fp, tok string, rec *idempotency.Record, why string) {
	sctx, cancel := h.storeCtx(context.WithoutCancel(ctx))
	saved, err := idempotency.Save(sctx, h.store, skey, tok, fp, rec, h.ttl)
	cancel()
	attrs := []any{"name", h.name, "method", method, "key", key}
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
		to, reason = "unknown", "the result was not stored (outcome unknown): "
		if why == "" {
			why = "the store refused the result"
		}
		h.logger.Warn("watertightgrpc: idempotency result not stored; the key answers \"outcome unknown\" until its TTL ends", attrs...)
	case idempotency.NotSaved:
		to, reason = "unsaved", "the store failed after the handler ran; the key stays claimed, then reads unknown: "
		if why == "" {
			why = "the store could not keep the result"
		}
		h.logger.Error("watertightgrpc: idempotency result not stored, the store failed: the key is held until its LockTTL, then answers \"outcome unknown\"", attrs...)
	case idempotency.LockLost:
		to, reason = "expired", "the claim's lock ended before the handler finished; the result was not stored: "
		if why == "" {
			why = "raise LockTTL above the handler's longest run"
		}
		h.logger.Error("watertightgrpc: idempotency claim's lock ended before the handler finished: the result was not stored and the key answers \"outcome unknown\"; raise LockTTL above the handler's longest run",
			append(attrs, "lock_ttl", h.lockTTL)...)
	}
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventStateChange, Source: "grpc", Name: h.name, Key: method,
		From: "claimed", To: to, Reason: reason + why, Err: err, Code: saved.Code()})
}

// releaseClaim releases the claim tok, and logs and emits why.
func (h *idemServer) releaseClaim(ctx context.Context, method, skey, tok, why string, cause error) {
	sctx, cancel := h.storeCtx(context.WithoutCancel(ctx))
	err := h.store.Release(sctx, skey, tok)
	cancel()
	attrs := []any{"name", h.name, "method", method, "reason", why}
	if cause != nil {
		attrs = append(attrs, "error", cause)
	}
	if err != nil && !errors.Is(err, idempotency.ErrNotOwner) {
		attrs = append(attrs, "release_error", err)
		h.logger.Warn("watertightgrpc: idempotency key not released: a retry is answered as in flight until the claim's LockTTL passes, then \"outcome unknown\"", attrs...)
	} else {
		h.logger.Warn("watertightgrpc: idempotency key released without a stored result: a retry runs again", attrs...)
	}
	if cause == nil {
		cause = err
	}
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventStateChange, Source: "grpc", Name: h.name, Key: method,
		From: "claimed", To: "released", Reason: why, Err: cause, Code: idempotency.CodeReleased})
}

// replay answers a call with the stored result rec.
func (h *idemServer) replay(ctx context.Context, method string, rec *idempotency.Record) (any, error) {
	res, err := decodeResult(rec)
	if err != nil {
		watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventRejected, Source: "grpc", Name: h.name, Key: method,
			Reason: "the stored result cannot be replayed", Err: err, Code: CodeReplayFailed})
		return nil, status.Error(codes.Internal, "the server has a result stored for this idempotency-key but cannot decode it ("+
			err.Error()+"); nothing was done")
	}
	// res.header and res.trailer are the record's own copies.
	if res.header == nil {
		res.header = make(metadata.MD, 1)
	}
	if res.trailer == nil {
		res.trailer = make(metadata.MD, 1)
	}
	res.header[MetadataIdempotentReplayed] = []string{"true"}
	res.trailer[MetadataIdempotentReplayed] = []string{"true"}
	_ = grpc.SetHeader(ctx, res.header)
	_ = grpc.SetTrailer(ctx, res.trailer)
	watertight.Emit(h.listener, watertight.Event{Kind: watertight.EventReplayed, Source: "grpc", Name: h.name, Key: method,
		Reason: "replayed the stored result (" + res.code.String() + ")"})
	if res.err != nil {
		return nil, res.err
	}
	return res.reply, nil
}

// mdCapture is the call's ServerTransportStream, which also keeps a copy
// of the metadata the handler sets (KeepMetadata).
type mdCapture struct {
	grpc.ServerTransportStream
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (c *mdCapture) SetHeader(md metadata.MD) error {
	err := c.ServerTransportStream.SetHeader(md)
	if err == nil {
		c.mu.Lock()
		c.header = metadata.Join(c.header, md)
		c.mu.Unlock()
	}
	return err
}

func (c *mdCapture) SendHeader(md metadata.MD) error {
	err := c.ServerTransportStream.SendHeader(md)
	if err == nil {
		c.mu.Lock()
		c.header = metadata.Join(c.header, md)
		c.mu.Unlock()
	}
	return err
}

func (c *mdCapture) SetTrailer(md metadata.MD) error {
	err := c.ServerTransportStream.SetTrailer(md)
	if err == nil {
		c.mu.Lock()
		c.trailer = metadata.Join(c.trailer, md)
		c.mu.Unlock()
	}
	return err
}

// The fields of a stored result's Record.Header. Record.Status is the
// status code; Record.Body the reply message (codes.OK) or the
// google.rpc.Status of the error, in proto's wire format.
const (
	// recFormat marks a record made by this interceptor, and its format.
	recFormat        = "Watertight-Grpc"
	recFormatVersion = "1"
	// recType is the full name of the reply message (codes.OK).
	recType = "Grpc-Message-Type"
	// recOverloaded is "true" when the error carried the overloaded signal.
	recOverloaded = "Grpc-Overloaded"
	// recHeader and recTrailer hold the handler's metadata (KeepMetadata),
	// one value per metadata value: the key, a space, and the value in
	// unpadded base64url.
	recHeader  = "Grpc-Header-Md"
	recTrailer = "Grpc-Trailer-Md"
)

// encodeResult returns the record of the handler's result: its reply, or
// its error; with the metadata mdc captured, if not nil.
func encodeResult(fp string, resp any, herr error, mdc *mdCapture) (idempotency.Record, error) {
	rec := idempotency.Record{Fingerprint: fp, Header: http.Header{recFormat: {recFormatVersion}}, Created: time.Now()}
	if herr != nil {
		st := errorStatus(herr)
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			return rec, fmt.Errorf("the error's status cannot be marshalled: %w", err)
		}
		rec.Status, rec.Body = int(st.Code()), b
		if watertight.IsOverloaded(herr) {
			rec.Header[recOverloaded] = []string{"true"}
		}
	} else {
		m, ok := resp.(proto.Message)
		if !ok {
			return rec, fmt.Errorf("the reply is a %T, not a proto.Message: not stored", resp)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return rec, fmt.Errorf("the reply cannot be marshalled: %w", err)
		}
		rec.Status, rec.Body = int(codes.OK), b
		rec.Header[recType] = []string{string(proto.MessageName(m))}
	}
	if mdc != nil {
		mdc.mu.Lock()
		encodeMD(rec.Header, recHeader, mdc.header)
		encodeMD(rec.Header, recTrailer, mdc.trailer)
		mdc.mu.Unlock()
	}
	return rec, nil
}

func encodeMD(h http.Header, field string, md metadata.MD) {
	for k, vs := range md {
		for _, v := range vs {
			h[field] = append(h[field], k+" "+base64.RawURLEncoding.EncodeToString([]byte(v)))
		}
	}
}

// result is a decoded record.
type result struct {
	code            codes.Code
	reply           proto.Message // codes.OK
	err             error         // otherwise
	header, trailer metadata.MD
}

// decodeResult rebuilds the result stored in rec. It fails when rec was not
// made by encodeResult, or its reply's message type is not registered in
// protoregistry.GlobalTypes.
func decodeResult(rec *idempotency.Record) (result, error) {
	var res result
	if v := rec.Header[recFormat]; len(v) != 1 || v[0] != recFormatVersion {
		return res, errors.New("the record was not made by watertightgrpc's idempotency interceptor, or by another version of it")
	}
	if rec.Status < 0 || rec.Status > 16 {
		return res, fmt.Errorf("the record's status %d is not a gRPC code", rec.Status)
	}
	res.code = codes.Code(rec.Status)
	var err error
	if res.header, err = decodeMD(rec.Header[recHeader]); err != nil {
		return res, err
	}
	if res.trailer, err = decodeMD(rec.Header[recTrailer]); err != nil {
		return res, err
	}
	if res.code == codes.OK {
		name := rec.Header[recType]
		if len(name) != 1 {
			return res, errors.New("the record names no reply message type")
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name[0]))
		if err != nil {
			return res, fmt.Errorf("the reply's message type %q: %w", name[0], err)
		}
		m := mt.New().Interface()
		if err := proto.Unmarshal(rec.Body, m); err != nil {
			return res, fmt.Errorf("the reply (%s): %w", name[0], err)
		}
		res.reply = m
		return res, nil
	}
	p := new(spb.Status)
	if err := proto.Unmarshal(rec.Body, p); err != nil {
		return res, fmt.Errorf("the error's status: %w", err)
	}
	if p.GetCode() != int32(res.code) {
		return res, fmt.Errorf("the error's status has code %d, the record %d", p.GetCode(), res.code)
	}
	st := status.FromProto(p)
	if v := rec.Header[recOverloaded]; len(v) == 1 && v[0] == "true" {
		res.err = &replayedError{st: st}
	} else {
		res.err = st.Err()
	}
	return res, nil
}

// decodeMD reads the metadata values of encodeMD. Reserved keys ("grpc-"
// and pseudo-headers) are skipped: the transport sets those.
func decodeMD(vals []string) (metadata.MD, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	md := make(metadata.MD, len(vals))
	for _, kv := range vals {
		k, v64, ok := strings.Cut(kv, " ")
		if !ok || !validMDKey(k) {
			return nil, errors.New("the record's metadata is malformed")
		}
		b, err := base64.RawURLEncoding.DecodeString(v64)
		if err != nil {
			return nil, errors.New("the record's metadata value is malformed")
		}
		if !strings.HasSuffix(k, "-bin") {
			for _, c := range b {
				if c < 0x20 || c > 0x7e {
					return nil, errors.New("the record's metadata value is not printable ASCII")
				}
			}
		}
		if strings.HasPrefix(k, "grpc-") {
			continue
		}
		md[k] = append(md[k], string(b))
	}
	return md, nil
}

// validMDKey reports whether k is a valid gRPC metadata key: lower-case
// letters, digits, '-', '_' and '.'.
func validMDKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// errorStatus returns the status with which err, a handler's error, is
// answered: its own; for an error without one, what
// UnaryServerInterceptor gives it (UNAVAILABLE when it carries the
// overloaded signal, the rejection's code for a rejection), else what gRPC
// gives it (CANCELLED and DEADLINE_EXCEEDED for the context's errors,
// UNKNOWN for the others).
func errorStatus(err error) *status.Status {
	if !hasStatus(err) && watertight.IsOverloaded(err) && !watertight.IsRejection(err) {
		return status.New(codes.Unavailable, err.Error())
	}
	st, ok := status.FromError(withStatus(err))
	if !ok {
		st = status.FromContextError(err)
	}
	return st
}

// statusError is a handler's error without a gRPC status, given the status
// it is stored with (errorStatus). It unwraps to the handler's error.
type statusError struct {
	err error
	st  *status.Status
}

func (e *statusError) Error() string              { return e.err.Error() }
func (e *statusError) Unwrap() error              { return e.err }
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// replayedError is a replayed error that carried the overloaded signal: it
// carries it again (watertight.IsOverloaded), so that
// UnaryServerInterceptor sends the negative pushback with the replay as it
// did with the first answer.
type replayedError struct {
	st *status.Status
}

func (e *replayedError) Error() string              { return e.st.Err().Error() + " (overloaded, do not retry)" }
func (e *replayedError) GRPCStatus() *status.Status { return e.st }
func (e *replayedError) Overloaded() bool           { return true }
func (e *replayedError) Is(target error) bool       { return target == watertight.ErrOverloaded }
