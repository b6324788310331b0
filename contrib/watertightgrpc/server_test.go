package watertightgrpc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// ---- calling the server interceptors directly --------------------------------

// fakeTransport records what an interceptor sets on the transport stream.
type fakeTransport struct {
	method  string
	mu      sync.Mutex
	trailer metadata.MD
}

func (f *fakeTransport) Method() string                  { return f.method }
func (f *fakeTransport) SetHeader(metadata.MD) error     { return nil }
func (f *fakeTransport) SendHeader(metadata.MD) error    { return nil }
func (f *fakeTransport) SetTrailer(md metadata.MD) error { f.set(md); return nil }

func (f *fakeTransport) set(md metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trailer = metadata.Join(f.trailer, md)
}

func (f *fakeTransport) pushback() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trailer.Get(watertightgrpc.MetadataPushback)
}

// request is one call through a unary server interceptor, made directly.
type request struct {
	ctx    context.Context
	tr     *fakeTransport
	method string
}

// newRequest returns a request for method whose incoming metadata holds kv,
// under ctx.
func newRequest(ctx context.Context, method string, kv ...string) *request {
	tr := &fakeTransport{method: method}
	ctx = grpc.NewContextWithServerTransportStream(ctx, tr)
	if len(kv) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	return &request{ctx: ctx, tr: tr, method: method}
}

// run calls icpt with handler h.
func (r *request) run(icpt grpc.UnaryServerInterceptor, h grpc.UnaryHandler) error {
	_, err := icpt(r.ctx, "req", &grpc.UnaryServerInfo{FullMethod: r.method}, h)
	return err
}

func serverInterceptor(t *testing.T, cfg watertightgrpc.ServerConfig) grpc.UnaryServerInterceptor {
	t.Helper()
	icpt, err := watertightgrpc.UnaryServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return icpt
}

func okHandler(context.Context, any) (any, error) { return "ok", nil }

// wantShed checks that err is a shed answer with code and the negative
// pushback.
func wantShed(t *testing.T, r *request, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), "watertight: shed") {
		t.Fatalf("err = %v; want a shed answer with code %v", err, code)
	}
	if pb := r.tr.pushback(); len(pb) != 1 || pb[0] != "-1" {
		t.Fatalf("trailer %s = %q; want -1", watertightgrpc.MetadataPushback, pb)
	}
}

func TestServerShedsShortAndExpiredDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l events
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{
			Name:     "srv",
			Deadline: propagator(t, deadline.Config{MinRemaining: 100 * time.Millisecond}),
			Listener: &l,
		})
		ran := 0
		h := func(context.Context, any) (any, error) { ran++; return "ok", nil }

		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		r := newRequest(short, methodCall)
		wantShed(t, r, r.run(icpt, h), codes.Unavailable)

		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		r = newRequest(expired, methodCall)
		wantShed(t, r, r.run(icpt, h), codes.Unavailable)

		enough, cancel3 := context.WithTimeout(context.Background(), 100*time.Millisecond) // exactly enough
		defer cancel3()
		if err := newRequest(enough, methodCall).run(icpt, h); err != nil {
			t.Fatal(err)
		}
		if err := newRequest(context.Background(), methodCall).run(icpt, h); err != nil {
			t.Fatal(err)
		}
		if ran != 2 {
			t.Fatalf("the handler ran %d times, want 2", ran)
		}
		shed := l.of(watertight.EventShed)
		if len(shed) != 2 || shed[0].Source != "grpc" || shed[0].Name != "srv" || shed[0].Key != methodCall || !errors.Is(shed[0].Err, deadline.ErrTooShort) {
			t.Fatalf("events %+v; want two EventShed for the deadline", shed)
		}
	})
}

// blocker is a handler that holds its place until released.
type blocker struct {
	entered chan string
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocker) handler(ctx context.Context, req any) (any, error) {
	b.entered <- req.(string)
	<-b.release
	return "ok", nil
}

func TestServerAdmissionQueuesThenRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l events
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: 1, Listener: &l})
		b := newBlocker()
		errs := make(chan error, 2)
		go func() { errs <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		go func() { errs <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		synctest.Wait() // the second waits in the queue
		select {
		case <-b.entered:
			t.Fatal("the second request ran while the first held the only place")
		default:
		}
		// The queue is full: the third is refused at once.
		r := newRequest(context.Background(), methodCall)
		wantShed(t, r, r.run(icpt, b.handler), codes.ResourceExhausted)
		// Another method has a limit of its own.
		if err := newRequest(context.Background(), methodOther).run(icpt, okHandler); err != nil {
			t.Fatalf("another method: %v", err)
		}
		close(b.release)
		<-b.entered // the queued one runs
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		shed := l.of(watertight.EventShed)
		if len(shed) != 1 || !errors.Is(shed[0].Err, watertightgrpc.ErrMethodFull) || !watertight.IsSaturation(shed[0].Err) {
			t.Fatalf("events %+v; want one EventShed with ErrMethodFull", shed)
		}
	})
}

func TestServerNoQueueAndRejectCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: -1, RejectCode: codes.Unavailable})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		r := newRequest(context.Background(), methodCall)
		wantShed(t, r, r.run(icpt, b.handler), codes.Unavailable)
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestServerSheddableDoesNotQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: 10})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		for _, crit := range []string{"sheddable", "SHEDDABLE_PLUS"} {
			r := newRequest(context.Background(), methodCall, watertightgrpc.MetadataCriticality, crit)
			wantShed(t, r, r.run(icpt, b.handler), codes.ResourceExhausted)
		}
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// With a place free, a sheddable request runs.
		r := newRequest(context.Background(), methodCall, watertightgrpc.MetadataCriticality, "sheddable")
		if err := r.run(icpt, okHandler); err != nil {
			t.Fatal(err)
		}
	})
}

func TestServerQueuedRequestGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l events
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, Listener: &l})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r := newRequest(ctx, methodCall)
		start := time.Now()
		err := r.run(icpt, b.handler)
		if time.Since(start) != time.Second {
			t.Fatalf("the queued request gave up after %v, want 1s (its deadline)", time.Since(start))
		}
		wantShed(t, r, err, codes.ResourceExhausted)
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		shed := l.of(watertight.EventShed)
		if len(shed) != 1 || !errors.Is(shed[0].Err, watertightgrpc.ErrQueueGaveUp) || !errors.Is(shed[0].Err, context.DeadlineExceeded) {
			t.Fatalf("events %+v; want one EventShed with ErrQueueGaveUp", shed)
		}
		if !watertight.IsRejection(shed[0].Err) || watertight.IsSaturation(shed[0].Err) {
			t.Fatalf("%v: want a rejection that is not a saturation (the caller gave up)", shed[0].Err)
		}
	})
}

func TestServerMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxWait: 50 * time.Millisecond})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		r := newRequest(context.Background(), methodCall)
		start := time.Now()
		err := r.run(icpt, b.handler)
		if time.Since(start) != 50*time.Millisecond {
			t.Fatalf("waited %v, want MaxWait 50ms", time.Since(start))
		}
		wantShed(t, r, err, codes.ResourceExhausted)
		close(b.release)
		<-done
	})
}

func TestServerShedsWhenQueueLeftTooLittle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{
			MaxConcurrent: 1,
			Deadline:      propagator(t, deadline.Config{MinRemaining: 100 * time.Millisecond}),
		})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		res := make(chan error)
		r := newRequest(ctx, methodCall)
		go func() { res <- r.run(icpt, okHandler) }()
		time.Sleep(250 * time.Millisecond) // virtual time: the queued request has 50ms left
		close(b.release)
		wantShed(t, r, <-res, codes.Unavailable)
		<-done
		// Its place was given back.
		if err := newRequest(context.Background(), methodCall).run(icpt, okHandler); err != nil {
			t.Fatal(err)
		}
	})
}

func TestServerCutsLongDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{Deadline: propagator(t, deadline.Config{Max: time.Second})})
		var left time.Duration
		h := func(ctx context.Context, _ any) (any, error) { left, _ = deadline.Remaining(ctx); return "ok", nil }
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if err := newRequest(ctx, methodCall).run(icpt, h); err != nil {
			t.Fatal(err)
		}
		if left != time.Second {
			t.Fatalf("handler saw %v left, want the Max of 1s", left)
		}
	})
}

func TestServerCriticality(t *testing.T) {
	var buf bytes.Buffer
	evs := &events{}
	icpt := serverInterceptor(t, watertightgrpc.ServerConfig{Name: "api", Listener: evs, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	var got watertighthttp.Criticality
	var ok bool
	h := func(ctx context.Context, _ any) (any, error) {
		got, ok = watertighthttp.CriticalityFrom(ctx)
		return "ok", nil
	}
	for _, c := range []struct {
		v    string
		want watertighthttp.Criticality
	}{
		{"sheddable-plus", watertighthttp.SheddablePlus},
		{"CRITICAL_PLUS", watertighthttp.CriticalPlus},
		{"urgent", watertighthttp.Critical},
		{"nonsense", watertighthttp.Critical},
	} {
		if err := newRequest(context.Background(), methodCall, watertightgrpc.MetadataCriticality, c.v).run(icpt, h); err != nil {
			t.Fatal(err)
		}
		if !ok || got != c.want {
			t.Errorf("%q: handler saw %v, %v; want %v", c.v, got, ok, c.want)
		}
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Fatalf("logged %d warnings, want 1:\n%s", n, buf.String())
	}
	if err := newRequest(context.Background(), methodCall).run(icpt, h); err != nil || ok {
		t.Fatalf("without metadata the handler saw a criticality (%v)", err)
	}
	// Logged once, counted every time: one event per unknown value.
	bad := evs.of(watertight.EventBadInput)
	if len(bad) != 2 || len(evs.of(watertight.EventShed)) != 0 {
		t.Fatalf("bad_input events %+v, want 2 (and no shed)", bad)
	}
	for _, e := range bad {
		if e.Source != "grpc" || e.Name != "api" || e.Key != watertightgrpc.MetadataCriticality ||
			e.Reason != watertighthttp.ReasonUnknownCriticality || e.Time.IsZero() {
			t.Errorf("event %+v: want Source grpc, Name api, Key %s, Reason %s", e, watertightgrpc.MetadataCriticality, watertighthttp.ReasonUnknownCriticality)
		}
	}
}

func TestServerAnswersHandlerErrors(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "down")
	cases := []struct {
		name     string
		err      error
		code     codes.Code
		pushback bool
	}{
		{"exhausted downstream", &retry.ExhaustedError{Attempts: 3, Last: unavailable}, codes.Unavailable, true},
		{"overloaded without status", watertight.Overloaded(errors.New("x")), codes.Unavailable, true},
		{"open breaker", circuit.ErrOpen, codes.Unavailable, false},
		{"deadline too short", deadline.ErrTooShort, codes.DeadlineExceeded, false},
		{"plain status", status.Error(codes.NotFound, "nope"), codes.NotFound, false},
		{"plain error", errors.New("boom"), codes.Unknown, false},
	}
	icpt := serverInterceptor(t, watertightgrpc.ServerConfig{})
	for _, c := range cases {
		r := newRequest(context.Background(), methodCall)
		err := r.run(icpt, func(context.Context, any) (any, error) { return nil, c.err })
		if status.Code(err) != c.code {
			t.Errorf("%s: code %v, want %v", c.name, status.Code(err), c.code)
		}
		if pb := r.tr.pushback(); c.pushback != (len(pb) == 1 && pb[0] == "-1") {
			t.Errorf("%s: pushback %q, want it: %v", c.name, pb, c.pushback)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: the answer %v does not wrap the handler's error", c.name, err)
		}
	}
}

func TestServerMaxMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: -1, MaxMethods: 1})
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		// The table is full of a busy method: the others share one limit.
		go func() { done <- newRequest(context.Background(), methodOther).run(icpt, b.handler) }()
		<-b.entered
		r := newRequest(context.Background(), "/x.Y/Z")
		err := r.run(icpt, okHandler)
		wantShed(t, r, err, codes.ResourceExhausted)
		if !strings.Contains(status.Convert(err).Message(), watertightgrpc.OtherMethods) {
			t.Fatalf("message %q does not name %q", status.Convert(err).Message(), watertightgrpc.OtherMethods)
		}
		close(b.release)
		<-done
		<-done
	})
}

func TestServerNoAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: -1})
		b := newBlocker()
		done := make(chan error)
		for range 3 {
			go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		}
		for range 3 {
			<-b.entered
		}
		close(b.release)
		for range 3 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestServerConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  watertightgrpc.ServerConfig
		want string
	}{
		{watertightgrpc.ServerConfig{RejectCode: codes.PermissionDenied}, "ServerConfig.RejectCode"},
		{watertightgrpc.ServerConfig{RejectCode: codes.Unknown}, "ServerConfig.RejectCode"},
		{watertightgrpc.ServerConfig{MaxConcurrent: 1 << 23, MaxQueue: 1}, "ServerConfig.MaxConcurrent + MaxQueue"},
	}
	for _, c := range cases {
		_, err := watertightgrpc.UnaryServerInterceptor(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "watertightgrpc: ") {
			t.Errorf("UnaryServerInterceptor(%+v) = %v; want an error naming %s", c.cfg, err, c.want)
		}
		if _, err := watertightgrpc.StreamServerInterceptor(c.cfg); err == nil {
			t.Errorf("StreamServerInterceptor accepted %+v", c.cfg)
		}
	}
}

// ---- streams, called directly ------------------------------------------------

// fakeServerStream is a grpc.ServerStream for calling a stream interceptor
// directly.
type fakeServerStream struct {
	ctx context.Context
	tr  fakeTransport
}

func (f *fakeServerStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeServerStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeServerStream) SetTrailer(md metadata.MD)    { f.tr.set(md) }
func (f *fakeServerStream) Context() context.Context     { return f.ctx }
func (f *fakeServerStream) SendMsg(any) error            { return nil }
func (f *fakeServerStream) RecvMsg(any) error            { return nil }
func (f *fakeServerStream) pushback() []string           { return f.tr.pushback() }
func streamInfo(method string) *grpc.StreamServerInfo {
	return &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}
}
func streamInterceptor(t *testing.T, cfg watertightgrpc.ServerConfig) grpc.StreamServerInterceptor {
	t.Helper()
	icpt, err := watertightgrpc.StreamServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return icpt
}

func TestServerStreamGuards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := streamInterceptor(t, watertightgrpc.ServerConfig{
			MaxConcurrent: 1, MaxQueue: -1,
			Deadline: propagator(t, deadline.Config{MinRemaining: 10 * time.Millisecond}),
		})
		entered, release := make(chan watertighthttp.Criticality), make(chan struct{})
		h := func(_ any, ss grpc.ServerStream) error {
			c, _ := watertighthttp.CriticalityFrom(ss.Context())
			entered <- c
			<-release
			return &retry.ExhaustedError{Attempts: 2, Last: status.Error(codes.Unavailable, "down")}
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(watertightgrpc.MetadataCriticality, "critical-plus"))
		first := &fakeServerStream{ctx: ctx}
		done := make(chan error)
		go func() { done <- icpt(nil, first, streamInfo(methodWatch), h) }()
		if c := <-entered; c != watertighthttp.CriticalPlus {
			t.Fatalf("the handler's stream context has criticality %v, want critical-plus", c)
		}
		// The method is full: a second stream is rejected while the first runs.
		second := &fakeServerStream{ctx: context.Background()}
		err := icpt(nil, second, streamInfo(methodWatch), h)
		if status.Code(err) != codes.ResourceExhausted || len(second.pushback()) != 1 {
			t.Fatalf("second stream: %v, pushback %q; want RESOURCE_EXHAUSTED with -1", err, second.pushback())
		}
		close(release)
		// The handler's overloaded error gets the pushback too.
		if err := <-done; status.Code(err) != codes.Unavailable || len(first.pushback()) != 1 {
			t.Fatalf("first stream: %v, pushback %q; want UNAVAILABLE with -1", err, first.pushback())
		}
		// A short deadline is shed.
		sctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		short := &fakeServerStream{ctx: sctx}
		if err := icpt(nil, short, streamInfo(methodWatch), h); status.Code(err) != codes.Unavailable || len(short.pushback()) != 1 {
			t.Fatalf("short stream: %v; want UNAVAILABLE with -1", err)
		}
	})
}

// ---- over the wire -------------------------------------------------------------

func TestServerRejectionOverTheWire(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sicpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: -1})
			entered, release := make(chan struct{}), make(chan struct{})
			ts := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
				if in == "hold" {
					close(entered)
					<-release
				}
				return "ok", nil
			}}
			cicpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, tr, ts, []grpc.ServerOption{grpc.ChainUnaryInterceptor(sicpt)}, grpc.WithChainUnaryInterceptor(cicpt))
			done := make(chan error)
			go func() {
				_, err := e.call(bounded(t), methodCall, "hold")
				done <- err
			}()
			<-entered
			var trailer metadata.MD
			_, err = e.call(bounded(t), methodCall, "x", grpc.Trailer(&trailer))
			if status.Code(err) != codes.ResourceExhausted || !watertight.IsOverloaded(err) {
				t.Fatalf("err = %v; want RESOURCE_EXHAUSTED, overloaded", err)
			}
			if pb := trailer.Get(watertightgrpc.MetadataPushback); len(pb) != 1 || pb[0] != "-1" {
				t.Fatalf("trailer %v; want %s: -1", trailer, watertightgrpc.MetadataPushback)
			}
			if n := ts.count(); n != 1 {
				t.Fatalf("the handler ran %d times, want 1: the rejection is not run and not retried", n)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOverloadIsNotRetriedAcrossHops: front → middle → back, every hop with
// the interceptors and retries of an idempotent method. The back end is
// down; the middle tier retries it and gives up; the front does not retry
// the middle tier, which answered with the negative pushback: 3 attempts
// reach the back end, not 9.
func TestOverloadIsNotRetriedAcrossHops(t *testing.T) {
	cfg := watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}}
	backTS := &testServer{call: failFirst(1000, codes.Unavailable)}
	cu, err := watertightgrpc.UnaryClientInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back := newEnv(t, "bufconn", backTS, nil, grpc.WithChainUnaryInterceptor(cu))
	midTS := &testServer{call: func(ctx context.Context, _, in string) (string, error) {
		return back.call(ctx, methodCall, in)
	}}
	sicpt := serverInterceptor(t, watertightgrpc.ServerConfig{})
	mid := newEnv(t, "tcp", midTS, []grpc.ServerOption{grpc.ChainUnaryInterceptor(sicpt)}, grpc.WithChainUnaryInterceptor(cu))
	_, err = mid.call(bounded(t), methodCall, "x")
	if status.Code(err) != codes.Unavailable || !watertight.IsOverloaded(err) {
		t.Fatalf("err = %v; want UNAVAILABLE carrying the overloaded signal", err)
	}
	if n, m := backTS.count(), midTS.count(); n != 3 || m != 1 {
		t.Fatalf("back end saw %d attempts and the middle tier %d; want 3 and 1", n, m)
	}
}

// ---- queue discipline over the wire -----------------------------------------------

// queuedCtx tells when a queued request starts waiting: the admission queue
// selects on Done only once the request is in the queue, and nothing calls
// it on the way there.
type queuedCtx struct {
	context.Context
	once sync.Once
	id   string
	ch   chan<- string
}

func (c *queuedCtx) Done() <-chan struct{} {
	c.once.Do(func() { c.ch <- c.id })
	return c.Context.Done()
}

// queueEnv serves methodCall through the server interceptor made from cfg,
// behind an interceptor that reports on queued when a request (named by its
// input) starts waiting. The handler sends its input on entered and waits
// for a token on step.
func queueEnv(t *testing.T, transport string, cfg watertightgrpc.ServerConfig) (e *env, queued, entered chan string, step chan struct{}) {
	t.Helper()
	queued, entered, step = make(chan string, 16), make(chan string, 16), make(chan struct{})
	spy := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id := req.(*wrapperspb.StringValue).GetValue()
		return h(&queuedCtx{Context: ctx, id: id, ch: queued}, req)
	}
	ts := &testServer{call: func(_ context.Context, _, in string) (string, error) {
		entered <- in
		// Not ctx.Done: that would report the running request as queued.
		select {
		case <-step:
			return "ok", nil
		case <-time.After(10 * time.Second): // a bound, so that a failed test ends
			return "", errors.New("no step came")
		}
	}}
	sicpt := serverInterceptor(t, cfg)
	e = newEnv(t, transport, ts, []grpc.ServerOption{grpc.ChainUnaryInterceptor(spy, sicpt)})
	return e, queued, entered, step
}

// withCrit returns a bounded context whose calls carry criticality crit.
func withCrit(t *testing.T, crit string) context.Context {
	return metadata.AppendToOutgoingContext(bounded(t), watertightgrpc.MetadataCriticality, crit)
}

// A full queue of critical requests: a critical-plus newcomer displaces the
// oldest, which gets RejectCode, the negative pushback and ErrDisplaced in
// its shed event; the newcomer runs when a place frees.
func TestServerQueueDisplacement(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var l events
			e, queued, entered, step := queueEnv(t, tr, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: 1, Listener: &l})
			type result struct {
				id      string
				err     error
				trailer metadata.MD
			}
			results := make(chan result, 3)
			call := func(id, crit string) {
				go func() {
					var trailer metadata.MD
					_, err := e.call(withCrit(t, crit), methodCall, id, grpc.Trailer(&trailer))
					results <- result{id, err, trailer}
				}()
			}
			call("hold", "critical")
			if id := <-entered; id != "hold" {
				t.Fatalf("%q entered, want hold", id)
			}
			call("old", "critical")
			if id := <-queued; id != "old" {
				t.Fatalf("%q queued, want old", id)
			}
			// The queue is full of critical: another critical is refused...
			_, err := e.call(withCrit(t, "critical"), methodCall, "equal")
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("critical newcomer to a full queue: %v; want RESOURCE_EXHAUSTED", err)
			}
			// ...but a critical-plus one displaces the oldest critical.
			call("new", "critical-plus")
			if id := <-queued; id != "new" {
				t.Fatalf("%q queued, want new", id)
			}
			r := <-results
			if r.id != "old" || status.Code(r.err) != codes.ResourceExhausted || !strings.Contains(status.Convert(r.err).Message(), "displaced") {
				t.Fatalf("%s: %v; want old displaced with RESOURCE_EXHAUSTED", r.id, r.err)
			}
			if pb := r.trailer.Get(watertightgrpc.MetadataPushback); len(pb) != 1 || pb[0] != "-1" {
				t.Fatalf("displaced call's trailer %v; want %s: -1", r.trailer, watertightgrpc.MetadataPushback)
			}
			step <- struct{}{} // hold ends: new is let in
			if id := <-entered; id != "new" {
				t.Fatalf("%q entered, want new", id)
			}
			step <- struct{}{}
			for range 2 {
				if r := <-results; r.err != nil {
					t.Fatalf("%s: %v", r.id, r.err)
				}
			}
			shed := l.of(watertight.EventShed)
			if len(shed) != 2 || !errors.Is(shed[0].Err, watertightgrpc.ErrMethodFull) ||
				!errors.Is(shed[1].Err, watertightgrpc.ErrDisplaced) || !watertight.IsSaturation(shed[1].Err) || shed[1].Key != methodCall {
				t.Fatalf("shed events %+v; want ErrMethodFull for the equal newcomer, then ErrDisplaced for old", shed)
			}
			if n := e.ts.count(); n != 2 {
				t.Fatalf("the handler ran %d times, want 2 (hold and new)", n)
			}
		})
	}
}

// With MaxQueue 4 and 4 critical requests queued (more than half full), the
// newest is let in first when a place frees; once the queue is back to half
// full, the oldest: adaptive LIFO, as watertighthttp.Handler's.
func TestServerQueueAdaptiveLIFO(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			e, queued, entered, step := queueEnv(t, tr, watertightgrpc.ServerConfig{MaxConcurrent: 1, MaxQueue: 4})
			done := make(chan error, 5)
			call := func(id string) {
				go func() {
					_, err := e.call(bounded(t), methodCall, id)
					done <- err
				}()
			}
			call("hold")
			if id := <-entered; id != "hold" {
				t.Fatalf("%q entered, want hold", id)
			}
			for _, id := range []string{"w1", "w2", "w3", "w4"} {
				call(id)
				if got := <-queued; got != id {
					t.Fatalf("%q queued, want %s", got, id)
				}
			}
			var order []string
			for range 4 {
				step <- struct{}{} // the one running ends: the next is let in
				order = append(order, <-entered)
			}
			step <- struct{}{}
			// 4 queued of 4: LIFO → w4; 3 of 4: LIFO → w3; 2 of 4 (half):
			// FIFO → w1, then w2.
			if s := strings.Join(order, ","); s != "w4,w3,w1,w2" {
				t.Fatalf("let in %s, want w4,w3,w1,w2", s)
			}
			for range 5 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
