package watertightgrpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// fastRetry is a retry configuration with tiny backoff, for tests against a
// real server.
func fastRetry() retry.Config {
	b, err := backoff.New(backoff.Config{Base: time.Microsecond, Cap: time.Microsecond})
	if err != nil {
		panic(err)
	}
	return retry.Config{Backoff: b}
}

// clientEnv serves ts and dials it through the client interceptors built
// from cfg.
func clientEnv(t *testing.T, transport string, ts *testServer, cfg watertightgrpc.ClientConfig) *env {
	t.Helper()
	u, err := watertightgrpc.UnaryClientInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := watertightgrpc.StreamClientInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, transport, ts, nil, grpc.WithChainUnaryInterceptor(u), grpc.WithChainStreamInterceptor(s))
}

func breakers(t *testing.T, cfg circuit.Config) *circuit.Registry {
	t.Helper()
	r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func bulkheads(t *testing.T, cfg bulkhead.Config) *bulkhead.Registry {
	t.Helper()
	r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUnaryRetriesIdempotentMethod(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ts := &testServer{call: failFirst(2, codes.Unavailable)}
			var l events
			e := clientEnv(t, tr, ts, watertightgrpc.ClientConfig{
				Name:       "test",
				Retry:      fastRetry(),
				Idempotent: []string{methodCall},
				Listener:   &l,
			})
			out, err := e.call(bounded(t), methodCall, "x")
			if err != nil || out != "ok" {
				t.Fatalf("call = %q, %v; want ok after two retries", out, err)
			}
			if n := ts.count(); n != 3 {
				t.Fatalf("server saw %d calls, want 3", n)
			}
			if got := ts.md(0).Get(watertightgrpc.MetadataAttempt); len(got) != 0 {
				t.Errorf("first attempt sent %s %q, want nothing", watertightgrpc.MetadataAttempt, got)
			}
			for i, want := range []string{"2", "3"} {
				if got := ts.md(i + 1).Get(watertightgrpc.MetadataAttempt); len(got) != 1 || got[0] != want {
					t.Errorf("attempt %d sent %s %q, want %q", i+2, watertightgrpc.MetadataAttempt, got, want)
				}
			}
			sched := l.of(watertight.EventRetryScheduled)
			if len(sched) != 2 || sched[0].Source != "grpc" || sched[0].Key != methodCall || sched[0].Name != "test" || sched[1].Attempt != 2 {
				t.Fatalf("retry events = %+v; want two, Source grpc, Key %s, Name test", sched, methodCall)
			}
		})
	}
}

func TestUnaryNotIdempotentIsNotRetried(t *testing.T) {
	ts := &testServer{call: failFirst(2, codes.Unavailable)}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodOther}})
	_, err := e.call(bounded(t), methodCall, "x")
	if status.Code(err) != codes.Unavailable || !errors.Is(err, retry.ErrNotIdempotent) {
		t.Fatalf("err = %v (code %v); want UNAVAILABLE skipped as not idempotent", err, status.Code(err))
	}
	if n := ts.count(); n != 1 {
		t.Fatalf("server saw %d calls, want 1", n)
	}
}

func TestUnaryIdempotentServiceEntry(t *testing.T) {
	for _, entry := range []string{"/" + svcName + "/*", "/" + svcName + "/"} {
		ts := &testServer{call: failFirst(1, codes.Unavailable)}
		e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{entry}})
		if _, err := e.call(bounded(t), methodOther, "x"); err != nil {
			t.Fatalf("%s: call = %v; want a success after one retry", entry, err)
		}
		if n := ts.count(); n != 2 {
			t.Fatalf("%s: server saw %d calls, want 2", entry, n)
		}
	}
}

func TestUnaryIdempotentByContextOrMetadata(t *testing.T) {
	cases := []struct {
		name    string
		ctx     func(context.Context) context.Context
		wantKey string
	}{
		{"retry.Idempotent", retry.Idempotent, ""},
		{"retry.WithIdempotencyKey", func(ctx context.Context) context.Context { return retry.WithIdempotencyKey(ctx, "k-1") }, "k-1"},
		{"metadata", func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, watertightgrpc.MetadataIdempotencyKey, "k-2")
		}, "k-2"},
		{"metadata wins over context", func(ctx context.Context) context.Context {
			ctx = retry.WithIdempotencyKey(ctx, "from-ctx")
			return metadata.AppendToOutgoingContext(ctx, watertightgrpc.MetadataIdempotencyKey, "from-md")
		}, "from-md"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := &testServer{call: failFirst(1, codes.Unavailable)}
			e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry()})
			if _, err := e.call(c.ctx(bounded(t)), methodCall, "x"); err != nil {
				t.Fatalf("call = %v; want a success after one retry", err)
			}
			if n := ts.count(); n != 2 {
				t.Fatalf("server saw %d calls, want 2", n)
			}
			for i := range 2 {
				got := ts.md(i).Get(watertightgrpc.MetadataIdempotencyKey)
				if c.wantKey == "" && len(got) != 0 || c.wantKey != "" && (len(got) != 1 || got[0] != c.wantKey) {
					t.Errorf("attempt %d: %s = %q, want %q", i+1, watertightgrpc.MetadataIdempotencyKey, got, c.wantKey)
				}
			}
		})
	}
}

func TestUnaryCallerErrorsAreNotRetriedNorCounted(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition, codes.Unauthenticated, codes.Unimplemented} {
		t.Run(code.String(), func(t *testing.T) {
			ts := &testServer{call: failFirst(100, code)}
			reg := breakers(t, circuit.Config{})
			e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Breakers: reg, Retry: fastRetry(), Idempotent: []string{methodCall}})
			_, err := e.call(bounded(t), methodCall, "x")
			if status.Code(err) != code {
				t.Fatalf("err = %v; want code %v", err, code)
			}
			if n := ts.count(); n != 1 {
				t.Fatalf("server saw %d calls, want 1", n)
			}
			b, _ := reg.Get(methodCall)
			if s := b.Snapshot(); s.Calls != 0 || s.Failures != 0 {
				t.Fatalf("breaker counted %d calls, %d failures; want the caller's error ignored", s.Calls, s.Failures)
			}
		})
	}
}

func TestUnaryFailuresCountForTheBreaker(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.Internal, codes.Unknown, codes.ResourceExhausted, codes.DataLoss} {
		ts := &testServer{call: failFirst(100, code)}
		reg := breakers(t, circuit.Config{})
		e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Breakers: reg, Retry: retry.Config{MaxAttempts: 1}})
		if _, err := e.call(bounded(t), methodCall, "x"); status.Code(err) != code {
			t.Fatalf("err = %v; want code %v", err, code)
		}
		b, _ := reg.Get(methodCall)
		if s := b.Snapshot(); s.Calls != 1 || s.Failures != 1 {
			t.Fatalf("%v: breaker counted %d calls, %d failures; want 1 and 1", code, s.Calls, s.Failures)
		}
	}
}

func TestUnaryNegativePushbackIsOverloaded(t *testing.T) {
	for _, pb := range []string{"-1", "-250", "soon", "+5", "1.5"} {
		for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
			ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) { return "", fail(ctx, code, pb) }}
			e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
			_, err := e.call(bounded(t), methodCall, "x")
			if status.Code(err) != code || !watertight.IsOverloaded(err) || !errors.Is(err, watertight.ErrOverloaded) {
				t.Fatalf("pushback %q, %v: err = %v; want %v carrying the overloaded signal", pb, code, err, code)
			}
			if n := ts.count(); n != 1 {
				t.Fatalf("pushback %q, %v: server saw %d calls, want 1 (no retry)", pb, code, n)
			}
		}
	}
}

func TestUnaryPositivePushbackIsWaited(t *testing.T) {
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.Unavailable} {
		var calls int
		ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
			calls++ // the calls are sequential
			if calls == 1 {
				return "", fail(ctx, code, "20")
			}
			return "ok", nil
		}}
		var l events
		e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}, Listener: &l})
		start := time.Now()
		if _, err := e.call(bounded(t), methodCall, "x"); err != nil {
			t.Fatalf("%v: call = %v; want a success after the pushback", code, err)
		}
		if el := time.Since(start); el < 20*time.Millisecond {
			t.Fatalf("%v: the call took %v; the pushback asked for 20ms", code, el)
		}
		sched := l.of(watertight.EventRetryScheduled)
		if len(sched) != 1 || sched[0].Delay != 20*time.Millisecond {
			t.Fatalf("%v: retry events %+v; want one with the 20ms delay", code, sched)
		}
	}
}

func TestUnaryResourceExhaustedWithoutPushbackIsNotRetried(t *testing.T) {
	ts := &testServer{call: failFirst(1, codes.ResourceExhausted)}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
	_, err := e.call(bounded(t), methodCall, "x")
	if status.Code(err) != codes.ResourceExhausted || watertight.IsOverloaded(err) {
		t.Fatalf("err = %v; want RESOURCE_EXHAUSTED, not marked overloaded", err)
	}
	if n := ts.count(); n != 1 {
		t.Fatalf("server saw %d calls, want 1", n)
	}
}

func TestUnaryServerDeadlineIsRetried(t *testing.T) {
	// DEADLINE_EXCEEDED from the server while the caller still has time:
	// the server's own timeout, worth retrying.
	ts := &testServer{call: failFirst(1, codes.DeadlineExceeded)}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
	if _, err := e.call(bounded(t), methodCall, "x"); err != nil {
		t.Fatalf("call = %v; want a success after one retry", err)
	}
	if n := ts.count(); n != 2 {
		t.Fatalf("server saw %d calls, want 2", n)
	}
}

func TestUnaryOwnDeadlineIsNotRetriedAndMarginApplies(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			left := make(chan time.Duration, 4)
			ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
				d, _ := deadline.Remaining(ctx)
				left <- d
				<-ctx.Done()
				return "", status.FromContextError(ctx.Err()).Err()
			}}
			margin := 150 * time.Millisecond
			var l events
			e := clientEnv(t, tr, ts, watertightgrpc.ClientConfig{
				Retry:      fastRetry(),
				Idempotent: []string{methodCall},
				Deadline:   propagator(t, deadline.Config{Margin: margin, MarginFraction: -1}), // a fixed margin
				Listener:   &l,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			_, err := e.call(ctx, methodCall, "x")
			if status.Code(err) != codes.DeadlineExceeded || watertight.IsRejection(err) {
				t.Fatalf("err = %v; want the server's DEADLINE_EXCEEDED", err)
			}
			if sched := l.of(watertight.EventRetryScheduled); len(sched) != 0 {
				t.Fatalf("a retry was scheduled (%+v); the caller's own deadline is not retried", sched)
			}
			if ctx.Err() != nil {
				t.Fatalf("the call returned after the caller's deadline; the margin should have ended it %v before", margin)
			}
			if n := ts.count(); n != 1 {
				t.Fatalf("server saw %d calls, want 1: the caller's own deadline is not retried", n)
			}
			if d := <-left; d > 400*time.Millisecond-margin {
				t.Fatalf("server saw %v left; want at most %v (the margin applied)", d, 400*time.Millisecond-margin)
			}
		})
	}
}

func TestUnaryTooShortFailsFast(t *testing.T) {
	ts := &testServer{}
	var l events
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Listener: &l})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond) // nothing left after the default margin's 1ms floor
	defer cancel()
	_, err := e.call(ctx, methodCall, "x")
	if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v (code %v); want deadline.ErrTooShort as DEADLINE_EXCEEDED", err, status.Code(err))
	}
	if n := ts.count(); n != 0 {
		t.Fatalf("server saw %d calls, want none", n)
	}
	rej := l.of(watertight.EventRejected)
	if len(rej) != 1 || rej[0].Source != "grpc" || rej[0].Key != methodCall || !errors.Is(rej[0].Err, deadline.ErrTooShort) {
		t.Fatalf("events %+v; want one EventRejected for the deadline", rej)
	}
}

func TestUnaryNoDeadlineIsSentWithout(t *testing.T) {
	got := make(chan bool, 1)
	ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		_, ok := ctx.Deadline()
		got <- ok
		return "ok", nil
	}}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{})
	if _, err := e.call(context.Background(), methodCall, "x"); err != nil {
		t.Fatal(err)
	}
	if <-got {
		t.Fatal("the server saw a deadline; the caller set none")
	}
}

func TestUnaryBreakerOpens(t *testing.T) {
	ts := &testServer{call: failFirst(100, codes.Unavailable)}
	reg := breakers(t, circuit.Config{WindowSize: 4, MinCalls: 4, OpenDuration: time.Hour})
	var l events
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Breakers: reg, Retry: retry.Config{MaxAttempts: 1}, Listener: &l})
	for range 4 {
		if _, err := e.call(bounded(t), methodCall, "x"); status.Code(err) != codes.Unavailable || watertight.IsRejection(err) {
			t.Fatalf("err = %v; want the server's UNAVAILABLE", err)
		}
	}
	_, err := e.call(bounded(t), methodCall, "x")
	if !errors.Is(err, circuit.ErrOpen) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v (code %v); want circuit.ErrOpen as UNAVAILABLE", err, status.Code(err))
	}
	if n := ts.count(); n != 4 {
		t.Fatalf("server saw %d calls, want 4 (the fifth refused by the open breaker)", n)
	}
	// Another method has a breaker of its own (KeyByMethod).
	if _, err := e.call(bounded(t), methodOther, "x"); errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("another method was refused: %v", err)
	}
	rej := l.of(watertight.EventRejected)
	if len(rej) != 1 || rej[0].Key != methodCall || !errors.Is(rej[0].Err, circuit.ErrOpen) {
		t.Fatalf("events %+v; want one EventRejected for the open breaker", rej)
	}
}

func TestUnaryBulkheadFull(t *testing.T) {
	for _, keyed := range []string{"method", "target"} {
		t.Run(keyed, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			ts := &testServer{call: func(ctx context.Context, m, _ string) (string, error) {
				if m == methodCall {
					close(entered)
					<-release
				}
				return "ok", nil
			}}
			cfg := watertightgrpc.ClientConfig{Bulkheads: bulkheads(t, bulkhead.Config{MaxConcurrent: 1})}
			if keyed == "target" {
				cfg.Key = watertightgrpc.KeyByTarget
			}
			e := clientEnv(t, "bufconn", ts, cfg)
			first := make(chan error, 1)
			go func() {
				_, err := e.call(bounded(t), methodCall, "x")
				first <- err
			}()
			<-entered
			_, err := e.call(bounded(t), methodOther, "x")
			if keyed == "target" {
				if !errors.Is(err, bulkhead.ErrFull) || status.Code(err) != codes.ResourceExhausted {
					t.Errorf("err = %v (code %v); want bulkhead.ErrFull as RESOURCE_EXHAUSTED", err, status.Code(err))
				}
			} else if err != nil {
				t.Errorf("another method: %v; want its own bulkhead", err)
			}
			close(release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			// The permit came back.
			if _, err := e.call(bounded(t), methodOther, "x"); err != nil {
				t.Fatalf("after the first call ended: %v", err)
			}
		})
	}
}

func TestUnaryRetriesExhaustedCarryOverload(t *testing.T) {
	ts := &testServer{call: failFirst(100, codes.Unavailable)}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: fastRetry(), Idempotent: []string{methodCall}})
	_, err := e.call(bounded(t), methodCall, "x")
	var ex *retry.ExhaustedError
	if !errors.As(err, &ex) || ex.Attempts != 3 || status.Code(err) != codes.Unavailable || !watertight.IsOverloaded(err) {
		t.Fatalf("err = %v; want an ExhaustedError after 3 attempts, UNAVAILABLE, overloaded", err)
	}
}

func TestUnaryBudgetBoundsRetries(t *testing.T) {
	ts := &testServer{call: failFirst(1000, codes.Unavailable)}
	bud, err := budget.New(budget.Config{Ratio: 0.1, MaxTokens: 1, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	rc := fastRetry()
	rc.Budget = bud
	rc.MaxAttempts = 5
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Retry: rc, Idempotent: []string{methodCall}})
	var refused int
	for range 20 {
		_, err := e.call(bounded(t), methodCall, "x")
		if errors.Is(err, retry.ErrNoBudget) {
			refused++
			if !watertight.IsOverloaded(err) || status.Code(err) != codes.Unavailable {
				t.Fatalf("err = %v; want UNAVAILABLE carrying the overloaded signal", err)
			}
		}
	}
	// 20 calls deposit 2 tokens: at most 2 retries in all (the budget
	// starts empty).
	if n := ts.count(); n > 22 || refused < 18 {
		t.Fatalf("server saw %d calls and %d retries were refused; want at most 22 and at least 18", n, refused)
	}
}

func TestUnaryForwardsCriticality(t *testing.T) {
	ts := &testServer{}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{})
	ctx := watertighthttp.WithCriticality(bounded(t), watertighthttp.Sheddable)
	if _, err := e.call(ctx, methodCall, "x"); err != nil {
		t.Fatal(err)
	}
	// The caller's own metadata wins.
	ctx = metadata.AppendToOutgoingContext(ctx, watertightgrpc.MetadataCriticality, "critical-plus")
	if _, err := e.call(ctx, methodCall, "x"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"sheddable", "critical-plus"} {
		if got := ts.md(i).Get(watertightgrpc.MetadataCriticality); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: %s = %q, want %q", i+1, watertightgrpc.MetadataCriticality, got, want)
		}
	}
}

func TestUnaryCallerOptionsKept(t *testing.T) {
	ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		grpc.SetTrailer(ctx, metadata.Pairs("x-mine", "v"))
		return "ok", nil
	}}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{})
	var tr metadata.MD
	if _, err := e.call(bounded(t), methodCall, "x", grpc.Trailer(&tr)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Get("x-mine"); len(got) != 1 || got[0] != "v" {
		t.Fatalf("the caller's trailer = %v; want x-mine: v", tr)
	}
}

func TestClientConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  watertightgrpc.ClientConfig
		want string
	}{
		{watertightgrpc.ClientConfig{Idempotent: []string{"Call"}}, "ClientConfig.Idempotent[0]"},
		{watertightgrpc.ClientConfig{Idempotent: []string{methodCall, "/a/b/c"}}, "ClientConfig.Idempotent[1]"},
		{watertightgrpc.ClientConfig{Idempotent: []string{"//Call"}}, "ClientConfig.Idempotent[0]"},
		{watertightgrpc.ClientConfig{Idempotent: []string{"/svc/Ca*"}}, "ClientConfig.Idempotent[0]"},
		{watertightgrpc.ClientConfig{Retry: retry.Config{MaxAttempts: -1}}, "ClientConfig.Retry: retry: Config.MaxAttempts"},
	}
	for _, c := range cases {
		_, err := watertightgrpc.UnaryClientInterceptor(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "watertightgrpc: ") {
			t.Errorf("UnaryClientInterceptor(%+v) = %v; want an error naming %s", c.cfg.Idempotent, err, c.want)
		}
		if _, err := watertightgrpc.StreamClientInterceptor(c.cfg); err == nil {
			t.Errorf("StreamClientInterceptor accepted %+v", c.cfg.Idempotent)
		}
	}
}

// The client keeps each method's pipelines, but follows its registries: a
// method whose breaker and bulkhead were evicted and created again is called
// through the new ones, on the first call after and on every one after that.
func TestUnaryFollowsRegistryEvictions(t *testing.T) {
	br, err := circuit.NewRegistry(circuit.RegistryConfig{MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	bh, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{MaxKeys: 1, Config: bulkhead.Config{MaxConcurrent: 4}})
	if err != nil {
		t.Fatal(err)
	}
	e := clientEnv(t, "bufconn", &testServer{}, watertightgrpc.ClientConfig{Breakers: br, Bulkheads: bh})
	// since counts the calls of each method since its breaker and bulkhead
	// were created.
	since := map[string]int{}
	for i, m := range []string{methodCall, methodCall, methodOther, methodCall, methodCall, methodOther, methodOther, methodCall} {
		if _, err := e.call(bounded(t), m, "x"); err != nil {
			t.Fatalf("call %d of %s: %v", i, m, err)
		}
		for k := range since {
			if k != m {
				delete(since, k) // evicted: MaxKeys is 1
			}
		}
		since[m]++
		h, _ := bh.Get(m)
		if got := h.Snapshot().Acquired; got != uint64(since[m]) {
			t.Errorf("call %d of %s: its bulkhead counts %d permits, want %d", i, m, got, since[m])
		}
		b, _ := br.Get(m)
		if got := b.Snapshot().Calls; got != int64(since[m]) {
			t.Errorf("call %d of %s: its breaker counts %d calls, want %d", i, m, got, since[m])
		}
	}
}

// A successful call through the client interceptor, with a breaker, a
// bulkhead, retries and a deadline, allocates once: the part of the call
// that gRPC gets pointers to (the trailer, the options, the context). A
// regression here would show in every call.
func TestUnaryClientAllocs(t *testing.T) {
	icpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
		Breakers:   breakers(t, circuit.Config{}),
		Bulkheads:  bulkheads(t, bulkhead.Config{MaxConcurrent: 100}),
		Idempotent: []string{methodCall},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := bounded(t)
	call := func() {
		if err := icpt(ctx, methodCall, nil, nil, nil, nopInvoker); err != nil {
			t.Fatal(err)
		}
	}
	call() // the key's pipelines are built on the first call
	if n := testing.AllocsPerRun(200, call); n != 1 {
		t.Errorf("%v allocations per call, want 1", n)
	}
}

// With ClientConfig.Methods, a call still allocates once: the lookup of
// its method's entry (exact name, service, default) allocates nothing, and
// the entry's pipelines are built on the first call and kept.
func TestUnaryClientAllocsWithMethods(t *testing.T) {
	icpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
		Breakers:  breakers(t, circuit.Config{}),
		Bulkheads: bulkheads(t, bulkhead.Config{MaxConcurrent: 100}),
		Methods: []watertightgrpc.MethodConfig{
			{Names: []string{methodCall}, Retry: retry.Config{MaxAttempts: 2}},
			{Names: []string{"/" + svcName + "/*"}},
			{Names: []string{"*"}, Retry: retry.Config{MaxAttempts: 4}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := bounded(t)
	for _, method := range []string{methodCall, methodOther, "/watertight.test.Elsewhere/Call"} {
		call := func() {
			if err := icpt(ctx, method, nil, nil, nil, nopInvoker); err != nil {
				t.Fatal(err)
			}
		}
		call() // the key's pipelines are built on the first call
		if n := testing.AllocsPerRun(200, call); n != 1 {
			t.Errorf("%s: %v allocations per call, want 1", method, n)
		}
	}
}
