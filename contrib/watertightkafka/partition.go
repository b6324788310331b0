package watertightkafka

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/watertight-go/watertight/retry"
)

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// partition is the consumer's state for one assigned partition. It lives
// from its assignment to its revocation (or loss); a later assignment of
// the same partition gets a new one.
type partition struct {
	tp
	// ctx is the base of its records' handler contexts, marked idempotent
	// for the retry policy; cancel abandons the work in progress.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// Guarded by Consumer.mu.
	track tracker
	held  int   // batches of the partition in lanes' held lists
	sent  int64 // the offset last sent in a commit; -1 none
	first int64 // the first offset dispatched; -1 none

	hwm atomic.Int64 // high watermark at the last fetch; -1 unknown

	mu      sync.Mutex // guards running, gone, runs, allRuns
	running int        // tasks running its records
	gone    bool       // revoked, lost or closed: nothing more starts
	runs    []*run     // idle attempt clocks, for the next tasks
	allRuns []*run     // every attempt clock made for it
	drained chan struct{}
	goneA   atomic.Bool // gone, for lock-free reads
}

func newPartition(base context.Context, k tp) *partition {
	ctx, cancel := context.WithCancelCause(base)
	p := &partition{
		tp:      k,
		ctx:     retry.Idempotent(ctx),
		cancel:  cancel,
		track:   newTracker(),
		sent:    -1,
		first:   -1,
		drained: make(chan struct{}),
	}
	p.hwm.Store(-1)
	return p
}

// enter counts a task that starts running the partition's records, and
// hands it an attempt clock when wd is not nil; it reports false when the
// partition is gone.
func (p *partition) enter(wd *watchdog) (*run, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return nil, false
	}
	p.running++
	if wd == nil {
		return nil, true
	}
	if n := len(p.runs); n > 0 {
		rn := p.runs[n-1]
		p.runs = p.runs[:n-1]
		return rn, true
	}
	rn := wd.begin(p.ctx)
	p.allRuns = append(p.allRuns, rn)
	return rn, true
}

// exit ends what enter counted, taking back the attempt clock.
func (p *partition) exit(rn *run) {
	p.mu.Lock()
	if rn != nil {
		p.runs = append(p.runs, rn)
	}
	p.running--
	if p.gone && p.running == 0 {
		close(p.drained)
	}
	p.mu.Unlock()
}

// markGone stops new tasks of the partition from starting and returns a
// channel closed once the running ones have ended.
func (p *partition) markGone() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		p.goneA.Store(true)
		if p.running == 0 {
			close(p.drained)
		}
	}
	return p.drained
}

func (p *partition) isGone() bool { return p.goneA.Load() }

// endRuns unregisters the partition's attempt clocks from wd, once it is
// gone.
func (p *partition) endRuns(wd *watchdog) {
	p.mu.Lock()
	runs := p.allRuns
	p.allRuns, p.runs = nil, nil
	p.mu.Unlock()
	for _, rn := range runs {
		wd.end(rn)
	}
}
