package watertightkafka

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/retry"
)

// lane is one worker pool with its bounded queue and what protects it. The
// fields after the pool are guarded by Consumer.mu unless atomic.
type lane struct {
	name    string
	cfg     LaneConfig // resolved
	handler Handler
	pool    *bulkhead.Pool
	// timeoutTicks is the attempt timeout in watchdog ticks.
	timeoutTicks int64

	// held are batches dispatched to the lane that its pool could not take
	// (queue full) or that a refusal sent back, oldest first from
	// held[hh]. While any is held, the partitions that feed the lane are
	// paused.
	held        []*batch
	hh          int
	heldRecords int
	// refused is set when a refusal (open breaker, ...) held a batch: the
	// held batches wait for the probe timer rather than for free workers.
	refused bool
	// paused is the state last reported in events (EventStateChange).
	paused bool
	probe  *time.Timer
	pauses uint64

	heldN    atomic.Int32 // len(held)-hh, for workers to look at without the lock
	queued   atomic.Int64 // records submitted to the pool and not started
	buffered atomic.Int64 // records dispatched to the lane and not finished
	peak     atomic.Int64 // the most buffered has been

	processed, deadLettered, duplicates atomic.Uint64
	// perRecord is a moving average of the time a record takes, in
	// nanoseconds (0 until a task finished), for chunk.
	perRecord atomic.Int64
}

// taskTarget is the least time a task should take when the records are
// quick: a hand-off to a worker costs a few microseconds, which a task of
// this length amortises.
const taskTarget = 50 * time.Microsecond

// observe folds a finished task's time per record into the average.
func (l *lane) observe(d time.Duration, records int) {
	if records <= 0 {
		return
	}
	sample := int64(d) / int64(records)
	old := l.perRecord.Load()
	if old == 0 {
		l.perRecord.Store(max(sample, 1))
		return
	}
	l.perRecord.Store(max(old+(sample-old)/8, 1))
}

// defaultRetry is a lane's retry policy when its LaneConfig has none: every
// record is idempotent (delivery is at least once anyway), transient errors
// only, under a retry budget of the lane's own.
func defaultRetry(lane string) (*retry.Policy, error) {
	b, err := budget.New(budget.Config{Name: lane})
	if err != nil {
		return nil, err
	}
	return retry.New(retry.Config{Name: lane, Idempotent: true, Budget: b})
}

// newLane builds a lane and starts its pool's workers.
func newLane(name, poolName string, lc LaneConfig, handler Handler) (*lane, error) {
	lc, err := lc.resolved(name)
	if err != nil {
		return nil, err
	}
	if lc.Handler != nil {
		handler = lc.Handler
	}
	qs := lc.QueueSize
	if qs == 0 {
		qs = -1 // bulkhead's "no queue"
	}
	pool, err := bulkhead.NewPool(bulkhead.PoolConfig{Name: poolName, Workers: lc.Workers, QueueSize: qs})
	if err != nil {
		return nil, fmt.Errorf("watertightkafka: lane %q: %w", name, err)
	}
	return &lane{name: name, cfg: lc, handler: handler, pool: pool}, nil
}

// chunk is the size of the tasks a run of n records of one partition is cut
// into: spread over the workers, or as many as take taskTarget when the
// records are quicker than that, at most MaxBatch, and never more than the
// queue holds.
func (l *lane) chunk(n int) int {
	size := (n + l.cfg.Workers - 1) / l.cfg.Workers
	if per := l.perRecord.Load(); per > 0 {
		size = max(size, int(int64(taskTarget)/per))
	}
	size = min(size, l.cfg.MaxBatch)
	if l.cfg.QueueSize > 0 {
		size = min(size, l.cfg.QueueSize)
	}
	return max(size, 1)
}

// trySubmit hands b to the pool if its queue has room for b's remaining
// records. Consumer.mu is held.
func (l *lane) trySubmit(c *Consumer, b *batch) bool {
	n := int64(len(b.recs) - int(b.finished.Load()))
	if l.cfg.QueueSize > 0 && l.queued.Load()+n > int64(l.cfg.QueueSize) {
		return false
	}
	l.queued.Add(n)
	if err := l.pool.Submit(context.Background(), func(context.Context) { c.runBatch(b) }); err != nil {
		l.queued.Add(-n)
		return false
	}
	return true
}

// heldLen returns the number of held batches. Consumer.mu is held.
func (l *lane) heldLen() int { return len(l.held) - l.hh }

// pushHeld appends b to the held batches (front puts it first, for a batch
// a refusal sent back). Consumer.mu is held.
func (l *lane) pushHeld(b *batch, front bool) {
	if front && l.hh > 0 {
		l.hh--
		l.held[l.hh] = b
	} else if front {
		l.held = append(l.held, nil)
		copy(l.held[1:], l.held)
		l.held[0] = b
	} else {
		l.held = append(l.held, b)
	}
	l.heldRecords += len(b.recs) - int(b.finished.Load())
	l.heldN.Store(int32(l.heldLen()))
	b.part.held++
}

// popHeld removes the oldest held batch. Consumer.mu is held.
func (l *lane) popHeld() {
	b := l.held[l.hh]
	l.held[l.hh] = nil
	l.hh++
	if l.hh == len(l.held) {
		l.held, l.hh = l.held[:0], 0
	}
	l.heldRecords -= len(b.recs) - int(b.finished.Load())
	l.heldN.Store(int32(l.heldLen()))
	b.part.held--
}

// dropHeldOf removes the held batches of partitions that are gone and
// returns how many records they held. Consumer.mu is held.
func (l *lane) dropHeldOf() int {
	keep := l.held[:l.hh]
	dropped := 0
	for _, b := range l.held[l.hh:] {
		if b.part.isGone() {
			n := len(b.recs) - int(b.finished.Load())
			dropped += n
			l.heldRecords -= n
			l.buffered.Add(-int64(n))
			b.part.held--
			continue
		}
		keep = append(keep, b)
	}
	clear(l.held[len(keep):])
	l.held = keep
	if l.hh == len(l.held) {
		l.held, l.hh = l.held[:0], 0
	}
	l.heldN.Store(int32(l.heldLen()))
	return dropped
}

// addBuffered counts n more records dispatched to the lane.
func (l *lane) addBuffered(n int) {
	v := l.buffered.Add(int64(n))
	for {
		p := l.peak.Load()
		if v <= p || l.peak.CompareAndSwap(p, v) {
			return
		}
	}
}
