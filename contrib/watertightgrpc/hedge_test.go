package watertightgrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

func hedgePolicy(t *testing.T, l watertight.Listener) *hedge.Policy {
	t.Helper()
	p, err := hedge.New(hedge.Config{Delay: 20 * time.Millisecond, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// slowFirst makes the first call wait for its context to end (the hedge
// wins and cancels it) and answers the others at once with their attempt
// number.
func slowFirst(cancelled chan<- codes.Code) func(context.Context, string, string) (string, error) {
	first := make(chan struct{}, 1)
	first <- struct{}{}
	return func(ctx context.Context, _, in string) (string, error) {
		select {
		case <-first:
			<-ctx.Done()
			cancelled <- status.FromContextError(ctx.Err()).Code()
			return "", status.FromContextError(ctx.Err()).Err()
		default:
			return "hedge won", nil
		}
	}
}

func TestHedgeWinsForIdempotentCall(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			cancelled := make(chan codes.Code, 1)
			ts := &testServer{call: slowFirst(cancelled)}
			var l events
			br := breakers(t, circuit.Config{})
			e := clientEnv(t, tr, ts, watertightgrpc.ClientConfig{
				Breakers:   br,
				Hedge:      hedgePolicy(t, &l),
				Idempotent: []string{methodCall},
			})
			out, err := e.call(bounded(t), methodCall, "x")
			if err != nil || out != "hedge won" {
				t.Fatalf("call = %q, %v; want the hedge's answer", out, err)
			}
			if c := <-cancelled; c != codes.Canceled {
				t.Fatalf("the first attempt ended with %v, want CANCELLED", c)
			}
			if n := ts.count(); n != 2 {
				t.Fatalf("server saw %d calls, want 2", n)
			}
			if got := ts.md(1).Get(watertightgrpc.MetadataAttempt); len(got) != 1 || got[0] != "2" {
				t.Fatalf("the hedge carried %s %q, want 2", watertightgrpc.MetadataAttempt, got)
			}
			if sent := l.of(watertight.EventHedgeSent); len(sent) != 1 {
				t.Fatalf("hedge events %+v; want one EventHedgeSent", sent)
			}
			b, _ := br.Get(methodCall)
			if s := b.Snapshot(); s.Failures != 0 || s.Calls != 1 {
				t.Fatalf("breaker: %d calls, %d failures; want the winner's success only (the loser was cancelled)", s.Calls, s.Failures)
			}
		})
	}
}

func TestHedgeSkipsCallsThatAreNotIdempotent(t *testing.T) {
	ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		time.Sleep(60 * time.Millisecond) // longer than the hedge delay: a hedge would be due
		return "once", nil
	}}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Hedge: hedgePolicy(t, nil)})
	if out, err := e.call(bounded(t), methodCall, "x"); err != nil || out != "once" {
		t.Fatalf("call = %q, %v", out, err)
	}
	if n := ts.count(); n != 1 {
		t.Fatalf("server saw %d calls, want 1: the call is not idempotent", n)
	}
}

func TestHedgeStopsOnOverload(t *testing.T) {
	ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		return "", fail(ctx, codes.ResourceExhausted, "-1")
	}}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Hedge: hedgePolicy(t, nil), Idempotent: []string{methodCall}})
	_, err := e.call(bounded(t), methodCall, "x")
	if status.Code(err) != codes.ResourceExhausted || !watertight.IsOverloaded(err) {
		t.Fatalf("err = %v; want RESOURCE_EXHAUSTED, overloaded", err)
	}
	if n := ts.count(); n != 1 {
		t.Fatalf("server saw %d calls, want 1", n)
	}
}
