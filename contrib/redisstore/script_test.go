package redisstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Claim whose script ran but whose reply was lost, and which go-redis
// sent again, finds its own claim and still reports it claimed (the key is
// not locked for nobody); another caller's claim is never mistaken for it.
// The scripts are run directly here, as a retry would run them.
func TestClaimScriptRetried(t *testing.T) {
	addr := os.Getenv("WATERTIGHT_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal("redis required but WATERTIGHT_REDIS_ADDR is unset")
		}
		t.Skip("WATERTIGHT_REDIS_ADDR is unset: skipping this test, which needs a real Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	key := "watertight-test:" + newToken() + ":retried"
	defer c.Del(ctx, key)

	life, lockEnd := millis(time.Hour), millis(time.Hour-time.Minute)
	mine := encodeClaim(newToken(), lockEnd, "fp")
	for attempt := range 2 {
		res, err := claimScript.Run(ctx, c, []string{key}, mine, life, lockEnd).Result()
		if err != nil || res != int64(1) {
			t.Fatalf("attempt %d of the same claim: %v, %v; want 1 (claimed)", attempt, res, err)
		}
	}
	other := encodeClaim(newToken(), lockEnd, "fp")
	res, err := claimScript.Run(ctx, c, []string{key}, other, life, lockEnd).Result()
	if r, ok := res.([]any); err != nil || !ok || len(r) != 2 || r[0] != mine {
		t.Fatalf("another caller's claim: %v, %v; want the held claim's value and PTTL", res, err)
	}
	// Once the lock has ended, the same call's retry is not handed the key
	// again: the claim is Unknown.
	if err := c.PExpire(ctx, key, time.Duration(lockEnd)*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = claimScript.Run(ctx, c, []string{key}, mine, life, lockEnd).Result()
	if r, ok := res.([]any); err != nil || !ok || len(r) != 2 || r[0] != mine {
		t.Fatalf("the same claim after its lock ended: %v, %v; want the value and PTTL (unknown)", res, err)
	}
}
