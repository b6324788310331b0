package watertightkafka

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
)

const waitLong = 20 * time.Second

// TestIsolation: a slow topic whose records block every worker of its lane
// leaves the light topic's lane working; with one shared lane (the control)
// the light records wait behind the slow ones.
func TestIsolation(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "per-topic lanes"
		if shared {
			name = "one shared lane"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, map[string]int32{"slow": 1, "light": 1})
			slow := e.topic("slow")
			gate := make(chan struct{})
			var lightDone, slowDone atomic.Int64
			h := func(ctx context.Context, r *kgo.Record) error {
				if r.Topic == slow {
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
					slowDone.Add(1)
					return nil
				}
				lightDone.Add(1)
				return nil
			}
			cfg := e.config("g", h, "slow", "light")
			cfg.DefaultLane = LaneConfig{Workers: 2, QueueSize: 10, MaxBatch: 1}
			slowLane := slow
			if shared {
				cfg.LaneOf = func(*kgo.Record) string { return "shared" }
				slowLane = "shared"
			}
			c, _ := start(t, cfg)
			e.produceN(t, "slow", 1, 6)
			waitFor(t, waitLong, "both workers of the slow lane busy", func() bool { return laneOf(c, slowLane).InUse == 2 })
			e.produceN(t, "light", 1, 20)
			if !shared {
				waitFor(t, waitLong, "the light records processed while the slow lane is stuck", func() bool { return lightDone.Load() == 20 })
				if got := laneOf(c, slow).InUse; got != 2 {
					t.Fatalf("slow lane in use = %d, want 2 (still blocked)", got)
				}
			} else {
				waitFor(t, waitLong, "all 26 records in the shared lane", func() bool { return laneOf(c, "shared").Buffered == 26 })
				if n := lightDone.Load(); n != 0 {
					t.Fatalf("%d light records processed with every shared worker blocked; want 0", n)
				}
			}
			close(gate)
			waitFor(t, waitLong, "everything processed", func() bool { return lightDone.Load() == 20 && slowDone.Load() == 6 })
		})
	}
}

// TestBackpressureBound: with a lag of thousands of records and a handler
// that cannot keep up, the records the consumer holds stay within
// Workers×MaxBatch + QueueSize + MaxPollRecords, and every record is
// processed once. Beside a light topic, the deep topic's partitions are
// paused so that the light one goes on; alone, nothing is paused and the
// consumer simply stops polling until its lane drains (a pause would make
// the client drop what it fetched).
func TestBackpressureBound(t *testing.T) {
	for _, beside := range []bool{true, false} {
		name := "alone"
		if beside {
			name = "beside a light topic"
		}
		t.Run(name, func(t *testing.T) { testBackpressure(t, beside) })
	}
}

func testBackpressure(t *testing.T, beside bool) {
	const (
		partitions = 2
		perPart    = 1000
		workers    = 2
		maxBatch   = 4
		queue      = 20
		maxPoll    = 50
		bound      = workers*maxBatch + queue + maxPoll
	)
	e := newEnv(t, map[string]int32{"deep": partitions, "light": 1})
	deep, light := e.topic("deep"), e.topic("light")
	e.produceN(t, "deep", partitions, perPart)
	gate := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	var lightDone atomic.Int64
	h := func(ctx context.Context, r *kgo.Record) error {
		if r.Topic == light {
			lightDone.Add(1)
			return nil
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		seen[string(r.Value)]++
		mu.Unlock()
		return nil
	}
	topics := []string{"deep"}
	if beside {
		topics = append(topics, "light")
	}
	cfg := e.config("g", h, topics...)
	cfg.MaxPollRecords = maxPoll
	cfg.DefaultLane = LaneConfig{Workers: workers, QueueSize: queue, MaxBatch: maxBatch}
	c, _ := start(t, cfg)
	wantPaused := 0
	if beside {
		wantPaused = partitions
	}
	waitFor(t, waitLong, "the lane full", func() bool {
		l := laneOf(c, deep)
		return l.Paused && l.Queued == queue && l.InUse == workers && topicOf(c, deep).PausedPartitions == wantPaused
	})
	// End offsets not fetched yet come from the brokers every
	// CommitInterval.
	waitFor(t, waitLong, "the lag of both partitions known", func() bool { return topicOf(c, deep).Lag >= partitions*perPart-bound })
	l, ts := laneOf(c, deep), topicOf(c, deep)
	t.Logf("full: buffered %d (held %d, queued %d), lag %d, %d partitions paused", l.Buffered, l.Held, l.Queued, ts.Lag, ts.PausedPartitions)
	if l.Buffered > bound {
		t.Fatalf("buffered %d records, bound %d", l.Buffered, bound)
	}
	if beside {
		e.produceN(t, "light", 1, 10)
		waitFor(t, waitLong, "the light topic processed beside the full lane", func() bool { return lightDone.Load() == 10 })
	}
	close(gate)
	waitFor(t, waitLong, "every record processed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == partitions*perPart
	})
	l = laneOf(c, deep)
	if l.PeakBuffered > bound {
		t.Fatalf("peak buffered %d records, bound %d", l.PeakBuffered, bound)
	}
	if l.Pauses == 0 {
		t.Fatal("the lane never paused")
	}
	if tp := topicOf(c, deep).Pauses; (tp > 0) != beside {
		t.Fatalf("the deep topic's partitions were paused %d times; beside another topic: %v", tp, beside)
	}
	mu.Lock()
	defer mu.Unlock()
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("record %s processed %d times", v, n)
		}
	}
	t.Logf("peak buffered %d of bound %d; lane paused %d times", l.PeakBuffered, bound, l.Pauses)
}

// offsetsSeen records which offsets of each partition a handler saw.
type offsetsSeen struct {
	mu   sync.Mutex
	seen map[int32]map[int64]int
}

func (o *offsetsSeen) add(r *kgo.Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[int32]map[int64]int{}
	}
	if o.seen[r.Partition] == nil {
		o.seen[r.Partition] = map[int64]int{}
	}
	o.seen[r.Partition][r.Offset]++
}

func (o *offsetsSeen) has(p int32, off int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[p][off] > 0
}

func (o *offsetsSeen) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.seen {
		n += len(m)
	}
	return n
}

// min returns the lowest offset seen in partition p, or -1.
func (o *offsetsSeen) min(p int32) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	lo := int64(-1)
	for off := range o.seen[p] {
		if lo < 0 || off < lo {
			lo = off
		}
	}
	return lo
}

// TestCrashReplaysNeverSkips: a consumer that crashes (no final commit, work
// in progress abandoned) after processing records beyond a stuck one; the
// next consumer of the group starts exactly at the committed offsets, so
// every record is processed (nothing lost or skipped) and only records past
// the commit are processed again — and, with an idempotency store, none of
// their side effects repeats.
func TestCrashReplaysNeverSkips(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		name := "no store"
		if withStore {
			name = "idempotency store"
		}
		t.Run(name, func(t *testing.T) {
			const (
				partitions = 3
				perPart    = 200
				stuckAt    = 50 // the offset of partition 0 that is still running at the crash
			)
			e := newEnv(t, map[string]int32{"orders": partitions})
			e.produceN(t, "orders", partitions, perPart)
			store := newMemoryStore(t)
			var effects sync.Map // record value -> *atomic.Int64: the side effect
			effect := func(r *kgo.Record) {
				v, _ := effects.LoadOrStore(string(r.Value), new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}

			// The first consumer: partition 0's offset stuckAt never ends.
			var first offsetsSeen
			h1 := func(ctx context.Context, r *kgo.Record) error {
				if r.Partition == 0 && r.Offset == stuckAt {
					<-ctx.Done()
					return ctx.Err()
				}
				effect(r)
				first.add(r)
				return nil
			}
			cfg := e.config("g", h1, "orders")
			cfg.DefaultLane = LaneConfig{Workers: 4, MaxBatch: 8}
			cfg.RevokeTimeout = -1 // a crash does not wait
			if withStore {
				cfg.Idempotency.Store = store
			}
			var commitMu sync.Mutex
			last := map[int32]int64{}
			c1, stop1 := start(t, cfg, func(c *Consumer) {
				c.onCommit = func(m map[string]map[int32]kgo.EpochOffset) {
					commitMu.Lock()
					defer commitMu.Unlock()
					for p, eo := range m[e.topic("orders")] {
						last[p] = eo.Offset
					}
				}
			})
			waitFor(t, waitLong, "the first consumer to commit 50, 200, 200 and process partition 0 to its end", func() bool {
				commitMu.Lock()
				defer commitMu.Unlock()
				return last[0] == stuckAt && last[1] == perPart && last[2] == perPart && first.has(0, perPart-1)
			})
			crash(t, c1, stop1)

			committed := e.committed(t, "g", "orders")
			for p := range int32(partitions) {
				for off := range committed[p] {
					if !first.has(p, off) {
						t.Fatalf("partition %d: offset %d committed (%d) but never processed", p, off, committed[p])
					}
				}
			}
			if committed[0] != stuckAt {
				t.Fatalf("partition 0 committed at %d, want %d (the stuck record)", committed[0], stuckAt)
			}

			// The second consumer of the group takes over.
			var second offsetsSeen
			h2 := func(ctx context.Context, r *kgo.Record) error {
				effect(r)
				second.add(r)
				return nil
			}
			cfg.Handler = h2
			c2, _ := start(t, cfg)
			waitFor(t, waitLong, "the second consumer through partition 0 from the commit", func() bool {
				l := laneOf(c2, e.topic("orders"))
				return l.Processed+l.Duplicates == perPart-stuckAt
			})
			for p := range int32(partitions) {
				for off := range int64(perPart) {
					if !first.has(p, off) && !second.has(p, off) {
						t.Fatalf("partition %d offset %d never processed", p, off)
					}
				}
			}
			if lo := second.min(0); lo != stuckAt {
				t.Fatalf("the second consumer started partition 0 at %d, want the committed %d", lo, stuckAt)
			}
			replayed := 0
			for off := int64(stuckAt + 1); off < perPart; off++ {
				if first.has(0, off) {
					replayed++
				}
			}
			if n := second.count(); withStore && n != perPart-stuckAt-replayed {
				// With the store, only the records the first consumer did
				// not finish run again.
				t.Fatalf("the second consumer ran %d records, want %d (those the first did not finish)", n, perPart-stuckAt-replayed)
			}
			if withStore {
				if d := laneOf(c2, e.topic("orders")).Duplicates; d != uint64(replayed) {
					t.Fatalf("duplicates skipped = %d, want %d (processed past the commit before the crash)", d, replayed)
				}
			} else if n := second.count(); n != perPart-stuckAt {
				t.Fatalf("the second consumer ran %d records, want %d (from the commit to the end)", n, perPart-stuckAt)
			}
			dup := 0
			effects.Range(func(_, v any) bool {
				if v.(*atomic.Int64).Load() > 1 {
					dup++
				}
				return true
			})
			switch {
			case withStore && dup != 0:
				t.Fatalf("%d side effects repeated with the idempotency store", dup)
			case !withStore && dup != replayed:
				t.Fatalf("%d side effects repeated, want %d (the records processed past the commit)", dup, replayed)
			}
			t.Logf("%d records processed past the commit before the crash; replayed %v", replayed, !withStore)
		})
	}
}

// TestOrderedCommits: records of one partition finish out of order on eight
// workers; no commit ever passes a record that has not finished, the commit
// stops right before the one left running, and moves to the end once it
// finishes.
func TestOrderedCommits(t *testing.T) {
	const n, held = 40, 5
	e := newEnv(t, map[string]int32{"seq": 1})
	e.produceN(t, "seq", 1, n)
	release := make([]chan struct{}, n)
	for i := range release {
		release[i] = make(chan struct{})
	}
	var done atomic.Int64
	h := func(ctx context.Context, r *kgo.Record) error {
		select {
		case <-release[r.Offset]:
		case <-ctx.Done():
			return ctx.Err()
		}
		done.Add(1)
		return nil
	}
	cfg := e.config("g", h, "seq")
	cfg.CommitInterval = 5 * time.Millisecond
	cfg.DefaultLane = LaneConfig{Workers: 8, MaxBatch: 1}
	// lowest is the lowest offset not released yet: no commit may pass it.
	var lowest atomic.Int64
	var mu sync.Mutex
	var commits []int64
	start(t, cfg, func(c *Consumer) {
		c.onCommit = func(m map[string]map[int32]kgo.EpochOffset) {
			off := m[e.topic("seq")][0].Offset
			if bound := lowest.Load(); off > bound {
				t.Errorf("commit %d passes offset %d, which has not finished", off, bound)
			}
			mu.Lock()
			commits = append(commits, off)
			mu.Unlock()
		}
	})
	lastCommit := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		if len(commits) == 0 {
			return -1
		}
		return commits[len(commits)-1]
	}
	// Release every record but one, in a scrambled order. The bound moves
	// before the release, so that it is never behind what may finish.
	released := make([]bool, n)
	for i := range n {
		k := (i*17 + 3) % n
		if k == held {
			continue
		}
		released[k] = true
		lo := lowest.Load()
		for lo < n && released[lo] {
			lo++
		}
		lowest.Store(lo)
		close(release[k])
	}
	waitFor(t, waitLong, "every record but one done", func() bool { return done.Load() == n-1 })
	waitFor(t, waitLong, "the commit to reach the held record", func() bool { return lastCommit() == held })
	lowest.Store(n)
	close(release[held])
	waitFor(t, waitLong, "the commit to reach the end", func() bool { return lastCommit() == n })
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(commits); i++ {
		if commits[i] < commits[i-1] {
			t.Fatalf("commits went back: %v", commits)
		}
	}
	t.Logf("commits: %v", commits)
}

// TestDeadLetter: a record whose error is permanent, one that keeps failing
// with a transient error, and one whose handler panics go to the dead-letter
// topic with the reason in headers, after the attempts the retry policy
// allows and no more; the records after them are processed.
func TestDeadLetter(t *testing.T) {
	e := newEnv(t, map[string]int32{"jobs": 1})
	jobs := e.topic("jobs")
	values := []string{"ok-1", "bad", "ok-2", "flaky", "ok-3", "boom", "ok-4"}
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: jobs, Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-" + v)}}})
	}
	e.produce(t, recs...)
	var mu sync.Mutex
	attempts := map[string]int{}
	var ok atomic.Int64
	h := func(ctx context.Context, r *kgo.Record) error {
		v := string(r.Value)
		mu.Lock()
		attempts[v]++
		mu.Unlock()
		switch v {
		case "bad":
			return errors.New("bad payload")
		case "flaky":
			return retry.MarkTransient(errors.New("downstream timeout"))
		case "boom":
			panic("handler bug")
		}
		ok.Add(1)
		return nil
	}
	pol := fastRetry(t, 3)
	var ev events
	cfg := e.config("g", h, "jobs")
	cfg.Listener = &ev
	cfg.DefaultLane = LaneConfig{Workers: 1, Retry: pol}
	c, _ := start(t, cfg)
	waitFor(t, waitLong, "the good records processed", func() bool { return ok.Load() == 4 })

	dlq := e.client(t, kgo.ConsumeTopics(jobs+DefaultDeadLetterSuffix), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]*kgo.Record{}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for len(got) < 3 && ctx.Err() == nil {
		dlq.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r })
	}
	want := map[string]struct {
		code     string
		attempts string
		err      string
		offset   string
	}{
		"bad":   {CodeNotRetryable, "1", "bad payload", "1"},
		"flaky": {retry.CodeMaxAttempts, "3", "downstream timeout", "3"},
		"boom":  {CodeHandlerPanic, "1", "handler bug", "5"},
	}
	for v, w := range want {
		r := got[v]
		if r == nil {
			t.Fatalf("no dead letter for %q (got %d)", v, len(got))
		}
		h := map[string]string{}
		for _, hd := range r.Headers {
			h[hd.Key] = string(hd.Value)
		}
		if h[HeaderCode] != w.code || h[HeaderAttempts] != w.attempts || h[HeaderOffset] != w.offset ||
			h[HeaderTopic] != jobs || h[HeaderPartition] != "0" || h[HeaderLane] != jobs || h["trace"] != "t-"+v ||
			!strings.Contains(h[HeaderError], w.err) {
			t.Errorf("dead letter of %q: headers %v; want code %s, attempts %s, offset %s, error containing %q, the original headers",
				v, h, w.code, w.attempts, w.offset, w.err)
		}
	}
	mu.Lock()
	if attempts["flaky"] != 3 || attempts["bad"] != 1 || attempts["boom"] != 1 {
		t.Errorf("attempts %v; want flaky 3, bad 1, boom 1", attempts)
	}
	mu.Unlock()
	if n := ev.count(CodeDeadLettered); n != 3 {
		t.Errorf("%d dead_lettered events, want 3", n)
	}
	if l, ts := laneOf(c, jobs), topicOf(c, jobs); l.DeadLettered != 3 || ts.DeadLettered != 3 || l.Processed != 4 {
		t.Errorf("lane dead-lettered %d, topic %d, processed %d; want 3, 3, 4", l.DeadLettered, ts.DeadLettered, l.Processed)
	}
}

// TestBreakerPausesAndResumes: failures open the lane's breaker; while it is
// open the lane's records are held, not failed, and its partitions paused;
// once the dependency is back a half-open trial closes the breaker and every
// held record is processed. Only the records that failed before the breaker
// opened are dead-lettered.
func TestBreakerPausesAndResumes(t *testing.T) {
	const n = 30
	e := newEnv(t, map[string]int32{"pay": 2, "light": 1})
	pay := e.topic("pay")
	var down atomic.Bool
	down.Store(true)
	var ok atomic.Int64
	h := func(ctx context.Context, r *kgo.Record) error {
		if r.Topic != pay {
			return nil
		}
		if down.Load() {
			return errors.New("payments down")
		}
		ok.Add(1)
		return nil
	}
	br, err := circuit.New(circuit.Config{Name: "payments", ConsecutiveFailures: 3, FailureRateThreshold: -1,
		OpenDuration: 20 * time.Millisecond, OpenJitter: -1, HalfOpenCalls: 1, HalfOpenSuccesses: 1})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := retry.New(retry.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	// The light topic, beside it, keeps the poll going: the open breaker's
	// topic is paused rather than the poll stopped.
	cfg := e.config("g", h, "pay", "light")
	cfg.Listener = &ev
	cfg.Lanes = map[string]LaneConfig{pay: {Workers: 1, MaxBatch: 1, Breaker: br, Retry: pol, ProbeInterval: 5 * time.Millisecond}}
	c, _ := start(t, cfg)
	e.produceN(t, "pay", 2, n/2)
	waitFor(t, waitLong, "the breaker open and the lane paused", func() bool {
		l := laneOf(c, pay)
		return br.State() == circuit.Open && l.Paused && l.Held > 0 && topicOf(c, pay).PausedPartitions == 2
	})
	if l := laneOf(c, pay); l.DeadLettered != 3 {
		t.Fatalf("dead-lettered %d while the breaker tripped; want 3 (the failures that opened it)", l.DeadLettered)
	}
	down.Store(false)
	waitFor(t, waitLong, "every other record processed", func() bool { return ok.Load() == n-3 })
	waitFor(t, waitLong, "the lane flowing again", func() bool {
		l := laneOf(c, pay)
		return !l.Paused && l.Held == 0 && topicOf(c, pay).PausedPartitions == 0
	})
	if br.State() != circuit.Closed {
		t.Fatalf("breaker %v, want closed", br.State())
	}
	if l := laneOf(c, pay); l.DeadLettered != 3 || l.Processed != n-3 {
		t.Fatalf("dead-lettered %d, processed %d; want 3, %d", l.DeadLettered, l.Processed, n-3)
	}
	if ev.count(CodeBreakerOpen) == 0 || ev.count(CodeResumed) == 0 {
		t.Fatalf("events %v: want breaker_open and resumed", ev.codes)
	}
}

// TestTwoConsumersRebalance: two consumers of one group, each with its own
// lanes. The bulkheads hold per instance (never more slow records at once in
// an instance than its slow lane's workers), and the rebalances when the
// second joins and when it leaves, with records in flight, lose nothing and,
// with a shared idempotency store, repeat no side effect.
func TestTwoConsumersRebalance(t *testing.T) {
	const (
		partitions = 4
		perPart    = 60
		slowW      = 2
	)
	e := newEnv(t, map[string]int32{"slow": partitions, "light": partitions})
	slow, light := e.topic("slow"), e.topic("light")
	e.produceN(t, "slow", partitions, perPart)
	e.produceN(t, "light", partitions, perPart)
	store := newMemoryStore(t)
	var effects sync.Map
	var total atomic.Int64
	type instance struct {
		inFlight, peak atomic.Int64
		done           atomic.Int64
	}
	handler := func(in *instance) Handler {
		return func(ctx context.Context, r *kgo.Record) error {
			if r.Topic == slow {
				n := in.inFlight.Add(1)
				defer in.inFlight.Add(-1)
				for p := in.peak.Load(); n > p && !in.peak.CompareAndSwap(p, n); p = in.peak.Load() {
				}
				if err := work(ctx, 2*time.Millisecond); err != nil {
					return err
				}
			}
			v, loaded := effects.LoadOrStore(r.Topic+"/"+string(r.Value), new(atomic.Int64))
			if v.(*atomic.Int64).Add(1) == 1 && !loaded {
				total.Add(1)
			}
			in.done.Add(1)
			return nil
		}
	}
	config := func(in *instance) Config {
		cfg := e.config("g", handler(in), "slow", "light")
		cfg.Idempotency.Store = store
		cfg.Lanes = map[string]LaneConfig{
			slow:  {Workers: slowW, QueueSize: 4, MaxBatch: 1},
			light: {Workers: 2, MaxBatch: 4},
		}
		return cfg
	}
	var a, b instance
	var evA, evB events
	cfgA, cfgB := config(&a), config(&b)
	cfgA.Listener, cfgB.Listener = &evA, &evB
	_, stopA := start(t, cfgA)
	waitFor(t, waitLong, "the first consumer under way", func() bool { return a.done.Load() >= 20 })
	_, stopB := start(t, cfgB)
	waitFor(t, waitLong, "the second consumer under way", func() bool { return b.done.Load() >= 20 })
	stopB()
	all := int64(2 * partitions * perPart)
	waitFor(t, waitLong, "every record processed", func() bool { return total.Load() == all })
	stopA()
	repeated := 0
	effects.Range(func(_, v any) bool {
		if v.(*atomic.Int64).Load() != 1 {
			repeated++
		}
		return true
	})
	if repeated != 0 {
		t.Fatalf("%d records' side effects ran more than once", repeated)
	}
	// The first gave partitions to the second, and got them back.
	if evA.count(CodeRevoked) == 0 || evB.count(CodeRevoked) == 0 || evA.count(CodeAssigned) < 2 {
		t.Fatalf("events of the first %v, of the second %v: want a revoke in each and two assignments of the first", evA.codes, evB.codes)
	}
	for name, in := range map[string]*instance{"first": &a, "second": &b} {
		if p := in.peak.Load(); p > slowW {
			t.Errorf("%s consumer ran %d slow records at once; its lane has %d workers", name, p, slowW)
		}
	}
	t.Logf("first processed %d, second %d; slow peaks %d and %d", a.done.Load(), b.done.Load(), a.peak.Load(), b.peak.Load())
}

// TestLanesByKey: with LaneOf naming a lane per tenant header, each tenant
// gets its own pool up to MaxLanes, the tenants after that share the
// overflow lane, and a tenant whose records block its workers leaves the
// others working.
func TestLanesByKey(t *testing.T) {
	e := newEnv(t, map[string]int32{"events": 1})
	tenantOf := func(r *kgo.Record) string {
		for _, h := range r.Headers {
			if h.Key == "tenant" {
				return string(h.Value)
			}
		}
		return "none"
	}
	gate := make(chan struct{})
	var mu sync.Mutex
	done := map[string]int{}
	h := func(ctx context.Context, r *kgo.Record) error {
		tenant := tenantOf(r)
		if tenant == "noisy" {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		done[tenant]++
		mu.Unlock()
		return nil
	}
	cfg := e.config("g", h, "events")
	cfg.LaneOf = tenantOf
	cfg.MaxLanes = 2
	cfg.DefaultLane = LaneConfig{Workers: 1, QueueSize: 100, MaxBatch: 1}
	c, _ := start(t, cfg)
	var recs []*kgo.Record
	for i := range 12 {
		tenant := []string{"noisy", "quiet", "third"}[i%3]
		recs = append(recs, &kgo.Record{Topic: e.topic("events"), Value: []byte{byte(i)}, Headers: []kgo.RecordHeader{{Key: "tenant", Value: []byte(tenant)}}})
	}
	e.produce(t, recs...)
	waitFor(t, waitLong, "the quiet tenants processed while the noisy one is blocked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done["quiet"] == 4 && done["third"] == 4
	})
	pools := c.Pools()
	if pools["noisy"] == nil || pools["quiet"] == nil || pools[OverflowLane] == nil || pools["third"] != nil {
		t.Fatalf("pools %v: want noisy, quiet and the overflow lane (MaxLanes 2)", pools)
	}
	if l := laneOf(c, "noisy"); l.InUse != 1 {
		t.Fatalf("noisy lane in use %d, want its one worker blocked", l.InUse)
	}
	close(gate)
	waitFor(t, waitLong, "the noisy tenant processed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done["noisy"] == 4
	})
}
