package watertightgrpc_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// watchN makes the Watch method send n messages and then end with err.
func watchN(n int, err error) func(string, grpc.ServerStream) error {
	return func(_ string, ss grpc.ServerStream) error {
		for range n {
			if e := ss.SendMsg(wrapperspb.String("m")); e != nil {
				return e
			}
		}
		return err
	}
}

// blockWatch makes Watch send one message and wait for its context to end.
func blockWatch(_ string, ss grpc.ServerStream) error {
	if err := ss.SendMsg(wrapperspb.String("m")); err != nil {
		return err
	}
	<-ss.Context().Done()
	return status.FromContextError(ss.Context().Err()).Err()
}

func openWatch(t *testing.T, ctx context.Context, e *env) (grpc.ClientStream, error) {
	t.Helper()
	cs, err := e.cc.NewStream(ctx, watchDesc, methodWatch)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return cs, nil
}

// streamEnv is clientEnv with one bulkhead permit, taken without waiting,
// and a breaker per method; it returns the registries.
func streamEnv(t *testing.T, tr string, ts *testServer) (*env, *circuit.Registry, *bulkhead.Registry) {
	return streamEnvWait(t, tr, ts, 0)
}

// streamEnvWait is streamEnv with a bulkhead that waits up to maxWait.
func streamEnvWait(t *testing.T, tr string, ts *testServer, maxWait time.Duration) (*env, *circuit.Registry, *bulkhead.Registry) {
	br := breakers(t, circuit.Config{})
	bh := bulkheads(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: maxWait})
	return clientEnv(t, tr, ts, watertightgrpc.ClientConfig{Breakers: br, Bulkheads: bh}), br, bh
}

// waitFree waits until the bulkhead of key (which must wait for permits:
// streamEnvWait with MaxWait -1) gives a permit: the stream that held it has
// let it go. It fails the test if that takes more than 10s.
func waitFree(t *testing.T, bh *bulkhead.Registry, key string) {
	t.Helper()
	b, err := bh.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("the permit of %s was never given back: %v (%+v)", key, err, b.Snapshot())
	}
	b.Release()
}

func TestStreamPermitReleasedAtEOF(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ts := &testServer{stream: watchN(3, nil)}
			e, br, bh := streamEnv(t, tr, ts)
			cs, err := openWatch(t, bounded(t), e)
			if err != nil {
				t.Fatal(err)
			}
			// While it runs, the bulkhead is full.
			if _, err := openWatch(t, bounded(t), e); !errors.Is(err, bulkhead.ErrFull) || status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("second stream: %v; want bulkhead.ErrFull as RESOURCE_EXHAUSTED", err)
			}
			n := 0
			for {
				err := cs.RecvMsg(new(wrapperspb.StringValue))
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 3 {
				t.Fatalf("got %d messages, want 3", n)
			}
			b, _ := bh.Get(methodWatch)
			if s := b.Snapshot(); s.Active != 0 {
				t.Fatalf("after io.EOF the bulkhead holds %d permits, want 0", s.Active)
			}
			c, _ := br.Get(methodWatch)
			if s := c.Snapshot(); s.Calls != 1 || s.Failures != 0 {
				t.Fatalf("breaker: %d calls, %d failures; want 1 success", s.Calls, s.Failures)
			}
		})
	}
}

func TestStreamFailureCountsForTheBreaker(t *testing.T) {
	ts := &testServer{stream: watchN(1, status.Error(codes.Unavailable, "down"))}
	e, br, bh := streamEnv(t, "bufconn", ts)
	cs, err := openWatch(t, bounded(t), e)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for last == nil {
		last = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if status.Code(last) != codes.Unavailable {
		t.Fatalf("stream ended with %v; want UNAVAILABLE", last)
	}
	c, _ := br.Get(methodWatch)
	if s := c.Snapshot(); s.Calls != 1 || s.Failures != 1 {
		t.Fatalf("breaker: %d calls, %d failures; want 1 failure", s.Calls, s.Failures)
	}
	b, _ := bh.Get(methodWatch)
	if s := b.Snapshot(); s.Active != 0 {
		t.Fatalf("the bulkhead holds %d permits, want 0", s.Active)
	}
}

func TestStreamPermitReleasedWhenCallerCancels(t *testing.T) {
	ts := &testServer{stream: blockWatch}
	e, br, bh := streamEnvWait(t, "bufconn", ts, -1)
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := openWatch(t, ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	cancel() // and never read again
	waitFree(t, bh, methodWatch)
	c, _ := br.Get(methodWatch)
	if s := c.Snapshot(); s.Calls != 0 {
		t.Fatalf("breaker counted %d calls; the caller's cancellation says nothing of the server", s.Calls)
	}
}

func TestStreamPermitReleasedAtCallerDeadline(t *testing.T) {
	ts := &testServer{stream: blockWatch}
	e, _, bh := streamEnvWait(t, "bufconn", ts, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := openWatch(t, ctx, e); err != nil {
		t.Fatal(err)
	}
	waitFree(t, bh, methodWatch) // nobody reads: the deadline ends it
}

func TestStreamPermitReleasedWhenConnCloses(t *testing.T) {
	ts := &testServer{stream: blockWatch}
	e, _, bh := streamEnvWait(t, "bufconn", ts, -1)
	cs, err := openWatch(t, context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	e.cc.Close() // the caller neither reads nor cancels
	waitFree(t, bh, methodWatch)
}

func TestStreamPermitReleasedOnHeaderOrCreationError(t *testing.T) {
	ts := &testServer{stream: func(string, grpc.ServerStream) error { return status.Error(codes.Internal, "boom") }}
	e, _, bh := streamEnvWait(t, "bufconn", ts, -1)
	cs, err := openWatch(t, bounded(t), e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Header(); err != nil {
		t.Logf("Header: %v", err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Internal {
		t.Fatalf("RecvMsg = %v; want INTERNAL", err)
	}
	waitFree(t, bh, methodWatch)
}

func TestStreamClientStreamingEndsAtAnswer(t *testing.T) {
	ts := &testServer{stream: func(_ string, ss grpc.ServerStream) error {
		for {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
				return ss.SendMsg(wrapperspb.String("done"))
			} else if err != nil {
				return err
			}
		}
	}}
	e, br, bh := streamEnv(t, "bufconn", ts)
	cs, err := e.cc.NewStream(bounded(t), uploadDesc, methodUpload)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cs.SendMsg(wrapperspb.String("part")); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	out := new(wrapperspb.StringValue)
	if err := cs.RecvMsg(out); err != nil || out.GetValue() != "done" {
		t.Fatalf("RecvMsg = %q, %v", out.GetValue(), err)
	}
	b, _ := bh.Get(methodUpload)
	if s := b.Snapshot(); s.Active != 0 {
		t.Fatalf("after the answer the bulkhead holds %d permits, want 0", s.Active)
	}
	c, _ := br.Get(methodUpload)
	if s := c.Snapshot(); s.Calls != 1 || s.Failures != 0 {
		t.Fatalf("breaker: %d calls, %d failures; want 1 success", s.Calls, s.Failures)
	}
}

func TestStreamRefusedByOpenBreakerAndShortDeadline(t *testing.T) {
	ts := &testServer{}
	br := breakers(t, circuit.Config{})
	var l events
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Breakers: br, Listener: &l})
	c, _ := br.Get(methodWatch)
	c.ForceOpen()
	if _, err := e.cc.NewStream(bounded(t), watchDesc, methodWatch); !errors.Is(err, circuit.ErrOpen) || status.Code(err) != codes.Unavailable {
		t.Fatalf("NewStream = %v; want circuit.ErrOpen as UNAVAILABLE", err)
	}
	c.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond) // nothing left after the margin's 1ms floor
	defer cancel()
	if _, err := e.cc.NewStream(ctx, watchDesc, methodWatch); status.Code(err) != codes.DeadlineExceeded || !watertight.IsRejection(err) {
		t.Fatalf("NewStream = %v; want a deadline rejection", err)
	}
	if n := ts.count(); n != 0 {
		t.Fatalf("server saw %d streams, want none", n)
	}
	if rej := l.of(watertight.EventRejected); len(rej) != 2 {
		t.Fatalf("events %+v; want two EventRejected", rej)
	}
}

// A stream whose caller's context ends while it waits for a bulkhead permit
// gets the context's status (CANCELLED), not RESOURCE_EXHAUSTED: the caller
// gave up; the bulkhead did not refuse it. The breaker counts nothing.
func TestStreamGaveUpWaitingForPermit(t *testing.T) {
	ts := &testServer{stream: watchN(1, nil)}
	e, br, bh := streamEnvWait(t, "bufconn", ts, -1)
	cs, err := openWatch(t, bounded(t), e)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := bh.Get(methodWatch)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for b.Snapshot().Waiting == 0 { // the second stream is queued
			runtime.Gosched()
		}
		cancel()
	}()
	_, err = openWatch(t, ctx, e)
	if !errors.Is(err, context.Canceled) || errors.Is(err, bulkhead.ErrFull) || status.Code(err) != codes.Canceled {
		t.Fatalf("stream whose context ended while waiting: %v (code %v); want CANCELLED", err, status.Code(err))
	}
	for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
	}
	c, _ := br.Get(methodWatch)
	if s := c.Snapshot(); s.Calls != 1 || s.Failures != 0 {
		t.Fatalf("breaker: %d calls, %d failures; want the first stream's success only", s.Calls, s.Failures)
	}
}
