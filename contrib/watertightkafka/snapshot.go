package watertightkafka

import (
	"sort"

	"github.com/watertight-go/watertight/bulkhead"
)

// Snapshot is a point-in-time view of a Consumer.
type Snapshot struct {
	// Lanes holds one entry per lane, by name.
	Lanes []LaneSnapshot
	// Topics holds one entry per consumed topic, by name.
	Topics []TopicSnapshot
}

// LaneSnapshot is one lane's state and totals.
type LaneSnapshot struct {
	// Name is the lane's name (its topic, without Config.LaneOf).
	Name string
	// Pool is the lane's worker pool's own snapshot (its queue counts
	// tasks, each a batch of the lane's records).
	Pool bulkhead.PoolSnapshot
	// InUse is the number of workers running a task.
	InUse int
	// Queued is the number of records waiting for a worker (at most
	// QueueSize).
	Queued int
	// Held is the number of records dispatched to the lane that wait
	// outside its pool (its queue was full, or a breaker refused them).
	Held int
	// Buffered is the number of records dispatched to the lane and not
	// finished: running, queued or held.
	Buffered int
	// PeakBuffered is the largest Buffered has been.
	PeakBuffered int
	// Paused reports whether the lane holds records, so that the
	// partitions feeding it are paused.
	Paused bool
	// Pauses counts the times the lane paused.
	Pauses uint64
	// Processed counts the records its handler finished without error.
	Processed uint64
	// DeadLettered counts the records written to a dead-letter topic.
	DeadLettered uint64
	// Duplicates counts the records skipped because the idempotency store
	// had them processed already.
	Duplicates uint64
	// Breaker is the state of the lane's breaker ("closed", "open", ...),
	// or empty without one.
	Breaker string
}

// TopicSnapshot is one topic's state and totals in this consumer.
type TopicSnapshot struct {
	// Topic is the topic's name.
	Topic string
	// Partitions is the number of its partitions assigned to this
	// consumer; PausedPartitions how many of them are paused.
	Partitions, PausedPartitions int
	// Pauses counts the times partitions of the topic were paused.
	Pauses uint64
	// Lag is the sum over its assigned partitions of the high watermark
	// minus the committed offset (or, before any commit, the first offset
	// this consumer fetched). The high watermark is the one the last fetch
	// brought or, for paused partitions, the end offset asked of the
	// brokers every CommitInterval; a partition with neither yet is left
	// out.
	Lag int64
	// DeadLettered counts its records written to a dead-letter topic.
	DeadLettered uint64
}

// Snapshot returns the consumer's lanes and topics. It takes the
// consumer's lock and the client's, briefly: it is meant for metrics and
// dashboards, not for every record.
func (c *Consumer) Snapshot() Snapshot {
	committed := c.cl.CommittedOffsets()
	var s Snapshot
	c.mu.Lock()
	for _, l := range c.lanes {
		ls := LaneSnapshot{
			Name:         l.name,
			Queued:       int(l.queued.Load()),
			Held:         l.heldRecords,
			Buffered:     int(l.buffered.Load()),
			PeakBuffered: int(l.peak.Load()),
			Paused:       l.paused,
			Pauses:       l.pauses,
			Processed:    l.processed.Load(),
			DeadLettered: l.deadLettered.Load(),
			Duplicates:   l.duplicates.Load(),
		}
		if br := l.cfg.Breaker; br != nil {
			ls.Breaker = br.State().String()
		}
		s.Lanes = append(s.Lanes, ls)
	}
	topics := map[string]*TopicSnapshot{}
	for name, ts := range c.topics {
		topics[name] = &TopicSnapshot{Topic: name, Pauses: ts.pauses, DeadLettered: ts.deadLettered.Load()}
	}
	for k, p := range c.parts {
		t := topics[k.topic]
		if t == nil {
			continue
		}
		t.Partitions++
		if _, ok := c.paused[k]; ok {
			t.PausedPartitions++
		}
		hwm := p.hwm.Load()
		if hwm < 0 {
			continue
		}
		base := p.first
		if base < 0 {
			base = 0
		}
		if eo, ok := committed[k.topic][k.partition]; ok && eo.Offset >= 0 {
			base = eo.Offset
		}
		if base >= 0 && hwm > base {
			t.Lag += hwm - base
		}
	}
	c.mu.Unlock()
	for i := range s.Lanes {
		// The pools' locks are taken outside the consumer's.
		l := &s.Lanes[i]
		l.Pool = c.Pool(l.Name).Snapshot()
		l.InUse = l.Pool.Busy
	}
	for _, t := range topics {
		s.Topics = append(s.Topics, *t)
	}
	sort.Slice(s.Lanes, func(i, j int) bool { return s.Lanes[i].Name < s.Lanes[j].Name })
	sort.Slice(s.Topics, func(i, j int) bool { return s.Topics[i].Topic < s.Topics[j].Topic })
	return s
}
