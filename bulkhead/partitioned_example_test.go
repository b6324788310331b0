package bulkhead_test

import (
	"context"
	"fmt"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

// Two tiers share 4 permits, 3 to 1. The free tier borrows what premium
// leaves idle, but only while half of premium's unused guarantee stays
// free (the default Reserve), so premium coming back gets in at once.
// Tenants the configuration does not name are in the free tier.
func ExampleNewPartitioned() {
	p, err := bulkhead.NewPartitioned(bulkhead.PartitionedConfig{
		Name:          "api",
		MaxConcurrent: 4,
		Partitions: []bulkhead.PartitionConfig{
			{Name: "premium", Weight: 3},
			{Name: "free", Weight: 1},
		},
		Default: "free", // unknown tenants
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, tenant := range []string{"acme", "globex", "initech", "premium", "premium"} {
		i, err := p.AcquireName(ctx, tenant)
		if err != nil {
			fmt.Printf("%s: %v (rejection: %t)\n", tenant, err, watertight.IsRejection(err))
			continue
		}
		fmt.Printf("%s: in, partition %s\n", tenant, p.PartitionName(i))
		// ... the call runs, then p.Release(i).
	}
	for _, s := range p.Snapshot().Partitions {
		fmt.Printf("%s: %d held, %d guaranteed, %d borrowed, %d refused\n", s.Name, s.Active, s.Guaranteed, s.Borrowed, s.Rejected)
	}
	// Output:
	// acme: in, partition free
	// globex: in, partition free
	// initech: bulkhead: api: free: full (rejection: true)
	// premium: in, partition premium
	// premium: in, partition premium
	// premium: 2 held, 3 guaranteed, 0 borrowed, 0 refused
	// free: 2 held, 1 guaranteed, 1 borrowed, 1 refused
}
