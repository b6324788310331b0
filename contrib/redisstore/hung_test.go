//go:build unix

package redisstore_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight-go/watertight/idempotency"
)

// signal sends sig to the server.
func (r *redisServer) signal(sig os.Signal) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
}

// Redis hung (stopped, not dead: connections open, nothing answers): every
// operation gives up after the client's timeout with an error; when Redis
// resumes, the store works again and Redis kept its keys.
func TestRedisHung(t *testing.T) {
	srv := startOwnRedis(t)
	client := newClient(t, srv.addr(), outageTimeout)
	s := newStoreWithPrefix(t, client, "hung:")
	ctx := context.Background()
	held := mustClaim(t, s, "held", "fp", lockTTL, idempotency.Claimed)

	// The recommended wiring: ContextTimeoutEnabled, so that the caller's
	// deadline (the middleware's StoreTimeout) bounds each call, whatever
	// the client's own timeouts.
	ctxClient := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute, DisableIdentity: true})
	defer ctxClient.Close()
	ctxStore := newStoreWithPrefix(t, ctxClient, "hung:")
	mustClaim(t, ctxStore, "warm", "fp", lockTTL, idempotency.Claimed) // a pooled connection

	srv.signal(syscall.SIGSTOP)
	failsPromptly(t, "with Redis hung", s, held.Token)
	const deadline = 300 * time.Millisecond
	for _, name := range []string{"Claim", "Complete", "Release"} {
		dctx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		var err error
		switch name {
		case "Claim":
			_, err = ctxStore.Claim(dctx, "new", "fp", lockTTL, time.Hour)
		case "Complete":
			err = ctxStore.Complete(dctx, "held", held.Token, sampleRecord("fp"), ttl)
		case "Release":
			err = ctxStore.Release(dctx, "held", held.Token)
		}
		cancel()
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > deadline+2*time.Second {
			t.Fatalf("%s with Redis hung and a %v deadline: %v after %v; want the deadline's error, promptly", name, deadline, err, took)
		}
	}
	srv.signal(syscall.SIGCONT)

	eventually(t, 10*time.Second, "the store did not recover after Redis resumed", func() bool {
		_, err := s.Claim(ctx, "probe", "fp", lockTTL, time.Hour)
		return err == nil
	})
	// Redis kept its keys. The Complete sent while it was stopped timed out
	// on our side but may still have reached Redis and run when it resumed
	// (an error from a store call means "outcome unknown", as for any call
	// over a network): the key is still held or completed, never free.
	if c, err := s.Claim(ctx, "held", "fp", lockTTL, time.Hour); err != nil || c.State == idempotency.Claimed {
		t.Fatalf("the key held before the hang: %+v, %v; want it still held or completed", c, err)
	}
	c := mustClaim(t, s, "after", "fp", lockTTL, idempotency.Claimed)
	if err := s.Complete(ctx, "after", c.Token, sampleRecord("fp"), ttl); err != nil {
		t.Fatalf("Complete after Redis resumed: %v", err)
	}
	mustClaim(t, s, "after", "fp", lockTTL, idempotency.Completed)
}
