package watertightkafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"
)

// trackerModel is the reference: every record dispatched, in order, with
// whether it finished. The commit position is the offset after the last
// record of the longest finished prefix.
type trackerModel struct {
	offsets  []int64
	finished []bool
}

func (m *trackerModel) commit() (int64, bool) {
	next, ok := int64(-1), false
	for i, f := range m.finished {
		if !f {
			break
		}
		next, ok = m.offsets[i]+1, true
	}
	return next, ok
}

// TestTrackerModel checks the contiguous-completion tracker against the
// model: batches of consecutive records (with gaps between offsets, as
// compaction and transaction markers leave) finish out of order, the records
// of one batch in order; the commit position always equals the model's, never
// moves back, and never passes a record that has not finished.
func TestTrackerModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := newTracker()
		var m trackerModel
		type pending struct {
			b     *batch
			first int // index of its first record in the model
		}
		var open []pending
		next := rapid.Int64Range(0, 1000).Draw(t, "start")
		last := int64(-1)
		t.Repeat(map[string]func(*rapid.T){
			"dispatch": func(t *rapid.T) {
				n := rapid.IntRange(1, 5).Draw(t, "n")
				b := &batch{}
				first := len(m.offsets)
				for range n {
					next += rapid.Int64Range(1, 3).Draw(t, "gap")
					b.recs = append(b.recs, &kgo.Record{Offset: next, LeaderEpoch: int32(next % 7)})
					m.offsets = append(m.offsets, next)
					m.finished = append(m.finished, false)
				}
				tr.push(b)
				open = append(open, pending{b, first})
			},
			"finish": func(t *rapid.T) {
				if len(open) == 0 {
					t.Skip("nothing pending")
				}
				i := rapid.IntRange(0, len(open)-1).Draw(t, "batch")
				p := open[i]
				k := int(p.b.finished.Load())
				p.b.finished.Store(int32(k + 1))
				m.finished[p.first+k] = true
				if k+1 == len(p.b.recs) {
					open = append(open[:i], open[i+1:]...)
				}
			},
			"": func(t *rapid.T) {
				got, epoch, ok := tr.committable()
				want, wok := m.commit()
				if ok != wok || got != want {
					t.Fatalf("committable = %d, %v; model says %d, %v", got, ok, want, wok)
				}
				if ok && epoch != int32((got-1)%7) {
					t.Fatalf("epoch %d for commit %d, want the last finished record's (%d)", epoch, got, (got-1)%7)
				}
				if got < last {
					t.Fatalf("commit position moved back from %d to %d", last, got)
				}
				last = got
				for i, off := range m.offsets {
					if !m.finished[i] && ok && got > off {
						t.Fatalf("commit position %d passes unfinished offset %d", got, off)
					}
				}
				wantPending := 0
				for _, f := range m.finished {
					if !f {
						wantPending++
					}
				}
				if n := tr.pending(); n != wantPending {
					t.Fatalf("pending = %d, want %d", n, wantPending)
				}
			},
		})
	})
}
