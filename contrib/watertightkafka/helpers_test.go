package watertightkafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
)

// fastRetry returns a retry policy of n attempts, every failure marked
// idempotent, with waits of a millisecond or two.
func fastRetry(t testing.TB, n int) *retry.Policy {
	t.Helper()
	bo, err := backoff.New(backoff.Config{Base: time.Millisecond, Cap: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := retry.New(retry.Config{Idempotent: true, MaxAttempts: n, Backoff: bo})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newMemoryStore returns an idempotency store in memory.
func newMemoryStore(t testing.TB) *idempotency.MemoryStore {
	t.Helper()
	s, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// brokersEnv names a real cluster to run the tests against instead of the
// in-process kfake cluster: WATERTIGHT_KAFKA_BROKERS=host:port,host:port.
// Each test then creates topics of its own, with a random prefix.
const brokersEnv = "WATERTIGHT_KAFKA_BROKERS"

// testEnv is a Kafka-protocol cluster for one test: kfake, started here, or
// the real one brokersEnv names.
type testEnv struct {
	brokers []string
	prefix  string
	fake    *kfake.Cluster
}

// newEnv starts the cluster (or connects to the real one) and creates the
// topics, each with its number of partitions, and each topic's ".dlq".
func newEnv(t testing.TB, topics map[string]int32) *testEnv {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &testEnv{prefix: "wtk-" + hex.EncodeToString(b[:]) + "-"}
	if v := os.Getenv(brokersEnv); v != "" {
		e.brokers = strings.Split(v, ",")
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		t.Cleanup(c.Close)
		e.fake = c
		e.brokers = c.ListenAddrs()
	}
	all := map[string]int32{}
	for name, n := range topics {
		all[e.topic(name)] = n
		all[e.topic(name)+DefaultDeadLetterSuffix] = 1
	}
	e.createTopics(t, all)
	return e
}

// topic returns the test's name for topic.
func (e *testEnv) topic(name string) string { return e.prefix + name }

// client returns a plain client of the cluster, closed at the test's end.
func (e *testEnv) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (e *testEnv) createTopics(t testing.TB, topics map[string]int32) {
	t.Helper()
	cl := e.client(t)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10_000
	for name, n := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, n, -1
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && err != kerr.TopicAlreadyExists {
			t.Fatalf("create topic %s: %v", rt.Topic, err)
		}
	}
}

// produce writes records (their Topic is the test's name) and waits for
// them to be acknowledged.
func (e *testEnv) produce(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	cl := e.client(t, kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// produceN writes n records to each partition of topic (name is the
// short name), with values "p/i".
func (e *testEnv) produceN(t testing.TB, name string, partitions int32, n int) {
	t.Helper()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: e.topic(name), Partition: p, Value: fmt.Appendf(nil, "%d/%d", p, i)})
		}
	}
	cl := e.client(t, kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// config returns a Config for the test's topics (short names) with a group
// of its own and the client settings tests want: start at the beginning,
// short fetch waits and a short session.
func (e *testEnv) config(group string, h Handler, topics ...string) Config {
	cfg := Config{
		Brokers:        e.brokers,
		Group:          e.prefix + group,
		Handler:        h,
		CommitInterval: 20 * time.Millisecond,
		ClientOptions: []kgo.Opt{
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(50 * time.Millisecond),
			kgo.SessionTimeout(6 * time.Second),
			kgo.HeartbeatInterval(100 * time.Millisecond),
		},
	}
	for _, tn := range topics {
		cfg.Topics = append(cfg.Topics, e.topic(tn))
	}
	return cfg
}

// committed reads the group's committed offsets for topic (short name).
func (e *testEnv) committed(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	cl := e.client(t)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = e.prefix + group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = e.topic(topic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, mt := range meta.Topics {
		if mt.Topic != nil && *mt.Topic == rt.Topic {
			for _, p := range mt.Partitions {
				rt.Partitions = append(rt.Partitions, p.Partition)
			}
		}
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	out := map[int32]int64{}
	for _, ft := range resp.Topics {
		for _, p := range ft.Partitions {
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// start builds a Consumer for cfg, applies setup (test hooks) to it and runs
// it until the test ends (or stop is called), failing the test if Run or
// Close fails.
func start(t testing.TB, cfg Config, setup ...func(*Consumer)) (*Consumer, func()) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range setup {
		f(c)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Run(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := <-errc; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// crash stops c as a crash would, as far as commits go: nothing more is
// committed, the work in progress is abandoned, and it leaves the group.
func crash(t testing.TB, c *Consumer, stop func()) {
	t.Helper()
	c.crashed.Store(true)
	stop()
}

// waitFor polls cond until it holds, failing the test after d. The cluster
// is real (or kfake on real sockets), so there is no virtual clock to
// advance: this is the bounded wait the tests use instead of sleeping.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// lane returns the snapshot of lane name.
func laneOf(c *Consumer, name string) LaneSnapshot {
	for _, l := range c.Snapshot().Lanes {
		if l.Name == name {
			return l
		}
	}
	return LaneSnapshot{}
}

// topicOf returns the snapshot of topic name.
func topicOf(c *Consumer, name string) TopicSnapshot {
	for _, ts := range c.Snapshot().Topics {
		if ts.Topic == name {
			return ts
		}
	}
	return TopicSnapshot{}
}

// events records the consumer's events by code.
type events struct {
	mu    sync.Mutex
	codes map[string]int
	all   []watertight.Event
}

func (e *events) OnEvent(ev watertight.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.codes == nil {
		e.codes = map[string]int{}
	}
	e.codes[ev.Code]++
	e.all = append(e.all, ev)
}

func (e *events) count(code string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.codes[code]
}

// work stands for a handler's processing time: it waits d, or until ctx
// ends. It is simulated work, not synchronisation.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
