package watertightgrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/watertightgrpc"
	"github.com/watertight-go/watertight/deadline"
)

// With the default margin, short deadlines are sent, not refused: a server
// on 127.0.0.1 that answers at once answers each of them, and it is sent
// less than the caller has (the margin, a share of the time left, applied).
// A fixed 100ms margin refused all of these without sending them.
func TestUnaryShortDeadlinesAreSent(t *testing.T) {
	left := make(chan time.Duration, 1)
	ts := &testServer{call: func(ctx context.Context, _, _ string) (string, error) {
		d, _ := deadline.Remaining(ctx)
		left <- d
		return "ok", nil
	}}
	e := clientEnv(t, "tcp", ts, watertightgrpc.ClientConfig{})
	// Connect first, without a deadline: the budgets below are for the call.
	if _, err := e.call(context.Background(), methodCall, "x"); err != nil {
		t.Fatal(err)
	}
	<-left
	for _, budget := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 101 * time.Millisecond, 150 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		out, err := e.call(ctx, methodCall, "x")
		cancel()
		if err != nil || out != "ok" {
			t.Fatalf("%v deadline: call = %q, %v; want the server's answer", budget, out, err)
		}
		if d := <-left; d <= 0 || d > budget-budget/10 {
			t.Fatalf("%v deadline: the server saw %v left; want in (0, %v], the margin applied", budget, d, budget-budget/10)
		}
	}
	// Truly too little: refused at once, nothing sent.
	for _, budget := range []time.Duration{500 * time.Microsecond, -time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		_, err := e.call(ctx, methodCall, "x")
		cancel()
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("%v deadline: err = %v; want deadline.ErrTooShort as DEADLINE_EXCEEDED", budget, err)
		}
	}
	if n := ts.count(); n != 1+5 {
		t.Fatalf("server saw %d calls, want 6", n)
	}
}
