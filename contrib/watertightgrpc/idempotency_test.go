package watertightgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	wbackoff "github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// ---- helpers -----------------------------------------------------------------

// quietLogger drops the interceptor's warnings, which some tests provoke.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func idemInterceptor(t testing.TB, cfg watertightgrpc.IdempotencyConfig) grpc.UnaryServerInterceptor {
	t.Helper()
	if cfg.Scope == nil {
		cfg.Scope = watertightgrpc.SharedScope
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	icpt, err := watertightgrpc.IdempotencyUnaryServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return icpt
}

// idemEnv serves ts over transport with the interceptors icpts (outermost
// first), and dials it without client interceptors.
func idemEnv(t testing.TB, transport string, ts *testServer, icpts ...grpc.UnaryServerInterceptor) *env {
	return newEnv(t, transport, ts, []grpc.ServerOption{grpc.ChainUnaryInterceptor(icpts...)})
}

// withKey returns ctx with the idempotency key (and more pairs) in its
// outgoing metadata.
func withKey(ctx context.Context, key string, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, append([]string{watertightgrpc.MetadataIdempotencyKey, key}, kv...)...)
}

// counted returns a call function that answers in + "#" + the number of the
// execution, and the counter.
func counted() (func(context.Context, string, string) (string, error), *atomic.Int32) {
	var n atomic.Int32
	return func(_ context.Context, _, in string) (string, error) {
		return in + "#" + itoa(int(n.Add(1))), nil
	}, &n
}

// idemStream is a grpc.ServerTransportStream for calls made directly to the
// interceptor: it records the header and trailer set on it.
type idemStream struct {
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *idemStream) Method() string { return methodCall }
func (s *idemStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *idemStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *idemStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

func (s *idemStream) replayed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.header.Get(watertightgrpc.MetadataIdempotentReplayed)
	return len(v) == 1 && v[0] == "true"
}

// direct calls icpt for methodCall with the request in, under the key (none
// if empty), as a server would, and returns the reply's value, the error and
// the stream.
func direct(ctx context.Context, icpt grpc.UnaryServerInterceptor, key, in string, h grpc.UnaryHandler) (string, *idemStream, error) {
	s := &idemStream{}
	md := metadata.MD{}
	if key != "" {
		md.Set(watertightgrpc.MetadataIdempotencyKey, key)
	}
	ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, md), s)
	resp, err := icpt(ctx, wrapperspb.String(in), &grpc.UnaryServerInfo{FullMethod: methodCall}, h)
	if err != nil {
		return "", s, err
	}
	return resp.(*wrapperspb.StringValue).GetValue(), s, nil
}

// stubStore is an idempotency.Store whose answers the test sets.
type stubStore struct {
	claim       func(fp string) (idempotency.Claim, error)
	completeErr error

	mu        sync.Mutex
	completed []idempotency.Record
	released  int
}

func (s *stubStore) Claim(_ context.Context, _, fp string, _, _ time.Duration) (idempotency.Claim, error) {
	if s.claim == nil {
		return idempotency.Claim{State: idempotency.Claimed, Token: "t", Fingerprint: fp}, nil
	}
	return s.claim(fp)
}

func (s *stubStore) Complete(_ context.Context, _, _ string, rec idempotency.Record, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.completeErr != nil {
		return s.completeErr
	}
	s.completed = append(s.completed, rec)
	return nil
}

func (s *stubStore) Release(context.Context, string, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released++
	return nil
}

func wantCode(t *testing.T, err error, code codes.Code, msgPart string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v (%v), want %v", st.Code(), err, code)
	}
	if msgPart != "" && !strings.Contains(st.Message(), msgPart) {
		t.Fatalf("message %q does not say %q", st.Message(), msgPart)
	}
}

// ---- over a real server --------------------------------------------------------

// TestIdempotencyReplay: the first call with a key runs; later calls with
// the key get the same reply, marked as a replay, with the handler's
// metadata (KeepMetadata); keys are per scope; other methods pass through.
func TestIdempotencyReplay(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			var n atomic.Int32
			ts := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
				k := itoa(int(n.Add(1)))
				grpc.SetHeader(ctx, metadata.Pairs("x-run", k))
				grpc.SetTrailer(ctx, metadata.Pairs("x-trail-bin", "\x00\xff"+k))
				return in + "#" + k, nil
			}}
			var l events
			icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{
				Scope:        watertightgrpc.ScopeMetadata("X-Api-Key"),
				Methods:      []string{methodCall},
				KeepMetadata: true,
				Listener:     &l,
			})
			e := idemEnv(t, transport, ts, icpt)
			ctx := bounded(t)
			call := func(ctx context.Context, method, in string) (string, metadata.MD, metadata.MD) {
				t.Helper()
				var hd, tr metadata.MD
				out, err := e.call(ctx, method, in, grpc.Header(&hd), grpc.Trailer(&tr))
				if err != nil {
					t.Fatal(err)
				}
				return out, hd, tr
			}
			alice := metadata.AppendToOutgoingContext(ctx, "x-api-key", "alice")

			out, hd, _ := call(withKey(alice, "k1"), methodCall, "a")
			if out != "a#1" || len(hd[watertightgrpc.MetadataIdempotentReplayed]) != 0 {
				t.Fatalf("first call: %q, header %v", out, hd)
			}
			for _, key := range []string{"k1", `"k1"`} { // the quoted form is the same key
				out, hd, tr := call(withKey(alice, key), methodCall, "a")
				if out != "a#1" {
					t.Fatalf("replay with %s: %q, want a#1", key, out)
				}
				if got := hd.Get(watertightgrpc.MetadataIdempotentReplayed); len(got) != 1 || got[0] != "true" {
					t.Fatalf("replay header %v", hd)
				}
				if got := tr.Get(watertightgrpc.MetadataIdempotentReplayed); len(got) != 1 || got[0] != "true" {
					t.Fatalf("replay trailer %v", tr)
				}
				if got := hd.Get("x-run"); len(got) != 1 || got[0] != "1" {
					t.Fatalf("the handler's header was not replayed: %v", hd)
				}
				if got := tr.Get("x-trail-bin"); len(got) != 1 || got[0] != "\x00\xff1" {
					t.Fatalf("the handler's binary trailer was not replayed: %q", got)
				}
			}
			if ts.count() != 1 {
				t.Fatalf("handler ran %d times, want 1", ts.count())
			}
			if out, _, _ := call(withKey(alice, "k2"), methodCall, "a"); out != "a#2" {
				t.Fatalf("a new key: %q, want a#2", out)
			}
			bob := metadata.AppendToOutgoingContext(ctx, "x-api-key", "bob")
			if out, _, _ := call(withKey(bob, "k1"), methodCall, "a"); out != "a#3" {
				t.Fatalf("another scope's k1: %q, want a#3 (scopes must not share keys)", out)
			}
			// Not a handled method: runs every time, key or not.
			call(withKey(alice, "k1"), methodOther, "a")
			call(withKey(alice, "k1"), methodOther, "a")
			if ts.count() != 5 {
				t.Fatalf("handler ran %d times, want 5", ts.count())
			}
			rep := l.of(watertight.EventReplayed)
			if len(rep) != 2 || rep[0].Source != "grpc" || rep[0].Key != methodCall {
				t.Fatalf("replayed events %+v", rep)
			}
		})
	}
}

// TestIdempotencyReplaysErrors: an error is stored and replayed with its
// code, message and details, with or without UnaryServerInterceptor in
// front; one that carried the overloaded signal is UNAVAILABLE both times,
// and gets the negative pushback again from UnaryServerInterceptor.
func TestIdempotencyReplaysErrors(t *testing.T) {
	for _, transport := range []string{"bufconn/guard", "tcp/guard", "bufconn", "tcp"} {
		transport, guarded := strings.CutSuffix(transport, "/guard")
		name := transport
		if guarded {
			name += "/guard"
		}
		t.Run(name, func(t *testing.T) {
			ts := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
				switch in {
				case "details":
					st, err := status.New(codes.NotFound, "no such account").WithDetails(wrapperspb.String("acct-7"))
					if err != nil {
						return "", err
					}
					return "", st.Err()
				case "plain":
					return "", errors.New("boom")
				default: // a client of a dependency gave up: overloaded
					return "", fmt.Errorf("payments down: %w", watertight.ErrOverloaded)
				}
			}}
			icpts := []grpc.UnaryServerInterceptor{idemInterceptor(t, watertightgrpc.IdempotencyConfig{})}
			if guarded {
				icpts = append([]grpc.UnaryServerInterceptor{serverInterceptor(t, watertightgrpc.ServerConfig{})}, icpts...)
			}
			e := idemEnv(t, transport, ts, icpts...)
			ctx := bounded(t)
			for i, in := range []string{"details", "plain", "overloaded"} {
				var first, again *status.Status
				var tr1, tr2, hd2 metadata.MD
				_, err := e.call(withKey(ctx, in), methodCall, in, grpc.Trailer(&tr1))
				first = status.Convert(err)
				_, err = e.call(withKey(ctx, in), methodCall, in, grpc.Trailer(&tr2), grpc.Header(&hd2))
				again = status.Convert(err)
				if first.Code() == codes.OK || !proto.Equal(first.Proto(), again.Proto()) {
					t.Fatalf("%s: first %v, replay %v", in, first.Proto(), again.Proto())
				}
				if got := hd2.Get(watertightgrpc.MetadataIdempotentReplayed); len(got) != 1 {
					t.Fatalf("%s: the replay is not marked: %v", in, hd2)
				}
				if ts.count() != i+1 {
					t.Fatalf("%s: handler ran %d times in all, want %d", in, ts.count(), i+1)
				}
				switch in {
				case "details":
					if d := again.Details(); len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "acct-7" {
						t.Fatalf("details %v", d)
					}
				case "plain":
					if again.Code() != codes.Unknown || again.Message() != "boom" {
						t.Fatalf("plain error replayed as %v", again)
					}
				case "overloaded":
					if again.Code() != codes.Unavailable {
						t.Fatalf("overloaded error without a status answered %v, want UNAVAILABLE", again.Code())
					}
					if !guarded {
						break
					}
					for _, tr := range []metadata.MD{tr1, tr2} {
						if got := tr.Get(watertightgrpc.MetadataPushback); len(got) != 1 || got[0] != "-1" {
							t.Fatalf("overloaded: pushback %v, want -1 on the first answer and on the replay", tr)
						}
					}
				}
			}
		})
	}
}

// TestIdempotencyKeyErrors: a missing key where required, a key too long,
// malformed or sent twice are INVALID_ARGUMENT, and nothing runs.
func TestIdempotencyKeyErrors(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			ts := &testServer{}
			var l events
			e := idemEnv(t, transport, ts, idemInterceptor(t, watertightgrpc.IdempotencyConfig{
				Required:     func(_ context.Context, m string) bool { return m == methodCall },
				MaxKeyLength: 8,
				Listener:     &l,
			}))
			ctx := bounded(t)
			_, err := e.call(ctx, methodCall, "x")
			wantCode(t, err, codes.InvalidArgument, `requires an idempotency key`)
			wantCode(t, err, codes.InvalidArgument, `"idempotency-key"`)
			for _, c := range []struct {
				ctx  context.Context
				part string
			}{
				{withKey(ctx, "123456789"), "invalid: too long: the key is 9 bytes long, more than 8"},
				{withKey(ctx, `"open`), "no closing quote"},
				{withKey(ctx, "a", watertightgrpc.MetadataIdempotencyKey, "b"), "2 idempotency-key values"},
				{withKey(ctx, "a,b"), "more than one key"},
			} {
				_, err := e.call(c.ctx, methodCall, "x")
				wantCode(t, err, codes.InvalidArgument, c.part)
			}
			if ts.count() != 0 {
				t.Fatalf("handler ran %d times, want 0", ts.count())
			}
			// Not required: runs without a key.
			if _, err := e.call(ctx, methodOther, "x"); err != nil || ts.count() != 1 {
				t.Fatalf("optional key: %v, %d runs", err, ts.count())
			}
			rej := l.of(watertight.EventRejected)
			if len(rej) != 5 || !errors.Is(rej[0].Err, idempotency.ErrKeyMissing) || !errors.Is(rej[1].Err, idempotency.ErrInvalidKey) || !errors.Is(rej[1].Err, idempotency.ErrKeyTooLong) {
				t.Fatalf("rejections %+v", rej)
			}
		})
	}
}

// TestIdempotencyMismatch: a key reused for another request — another
// message, another method, completed or in flight — is FAILED_PRECONDITION
// at once, even with WaitInFlight, and nothing runs.
func TestIdempotencyMismatch(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			started, release := make(chan struct{}), make(chan struct{})
			ts := &testServer{call: func(_ context.Context, _, in string) (string, error) {
				if in == "hold" {
					close(started)
					<-release
				}
				return in, nil
			}}
			var l events
			e := idemEnv(t, transport, ts, idemInterceptor(t, watertightgrpc.IdempotencyConfig{WaitInFlight: true, Listener: &l}))
			ctx := bounded(t)
			if _, err := e.call(withKey(ctx, "k"), methodCall, "a"); err != nil {
				t.Fatal(err)
			}
			_, err := e.call(withKey(ctx, "k"), methodCall, "b")
			wantCode(t, err, codes.FailedPrecondition, "already used for a different call")
			_, err = e.call(withKey(ctx, "k"), methodOther, "a")
			wantCode(t, err, codes.FailedPrecondition, "")

			done := make(chan error, 1)
			go func() {
				_, err := e.call(withKey(ctx, "held"), methodCall, "hold")
				done <- err
			}()
			<-started
			_, err = e.call(withKey(ctx, "held"), methodCall, "other")
			wantCode(t, err, codes.FailedPrecondition, "")
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if ts.count() != 2 {
				t.Fatalf("handler ran %d times, want 2", ts.count())
			}
			rej := l.of(watertight.EventRejected)
			if len(rej) != 3 || !errors.Is(rej[2].Err, idempotency.ErrMismatch) {
				t.Fatalf("rejections %+v", rej)
			}
		})
	}
}

// TestIdempotencyInFlight: a duplicate that arrives while the first call
// runs is ABORTED by default, UNAVAILABLE with the pushback "1000" when
// configured so; it does not run.
func TestIdempotencyInFlight(t *testing.T) {
	for _, code := range []codes.Code{0, codes.Unavailable} {
		for _, transport := range transports {
			t.Run(code.String()+"/"+transport, func(t *testing.T) {
				started, release := make(chan struct{}), make(chan struct{})
				ts := &testServer{call: func(context.Context, string, string) (string, error) {
					close(started)
					<-release
					return "done", nil
				}}
				e := idemEnv(t, transport, ts, idemInterceptor(t, watertightgrpc.IdempotencyConfig{InFlightCode: code}))
				ctx := bounded(t)
				done := make(chan error, 1)
				go func() {
					_, err := e.call(withKey(ctx, "k"), methodCall, "x")
					done <- err
				}()
				<-started
				var tr metadata.MD
				_, err := e.call(withKey(ctx, "k"), methodCall, "x", grpc.Trailer(&tr))
				want := codes.Aborted
				if code == codes.Unavailable {
					want = codes.Unavailable
					if got := tr.Get(watertightgrpc.MetadataPushback); len(got) != 1 || got[0] != "1000" {
						t.Errorf("pushback %v, want 1000", tr)
					}
				}
				wantCode(t, err, want, "still being processed")
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if out, err := e.call(withKey(ctx, "k"), methodCall, "x"); err != nil || out != "done" {
					t.Fatalf("after the first finished: %q, %v", out, err)
				}
				if ts.count() != 1 {
					t.Fatalf("handler ran %d times, want 1", ts.count())
				}
			})
		}
	}
}

// TestIdempotencyStoreDown: when the store fails, the call is UNAVAILABLE
// with a message that says it is safe to retry with the same key and the
// pushback "1000", and nothing runs; FailOpen methods run.
func TestIdempotencyStoreDown(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			ts := &testServer{}
			var l events
			down := &stubStore{claim: func(string) (idempotency.Claim, error) {
				return idempotency.Claim{}, errors.New("connection refused")
			}}
			e := idemEnv(t, transport, ts, idemInterceptor(t, watertightgrpc.IdempotencyConfig{
				Store:    down,
				FailOpen: func(_ context.Context, m string) bool { return m == methodOther },
				Listener: &l,
			}))
			ctx := bounded(t)
			var tr metadata.MD
			_, err := e.call(withKey(ctx, "k"), methodCall, "x", grpc.Trailer(&tr))
			wantCode(t, err, codes.Unavailable, "safe to retry the call with the same idempotency-key")
			if got := tr.Get(watertightgrpc.MetadataPushback); len(got) != 1 || got[0] != "1000" {
				t.Fatalf("pushback %v, want 1000", tr)
			}
			if ts.count() != 0 {
				t.Fatalf("handler ran %d times, want 0", ts.count())
			}
			if _, err := e.call(withKey(ctx, "k"), methodOther, "x"); err != nil || ts.count() != 1 {
				t.Fatalf("fail open: %v, %d runs", err, ts.count())
			}
			rej := l.of(watertight.EventRejected)
			if len(rej) != 1 || !errors.Is(rej[0].Err, idempotency.ErrStoreUnavailable) {
				t.Fatalf("rejections %+v", rej)
			}
			if fo := l.of(watertight.EventFallbackUsed); len(fo) != 1 || fo[0].Key != methodOther {
				t.Fatalf("fail-open events %+v", fo)
			}
		})
	}
}

// TestIdempotencyTwoServersConcurrent: 200 concurrent calls, 20 keys × 10,
// spread over two servers (bufconn and TCP) that share one MemoryStore:
// every call arrives before any handler finishes, each key's handler runs
// once, and the 180 others wait for its result and get it replayed.
func TestIdempotencyTwoServersConcurrent(t *testing.T) {
	const keys, dups = 20, 10
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	run, runs := counted()
	gate := make(chan struct{})
	ts := &testServer{call: func(ctx context.Context, m, in string) (string, error) {
		<-gate
		return run(ctx, m, in)
	}}
	var arrived atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if arrived.Add(1) == keys*dups {
			close(gate)
		}
		return h(ctx, req)
	}
	var l events
	cfg := watertightgrpc.IdempotencyConfig{Store: store, WaitInFlight: true, MaxWait: 10 * time.Second, Listener: &l}
	envs := []*env{
		idemEnv(t, "bufconn", ts, count, idemInterceptor(t, cfg)),
		idemEnv(t, "tcp", ts, count, idemInterceptor(t, cfg)),
	}
	ctx := bounded(t)
	replies := make([][]string, keys)
	for i := range replies {
		replies[i] = make([]string, dups)
	}
	errs := make(chan error, keys*dups)
	var wg sync.WaitGroup
	for j := range dups {
		for i := range keys {
			wg.Go(func() {
				k := "key-" + itoa(i)
				out, err := envs[(i+j)%2].call(withKey(ctx, k), methodCall, k)
				if err != nil {
					errs <- err
					return
				}
				replies[i][j] = out
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if runs.Load() != keys || ts.count() != keys {
		t.Fatalf("handlers ran %d times, want %d (one per key)", ts.count(), keys)
	}
	for i, rs := range replies {
		for _, r := range rs {
			if r != rs[0] || !strings.HasPrefix(r, "key-"+itoa(i)+"#") {
				t.Fatalf("key %d: replies %q, want all the same", i, rs)
			}
		}
	}
	if n := len(l.of(watertight.EventReplayed)); n != keys*(dups-1) {
		t.Fatalf("%d replays, want %d", n, keys*(dups-1))
	}
}

// dropListener is a listener whose connections the test can cut, to lose a
// request or a reply on the wire.
type dropListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *dropListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// drop closes every connection accepted so far.
func (l *dropListener) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// lossyPlans say, per operation, what happens to its attempts in turn as
// the server sees them: 'Q' the request is lost (the connection is cut
// before the handler), 'A' the answer is lost (cut after the handler ran);
// attempts past the plan go through.
var lossyPlans = []string{"", "A", "QA", "AA", "QQ", "AQA"}

// lossyRun makes 2×len(lossyPlans) operations, one at a time, through
// watertight's client interceptor (retries with a key) over a connection that
// loses requests and answers as lossyPlans say, to a server with idem (if
// not nil), and returns how many times each operation's handler ran.
func lossyRun(t *testing.T, transport string, idem grpc.UnaryServerInterceptor) []int {
	t.Helper()
	var mu sync.Mutex
	execs := map[string]int{}
	seen := map[string]int{}
	ts := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		execs[in]++
		return "charged " + in, nil
	}}
	var lis *dropListener
	lossy := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		op := req.(*wrapperspb.StringValue).GetValue()
		mu.Lock()
		n := seen[op]
		seen[op]++
		mu.Unlock()
		plan := op[strings.LastIndexByte(op, '-')+1:]
		if n < len(plan) {
			switch plan[n] {
			case 'Q':
				lis.drop()
				return nil, status.Error(codes.Unavailable, "lost")
			case 'A':
				resp, err := h(ctx, req)
				lis.drop()
				return resp, err
			}
		}
		return h(ctx, req)
	}
	icpts := []grpc.UnaryServerInterceptor{lossy}
	if idem != nil {
		icpts = append(icpts, idem)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpts...))
	srv.RegisterService(&serviceDesc, ts)
	var target string
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond}, MinConnectTimeout: time.Second})}
	switch transport {
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		lis, target = &dropListener{Listener: bl}, "passthrough:///bufnet"
		dopts = append(dopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = &dropListener{Listener: l}, "passthrough:///"+l.Addr().String()
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()
	// A few milliseconds between attempts: the client must notice the cut
	// connection and dial again, or its retries all meet the dead one.
	b, err := wbackoff.New(wbackoff.Config{Base: 2 * time.Millisecond, Cap: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rc := retry.Config{Backoff: b, MaxAttempts: 20}
	cli, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Retry: rc})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, append(dopts, grpc.WithChainUnaryInterceptor(cli))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	ctx := bounded(t)
	var out []int
	for i := range 2 * len(lossyPlans) {
		op := fmt.Sprintf("op-%d-%s", i, lossyPlans[i%len(lossyPlans)])
		octx := retry.WithIdempotencyKey(ctx, idempotency.NewKey()) // one key per operation
		reply := new(wrapperspb.StringValue)
		if err := cc.Invoke(octx, methodCall, wrapperspb.String(op), reply); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if reply.GetValue() != "charged "+op {
			t.Fatalf("%s: reply %q", op, reply.GetValue())
		}
		mu.Lock()
		out = append(out, execs[op])
		mu.Unlock()
	}
	return out
}

// TestIdempotencyLossyConnection: watertight's client retries an operation
// whose requests and answers are lost on the wire (connections cut); with
// the idempotency interceptor each operation runs exactly once. Without it,
// the same run executes every lost answer's operation again — the control
// that shows the connection really loses answers after the work was done.
func TestIdempotencyLossyConnection(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			for i, n := range lossyRun(t, transport, idemInterceptor(t, watertightgrpc.IdempotencyConfig{})) {
				if n != 1 {
					t.Fatalf("with keys: operation %d (plan %q) ran %d times, want 1", i, lossyPlans[i%len(lossyPlans)], n)
				}
			}
			double := 0
			for i, n := range lossyRun(t, transport, nil) {
				want := 1 + strings.Count(lossyPlans[i%len(lossyPlans)], "A")
				if n != want {
					t.Fatalf("control without the interceptor: operation %d (plan %q) ran %d times, want %d", i, lossyPlans[i%len(lossyPlans)], n, want)
				}
				double += n - 1
			}
			if double == 0 {
				t.Fatal("the control run executed nothing twice: the test does not lose answers")
			}
		})
	}
}

// ---- calling the interceptor directly, in synctest bubbles -----------------

// TestIdempotencyWaitInFlight: with WaitInFlight a duplicate waits for the
// first call and gets its result; it gives up at MaxWait or at its own
// deadline; and it runs itself when the first releases the key.
func TestIdempotencyWaitInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{WaitInFlight: true, LockTTL: time.Minute, MaxWait: 3 * time.Second})
		release := make(chan struct{})
		var runs atomic.Int32
		hold := func(ctx context.Context, req any) (any, error) {
			runs.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			if req.(*wrapperspb.StringValue).GetValue() == "give up" {
				watertightgrpc.ReleaseIdempotencyKey(ctx)
				return nil, status.Error(codes.Unavailable, "not now")
			}
			return wrapperspb.String("done " + itoa(int(runs.Load()))), nil
		}
		type answer struct {
			out      string
			err      error
			replayed bool
			took     time.Duration
		}
		start := func(ctx context.Context, key, in string) chan answer {
			ch := make(chan answer, 1)
			go func() {
				t0 := time.Now()
				out, s, err := direct(ctx, icpt, key, in, hold)
				ch <- answer{out, err, s.replayed(), time.Since(t0)}
			}()
			synctest.Wait()
			return ch
		}
		ctx := context.Background()

		// The duplicate waits, then replays the first call's result.
		first := start(ctx, "k", "x")
		dup := start(ctx, "k", "x")
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case a := <-dup:
			t.Fatalf("the duplicate did not wait: %+v", a)
		default:
		}
		close(release)
		if a := <-first; a.err != nil || a.out != "done 1" || a.replayed {
			t.Fatalf("first: %+v", a)
		}
		if a := <-dup; a.err != nil || a.out != "done 1" || !a.replayed || a.took < time.Second || a.took > time.Second+300*time.Millisecond {
			t.Fatalf("duplicate: %+v, want the replay of done 1 soon after a second", a)
		}
		if runs.Load() != 1 {
			t.Fatalf("%d runs, want 1", runs.Load())
		}

		// MaxWait: the duplicate gives up after exactly 3s; its own
		// deadline (1s) ends the wait sooner.
		release = make(chan struct{})
		slow := start(ctx, "k2", "x")
		if a := <-start(ctx, "k2", "x"); status.Code(a.err) != codes.Aborted || a.took != 3*time.Second {
			t.Fatalf("MaxWait: %+v, want ABORTED after 3s", a)
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		if a := <-start(dctx, "k2", "x"); status.Code(a.err) != codes.Aborted || a.took != time.Second {
			t.Fatalf("deadline: %+v, want ABORTED after 1s", a)
		}
		cancel()
		close(release)
		<-slow

		// The first releases the key: the waiting duplicate runs itself.
		release = make(chan struct{})
		giveUp := start(ctx, "k3", "give up")
		dup = start(ctx, "k3", "give up")
		close(release)
		if a := <-giveUp; status.Code(a.err) != codes.Unavailable {
			t.Fatalf("first: %+v", a)
		}
		if a := <-dup; status.Code(a.err) != codes.Unavailable || a.replayed {
			t.Fatalf("duplicate after a release: %+v, want its own run", a)
		}
		if runs.Load() != 4 {
			t.Fatalf("%d runs, want 4 (k, k2, k3 twice)", runs.Load())
		}
	})
}

// TestIdempotencyLockTTL: the handler's context ends at nine tenths of
// LockTTL with the cause idempotency.ErrLockExpiring; a handler that ignores
// it loses its claim at LockTTL: a retry is then told the outcome is
// unknown (DATA_LOSS) and does not run, and the late result is not stored
// (EventStateChange to "expired").
func TestIdempotencyLockTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l events
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{LockTTL: 10 * time.Second, Listener: &l})
		var took time.Duration
		var cause error
		_, _, err := direct(context.Background(), icpt, "k", "x", func(ctx context.Context, _ any) (any, error) {
			t0 := time.Now()
			<-ctx.Done()
			took, cause = time.Since(t0), context.Cause(ctx)
			return nil, ctx.Err()
		})
		if took != 9*time.Second || !errors.Is(cause, idempotency.ErrLockExpiring) {
			t.Fatalf("handler context ended after %v with %v, want 9s and ErrLockExpiring", took, cause)
		}
		wantCode(t, err, codes.DeadlineExceeded, "")
		// The result was stored: the retry gets it.
		_, s, err := direct(context.Background(), icpt, "k", "x", func(context.Context, any) (any, error) {
			t.Fatal("ran again")
			return nil, nil
		})
		if !s.replayed() || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("replay: %v, replayed %v", err, s.replayed())
		}

		// A handler that ignores its context.
		release := make(chan struct{})
		var runs atomic.Int32
		stubborn := func(context.Context, any) (any, error) {
			n := runs.Add(1)
			if n == 1 {
				<-release
			}
			return wrapperspb.String("run " + itoa(int(n))), nil
		}
		done := make(chan string, 1)
		go func() {
			out, _, _ := direct(context.Background(), icpt, "k2", "x", stubborn)
			done <- out
		}()
		time.Sleep(10*time.Second + time.Millisecond)
		_, s, err = direct(context.Background(), icpt, "k2", "x", stubborn)
		wantUnknown(t, s, err)
		close(release)
		if out := <-done; out != "run 1" {
			t.Fatalf("late first: %q", out)
		}
		_, s, err = direct(context.Background(), icpt, "k2", "x", stubborn)
		wantUnknown(t, s, err)
		if runs.Load() != 1 {
			t.Fatalf("%d runs, want 1", runs.Load())
		}
		var expired bool
		for _, e := range l.of(watertight.EventStateChange) {
			expired = expired || e.To == "expired"
		}
		if !expired {
			t.Fatal("no EventStateChange to expired")
		}
	})
}

// wantUnknown fails unless err is the "outcome unknown" answer: DATA_LOSS,
// a message that says what to do, and the trailer idempotency-outcome:
// unknown.
func wantUnknown(t *testing.T, s *idemStream, err error) {
	t.Helper()
	wantCode(t, err, codes.DataLoss, "may have been applied")
	wantCode(t, err, codes.DataLoss, "NEW idempotency-key")
	if !errors.Is(err, idempotency.ErrOutcomeUnknown) {
		t.Fatalf("%v does not match idempotency.ErrOutcomeUnknown", err)
	}
	if v := s.trailer.Get(watertightgrpc.MetadataIdempotencyOutcome); len(v) != 1 || v[0] != "unknown" {
		t.Fatalf("trailer %s = %q, want unknown", watertightgrpc.MetadataIdempotencyOutcome, v)
	}
}

// TestIdempotencyPanicMarksUnknown: a handler that panicked may have done
// its work: the panic goes on, the key is marked "outcome unknown", and a
// retry is told so, never run.
func TestIdempotencyPanicMarksUnknown(t *testing.T) {
	var l events
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Listener: &l})
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		direct(context.Background(), icpt, "k", "x", func(context.Context, any) (any, error) { panic("boom") })
	}()
	_, s, err := direct(context.Background(), icpt, "k", "x", func(context.Context, any) (any, error) {
		t.Fatal("ran again after a panic")
		return nil, nil
	})
	wantUnknown(t, s, err)
	if sc := l.of(watertight.EventStateChange); len(sc) != 1 || sc[0].To != "unknown" || !strings.Contains(sc[0].Reason, "panicked") {
		t.Fatalf("events %+v", sc)
	}
}

// TestIdempotencyRelease: Release and ReleaseIdempotencyKey release the key:
// the answer goes out, and a retry runs again. An unstorable result (too
// large, not a proto.Message) marks the key "outcome unknown", and a store
// that cannot keep the result leaves it claimed: the answer goes out, and a
// retry does not run.
func TestIdempotencyRelease(t *testing.T) {
	ctx := context.Background()
	once := func(t *testing.T, icpt grpc.UnaryServerInterceptor, h grpc.UnaryHandler) {
		t.Helper()
		var runs int
		hh := func(ctx context.Context, req any) (any, error) { runs++; return h(ctx, req) }
		if _, _, err := direct(ctx, icpt, "k", "x", hh); err != nil {
			t.Fatalf("first call: %v", err)
		}
		_, s, err := direct(ctx, icpt, "k", "x", hh)
		if runs != 1 {
			t.Fatalf("%d runs, want 1", runs)
		}
		wantUnknown(t, s, err)
	}
	twice := func(t *testing.T, icpt grpc.UnaryServerInterceptor, h grpc.UnaryHandler) {
		t.Helper()
		var runs int
		hh := func(ctx context.Context, req any) (any, error) { runs++; return h(ctx, req) }
		_, _, err1 := direct(ctx, icpt, "k", "x", hh)
		_, s, err2 := direct(ctx, icpt, "k", "x", hh)
		if runs != 2 || s.replayed() || status.Code(err1) != status.Code(err2) {
			t.Fatalf("%d runs (%v, %v), want 2: the key was not released", runs, err1, err2)
		}
	}
	unavailable := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unavailable, "dependency down")
	}
	t.Run("Release", func(t *testing.T) {
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Release: func(_ context.Context, m string, err error) bool {
			return m == methodCall && status.Code(err) == codes.Unavailable
		}})
		twice(t, icpt, unavailable)
	})
	t.Run("ReleaseIdempotencyKey", func(t *testing.T) {
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{})
		twice(t, icpt, func(ctx context.Context, _ any) (any, error) {
			if k, ok := watertightgrpc.IdempotencyKeyFrom(ctx); !ok || k != "k" {
				t.Errorf("IdempotencyKeyFrom: %q, %v", k, ok)
			}
			if !watertightgrpc.ReleaseIdempotencyKey(ctx) {
				t.Error("ReleaseIdempotencyKey: false")
			}
			return nil, status.Error(codes.Unavailable, "dependency down")
		})
		if watertightgrpc.ReleaseIdempotencyKey(ctx) {
			t.Error("ReleaseIdempotencyKey outside a claimed call: true")
		}
		if _, ok := watertightgrpc.IdempotencyKeyFrom(ctx); ok {
			t.Error("IdempotencyKeyFrom outside a claimed call: ok")
		}
	})
	t.Run("too-large", func(t *testing.T) {
		var l events
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{MaxResponseBytes: 64, Listener: &l})
		big := strings.Repeat("x", 100)
		// The reply still reaches the client.
		if out, _, err := direct(ctx, icpt, "k0", "x", func(context.Context, any) (any, error) { return wrapperspb.String(big), nil }); err != nil || out != big {
			t.Fatalf("too large a reply: %v", err)
		}
		once(t, icpt, func(context.Context, any) (any, error) { return wrapperspb.String(big), nil })
		if sc := l.of(watertight.EventStateChange); len(sc) != 2 || sc[0].To != "unknown" || !strings.Contains(sc[0].Reason, "MaxResponseBytes") {
			t.Fatalf("events %+v", sc)
		}
	})
	t.Run("not-proto", func(t *testing.T) {
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{
			Fingerprint: func(m string, req any) (string, error) { return m + fmt.Sprint(req), nil },
		})
		var runs int
		for i := range 2 {
			s := &idemStream{}
			c := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", "k")), s)
			resp, err := icpt(c, "raw request", &grpc.UnaryServerInfo{FullMethod: methodCall}, func(context.Context, any) (any, error) {
				runs++
				return "raw reply", nil
			})
			if i == 0 && (err != nil || resp != "raw reply") {
				t.Fatalf("%v, %v", resp, err)
			}
			if i == 1 {
				wantUnknown(t, s, err)
			}
		}
		if runs != 1 {
			t.Fatalf("%d runs, want 1: an unstorable reply marks the key unknown", runs)
		}
	})
	t.Run("store-cannot-keep", func(t *testing.T) {
		st := &stubStore{completeErr: errors.New("out of memory")}
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: st})
		if out, _, err := direct(ctx, icpt, "k", "x", func(context.Context, any) (any, error) { return wrapperspb.String("ok"), nil }); err != nil || out != "ok" {
			t.Fatalf("%q, %v", out, err)
		}
		if st.released != 0 {
			t.Fatalf("%d releases, want 0: the handler ran", st.released)
		}
	})
	t.Run("store-refuses", func(t *testing.T) {
		// A store that is up but refuses the record keeps the marker.
		mem, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxBytes: 8000})
		if err != nil {
			t.Fatal(err)
		}
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: mem})
		once(t, icpt, func(context.Context, any) (any, error) { return wrapperspb.String(strings.Repeat("x", 20000)), nil })
	})
}

// TestIdempotencyForgotten: a key whose result the store dropped early is
// answered FAILED_PRECONDITION with the trailer idempotency-outcome:
// forgotten, and nothing runs.
func TestIdempotencyForgotten(t *testing.T) {
	st := &stubStore{claim: func(string) (idempotency.Claim, error) {
		return idempotency.Claim{State: idempotency.Forgotten}, nil
	}}
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: st})
	_, s, err := direct(context.Background(), icpt, "k", "x", func(context.Context, any) (any, error) {
		t.Fatal("a forgotten key ran")
		return nil, nil
	})
	wantCode(t, err, codes.FailedPrecondition, "too old")
	if !errors.Is(err, idempotency.ErrForgotten) {
		t.Fatalf("%v does not match idempotency.ErrForgotten", err)
	}
	if v := s.trailer.Get(watertightgrpc.MetadataIdempotencyOutcome); len(v) != 1 || v[0] != "forgotten" {
		t.Fatalf("trailer = %q, want forgotten", v)
	}
}

// TestIdempotencyInternalErrors: a request that cannot be fingerprinted
// (not a proto.Message) and a stored result that cannot be decoded are
// INTERNAL, and nothing runs.
func TestIdempotencyInternalErrors(t *testing.T) {
	ctx := context.Background()
	never := func(context.Context, any) (any, error) {
		t.Fatal("the handler ran")
		return nil, nil
	}
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{})
	c := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", "k")), &idemStream{})
	_, err := icpt(c, "not a proto", &grpc.UnaryServerInfo{FullMethod: methodCall}, never)
	wantCode(t, err, codes.Internal, "Fingerprint")

	for name, rec := range map[string]idempotency.Record{
		"unknown type": {Status: 0, Header: map[string][]string{"Watertight-Grpc": {"1"}, "Grpc-Message-Type": {"no.such.Message"}}},
		"http record":  {Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte("{}")},
		"bad status":   {Status: 13, Header: map[string][]string{"Watertight-Grpc": {"1"}}, Body: []byte{0xff}},
	} {
		st := &stubStore{claim: func(fp string) (idempotency.Claim, error) {
			r := rec
			r.Fingerprint = fp
			return idempotency.Claim{State: idempotency.Completed, Fingerprint: fp, Record: &r}, nil
		}}
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: st})
		_, _, err := direct(ctx, icpt, "k", "x", never)
		if status.Code(err) != codes.Internal {
			t.Fatalf("%s: %v, want INTERNAL", name, err)
		}
	}
}

// TestIdempotencySharedWithHTTP: with one store, a key is one key across
// watertighthttp.Idempotency and the gRPC interceptor (the same scoped store
// key): its second use, by the other protocol, is a different request and
// is refused.
func TestIdempotencySharedWithHTTP(t *testing.T) {
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hh, err := watertighthttp.NewIdempotencyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "http")
	}), watertighthttp.IdempotencyConfig{Store: store, Scope: func(*http.Request) string { return "tenant-1" }, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("x"))
	req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"shared"`)
	hh.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP: %d", rec.Code)
	}
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: store, Scope: func(context.Context) string { return "tenant-1" }})
	_, _, err = direct(context.Background(), icpt, "shared", "x", func(context.Context, any) (any, error) {
		t.Fatal("the handler ran")
		return nil, nil
	})
	wantCode(t, err, codes.FailedPrecondition, "")
	// Another scope: another key.
	icpt = idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: store, Scope: func(context.Context) string { return "tenant-2" }})
	if _, _, err := direct(context.Background(), icpt, "shared", "x", func(context.Context, any) (any, error) {
		return wrapperspb.String("grpc"), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestIdempotencyMethodsAndHandles: Methods takes service-config entries;
// Handles decides instead.
func TestIdempotencyMethodsAndHandles(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]watertightgrpc.IdempotencyConfig{
		"service":  {Methods: []string{"/" + svcName + "/*"}},
		"service/": {Methods: []string{"/" + svcName + "/"}},
		"method":   {Methods: []string{methodCall}},
		"handles":  {Handles: func(m string) bool { return m == methodCall }},
	} {
		icpt := idemInterceptor(t, cfg)
		runs := 0
		h := func(context.Context, any) (any, error) { runs++; return wrapperspb.String("ok"), nil }
		direct(ctx, icpt, "k", "x", h)
		direct(ctx, icpt, "k", "x", h)
		if runs != 1 {
			t.Fatalf("%s: %d runs, want 1", name, runs)
		}
	}
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Methods: []string{"/other.Service/*"}})
	runs := 0
	h := func(context.Context, any) (any, error) { runs++; return wrapperspb.String("ok"), nil }
	direct(ctx, icpt, "k", "x", h)
	direct(ctx, icpt, "k", "x", h)
	if runs != 2 {
		t.Fatalf("a method not listed: %d runs, want 2", runs)
	}
}

func TestIdempotencyConfigErrors(t *testing.T) {
	scope := watertightgrpc.SharedScope
	for _, c := range []struct {
		cfg  watertightgrpc.IdempotencyConfig
		want string
	}{
		{watertightgrpc.IdempotencyConfig{}, "IdempotencyConfig.Scope must be set"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, TTL: -1}, "IdempotencyConfig.TTL must be >= 0"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, LockTTL: -1}, "IdempotencyConfig.LockTTL must be >= 0"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, MaxWait: -1}, "IdempotencyConfig.MaxWait must be >= 0"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, MaxKeyLength: -1}, "IdempotencyConfig.MaxKeyLength must be >= 0"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, InFlightCode: codes.Internal}, "IdempotencyConfig.InFlightCode must be"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, Methods: []string{"Call"}}, "IdempotencyConfig.Methods[0] must be"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, Methods: []string{"/a.B/C*"}}, "IdempotencyConfig.Methods[0] must be"},
		{watertightgrpc.IdempotencyConfig{Scope: scope, Methods: []string{}, Handles: func(string) bool { return true }}, "Methods and Handles must not both be set"},
	} {
		_, err := watertightgrpc.IdempotencyUnaryServerInterceptor(c.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "watertightgrpc: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
}

// FuzzIdempotencyReplay feeds the replay path records of any shape, as a
// store shared with other programs (or corrupted) might hold: the
// interceptor never panics and never runs the handler, and answers with a
// proto reply, the record's status, or INTERNAL.
func FuzzIdempotencyReplay(f *testing.F) {
	// Seeds: the records the interceptor itself stores.
	rec := &stubStore{}
	icpt := idemInterceptor(f, watertightgrpc.IdempotencyConfig{Store: rec, KeepMetadata: true})
	ctx := context.Background()
	direct(ctx, icpt, "k", "x", func(ctx context.Context, _ any) (any, error) {
		grpc.SetHeader(ctx, metadata.Pairs("x-a", "1", "x-b-bin", "\x00"))
		return wrapperspb.String("ok"), nil
	})
	direct(ctx, icpt, "k", "x", func(ctx context.Context, _ any) (any, error) {
		grpc.SetTrailer(ctx, metadata.Pairs("x-t", "2"))
		st, _ := status.New(codes.NotFound, "gone").WithDetails(wrapperspb.String("d"))
		return nil, st.Err()
	})
	direct(ctx, icpt, "k", "x", func(context.Context, any) (any, error) {
		return nil, fmt.Errorf("x: %w", watertight.ErrOverloaded)
	})
	for _, r := range rec.completed {
		h := r.Header
		f.Add(r.Status, strings.Join(h["Watertight-Grpc"], "\n"), strings.Join(h["Grpc-Message-Type"], "\n"), r.Body,
			strings.Join(h["Grpc-Header-Md"], "\n"), strings.Join(h["Grpc-Trailer-Md"], "\n"), len(h["Grpc-Overloaded"]) > 0)
	}
	f.Add(-1, "1", "", []byte(nil), "", "", false)
	f.Add(99, "2", "google.protobuf.Empty", []byte{1, 2}, "grpc-status AA", "BAD KEY x", true)
	f.Fuzz(func(t *testing.T, code int, format, typ string, body []byte, hdr, trl string, overloaded bool) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		h := map[string][]string{"Watertight-Grpc": split(format), "Grpc-Message-Type": split(typ),
			"Grpc-Header-Md": split(hdr), "Grpc-Trailer-Md": split(trl)}
		if overloaded {
			h["Grpc-Overloaded"] = []string{"true"}
		}
		st := &stubStore{claim: func(fp string) (idempotency.Claim, error) {
			return idempotency.Claim{State: idempotency.Completed, Fingerprint: fp,
				Record: &idempotency.Record{Fingerprint: fp, Status: code, Header: h, Body: body}}, nil
		}}
		icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{Store: st})
		s := &idemStream{}
		c := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k")), s)
		resp, err := icpt(c, wrapperspb.String("x"), &grpc.UnaryServerInfo{FullMethod: methodCall}, func(context.Context, any) (any, error) {
			t.Fatal("the handler ran")
			return nil, nil
		})
		switch {
		case err == nil:
			if _, ok := resp.(proto.Message); !ok || code != 0 || !s.replayed() {
				t.Fatalf("reply %T for status %d", resp, code)
			}
			for k := range s.header {
				if strings.HasPrefix(k, "grpc-") {
					t.Fatalf("replayed a reserved key %q", k)
				}
			}
		case status.Code(err) == codes.Internal:
		case int(status.Code(err)) == code && s.replayed():
			if overloaded != watertight.IsOverloaded(err) {
				t.Fatalf("overloaded %v, error %v", overloaded, err)
			}
		default:
			t.Fatalf("status %d replayed as %v", code, err)
		}
	})
}

// ExampleIdempotencyUnaryServerInterceptor: a payment method that runs once
// per idempotency key. The client sends one key per operation; when the
// answer to the first call is lost and the operation is sent again with the
// same key, the server replays the stored answer instead of charging twice.
func ExampleIdempotencyUnaryServerInterceptor() {
	idem, err := watertightgrpc.IdempotencyUnaryServerInterceptor(watertightgrpc.IdempotencyConfig{
		Scope:    watertightgrpc.ScopeMetadata("x-api-key"), // better: the authenticated caller
		Methods:  []string{methodCall},
		Required: func(context.Context, string) bool { return true },
	})
	if err != nil {
		panic(err)
	}
	var charges atomic.Int32
	ts := &testServer{call: func(_ context.Context, _, in string) (string, error) {
		return fmt.Sprintf("charge #%d of %s", charges.Add(1), in), nil
	}}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	srv.RegisterService(&serviceDesc, ts)
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()

	cli, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{})
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(cli))
	if err != nil {
		panic(err)
	}
	defer cc.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "shop-1")
	op := retry.WithIdempotencyKey(ctx, idempotency.NewKey()) // one key per payment
	for range 2 {
		var hd metadata.MD
		out := new(wrapperspb.StringValue)
		if err := cc.Invoke(op, methodCall, wrapperspb.String("42 EUR"), out, grpc.Header(&hd)); err != nil {
			panic(err)
		}
		fmt.Printf("%s (replayed: %v)\n", out.GetValue(), hd.Get(watertightgrpc.MetadataIdempotentReplayed))
	}
	err = cc.Invoke(ctx, methodCall, wrapperspb.String("42 EUR"), new(wrapperspb.StringValue))
	fmt.Println("without a key:", status.Code(err))
	fmt.Println("charges:", charges.Load())
	// Output:
	// charge #1 of 42 EUR (replayed: [])
	// charge #1 of 42 EUR (replayed: [true])
	// without a key: InvalidArgument
	// charges: 1
}

// BenchmarkIdempotency is the interceptor's cost, with a MemoryStore and no
// network: a replay (claim finds the result, decode, metadata) and a first
// call (fingerprint, claim, run, encode, complete), each with a new key.
func BenchmarkIdempotency(b *testing.B) {
	icpt := idemInterceptor(b, watertightgrpc.IdempotencyConfig{})
	h := func(context.Context, any) (any, error) { return wrapperspb.String("reply"), nil }
	ctx := context.Background()
	direct(ctx, icpt, "bench", "x", h)
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := direct(ctx, icpt, "bench", "x", h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := direct(ctx, icpt, "bench", "x", h); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	var n atomic.Int64
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := direct(ctx, icpt, "k"+itoa(int(n.Add(1))), "x", h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := direct(ctx, icpt, "k"+itoa(int(n.Add(1))), "x", h); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("no-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := direct(ctx, icpt, "", "x", h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
