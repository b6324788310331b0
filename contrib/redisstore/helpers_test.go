package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/watertight-go/watertight/contrib/redisstore"
)

// redisAddr returns the address of the Redis the tests use, from
// WATERTIGHT_REDIS_ADDR. Without it the test is skipped, or fails when
// WATERTIGHT_REQUIRE_REDIS=1 (as in CI), so a missing Redis never passes
// silently there.
func redisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("WATERTIGHT_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal("redis required but WATERTIGHT_REDIS_ADDR is unset")
		}
		t.Skip("WATERTIGHT_REDIS_ADDR is unset: skipping this test, which needs a real Redis " +
			"(bash scripts/test.sh starts one when redis-server is installed)")
	}
	return addr
}

// newClient returns a client of the Redis at addr, with timeout as its
// dial, read and write timeouts and no retries, so that what the store
// returns is what Redis answered; it closes the client when the test ends.
func newClient(t testing.TB, addr string, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     timeout,
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
		DialerRetries:   1,
		MaxRetries:      -1,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// timeout is the clients' timeout on the tests' shared Redis: generous, as
// the machine may be busy (a slow answer is not what these tests check).
const timeout = 10 * time.Second

// sharedClient returns a client of the tests' Redis (see redisAddr),
// checked with a PING.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	c := newClient(t, redisAddr(t), timeout)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("WATERTIGHT_REDIS_ADDR=%s does not answer PING: %v", os.Getenv("WATERTIGHT_REDIS_ADDR"), err)
	}
	return c
}

// freshPrefix returns a key prefix no other test uses, and deletes its keys
// when the test ends (with cleanup, a client still open then).
func freshPrefix(t testing.TB, cleanup *redis.Client) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "watertight-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := cleanup.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			cleanup.Del(ctx, iter.Val())
		}
	})
	return prefix
}

// newStore returns a store on client with a fresh prefix.
func newStore(t testing.TB, client *redis.Client) *redisstore.Store {
	t.Helper()
	return newStoreWithPrefix(t, client, freshPrefix(t, client))
}

func newStoreWithPrefix(t testing.TB, client redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, redisstore.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eventually calls f until it returns true, for up to d, polling every few
// milliseconds: for waits on real Redis TTLs, which no virtual clock can
// advance.
func eventually(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
