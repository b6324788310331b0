package redisstore_test

import (
	"testing"

	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/idempotency/storetest"
)

// The store keeps the idempotency.Store contract that the HTTP middleware
// relies on, checked by the shared conformance suite against a real Redis.
func TestConformance(t *testing.T) {
	client := sharedClient(t)
	storetest.Run(t, func(t *testing.T) idempotency.Store { return newStore(t, client) })
}

// The same suite, with every subtest's store on a client of its own: the
// stores share nothing but Redis and the key prefix, as server instances do.
func TestConformanceSeparateClients(t *testing.T) {
	addr := redisAddr(t)
	prefix := freshPrefix(t, sharedClient(t))
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStoreWithPrefix(t, newClient(t, addr, timeout), prefix)
	})
}
