package watertightkafka_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watertight-go/watertight/contrib/watertightkafka"
)

// A consumer of two topics, each with its own lane: the registrations keep
// their workers whatever the transcoding jobs do. The cluster is franz-go's
// in-process kfake.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, "user-registrations", "video-transcoding"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	ctx := context.Background()
	for _, r := range []*kgo.Record{
		{Topic: "user-registrations", Value: []byte("ada")},
		{Topic: "user-registrations", Value: []byte("grace")},
		{Topic: "video-transcoding", Value: []byte("intro.mp4")},
	} {
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	var seen []string
	all := make(chan struct{})
	c, err := watertightkafka.New(watertightkafka.Config{
		Brokers: cluster.ListenAddrs(),
		Group:   "example",
		Topics:  []string{"user-registrations", "video-transcoding"},
		Handler: func(ctx context.Context, r *kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, r.Topic+": "+string(r.Value))
			if len(seen) == 3 {
				close(all)
			}
			return nil
		},
		Lanes: map[string]watertightkafka.LaneConfig{
			"user-registrations": {Workers: 4, QueueSize: 100},
			"video-transcoding":  {Workers: 2, QueueSize: 4, MaxBatch: 1},
		},
		ClientOptions: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		panic("records not consumed")
	}
	for _, l := range c.Snapshot().Lanes {
		fmt.Printf("lane %s: %d workers\n", l.Name, l.Pool.Workers)
	}
	if err := c.Close(ctx); err != nil {
		panic(err)
	}
	if err := <-done; err != nil {
		panic(err)
	}
	sort.Strings(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// lane user-registrations: 4 workers
	// lane video-transcoding: 2 workers
	// user-registrations: ada
	// user-registrations: grace
	// video-transcoding: intro.mp4
}
