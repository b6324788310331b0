package watertightgrpc_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/watertight-go/watertight/circuit"
	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
)

// codesOf lists "kind:code" of the events l got.
func codesOf(l *events) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.evs {
		out = append(out, e.Kind.String()+":"+e.Code)
	}
	return out
}

// The client's events carry codes: a retry policy's decisions (turned into
// events of Source "grpc") and rejections by its own protections.
func TestClientEventCodes(t *testing.T) {
	ts := &testServer{call: failFirst(100, codes.Unavailable)}
	reg := breakers(t, circuit.Config{WindowSize: 2, MinCalls: 2, OpenDuration: time.Hour})
	var l events
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Breakers: reg, Retry: fastRetry(), Listener: &l})
	_, _ = e.call(bounded(t), methodCall, "x")                      // not idempotent: not retried
	_, _ = e.call(retry.Idempotent(bounded(t)), methodCall, "x")    // retried until the breaker opens
	_, err := e.call(retry.Idempotent(bounded(t)), methodCall, "x") // refused
	if !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("err = %v, want the open breaker", err)
	}
	want := []string{
		"retry_skipped:" + retry.CodeNotIdempotent,
		"retry_scheduled:",
		"rejected:" + circuit.CodeOpen, // the retry met the open breaker
		"rejected:" + circuit.CodeOpen,
	}
	if got := codesOf(&l); !slices.Equal(got, want) {
		t.Fatalf("codes\n got %q\nwant %q", got, want)
	}
}

// The idempotency interceptor's rejections carry package idempotency's
// codes, as the HTTP middleware's do.
func TestIdempotencyEventCodes(t *testing.T) {
	var l events
	icpt := idemInterceptor(t, watertightgrpc.IdempotencyConfig{
		Methods: []string{methodCall}, Listener: &l,
		Required: func(_ context.Context, m string) bool { return true },
	})
	e := idemEnv(t, "bufconn", &testServer{}, icpt)
	_, _ = e.call(bounded(t), methodCall, "x")                        // no key
	_, _ = e.call(withKey(bounded(t), "not quoted"), methodCall, "x") // malformed
	_, _ = e.call(withKey(bounded(t), `"k1"`), methodCall, "x")       // runs
	_, _ = e.call(withKey(bounded(t), `"k1"`), methodCall, "y")       // another request, same key
	want := []string{
		"rejected:" + idempotency.CodeKeyMissing,
		"rejected:" + idempotency.CodeInvalidKey,
		"rejected:" + idempotency.CodeMismatch,
	}
	if got := codesOf(&l); !slices.Equal(got, want) {
		t.Fatalf("codes\n got %q\nwant %q", got, want)
	}
}
