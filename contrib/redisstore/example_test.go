package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/watertight-go/watertight/contrib/redisstore"
	"github.com/watertight-go/watertight/idempotency"
)

// Every server instance builds the same store over the shared Redis; the
// idempotency middleware (watertighthttp) takes it as its Store. Here the
// store is driven by hand: claim the key, run the operation once, store
// its result for replay.
//
// This example has no Output line: it needs a running Redis, so it is
// compiled but not run by go test.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379",
		// Short timeouts: with Redis down, a request fails closed quickly
		// instead of hanging.
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
		// Let the request's deadline bound each store call too.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{KeyPrefix: "payments:idem:"})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	key, fp := "tenant-42/7f3c9a", "POST /payments sha256:…" // scoped key, request fingerprint
	c, err := store.Claim(ctx, key, fp, 30*time.Second, time.Hour)
	if err != nil {
		log.Fatal(err) // fail closed: run nothing, answer 503, the client retries with the key
	}
	switch c.State {
	case idempotency.Claimed:
		// Run the operation once, then store its result for 24 hours.
		rec := idempotency.Record{Fingerprint: fp, Status: 201, Body: []byte(`{"id":"pay_1"}`), Created: time.Now()}
		if err := store.Complete(ctx, key, c.Token, rec, 24*time.Hour); err != nil {
			log.Print(err) // ErrNotOwner: the claim expired and was taken over
		}
	case idempotency.InFlight:
		fmt.Println("409: a request with this key is still running")
	case idempotency.Completed:
		fmt.Printf("replay: %d %s\n", c.Record.Status, c.Record.Body)
	}
}
