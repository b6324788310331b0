package watertightkafka

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batch is a run of consecutive records of one partition (as a poll
// returned them: offsets rise, gaps are possible), all for one lane. One
// task at a time runs it, in offset order, on a worker of the lane; a
// breaker's refusal sends the rest back to the lane's held list, and a
// later task goes on where it stopped.
type batch struct {
	part *partition
	lane *lane
	recs []*kgo.Record
	// finished counts the records of recs whose processing ended (done,
	// dead-lettered or found processed already), which are always a
	// prefix: the running task stores it after each record, the tracker
	// loads it.
	finished atomic.Int32
}

// tracker is a partition's contiguous-completion tracker: the batches of
// the partition not yet finished, in offset order. Batches finish out of
// order (each on its own worker), records within one in order; the offset
// that may be committed is the one after the last record of the longest
// finished prefix of everything dispatched, so a commit never passes a
// record that has not finished, and a crash replays rather than skips.
//
// It is not safe for concurrent use: the consumer guards it with its lock;
// workers touch only batch.finished.
type tracker struct {
	q    []*batch // pending batches, oldest first, from q[head]
	head int
	// next and epoch are the commit position: the offset after the last
	// record of the finished prefix and that record's leader epoch; next
	// is -1 until a record finished.
	next  int64
	epoch int32
}

func newTracker() tracker { return tracker{next: -1, epoch: -1} }

// push appends a batch dispatched after every batch already pushed.
func (t *tracker) push(b *batch) { t.q = append(t.q, b) }

// committable advances past the finished prefix and returns the commit
// position: ok is false while no record has finished.
func (t *tracker) committable() (next int64, epoch int32, ok bool) {
	for t.head < len(t.q) {
		b := t.q[t.head]
		n := int(b.finished.Load())
		if n > 0 {
			last := b.recs[n-1]
			t.next, t.epoch = last.Offset+1, last.LeaderEpoch
		}
		if n < len(b.recs) {
			break
		}
		t.q[t.head] = nil
		t.head++
	}
	if t.head == len(t.q) {
		t.q, t.head = t.q[:0], 0
	} else if t.head > 64 && t.head > len(t.q)/2 {
		n := copy(t.q, t.q[t.head:])
		clear(t.q[n:])
		t.q, t.head = t.q[:n], 0
	}
	return t.next, t.epoch, t.next >= 0
}

// pending returns the number of records dispatched and not finished.
func (t *tracker) pending() int {
	n := 0
	for _, b := range t.q[t.head:] {
		n += len(b.recs) - int(b.finished.Load())
	}
	return n
}
