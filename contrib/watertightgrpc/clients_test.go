package watertightgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/watertighthttp"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// mdClient is the metadata key that carries a test call's client identity.
const mdClient = "x-test-client"

// clientID is the ServerConfig.Client of the per-client tests.
func clientID(ctx context.Context, _ string) string {
	if vs := metadata.ValueFromIncomingContext(ctx, mdClient); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// as returns a bounded context whose calls come from client id ("" for no
// identity).
func as(t *testing.T, id string) context.Context {
	if id == "" {
		return bounded(t)
	}
	return metadata.AppendToOutgoingContext(bounded(t), mdClient, id)
}

// clientLimitMsg is the message of a per-client rejection of a call to key
// by a server with MaxPerClient n.
func clientLimitMsg(n int, key string) string {
	reqs := fmt.Sprintf("%d requests", n)
	if n == 1 {
		reqs = "1 request"
	}
	return "watertight: shed: watertightgrpc: client at its limit of requests in flight: this client already has " +
		reqs + " in the server, running or queued (method \"" + key + "\")"
}

// wantClientShed checks a per-client rejection received over the wire:
// RESOURCE_EXHAUSTED, the negative pushback, the overloaded signal on the
// client side, and a message that says what happened without naming the
// client.
func wantClientShed(t *testing.T, err error, trailer metadata.MD, limit int, key, client string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v; want RESOURCE_EXHAUSTED", err)
	}
	if msg := status.Convert(err).Message(); msg != clientLimitMsg(limit, key) {
		t.Errorf("message %q, want %q", msg, clientLimitMsg(limit, key))
	}
	if pb := trailer.Get(watertightgrpc.MetadataPushback); len(pb) != 1 || pb[0] != "-1" {
		t.Errorf("trailer %v; want %s: -1", trailer, watertightgrpc.MetadataPushback)
	}
	if strings.Contains(err.Error(), client) || strings.Contains(fmt.Sprint(trailer), client) {
		t.Errorf("the answer names the client %q: %v, trailer %v", client, err, trailer)
	}
}

// wantClientEvent checks that e is the EventShed of a per-client rejection
// of a call to key, not naming the client.
func wantClientEvent(t *testing.T, e watertight.Event, key, client string) {
	t.Helper()
	if e.Kind != watertight.EventShed || e.Source != "grpc" || e.Key != key ||
		!errors.Is(e.Err, watertightgrpc.ErrClientLimit) || !watertight.IsSaturation(e.Err) {
		t.Errorf("event %+v; want an EventShed for %s with ErrClientLimit, a saturation", e, key)
	}
	if strings.Contains(fmt.Sprintf("%+v %v", e, e.Err), client) {
		t.Errorf("the event names the client %q: %+v", client, e)
	}
	if e.Code != watertighthttp.CodeClientLimit {
		t.Errorf("code %q, want %q", e.Code, watertighthttp.CodeClientLimit)
	}
}

// holdServer is a test server whose calls with an input that starts with
// "hold" (and Watch streams, named by their first message) report their
// input on entered and wait until the test frees that input; other calls
// answer at once.
type holdServer struct {
	*testServer
	entered chan string

	mu    sync.Mutex
	gates map[string]chan struct{}
}

func newHoldServer() *holdServer {
	h := &holdServer{entered: make(chan string, 32), gates: map[string]chan struct{}{}}
	h.testServer = &testServer{
		call: func(ctx context.Context, method, in string) (string, error) {
			if strings.HasPrefix(in, "hold") {
				if err := h.hold(ctx, in); err != nil {
					return "", err
				}
			}
			return "ok", nil
		},
		stream: func(_ string, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return h.hold(ss.Context(), in.GetValue())
		},
	}
	return h
}

func (h *holdServer) gate(in string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gates[in]
	if g == nil {
		g = make(chan struct{})
		h.gates[in] = g
	}
	return g
}

// hold reports in on entered and waits until it is freed.
func (h *holdServer) hold(ctx context.Context, in string) error {
	g := h.gate(in)
	h.entered <- in
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// free lets the call (or stream) named in end.
func (h *holdServer) free(in string) { close(h.gate(in)) }

// clientLimitEnv serves h over TCP on 127.0.0.1 through both server
// interceptors made together from cfg (Client set to clientID), behind an
// interceptor that counts the unary calls arriving (the returned counter),
// with the unary client interceptor of cli when it is not nil.
func clientLimitEnv(t *testing.T, h *holdServer, cfg watertightgrpc.ServerConfig, cli *watertightgrpc.ClientConfig) (*env, *atomic.Int64) {
	t.Helper()
	cfg.Client = clientID
	u, s, err := watertightgrpc.ServerInterceptors(cfg)
	if err != nil {
		t.Fatal(err)
	}
	arrived := new(atomic.Int64)
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		arrived.Add(1)
		return h(ctx, req)
	}
	var dopts []grpc.DialOption
	if cli != nil {
		cu, err := watertightgrpc.UnaryClientInterceptor(*cli)
		if err != nil {
			t.Fatal(err)
		}
		dopts = append(dopts, grpc.WithChainUnaryInterceptor(cu))
	}
	sopts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, u), grpc.ChainStreamInterceptor(s)}
	return newEnv(t, "tcp", h.testServer, sopts, dopts...), arrived
}

// unblock closes ch unless it is closed already. Deferred in a synctest
// bubble, it lets the goroutines of a failed test end.
func unblock(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

type callResult struct {
	in  string
	err error
}

// goCall makes the call in a goroutine and sends its result on results.
func goCall(e *env, ctx context.Context, method, in string, results chan<- callResult) {
	go func() {
		_, err := e.call(ctx, method, in)
		results <- callResult{in, err}
	}()
}

// wantEntered receives from entered and checks it is in.
func wantEntered(t *testing.T, h *holdServer, in string) {
	t.Helper()
	if got := <-h.entered; got != in {
		t.Fatalf("%q entered, want %q", got, in)
	}
}

// wantResult receives a result and checks it is in's, without error.
func wantResult(t *testing.T, results <-chan callResult, in string) {
	t.Helper()
	r := <-results
	if r.in != in || r.err != nil {
		t.Fatalf("result %s: %v; want %s without error", r.in, r.err, in)
	}
}

func TestServerClientLimit(t *testing.T) {
	var l events
	h := newHoldServer()
	// RejectCode Unavailable: the client's rejection is RESOURCE_EXHAUSTED
	// all the same.
	e, arrived := clientLimitEnv(t, h, watertightgrpc.ServerConfig{MaxPerClient: 2, RejectCode: codes.Unavailable, Listener: &l}, nil)
	const alice = "alice-secret-key"
	results := make(chan callResult, 16)
	goCall(e, as(t, alice), methodCall, "hold-a1", results)
	wantEntered(t, h, "hold-a1")
	goCall(e, as(t, alice), methodCall, "hold-a2", results)
	wantEntered(t, h, "hold-a2")

	// Alice's third call, to another method, finds her at her limit.
	var trailer metadata.MD
	_, err := e.call(as(t, alice), methodOther, "x", grpc.Trailer(&trailer))
	wantClientShed(t, err, trailer, 2, methodOther, alice)
	shed := l.of(watertight.EventShed)
	if len(shed) != 1 {
		t.Fatalf("%d shed events, want 1: %+v", len(shed), shed)
	}
	wantClientEvent(t, shed[0], methodOther, alice)

	// Another client, and calls without an identity, are not limited by
	// Alice's count.
	goCall(e, as(t, "bob"), methodCall, "hold-b", results)
	wantEntered(t, h, "hold-b")
	for _, in := range []string{"hold-n1", "hold-n2", "hold-n3"} {
		goCall(e, as(t, ""), methodCall, in, results)
		wantEntered(t, h, in)
	}

	// One of Alice's ending makes room for one more, and one only.
	h.free("hold-a1")
	wantResult(t, results, "hold-a1")
	goCall(e, as(t, alice), methodCall, "hold-a3", results)
	wantEntered(t, h, "hold-a3")
	trailer = nil
	_, err = e.call(as(t, alice), methodCall, "x", grpc.Trailer(&trailer))
	wantClientShed(t, err, trailer, 2, methodCall, alice)
	if shed := l.of(watertight.EventShed); len(shed) != 2 {
		t.Fatalf("%d shed events, want 2", len(shed))
	} else {
		wantClientEvent(t, shed[1], methodCall, alice)
	}

	for _, in := range []string{"hold-a2", "hold-a3", "hold-b", "hold-n1", "hold-n2", "hold-n3"} {
		h.free(in)
		wantResult(t, results, in)
	}
	// With nothing in flight, Alice has her two places back.
	for _, in := range []string{"hold-a4", "hold-a5"} {
		goCall(e, as(t, alice), methodCall, in, results)
		wantEntered(t, h, in)
	}
	for _, in := range []string{"hold-a4", "hold-a5"} {
		h.free(in)
		wantResult(t, results, in)
	}
	if n, m := arrived.Load(), h.count(); n != 11 || m != 9 {
		t.Fatalf("%d calls arrived and %d ran; want 11 and 9 (the two rejected never ran)", n, m)
	}
}

// A call waiting in a method's queue counts against its client, and a call
// the client limit rejects never joins the queue.
func TestServerClientLimitCountsQueued(t *testing.T) {
	var l events
	e, queued, entered, step := queueEnv(t, "tcp", watertightgrpc.ServerConfig{
		MaxConcurrent: 1, MaxQueue: 5, Client: clientID, MaxPerClient: 2, Listener: &l,
	})
	results := make(chan callResult, 4)
	goCall(e, as(t, "alice"), methodCall, "hold", results)
	if in := <-entered; in != "hold" {
		t.Fatalf("%q entered, want hold", in)
	}
	goCall(e, as(t, "alice"), methodCall, "q", results)
	if in := <-queued; in != "q" {
		t.Fatalf("%q queued, want q", in)
	}
	var trailer metadata.MD
	_, err := e.call(as(t, "alice"), methodCall, "x", grpc.Trailer(&trailer))
	wantClientShed(t, err, trailer, 2, methodCall, "alice")
	// The queue had room: Bob's call joins it, Alice's rejected one did not.
	goCall(e, as(t, "bob"), methodCall, "b", results)
	if in := <-queued; in != "b" {
		t.Fatalf("%q queued, want Bob's b (the rejected x must not queue)", in)
	}
	for _, want := range []string{"q", "b"} {
		step <- struct{}{}
		if in := <-entered; in != want {
			t.Fatalf("%q entered, want %s", in, want)
		}
	}
	step <- struct{}{}
	for range 3 {
		if r := <-results; r.err != nil {
			t.Fatalf("%s: %v", r.in, r.err)
		}
	}
	shed := l.of(watertight.EventShed)
	if len(shed) != 1 {
		t.Fatalf("shed events %+v; want one", shed)
	}
	wantClientEvent(t, shed[0], methodCall, "alice")
}

// A call that admission refuses gives its client's count back: Alice, at
// most one call in flight, is refused by the full method, then calls another
// method.
func TestServerClientLimitReleasedOnRefusal(t *testing.T) {
	var l events
	h := newHoldServer()
	e, _ := clientLimitEnv(t, h, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: -1, MaxPerClient: 1, Listener: &l}, nil)
	results := make(chan callResult, 1)
	goCall(e, as(t, "bob"), methodCall, "hold-b", results)
	wantEntered(t, h, "hold-b")
	for i := range 3 {
		if _, err := e.call(as(t, "alice"), methodCall, "x"); status.Code(err) != codes.ResourceExhausted ||
			!strings.Contains(status.Convert(err).Message(), "method at its limit") {
			t.Fatalf("refusal %d: %v; want the method's RESOURCE_EXHAUSTED", i, err)
		}
	}
	if _, err := e.call(as(t, "alice"), methodOther, "y"); err != nil {
		t.Fatalf("Alice's call after the refusals: %v; want it to run (her count given back)", err)
	}
	h.free("hold-b")
	wantResult(t, results, "hold-b")
	for i, ev := range l.of(watertight.EventShed) {
		if !errors.Is(ev.Err, watertightgrpc.ErrMethodFull) {
			t.Errorf("event %d: %v; want ErrMethodFull", i, ev.Err)
		}
		if ev.Code != watertighthttp.CodeRouteFull {
			t.Errorf("event %d: code %q, want %q", i, ev.Code, watertighthttp.CodeRouteFull)
		}
	}
}

// The other ways out give the count back too: a queued call whose deadline
// passes, one let in with too little time left, and a handler that panics.
func TestServerClientLimitReleasedOnEveryPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{
			MaxConcurrent: 1, MaxQueue: 1, Client: clientID, MaxPerClient: 1,
			Deadline: propagator(t, deadline.Config{MinRemaining: 100 * time.Millisecond}),
		})
		alice := func(ctx context.Context, method string) *request {
			return newRequest(ctx, method, mdClient, "alice")
		}
		// aliceRuns checks that Alice has her place: nothing of hers is
		// counted.
		aliceRuns := func(after string) {
			t.Helper()
			if err := alice(context.Background(), methodOther).run(icpt, okHandler); err != nil {
				t.Fatalf("after %s: Alice's call: %v; want it to run", after, err)
			}
		}

		b := newBlocker()
		defer unblock(b.release) // when the test fails: let the goroutines end
		done := make(chan error, 3)
		go func() { done <- newRequest(context.Background(), methodCall, mdClient, "bob").run(icpt, b.handler) }()
		<-b.entered

		// Queued until its deadline passes.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r := alice(ctx, methodCall)
		wantShed(t, r, r.run(icpt, okHandler), codes.ResourceExhausted)
		cancel()
		aliceRuns("giving up in the queue")

		// Let in with 50ms left, less than MinRemaining.
		ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		r = alice(ctx, methodCall)
		res := make(chan error)
		go func() { res <- r.run(icpt, okHandler) }()
		time.Sleep(250 * time.Millisecond) // virtual time
		close(b.release)
		wantShed(t, r, <-res, codes.Unavailable)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		aliceRuns("a deadline too short after the queue")

		// A handler that panics.
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the handler's panic was swallowed")
				}
			}()
			_ = alice(context.Background(), methodCall).run(icpt, func(context.Context, any) (any, error) { panic("boom") })
		}()
		aliceRuns("a panic")
	})
}

// watchAs opens a Watch stream as client id, named by its first message.
func watchAs(t *testing.T, e *env, id, name string) grpc.ClientStream {
	t.Helper()
	cs, err := e.cc.NewStream(as(t, id), watchDesc, methodWatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String(name)); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return cs
}

// A stream counts against its client until its handler returns.
func TestServerClientLimitStream(t *testing.T) {
	var l events
	h := newHoldServer()
	e, _ := clientLimitEnv(t, h, watertightgrpc.ServerConfig{MaxPerClient: 1, Listener: &l}, nil)
	first := watchAs(t, e, "alice", "watch-1")
	wantEntered(t, h, "watch-1")

	// While it runs, Alice's unary call and second stream are refused.
	var trailer metadata.MD
	_, err := e.call(as(t, "alice"), methodCall, "x", grpc.Trailer(&trailer))
	wantClientShed(t, err, trailer, 1, methodCall, "alice")
	second := watchAs(t, e, "alice", "watch-2")
	err = second.RecvMsg(new(wrapperspb.StringValue))
	wantClientShed(t, err, second.Trailer(), 1, methodWatch, "alice")
	// Bob is not.
	if _, err := e.call(as(t, "bob"), methodCall, "y"); err != nil {
		t.Fatalf("Bob's call: %v", err)
	}

	h.free("watch-1")
	if err := first.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("first stream ended with %v, want io.EOF", err)
	}
	// Its handler returned: Alice has her place back.
	if _, err := e.call(as(t, "alice"), methodCall, "z"); err != nil {
		t.Fatalf("Alice's call after her stream ended: %v", err)
	}
	shed := l.of(watertight.EventShed)
	if len(shed) != 2 {
		t.Fatalf("shed events %+v; want two", shed)
	}
	wantClientEvent(t, shed[0], methodCall, "alice")
	wantClientEvent(t, shed[1], methodWatch, "alice")
}

// A stream interceptor built alone counts its streams: a client's second
// stream is refused while its first runs, RESOURCE_EXHAUSTED whatever
// RejectCode says, and let in once the first's handler has returned.
func TestServerClientLimitStreamAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := streamInterceptor(t, watertightgrpc.ServerConfig{Client: clientID, MaxPerClient: 1, RejectCode: codes.Unavailable})
		alice := func() *fakeServerStream {
			return &fakeServerStream{ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs(mdClient, "alice"))}
		}
		entered, release := make(chan struct{}, 3), make(chan struct{})
		defer unblock(release)
		h := func(any, grpc.ServerStream) error {
			entered <- struct{}{}
			<-release
			return nil
		}
		done := make(chan error, 3)
		go func() { done <- icpt(nil, alice(), streamInfo(methodWatch), h) }()
		<-entered
		second := alice()
		err := icpt(nil, second, streamInfo(methodUpload), h)
		if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != clientLimitMsg(1, methodUpload) {
			t.Fatalf("second stream: %v; want the client's RESOURCE_EXHAUSTED", err)
		}
		if pb := second.pushback(); len(pb) != 1 || pb[0] != "-1" {
			t.Fatalf("second stream's pushback %q, want -1", pb)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		go func() { done <- icpt(nil, alice(), streamInfo(methodWatch), h) }()
		<-entered
		if err := <-done; err != nil {
			t.Fatalf("third stream: %v", err)
		}
	})
}

// The client interceptor honours the rejection's pushback: the call is not
// retried, and the error carries the overloaded signal.
func TestClientDoesNotRetryClientLimit(t *testing.T) {
	var l events
	h := newHoldServer()
	e, arrived := clientLimitEnv(t, h, watertightgrpc.ServerConfig{MaxPerClient: 1, Listener: &l},
		&watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
	results := make(chan callResult, 1)
	goCall(e, as(t, "alice"), methodCall, "hold-a", results)
	wantEntered(t, h, "hold-a")
	_, err := e.call(as(t, "alice"), methodCall, "x")
	if status.Code(err) != codes.ResourceExhausted || !watertight.IsOverloaded(err) {
		t.Fatalf("err = %v; want RESOURCE_EXHAUSTED carrying the overloaded signal", err)
	}
	if n := arrived.Load(); n != 2 {
		t.Fatalf("%d calls reached the server, want 2: the rejected one was retried", n)
	}
	h.free("hold-a")
	wantResult(t, results, "hold-a")
	if n := len(l.of(watertight.EventShed)); n != 1 {
		t.Fatalf("%d shed events, want 1", n)
	}
}

func TestServerClientConfig(t *testing.T) {
	for _, n := range []int{0, -1} {
		cfg := watertightgrpc.ServerConfig{Client: clientID, MaxPerClient: n}
		_, err := watertightgrpc.UnaryServerInterceptor(cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "watertightgrpc: ServerConfig.MaxPerClient must be > 0") {
			t.Errorf("MaxPerClient %d: error %v, want one naming ServerConfig.MaxPerClient", n, err)
		}
		if _, err := watertightgrpc.StreamServerInterceptor(cfg); err == nil {
			t.Errorf("StreamServerInterceptor accepted MaxPerClient %d", n)
		}
		if _, _, err := watertightgrpc.ServerInterceptors(cfg); err == nil || !strings.Contains(err.Error(), "ServerConfig.MaxPerClient") {
			t.Errorf("ServerInterceptors, MaxPerClient %d: error %v", n, err)
		}
	}
	for _, n := range []int{0, -1, 1} {
		if _, err := watertightgrpc.UnaryServerInterceptor(watertightgrpc.ServerConfig{Client: clientID, MaxPerClient: 1, MaxClients: n}); err != nil {
			t.Errorf("MaxClients %d: %v", n, err)
		}
	}
	// MaxPerClient without Client: accepted and ignored.
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxPerClient: 1})
		b := newBlocker()
		defer unblock(b.release)
		done := make(chan error, 3)
		for range 2 {
			go func() { done <- newRequest(context.Background(), methodCall, mdClient, "alice").run(icpt, b.handler) }()
			<-b.entered
		}
		close(b.release)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// With the client table full of busy clients, a new client's calls share
// the overflow count, limited like one client: Bob's first call runs, his
// second and Carol's first are refused (ErrClientOverflow). With room in
// the table, Bob is refused at his own limit and Carol runs.
func TestServerMaxClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, maxClients := range []int{1, 0} {
			icpt := serverInterceptor(t, watertightgrpc.ServerConfig{Client: clientID, MaxPerClient: 1, MaxClients: maxClients, MaxConcurrent: -1})
			b := newBlocker()
			defer unblock(b.release)
			done := make(chan error, 4)
			for _, who := range []string{"alice", "bob"} {
				go func() { done <- newRequest(context.Background(), methodCall, mdClient, who).run(icpt, b.handler) }()
				<-b.entered
			}
			second := make(chan error, 1)
			go func() { second <- newRequest(context.Background(), methodCall, mdClient, "bob").run(icpt, b.handler) }()
			synctest.Wait()
			if len(b.entered) != 0 {
				t.Fatalf("MaxClients %d: Bob's second call ran, beyond MaxPerClient 1", maxClients)
			}
			err := <-second
			want := map[int]error{1: watertightgrpc.ErrClientOverflow, 0: watertightgrpc.ErrClientLimit}[maxClients]
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), want.Error()) {
				t.Fatalf("MaxClients %d: Bob's second call: %v; want RESOURCE_EXHAUSTED for %v", maxClients, err, want)
			}
			r := newRequest(context.Background(), methodCall, mdClient, "carol")
			go func() { done <- r.run(icpt, b.handler) }()
			synctest.Wait()
			entered := len(b.entered) == 1
			switch {
			case maxClients == 1 && entered:
				t.Fatal("MaxClients 1: Carol's call ran; want it refused, the overflow count at its limit (Bob's call)")
			case maxClients == 0 && !entered:
				t.Fatal("MaxClients 0 (10000): Carol's call did not run")
			}
			close(b.release)
			errs := 0
			for range 3 {
				if err := <-done; err != nil {
					errs++
				}
			}
			if want := map[int]int{1: 1, 0: 0}[maxClients]; errs != want {
				t.Fatalf("MaxClients %d: %d calls refused, want %d", maxClients, errs, want)
			}
		}
	})
}

// Issue 23, on a real server: once MaxClients clients are busy, the clients
// beyond them share one overflow count limited like one client, instead of
// going unlimited. Four busy clients hold a table of four; ten more clients,
// three calls each, together get two calls in; the other 28 get
// RESOURCE_EXHAUSTED with the negative pushback and ErrClientOverflow, the
// metrics label client_overflow.
func TestServerClientOverflow(t *testing.T) {
	var l events
	h := newHoldServer()
	h.entered = make(chan string, 64)
	e, _ := clientLimitEnv(t, h, watertightgrpc.ServerConfig{MaxPerClient: 2, MaxClients: 4, Listener: &l}, nil)
	var gates []string
	defer func() { // the calls still held end even when the test fails
		for _, in := range gates {
			h.free(in)
		}
	}()
	results := make(chan callResult, 64)
	for i := range 4 {
		in := fmt.Sprint("hold-busy-", i)
		goCall(e, as(t, fmt.Sprint("busy-", i)), methodCall, in, results)
		wantEntered(t, h, in)
		gates = append(gates, in)
	}
	const clients, each = 10, 3
	for i := range clients * each {
		goCall(e, as(t, fmt.Sprint("new-", i%clients)), methodCall, fmt.Sprint("hold-new-", i), results)
	}
	started, refused := 0, 0
	for started+refused < clients*each {
		select {
		case in := <-h.entered:
			gates = append(gates, in)
			started++
		case r := <-results:
			if status.Code(r.err) != codes.ResourceExhausted || !strings.Contains(status.Convert(r.err).Message(), watertightgrpc.ErrClientOverflow.Error()) {
				t.Fatalf("a refused newcomer got %v; want RESOURCE_EXHAUSTED for ErrClientOverflow", r.err)
			}
			if strings.Contains(r.err.Error(), "new-") {
				t.Errorf("the answer names the client: %v", r.err)
			}
			refused++
		}
	}
	if started != 2 {
		t.Fatalf("the clients beyond a full table of busy ones had %d calls in flight together, want 2 (MaxPerClient)", started)
	}
	shed := l.of(watertight.EventShed)
	if len(shed) != refused {
		t.Fatalf("%d shed events, want %d", len(shed), refused)
	}
	for _, ev := range shed {
		if ev.Source != "grpc" || ev.Key != methodCall || !errors.Is(ev.Err, watertightgrpc.ErrClientOverflow) ||
			errors.Is(ev.Err, watertightgrpc.ErrClientLimit) || !watertight.IsSaturation(ev.Err) || strings.Contains(fmt.Sprintf("%+v", ev), "new-") {
			t.Fatalf("event %+v; want an EventShed for %s with ErrClientOverflow, a saturation, not naming the client", ev, methodCall)
		}
		if ev.Code != watertighthttp.CodeClientOverflow {
			t.Fatalf("code %q, want %q", ev.Code, watertighthttp.CodeClientOverflow)
		}
	}
	// The pushback, on one more refused call.
	var trailer metadata.MD
	if _, err := e.call(as(t, "new-x"), methodCall, "x", grpc.Trailer(&trailer)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("one more newcomer: %v", err)
	}
	if pb := trailer.Get(watertightgrpc.MetadataPushback); len(pb) != 1 || pb[0] != "-1" {
		t.Errorf("trailer %v; want %s: -1", trailer, watertightgrpc.MetadataPushback)
	}
	held := gates
	gates = nil
	for _, in := range held {
		h.free(in)
		wantResult(t, results, in)
	}
}

// TestServerClientLimitRace makes many concurrent calls of three clients,
// four goroutines each: a client never has more than MaxPerClient running,
// every call runs or gets the client's rejection, and afterwards each
// client has all its places back.
func TestServerClientLimitRace(t *testing.T) {
	const maxPer = 2
	var mu sync.Mutex
	running := map[string]int{}
	var over atomic.Bool
	var l events
	icpt := serverInterceptor(t, watertightgrpc.ServerConfig{Client: clientID, MaxPerClient: maxPer, Listener: &l})
	h := func(ctx context.Context, _ any) (any, error) {
		id := clientID(ctx, "")
		mu.Lock()
		running[id]++
		if running[id] > maxPer {
			over.Store(true)
		}
		mu.Unlock()
		for range 10 { // let the others run meanwhile
			runtime.Gosched()
		}
		mu.Lock()
		running[id]--
		mu.Unlock()
		return "ok", nil
	}
	var wg sync.WaitGroup
	var bad, limited atomic.Int64
	for g := range 12 {
		wg.Go(func() {
			for range 50 {
				r := newRequest(context.Background(), methodCall, mdClient, fmt.Sprint("c", g%3))
				switch err := r.run(icpt, h); {
				case err == nil:
				case status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "client at its limit"):
					limited.Add(1)
				default:
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if over.Load() {
		t.Error("a client had more than MaxPerClient calls running")
	}
	if n := bad.Load(); n != 0 {
		t.Errorf("%d calls failed other than by the client limit", n)
	}
	if n := int64(len(l.of(watertight.EventShed))); n != limited.Load() {
		t.Errorf("%d shed events for %d rejections", n, limited.Load())
	}
	t.Logf("%d of 600 calls limited", limited.Load())
	// Every count is back to zero: each client can hold maxPer calls again.
	b := newBlocker()
	done := make(chan error, 3*maxPer)
	for c := range 3 {
		for range maxPer {
			go func() {
				done <- newRequest(context.Background(), methodCall, mdClient, fmt.Sprint("c", c)).run(icpt, b.handler)
			}()
			<-b.entered
		}
	}
	close(b.release)
	for range 3 * maxPer {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
