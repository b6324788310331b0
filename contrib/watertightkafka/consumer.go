package watertightkafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

// Consumer consumes a consumer group's topics through one worker pool per
// lane (per topic by default), with backpressure, ordered commits, a
// breaker, retries, dead letters and optional deduplication: see the
// package documentation. Build it with New, run it with Run, stop it by
// cancelling Run's context or with Close. It is safe for concurrent use;
// a Consumer runs once.
type Consumer struct {
	cfg Config
	cl  *kgo.Client

	// hard is the base of every handler context; it ends at the very end
	// of the shutdown.
	hard       context.Context
	hardCancel context.CancelCauseFunc
	// stop ends the poll loop (Close).
	stop       context.Context
	stopCancel context.CancelFunc
	started    atomic.Bool
	done       chan struct{} // closed when Run (or Close, without Run) has shut down
	shutOnce   sync.Once
	closing    atomic.Bool
	crashed    atomic.Bool // test hook: abandon without committing

	mu          sync.Mutex
	lanes       map[string]*lane
	dynamic     int // lanes LaneOf created
	parts       map[tp]*partition
	paused      map[tp]struct{} // the partitions paused in the client
	pauseDirty  bool
	topics      map[string]*topicStats
	commitArmed bool
	commitTimer *time.Timer

	wakeMu     sync.Mutex
	pollCancel context.CancelFunc
	woken      bool
	wakeCh     chan struct{} // buffered 1
	canPoll    bool          // guarded by mu: see reconcile

	lastCommit  time.Time   // poll goroutine only
	commitAgain atomic.Bool // a commit failed: send every offset next time

	// wd enforces the lanes' attempt timeouts; nil when none has one.
	wd *watchdog

	// bg counts the end-offset refreshes in flight (at most one).
	bg         sync.WaitGroup
	refreshing atomic.Bool

	// onCommit, if set (by tests), sees every commit before it is sent.
	onCommit func(map[string]map[int32]kgo.EpochOffset)
}

// topicStats are the per-topic counters of a Snapshot.
type topicStats struct {
	pauses       uint64 // guarded by Consumer.mu
	deadLettered atomic.Uint64
}

// New validates cfg, builds its lanes and the franz-go client (which starts
// joining the group), and returns the Consumer. It fails, naming the field
// and the rule, when cfg is invalid, or with the client's error.
func New(cfg Config) (*Consumer, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:    cfg,
		lanes:  make(map[string]*lane),
		parts:  make(map[tp]*partition),
		paused: make(map[tp]struct{}),
		topics: make(map[string]*topicStats),
		done:   make(chan struct{}),
		wakeCh: make(chan struct{}, 1),
		// The first reconcile decides whether to poll.
		pauseDirty: true,
	}
	c.hard, c.hardCancel = context.WithCancelCause(context.Background())
	c.stop, c.stopCancel = context.WithCancel(context.Background())
	for _, t := range cfg.Topics {
		c.topics[t] = &topicStats{}
	}
	c.wd = newWatchdog(cfg.smallestAttemptTimeout())
	// The lanes known in advance: the topics (without LaneOf) and those
	// Config.Lanes names.
	names := make([]string, 0, len(cfg.Topics)+len(cfg.Lanes))
	if cfg.LaneOf == nil {
		names = append(names, cfg.Topics...)
	}
	for name := range cfg.Lanes {
		names = append(names, name)
	}
	for _, name := range names {
		if c.lanes[name] != nil {
			continue
		}
		l, err := c.newLane(name)
		if err != nil {
			c.abandonNew()
			return nil, err
		}
		c.lanes[name] = l
	}
	opts := make([]kgo.Opt, 0, len(cfg.ClientOptions)+10)
	opts = append(opts, kgo.FetchMaxWait(DefaultFetchMaxWait))
	if len(cfg.Brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(cfg.Brokers...))
	}
	opts = append(opts, cfg.ClientOptions...)
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { c.release(ctx, m, false) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { c.release(ctx, m, true) }),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.abandonNew()
		return nil, fmt.Errorf("watertightkafka: %w", err)
	}
	c.cl = cl
	return c, nil
}

// abandonNew undoes a New that fails: the pools built so far stop.
func (c *Consumer) abandonNew() {
	c.shutdownPools()
	c.stopCancel()
	c.hardCancel(ErrAbandoned)
}

// newLane builds the lane name with its configuration.
func (c *Consumer) newLane(name string) (*lane, error) {
	lc, ok := c.cfg.Lanes[name]
	if !ok {
		lc = c.cfg.DefaultLane
	}
	poolName := name
	if c.cfg.Name != "" {
		poolName = c.cfg.Name + "/" + name
	}
	l, err := newLane(name, poolName, lc, c.cfg.Handler)
	if err == nil && c.wd != nil && l.cfg.AttemptTimeout > 0 {
		l.timeoutTicks = c.wd.ticks(l.cfg.AttemptTimeout)
	}
	return l, err
}

// Client returns the franz-go client, to produce with or to read its
// metrics. Do not poll, commit, pause or resume with it, nor close it.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Run consumes until ctx ends or Close is called, then shuts down: it stops
// fetching, waits up to RevokeTimeout for the records being processed,
// commits what finished, leaves the group, stops the pools and returns. It
// returns nil after such a stop, and ErrClosed at once if the consumer ran
// or was closed before.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrClosed
	}
	stop := context.AfterFunc(ctx, c.stopCancel)
	defer stop()
	if c.wd != nil {
		c.wd.start()
	}
	c.loop()
	c.shutOnce.Do(c.shutdown)
	close(c.done)
	return nil
}

// Close stops the consumer as the end of Run does (a consumer that never
// ran is shut down here) and waits for that, or for ctx to end, in which
// case it returns ctx's error and the shutdown goes on. It may be called
// more than once.
func (c *Consumer) Close(ctx context.Context) error {
	c.stopCancel()
	c.wake()
	if c.started.CompareAndSwap(false, true) {
		c.shutOnce.Do(c.shutdown)
		close(c.done)
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop is the poll goroutine: it pauses and resumes partitions as the lanes
// fill and drain, commits, polls, and hands the records to the lanes.
func (c *Consumer) loop() {
	for c.stop.Err() == nil {
		canPoll := c.reconcile()
		c.commitIfDue()
		if !canPoll {
			// Every partition feeds a lane that holds records: a poll
			// could bring only more to hold. Wait for a lane to drain
			// rather than pause them all, which would throw away what the
			// client has fetched for them.
			c.waitWake()
			continue
		}
		ctx := c.pollContext()
		fs := c.cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		c.endPoll()
		c.dispatch(fs)
		c.cl.AllowRebalance()
	}
}

// pollContext returns the context of the next poll, which wake cancels; a
// nil context (poll what is buffered, do not wait) when a wake came while
// no poll was under way.
func (c *Consumer) pollContext() context.Context {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	if c.woken || c.stop.Err() != nil {
		c.woken = false
		return nil
	}
	ctx, cancel := context.WithCancel(c.stop)
	c.pollCancel = cancel
	return ctx
}

func (c *Consumer) endPoll() {
	c.wakeMu.Lock()
	if c.pollCancel != nil {
		c.pollCancel()
		c.pollCancel = nil
	}
	c.wakeMu.Unlock()
}

// wake makes the poll goroutine go round its loop: it ends the poll or the
// wait under way, or the next one at once.
func (c *Consumer) wake() {
	c.wakeMu.Lock()
	if c.pollCancel != nil {
		c.pollCancel()
		c.pollCancel = nil
	} else {
		c.woken = true
	}
	c.wakeMu.Unlock()
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

// waitWake waits for a wake (or the stop).
func (c *Consumer) waitWake() {
	c.wakeMu.Lock()
	woken := c.woken
	c.woken = false
	c.wakeMu.Unlock()
	if woken {
		return
	}
	select {
	case <-c.wakeCh:
	case <-c.stop.Done():
	}
	c.wakeMu.Lock()
	c.woken = false
	c.wakeMu.Unlock()
}

// dispatch hands a poll's records to their lanes, cut into batches.
func (c *Consumer) dispatch(fs kgo.Fetches) {
	var evs []watertight.Event
	c.mu.Lock()
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Err != nil {
			if !errors.Is(fp.Err, context.Canceled) && !errors.Is(fp.Err, kgo.ErrClientClosed) {
				evs = append(evs, watertight.Event{Kind: watertight.EventRejected, Key: fp.Topic, Code: CodeFetchError,
					Reason: "fetch error on " + fp.Topic, Err: fp.Err})
			}
		}
		if len(fp.Records) == 0 {
			return
		}
		p := c.parts[tp{fp.Topic, fp.Partition}]
		if p == nil || p.isGone() {
			return // not ours (any more): the next owner fetches them
		}
		p.hwm.Store(fp.HighWatermark)
		if p.first < 0 {
			p.first = fp.Records[0].Offset
		}
		recs := fp.Records
		for len(recs) > 0 {
			l, n := c.laneRun(recs)
			if ev, ok := c.offerLocked(l, p, recs[:n]); ok {
				evs = append(evs, ev)
			}
			recs = recs[n:]
		}
	})
	// A batch held because the queue was full while its workers finished
	// everything before it was held would wait for nobody: try again.
	for _, l := range c.lanes {
		if l.heldLen() > 0 && !l.refused {
			if ev, ok := c.pumpLocked(l); ok {
				evs = append(evs, ev)
			}
		}
	}
	c.mu.Unlock()
	c.emitAll(evs)
}

// laneRun returns the lane of recs[0] and how many records from there go to
// it. Consumer.mu is held.
func (c *Consumer) laneRun(recs []*kgo.Record) (*lane, int) {
	if c.cfg.LaneOf == nil {
		return c.laneLocked(recs[0].Topic), len(recs)
	}
	name := c.cfg.LaneOf(recs[0])
	n := 1
	for n < len(recs) && c.cfg.LaneOf(recs[n]) == name {
		n++
	}
	return c.laneLocked(name), n
}

// laneLocked returns the lane name, creating it if need be (or the overflow
// lane past MaxLanes). Consumer.mu is held.
func (c *Consumer) laneLocked(name string) *lane {
	if l := c.lanes[name]; l != nil {
		return l
	}
	if c.dynamic >= c.cfg.MaxLanes {
		name = OverflowLane
		if l := c.lanes[name]; l != nil {
			return l
		}
	}
	l, err := c.newLane(name)
	if err != nil {
		// The configuration passed validation, so only a lane name that
		// another part of the configuration rejects can get here: use the
		// overflow lane, which takes DefaultLane.
		if l = c.lanes[OverflowLane]; l == nil {
			l, _ = c.newLane(OverflowLane)
			c.lanes[OverflowLane] = l
		}
		return l
	}
	c.dynamic++
	c.lanes[name] = l
	return l
}

// offerLocked cuts a run of records of p for lane l into batches, tracks
// them and submits them, holding those the lane cannot take. It returns
// the event of the lane pausing, if it did. Consumer.mu is held.
func (c *Consumer) offerLocked(l *lane, p *partition, recs []*kgo.Record) (watertight.Event, bool) {
	size := l.chunk(len(recs))
	paused := false
	for len(recs) > 0 {
		n := min(size, len(recs))
		b := &batch{part: p, lane: l, recs: recs[:n:n]}
		recs = recs[n:]
		p.track.push(b)
		l.addBuffered(n)
		if l.heldLen() == 0 && l.trySubmit(c, b) {
			continue
		}
		l.pushHeld(b, false)
		c.pauseDirty = true
		if !l.paused {
			l.paused = true
			l.pauses++
			paused = true
		}
	}
	if !paused {
		return watertight.Event{}, false
	}
	return watertight.Event{Kind: watertight.EventStateChange, Key: l.name, From: "flowing", To: "paused", Code: CodeQueueFull,
		Reason: "lane " + l.name + ": workers busy and queue full; its partitions are paused"}, true
}

// pumpLocked moves held batches into the pool while it has room, and
// reports the lane resuming when none is left. Consumer.mu is held.
func (c *Consumer) pumpLocked(l *lane) (watertight.Event, bool) {
	for l.heldLen() > 0 && !l.refused {
		b := l.held[l.hh]
		if b.part.isGone() {
			l.dropHeldOf()
			continue
		}
		if !l.trySubmit(c, b) {
			break
		}
		l.popHeld()
	}
	if l.heldLen() > 0 || !l.paused {
		return watertight.Event{}, false
	}
	l.paused = false
	c.pauseDirty = true
	return watertight.Event{Kind: watertight.EventStateChange, Key: l.name, From: "paused", To: "flowing", Code: CodeResumed,
		Reason: "lane " + l.name + ": every held record is queued; its partitions are fetched again"}, true
}

// pump is pumpLocked for a worker or a timer, which then wakes the poll
// goroutine to resume the lane's partitions.
func (c *Consumer) pump(l *lane) {
	c.mu.Lock()
	ev, resumed := c.pumpLocked(l)
	c.mu.Unlock()
	if resumed {
		c.emit(ev)
		c.wake()
	}
}

// hold takes back a batch that a refusal stopped at its first unfinished
// record, and pauses its lane until the probe timer finds the refusal over.
func (c *Consumer) hold(b *batch, err error) {
	l := b.lane
	var ev watertight.Event
	report := false
	c.mu.Lock()
	if b.part.isGone() || c.closing.Load() {
		c.mu.Unlock()
		l.buffered.Add(-int64(len(b.recs) - int(b.finished.Load())))
		return
	}
	l.pushHeld(b, true)
	l.refused = true
	c.pauseDirty = true
	if !l.paused {
		l.paused = true
		l.pauses++
		report = true
		code := CodeRefused
		if isBreakerRefusal(err) {
			code = CodeBreakerOpen
		}
		ev = watertight.Event{Kind: watertight.EventStateChange, Key: l.name, From: "flowing", To: "paused", Code: code, Err: err,
			Reason: "lane " + l.name + ": a record was refused (" + err.Error() + "); it is held and the lane's partitions are paused"}
	}
	if l.probe == nil {
		l.probe = time.AfterFunc(l.cfg.ProbeInterval, func() { c.probeLane(l) })
	}
	c.mu.Unlock()
	if report {
		c.emit(ev)
	}
	c.wake()
}

// probeLane runs ProbeInterval after a refusal: while the lane's breaker is
// open it waits another interval; otherwise it sends the held batches to
// the pool, where half-open trials (or the refused call, again) decide.
func (c *Consumer) probeLane(l *lane) {
	c.mu.Lock()
	l.probe = nil
	if c.closing.Load() || !l.refused {
		c.mu.Unlock()
		return
	}
	if br := l.cfg.Breaker; br != nil && isOpen(br.State()) {
		l.probe = time.AfterFunc(l.cfg.ProbeInterval, func() { c.probeLane(l) })
		c.mu.Unlock()
		return
	}
	l.refused = false
	ev, resumed := c.pumpLocked(l)
	c.mu.Unlock()
	if resumed {
		c.emit(ev)
	}
	c.wake()
}

// reconcile decides whether the poll goroutine may poll, and pauses and
// resumes partitions to match. A partition needs pausing while it has held
// batches or, with a lane per topic, while its topic's lane holds any. If
// every assigned partition needs it, nothing is paused and the poll
// goroutine waits (canPoll false): the client keeps what it has fetched.
// Otherwise the partitions that need it are paused, so that the next poll
// brings records only for lanes that can take them, and the others resumed.
func (c *Consumer) reconcile() (canPoll bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pauseDirty {
		return c.canPoll
	}
	c.pauseDirty = false
	need := make(map[tp]bool, len(c.parts))
	free := len(c.parts) == 0
	for k, p := range c.parts {
		n := p.held > 0
		if !n && c.cfg.LaneOf == nil {
			if l := c.lanes[k.topic]; l != nil && l.heldLen() > 0 {
				n = true
			}
		}
		need[k] = n
		free = free || !n
	}
	c.canPoll = free
	if !free {
		return false
	}
	var pause, resume map[string][]int32
	counted := map[string]bool{}
	for k, want := range need {
		_, is := c.paused[k]
		switch {
		case want && !is:
			if pause == nil {
				pause = map[string][]int32{}
			}
			pause[k.topic] = append(pause[k.topic], k.partition)
			c.paused[k] = struct{}{}
			if ts := c.topics[k.topic]; ts != nil && !counted[k.topic] {
				ts.pauses++
				counted[k.topic] = true
			}
		case !want && is:
			if resume == nil {
				resume = map[string][]int32{}
			}
			resume[k.topic] = append(resume[k.topic], k.partition)
			delete(c.paused, k)
		}
	}
	if pause != nil {
		c.cl.PauseFetchPartitions(pause)
	}
	if resume != nil {
		c.cl.ResumeFetchPartitions(resume)
	}
	return true
}

// commitIfDue commits, every CommitInterval, the offsets that moved.
func (c *Consumer) commitIfDue() {
	now := time.Now()
	if now.Sub(c.lastCommit) < c.cfg.CommitInterval || c.crashed.Load() {
		c.armCommit()
		return
	}
	c.lastCommit = now
	c.refreshEnds()
	offsets := c.collectCommits()
	if len(offsets) > 0 {
		if c.onCommit != nil {
			c.onCommit(offsets)
		}
		c.cl.CommitOffsets(c.hard, offsets, c.onCommitted)
	}
	c.armCommit()
}

// collectCommits returns the commit positions that moved since they were
// last sent (all of them after a failed commit).
func (c *Consumer) collectCommits() map[string]map[int32]kgo.EpochOffset {
	again := c.commitAgain.Swap(false)
	var out map[string]map[int32]kgo.EpochOffset
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.parts {
		next, epoch, ok := p.track.committable()
		if !ok || (next <= p.sent && !again) {
			continue
		}
		p.sent = next
		if out == nil {
			out = map[string]map[int32]kgo.EpochOffset{}
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.EpochOffset{}
		}
		out[k.topic][k.partition] = kgo.EpochOffset{Epoch: epoch, Offset: next}
	}
	return out
}

// armCommit arms the timer that wakes the poll goroutine for the next
// commit while records are pending or finished records are not committed.
func (c *Consumer) armCommit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commitArmed || c.closing.Load() {
		return
	}
	outstanding := false
	for _, p := range c.parts {
		if p.track.head < len(p.track.q) || p.track.next > p.sent {
			outstanding = true
			break
		}
	}
	if !outstanding {
		return
	}
	c.commitArmed = true
	wait := c.cfg.CommitInterval - time.Since(c.lastCommit)
	c.commitTimer = time.AfterFunc(max(wait, time.Millisecond), func() {
		c.mu.Lock()
		c.commitArmed = false
		c.mu.Unlock()
		c.wake()
	})
}

// onCommitted reports a failed commit and has the next one send every
// offset again.
func (c *Consumer) onCommitted(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err == nil {
		err = commitErr(resp)
	}
	if err == nil {
		return
	}
	c.commitAgain.Store(true)
	c.emit(watertight.Event{Kind: watertight.EventRejected, Code: CodeCommitFailed, Err: err,
		Reason: "offset commit failed; the next commit sends the offsets again"})
}

// commitErr returns the first partition error of a commit response.
func commitErr(resp *kmsg.OffsetCommitResponse) error {
	if resp == nil {
		return nil
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerrOf(p.ErrorCode); err != nil {
				return fmt.Errorf("commit %s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// onAssigned creates the state of newly assigned partitions.
func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	var evs []watertight.Event
	c.mu.Lock()
	for _, topic := range sortedKeys(m) {
		n := 0
		for _, part := range m[topic] {
			k := tp{topic, part}
			if c.parts[k] != nil {
				continue
			}
			c.parts[k] = newPartition(c.hard, k)
			n++
		}
		if n > 0 {
			evs = append(evs, watertight.Event{Kind: watertight.EventStateChange, Key: topic, To: "assigned", Code: CodeAssigned, Attempt: n,
				Reason: fmt.Sprintf("%d partitions of %s assigned", n, topic)})
		}
	}
	c.pauseDirty = true
	c.mu.Unlock()
	c.emitAll(evs)
	c.wake()
}

// release ends the partitions of m (revoked, or lost): nothing of theirs
// starts any more; held batches are dropped; the records being processed
// are waited for, up to RevokeTimeout, then abandoned; and what finished is
// committed, unless the partitions were lost.
func (c *Consumer) release(ctx context.Context, m map[string][]int32, lost bool) {
	abandon := lost || c.crashed.Load()
	type goneP struct {
		p       *partition
		drained <-chan struct{}
	}
	var gone []goneP
	var resume map[string][]int32
	c.mu.Lock()
	for _, topic := range sortedKeys(m) {
		for _, part := range m[topic] {
			k := tp{topic, part}
			p := c.parts[k]
			if p == nil {
				continue
			}
			delete(c.parts, k)
			gone = append(gone, goneP{p, p.markGone()})
			if _, ok := c.paused[k]; ok {
				delete(c.paused, k)
				if resume == nil {
					resume = map[string][]int32{}
				}
				resume[topic] = append(resume[topic], part)
			}
		}
	}
	var evs []watertight.Event
	for _, l := range c.lanes {
		if l.heldLen() == 0 {
			continue
		}
		l.dropHeldOf()
		if l.heldLen() == 0 && l.paused {
			l.paused, l.refused = false, false
			evs = append(evs, watertight.Event{Kind: watertight.EventStateChange, Key: l.name, From: "paused", To: "flowing", Code: CodeResumed,
				Reason: "lane " + l.name + ": its held records belonged to partitions that are gone"})
		}
	}
	c.pauseDirty = true
	c.mu.Unlock()
	c.emitAll(evs)
	c.wake()
	if len(gone) == 0 {
		return
	}
	if resume != nil {
		// A partition paused now would stay paused if it came back.
		c.cl.ResumeFetchPartitions(resume)
	}
	if abandon {
		for _, g := range gone {
			g.p.cancel(ErrAbandoned)
		}
	} else if c.cfg.RevokeTimeout > 0 {
		timer := time.NewTimer(c.cfg.RevokeTimeout)
	wait:
		for _, g := range gone {
			select {
			case <-g.drained:
			case <-timer.C:
				break wait
			}
		}
		timer.Stop()
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	abandoned := map[string]int{}
	count := map[string]int{}
	for _, g := range gone {
		p := g.p
		p.cancel(ErrAbandoned) // whatever still runs is abandoned
		if c.wd != nil {
			p.endRuns(c.wd)
		}
		count[p.topic]++
		if n := p.track.pending(); n > 0 {
			abandoned[p.topic] += n
		}
		if abandon {
			continue
		}
		// Sent again even if a periodic commit sent it: that one may have
		// failed, and this is the partition's last commit here.
		if next, epoch, ok := p.track.committable(); ok {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[p.topic][p.partition] = kgo.EpochOffset{Epoch: epoch, Offset: next}
		}
	}
	if len(offsets) > 0 {
		if c.onCommit != nil {
			c.onCommit(offsets)
		}
		c.cl.CommitOffsetsSync(ctx, offsets, c.onCommitted)
	}
	code, to := CodeRevoked, "revoked"
	if lost {
		code, to = CodeLost, "lost"
	}
	for _, topic := range sortedKeys(count) {
		evs = append(evs[:0], watertight.Event{Kind: watertight.EventStateChange, Key: topic, From: "assigned", To: to, Code: code, Attempt: count[topic],
			Reason: fmt.Sprintf("%d partitions of %s %s", count[topic], topic, to)})
		if n := abandoned[topic]; n > 0 {
			evs = append(evs, watertight.Event{Kind: watertight.EventDropped, Key: topic, Code: CodeAbandoned, Attempt: n, Err: ErrAbandoned,
				Reason: fmt.Sprintf("%d records of %s left unfinished; not committed, the next owner runs them", n, topic)})
		}
		c.emitAll(evs)
	}
}

// shutdown stops everything once the poll goroutine has stopped: leaving
// the group revokes every partition (see release), then the client closes,
// the timers stop and the pools shut down.
func (c *Consumer) shutdown() {
	c.cl.AllowRebalance()
	c.cl.Close() // leaves the group: release runs for every partition
	c.closing.Store(true)
	c.mu.Lock()
	if c.commitTimer != nil {
		c.commitTimer.Stop()
	}
	for _, l := range c.lanes {
		if l.probe != nil {
			l.probe.Stop()
			l.probe = nil
		}
	}
	c.mu.Unlock()
	c.shutdownPools()
	if c.wd != nil {
		c.wd.stop()
	}
	c.hardCancel(ErrAbandoned)
	c.bg.Wait()
}

// refreshEnds asks the brokers, in the background, for the end offsets of
// the partitions that are paused or not fetched yet, whose high watermark
// no fetch brings: their lag would otherwise be stale or unknown.
func (c *Consumer) refreshEnds() {
	if c.refreshing.Load() {
		return
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	c.mu.Lock()
	byTopic := map[string]*kmsg.ListOffsetsRequestTopic{}
	for k, p := range c.parts {
		if _, paused := c.paused[k]; !paused && p.hwm.Load() >= 0 {
			continue
		}
		rt := byTopic[k.topic]
		if rt == nil {
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = k.topic
			rt = &t
			byTopic[k.topic] = rt
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = k.partition, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	c.mu.Unlock()
	if len(byTopic) == 0 {
		return
	}
	for _, rt := range byTopic {
		req.Topics = append(req.Topics, *rt)
	}
	c.refreshing.Store(true)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.hard, 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			return // the next refresh tries again
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if p := c.parts[tp{rt.Topic, rp.Partition}]; p != nil && rp.ErrorCode == 0 && rp.Offset > p.hwm.Load() {
					p.hwm.Store(rp.Offset)
				}
			}
		}
	}()
}

// shutdownPools stops every lane's pool, waiting up to RevokeTimeout for
// running handlers (which were abandoned) to return.
func (c *Consumer) shutdownPools() {
	wait := c.cfg.RevokeTimeout
	if wait <= 0 {
		wait = DefaultRevokeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c.mu.Lock()
	lanes := make([]*lane, 0, len(c.lanes))
	for _, l := range c.lanes {
		lanes = append(lanes, l)
	}
	c.mu.Unlock()
	for _, l := range lanes {
		_ = l.pool.Shutdown(ctx)
	}
}

// emit sends e to the listener with the consumer's Source and Name.
func (c *Consumer) emit(e watertight.Event) {
	if c.cfg.Listener == nil {
		return
	}
	e.Source, e.Name = source, c.cfg.Name
	watertight.Emit(c.cfg.Listener, e)
}

func (c *Consumer) emitAll(evs []watertight.Event) {
	for _, e := range evs {
		c.emit(e)
	}
}

// Pools returns the lanes' worker pools, by lane name, for metrics
// (contrib/watertightprom's AddPool). Lanes that Config.LaneOf creates later
// are not in it; Pool finds any.
func (c *Consumer) Pools() map[string]*bulkhead.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*bulkhead.Pool, len(c.lanes))
	for name, l := range c.lanes {
		out[name] = l.pool
	}
	return out
}

// Pool returns the worker pool of lane name, or nil if there is no such
// lane (yet).
func (c *Consumer) Pool(name string) *bulkhead.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.lanes[name]; l != nil {
		return l.pool
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
