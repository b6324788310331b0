package watertightkafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watertight-go/watertight"
)

func nopHandler(context.Context, *kgo.Record) error { return nil }

// TestConfigErrors: each invalid configuration is refused by New with an
// error that names the field and says what to do.
func TestConfigErrors(t *testing.T) {
	base := func() Config {
		return Config{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Handler: nopHandler}
	}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Group = "" }, "Config.Group is required"},
		{func(c *Config) { c.Topics = nil }, "Config.Topics is required"},
		{func(c *Config) { c.Topics = []string{"t", ""} }, "Config.Topics[1] is empty"},
		{func(c *Config) { c.Handler = nil }, "Config.DefaultLane has no Handler and Config.Handler is nil"},
		{func(c *Config) { c.MaxLanes = -1 }, "Config.MaxLanes must be >= 0"},
		{func(c *Config) { c.MaxPollRecords = -1 }, "Config.MaxPollRecords must be >= 0"},
		{func(c *Config) { c.CommitInterval = -time.Second }, "Config.CommitInterval must be >= 0"},
		{func(c *Config) { c.DefaultLane.Workers = -1 }, "Config.DefaultLane.Workers must be >= 0"},
		{func(c *Config) { c.Lanes = map[string]LaneConfig{"t": {MaxBatch: -2}} }, `Config.Lanes["t"].MaxBatch must be >= 0`},
		{func(c *Config) { c.Lanes = map[string]LaneConfig{"t": {ProbeInterval: -1}} }, `Config.Lanes["t"].ProbeInterval must be >= 0`},
		{func(c *Config) { c.Lanes = map[string]LaneConfig{"": {}} }, "Config.Lanes has an empty lane name"},
		{func(c *Config) { c.Idempotency.LockTTL = -1 }, "Config.Idempotency.LockTTL must be >= 0"},
		{func(c *Config) { c.Idempotency.TTL = -1 }, "Config.Idempotency.TTL must be >= 0"},
		{func(c *Config) { c.Idempotency.TTL = time.Minute; c.Idempotency.LockTTL = time.Hour }, "Config.Idempotency.TTL (1m0s) must not be below LockTTL"},
	} {
		cfg := base()
		tc.change(&cfg)
		c, err := New(cfg)
		if err == nil {
			_ = c.Close(context.Background())
			t.Errorf("%s: New accepted it", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "watertightkafka: ") {
			t.Errorf("error %q, want it to contain %q", err, tc.want)
		}
	}
}

// TestLifecycle: a consumer closed before it ran, or that ran, refuses to
// run (again) with ErrClosed, a rejection; Close may be called twice.
func TestLifecycle(t *testing.T) {
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"}, Handler: nopHandler, RevokeTimeout: -1}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools()) != 1 || c.Pool("t") == nil || c.Pool("nope") != nil {
		t.Fatalf("pools %v: want the topic's lane", c.Pools())
	}
	ctx := context.Background()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, ErrClosed) || !watertight.IsRejection(err) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

// TestDefaults: zero fields resolve to the documented defaults.
func TestDefaults(t *testing.T) {
	cfg, err := Config{Group: "g", Topics: []string{"t"}, Handler: nopHandler}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxLanes != DefaultMaxLanes || cfg.CommitInterval != DefaultCommitInterval || cfg.RevokeTimeout != DefaultRevokeTimeout ||
		cfg.Idempotency.LockTTL != DefaultIdempotencyLockTTL || cfg.Idempotency.TTL != DefaultIdempotencyTTL || cfg.MaxPollRecords != 0 {
		t.Fatalf("resolved %+v", cfg)
	}
	lc, err := LaneConfig{}.resolved("t")
	if err != nil {
		t.Fatal(err)
	}
	if lc.Workers != DefaultWorkers || lc.QueueSize != DefaultQueueSize || lc.MaxBatch != DefaultMaxBatch ||
		lc.ProbeInterval != DefaultProbeInterval || lc.AttemptTimeout != DefaultAttemptTimeout || lc.Retry == nil {
		t.Fatalf("lane resolved %+v", lc)
	}
	if lc, _ := (LaneConfig{QueueSize: -1}).resolved("t"); lc.QueueSize != 0 {
		t.Fatalf("QueueSize -1 resolved to %d, want 0 (no queue)", lc.QueueSize)
	}
}

// TestChunk: a run of records is spread over the workers while records are
// slow or their speed unknown, cut into tasks that take about taskTarget
// once they are known to be quick, and never past MaxBatch or the queue.
func TestChunk(t *testing.T) {
	l, err := newLane("t", "t", LaneConfig{Workers: 4, MaxBatch: 64, QueueSize: 50}, nopHandler)
	if err != nil {
		t.Fatal(err)
	}
	defer l.pool.Shutdown(context.Background())
	for _, tc := range []struct {
		perRecord time.Duration
		n, want   int
	}{
		{0, 1, 1}, {0, 10, 3}, {0, 400, 50}, {time.Millisecond, 40, 10},
		{time.Microsecond, 8, 50}, {10 * time.Microsecond, 8, 5},
	} {
		l.perRecord.Store(int64(tc.perRecord))
		if got := l.chunk(tc.n); got != tc.want {
			t.Errorf("chunk(%d) with %v per record = %d, want %d", tc.n, tc.perRecord, got, tc.want)
		}
	}
}
