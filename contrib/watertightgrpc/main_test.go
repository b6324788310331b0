package watertightgrpc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: every test closes its
// ClientConn and stops its server (newEnv's cleanup), which ends gRPC's
// goroutines; goleak retries for a while, which covers the transports'
// goroutines that take a moment to notice. No goroutine is ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
