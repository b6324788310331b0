package limit

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Partition is one share of a Partitioned limiter's limit: a criticality,
// a tenant, a class of traffic.
type Partition struct {
	// Name labels the partition in snapshots and in Index.
	Name string
	// Share is the fraction of the limit the partition is guaranteed, in
	// (0, 1]; the shares of a limiter add up to at most 1.
	Share float64
}

// PartitionedConfig configures a Partitioned limiter.
type PartitionedConfig struct {
	// Config configures the limit and how it adapts, as for a Limiter;
	// MaxWait, MaxWaiters and QueueOrder are ignored (a partitioned
	// limiter does not queue).
	Config
	// Partitions are the shares, at least one.
	Partitions []Partition
}

// Partitioned is an adaptive limit shared by partitions of the traffic
// (concurrency-limits' partitioned limiter): each partition is guaranteed
// its share of the limit (at least one call), and may borrow what the
// others leave unused. A call is refused only when the limit is reached
// and its own partition holds its share or more: so when a partition that
// was idle comes back, it gets its share at once, from the borrowers'
// headroom, while the borrowers give way as their calls end. Give the
// traffic that must get through (critical, premium) a large share, and the
// sheddable traffic a small one: under overload the sheddable traffic is
// the first refused.
//
// The limit adapts as a Limiter's does (a Controller judges the calls'
// latencies and drops); the partitions' guarantees follow it. Admission is
// two atomic adds and a few loads; nothing allocates, no lock is taken.
type Partitioned struct {
	ctl   *Controller
	parts []part
	names map[string]int
	err   error
	limit atomic.Int64 // read by every call, written once per window
	_     [64]byte
	total atomic.Int64 // written by every call: a line of its own
	_     [56]byte
}

type part struct {
	name       string
	share      float64
	guaranteed atomic.Int64 // read by every call of the partition
	_          [32]byte
	inFlight   atomic.Int64 // written by every call of the partition
	rejected   atomic.Uint64
	_          [48]byte
}

// NewPartitioned returns a Partitioned limiter for cfg, or an error naming
// the first invalid field.
func NewPartitioned(cfg PartitionedConfig) (*Partitioned, error) {
	if len(cfg.Partitions) == 0 {
		return nil, errors.New("limit: PartitionedConfig.Partitions must hold at least one partition, got none")
	}
	p := &Partitioned{parts: make([]part, len(cfg.Partitions)), names: map[string]int{}}
	sum := 0.0
	for i, pt := range cfg.Partitions {
		if !(pt.Share > 0 && pt.Share <= 1) {
			return nil, fmt.Errorf("limit: PartitionedConfig.Partitions[%d].Share must be in (0, 1], got %v", i, pt.Share)
		}
		if _, dup := p.names[pt.Name]; dup {
			return nil, fmt.Errorf("limit: PartitionedConfig.Partitions[%d].Name %q is given twice", i, pt.Name)
		}
		sum += pt.Share
		p.names[pt.Name] = i
		p.parts[i].name, p.parts[i].share = pt.Name, pt.Share
	}
	if sum > 1+1e-9 {
		return nil, fmt.Errorf("limit: PartitionedConfig.Partitions' shares must add up to at most 1, got %v", sum)
	}
	p.err = ErrLimited
	if cfg.Name != "" {
		p.err = &namedError{name: cfg.Name, err: ErrLimited}
	}
	ctl, err := NewController(cfg.Config, partitionGate{p})
	if err != nil {
		return nil, err
	}
	p.ctl = ctl
	return p, nil
}

// partitionGate is a Partitioned limiter's Gate: the Controller sets the
// limit, and the guarantees follow.
type partitionGate struct{ p *Partitioned }

func (g partitionGate) SetLimit(n int) {
	g.p.limit.Store(int64(n))
	for i := range g.p.parts {
		pt := &g.p.parts[i]
		pt.guaranteed.Store(int64(max(1, math.Ceil(float64(n)*pt.share))))
	}
}

func (g partitionGate) Load() (int, int) { return int(g.p.total.Load()), 0 }

// Index returns the index of the partition named name, for TryAcquire.
func (p *Partitioned) Index(name string) (int, bool) {
	i, ok := p.names[name]
	return i, ok
}

// PartitionPermit is one admitted call of a partition. Exactly one of Done,
// Drop or Ignore must be called when it ends. The zero PartitionPermit
// does nothing.
type PartitionPermit struct {
	p  *Partitioned
	pt *part
}

// TryAcquire admits a call of partition i (see Index) unless the limit is
// reached and the partition holds its guaranteed share or more. It never
// waits. It panics if i is not a partition's index.
func (p *Partitioned) TryAcquire(i int) (PartitionPermit, bool) {
	pt := &p.parts[i]
	n := pt.inFlight.Add(1)
	t := p.total.Add(1)
	if t > p.limit.Load() && n > pt.guaranteed.Load() {
		pt.inFlight.Add(-1)
		p.total.Add(-1)
		pt.rejected.Add(1)
		return PartitionPermit{}, false
	}
	return PartitionPermit{p: p, pt: pt}, true
}

// Err is the error to return for a refused call: ErrLimited, named.
func (p *Partitioned) Err() error { return p.err }

func (pp PartitionPermit) release() {
	pp.pt.inFlight.Add(-1)
	pp.p.total.Add(-1)
}

// Done ends a measured call (see Permit.Done).
func (pp PartitionPermit) Done(latency time.Duration) {
	if pp.p != nil {
		pp.p.ctl.Sample(latency, 0) // before the release: InFlight counts this call
		pp.release()
	}
}

// Drop ends a call that signalled overload (see Permit.Drop).
func (pp PartitionPermit) Drop() {
	if pp.p != nil {
		pp.p.ctl.Drop()
		pp.release()
	}
}

// Ignore ends a call that says nothing about the dependency.
func (pp PartitionPermit) Ignore() {
	if pp.p != nil {
		pp.release()
	}
}

// Limit returns the current limit.
func (p *Partitioned) Limit() int { return int(p.limit.Load()) }

// PartitionSnapshot is one partition's state.
type PartitionSnapshot struct {
	// Name and Share are the partition's.
	Name  string
	Share float64
	// Guaranteed is its share of the current limit, in calls (at least 1).
	Guaranteed int
	// InFlight is the calls it holds; Rejected the calls refused since New.
	InFlight int
	Rejected uint64
}

// PartitionedSnapshot is a Partitioned limiter's state.
type PartitionedSnapshot struct {
	// Snapshot is the limit's: InFlight the calls of every partition,
	// Rejected the sum of the partitions'; Acquired is not counted (it
	// reads zero).
	Snapshot
	// Partitions are the partitions', in the order of the Config.
	Partitions []PartitionSnapshot
}

// Snapshot returns the limiter's state. It allocates the partitions'
// slice; it is meant for metrics, not for every call.
func (p *Partitioned) Snapshot() PartitionedSnapshot {
	s := PartitionedSnapshot{Snapshot: p.ctl.Snapshot(), Partitions: make([]PartitionSnapshot, len(p.parts))}
	for i := range p.parts {
		pt := &p.parts[i]
		s.Partitions[i] = PartitionSnapshot{
			Name: pt.name, Share: pt.share, Guaranteed: int(pt.guaranteed.Load()),
			InFlight: int(pt.inFlight.Load()), Rejected: pt.rejected.Load(),
		}
		s.Rejected += pt.rejected.Load()
	}
	return s
}
