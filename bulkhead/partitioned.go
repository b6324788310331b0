package bulkhead

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// DefaultReserve is the lending reserve used when PartitionedConfig.Reserve
// is zero: a partition at or over its guarantee may borrow a permit only
// while half of the other partitions' unused guarantees stays free, so that
// a partition coming back from idle with up to half its guarantee in calls
// (its usual load, when guarantees are sized at twice the usual load) is
// admitted at once. See Partitioned for the rule and docs/bulkhead.md for
// the simulation that chose it.
const DefaultReserve = 0.5

// DefaultPartitionName is the name of the partition that callers with a
// name no partition has use, when PartitionedConfig.Default is empty.
const DefaultPartitionName = "default"

// MaxWeight is the largest PartitionConfig.Weight (and
// PartitionedConfig.DefaultWeight) NewPartitioned accepts.
const MaxWeight = 1 << 20

// NoWait, as a PartitionConfig.MaxWait, refuses a call of that partition at
// once when it cannot have a permit, whatever PartitionedConfig.MaxWait
// says (a zero PartitionConfig.MaxWait means "PartitionedConfig.MaxWait").
const NoWait time.Duration = math.MinInt64

// ErrNoPartition is returned by Partitioned.Acquire and TryAcquire for an
// index that is not a partition's (see Partitioned.Index), and by every
// call on a zero Partitioned. It is a bug in the caller, reported as a
// rejection so that nothing retries it.
var ErrNoPartition = watertight.NewRejection("bulkhead: no partition with that index")

// PartitionConfig configures one partition of a Partitioned bulkhead.
type PartitionConfig struct {
	// Name is the partition's name (a tier, a tenant): callers pass it to
	// Index or AcquireName, and it is the Key of the partition's events
	// and the Name of its PartitionSnapshot. It must not be empty, and no
	// two partitions may share it.
	Name string
	// Weight is the partition's share of MaxConcurrent relative to the
	// others': a partition of weight 3 beside one of weight 1 is
	// guaranteed three quarters of the permits. Zero means 1; a negative
	// value, NaN, infinity or one above MaxWeight is an error.
	Weight float64
	// MaxWait is how long a call of this partition waits for a permit
	// when it cannot have one at once. Zero means PartitionedConfig.MaxWait;
	// NoWait means no wait (refuse at once with ErrFull); any other
	// negative value means wait until the caller's context ends; a
	// positive value waits at most that long, then fails with ErrFull.
	MaxWait time.Duration
	// MaxWaiters bounds the partition's queue: how many of its calls may
	// wait at once. Zero means PartitionedConfig.MaxWaiters; a negative
	// value means no bound. A call that finds the queue full fails with
	// ErrFull at once.
	MaxWaiters int
}

// PartitionedConfig configures a Partitioned bulkhead.
type PartitionedConfig struct {
	// Name labels the bulkhead's errors, events and Snapshot. It may be
	// empty.
	Name string
	// MaxConcurrent is how many calls of all partitions together may hold
	// a permit at once: a hard cap, never exceeded. Zero means
	// DefaultMaxConcurrent; a negative value, one above
	// MaxConcurrentLimit, or one below the number of partitions (the
	// default partition included: each is guaranteed a permit) is an
	// error.
	MaxConcurrent int
	// Partitions are the named partitions, in the order of their indexes
	// (Index). It may be empty: then every call is in the default
	// partition and the bulkhead is a plain one.
	Partitions []PartitionConfig
	// Default is the name of the partition that callers whose name is not
	// a partition's use (Index maps unknown names to it, so no client
	// input ever makes a partition). If Partitions has a partition of that
	// name, it is that one; otherwise a partition of that name is added
	// after the others, with weight DefaultWeight and this config's
	// MaxWait and MaxWaiters. Empty means DefaultPartitionName.
	Default string
	// DefaultWeight is the weight of the added default partition. Zero
	// means 1. It must be zero when Default names one of Partitions (give
	// that partition its Weight instead), and is otherwise checked as
	// PartitionConfig.Weight is.
	DefaultWeight float64
	// Reserve is the fraction of the other partitions' unused guarantees
	// that lending keeps free: a partition at or over its guarantee may
	// take a permit only while the permits left free after it are at least
	// Reserve × (the sum, over all partitions, of their guarantee minus
	// what they hold, where positive), rounded up. It is what lets a
	// partition that comes back from idle get its usual load at once,
	// without waiting for borrowers to finish. Zero means DefaultReserve;
	// a negative value means no reserve (lend every free permit); 1 means
	// no lending (each partition is capped at its guarantee); above 1, or
	// NaN, is an error.
	Reserve float64
	// MaxWait is the MaxWait of the partitions that do not set their own
	// (see PartitionConfig.MaxWait): zero means no wait (NoWait too), a
	// negative value means until the caller's context ends, a positive
	// value at most that long.
	MaxWait time.Duration
	// MaxWaiters is the MaxWaiters of the partitions that do not set their
	// own: each partition's queue holds at most this many callers. Zero
	// means DefaultMaxWaiters; a negative value means no bound.
	MaxWaiters int
	// Listener, if not nil, receives an EventBulkheadFull for every call
	// refused (Acquire, TryAcquire), with Key the partition's name and Code
	// CodeNoPermit (no permit free for a partition under its guarantee),
	// CodeOverShare (the partition held its guarantee or more and no
	// permit could be lent to it), CodeWaitingRoomFull (its queue was
	// full) or CodeMaxWait (no permit within MaxWait); and an EventAcquired
	// and an EventReleased for every permit taken and given back, unless
	// the listener says it does not want those (watertight.Wants). Events
	// have Source "bulkhead" and Name this Name. A call whose context ends
	// sends none. It is called in the caller's goroutine with no lock
	// held. If nil, no events are built.
	Listener watertight.Listener
}

// Partitioned is a bulkhead whose MaxConcurrent permits are shared by named
// partitions (tiers, tenants) in proportion to their weights, each with its
// own FIFO queue: a spike in one partition is queued and refused in that
// partition, and does not take the permits the others are guaranteed.
//
// The rules, each a property its tests check:
//
//   - The permits held by all partitions together never exceed
//     MaxConcurrent.
//   - Each partition is guaranteed a part of MaxConcurrent from its weight:
//     MaxConcurrent × weight / total weight, rounded by largest remainder
//     so that the guarantees add up to exactly MaxConcurrent, each at least
//     1 (Snapshot shows them). A partition holding less than its guarantee
//     takes any free permit.
//   - A partition holding its guarantee or more borrows: it may take a free
//     permit only while the permits left free after it stay at or above
//     the reserve, Reserve × the unused guarantees of the others (the sum
//     of guarantee − held over the partitions below their guarantee),
//     rounded up; and never ahead of a call already queued in any
//     partition.
//   - A permit given back while calls wait goes first to a partition below
//     its guarantee (the one holding the smallest fraction of its
//     guarantee, then the one whose call has waited longest), and only
//     then, if the reserve allows, to a borrower (the same order). Within
//     a partition, calls are served first come, first served.
//
// The trade-off of the reserve. Lending lets a busy partition use what
// idle ones leave; but a permit lent is back only when the borrower's call
// ends, so a partition coming back from idle would wait for the borrowers'
// calls to end. With the reserve, borrowers leave Reserve of the idle
// guarantees free, so a returning partition gets that much of its load at
// once, and every permit given back after that goes to it first. The price
// is capacity left idle while borrowers queue: with Reserve r and idle
// guarantees U, about r×U permits. Reserve 1 is static partitioning (no
// lending), a negative Reserve lends everything (a returning partition
// waits for the borrowers' next releases, at the head of the line).
//
// A guarantee does not preempt: a permit lent is not taken back. A
// partition below its guarantee whose calls find every permit held (by
// borrowers, with a small Reserve) waits for the next one given back, and
// is refused if its MaxWait is zero; give the partitions that must get
// through a MaxWait of a few calls' duration.
//
// Taking a free permit and giving one back when no call of the partition
// (or, to borrow, of any partition) is queued costs a few atomic
// operations on a word shared by all partitions and one of the partition,
// and no allocation; borrowing also reads every partition's count (a
// partitioned bulkhead is meant for a few partitions: tiers, or the
// tenants a configuration names). Only a call that must wait, or a
// release while calls wait, takes the mutex. Under races the reserve is
// kept approximately (calls racing for the last permits may all borrow);
// the cap is exact.
//
// A Partitioned is safe for concurrent use. Build it with NewPartitioned:
// the zero value has no partitions, and every call fails with
// ErrNoPartition.
type Partitioned struct {
	parts    []partition
	names    map[string]int
	def      int           // index of the default partition
	reserve  atomic.Uint32 // Reserve in 1/65536ths
	name     string
	perCall  watertight.Listener
	listener watertight.Listener

	// gate counts the permits held (low 32 bits) and holds MaxConcurrent
	// (high 32 bits), so that a compare-and-swap takes a permit only below
	// the cap as it is at that moment, also while Reconfigure changes it.
	_    [64]byte
	gate atomic.Uint64
	_    [56]byte
	// waiting counts the calls queued in every partition; changed only
	// under mu. A Release that sees it non-zero hands permits over.
	waiting atomic.Int64
	_       [56]byte

	mu  sync.Mutex
	seq uint64 // order of arrival of waiters; under mu
}

const gateLow = 1<<32 - 1

// partition is one partition's state, alone on its cache lines.
type partition struct {
	// state counts the permits the partition holds (low bits) and its fast
	// acquisitions (high bits), as a Bulkhead's cell does (see state.go).
	state        atomic.Uint64
	wraps        atomic.Uint64
	guaranteed   atomic.Uint64
	waiting      atomic.Int64 // calls in the queue; changed only under mu
	maxWait      atomic.Int64
	maxWaiters   atomic.Int64 // effective: -1 is no bound
	acquiredSlow atomic.Uint64
	rejected     atomic.Uint64
	canceled     atomic.Uint64
	weight       atomic.Uint64 // float64 bits, for Snapshot
	name         string
	errFull      error
	head, tail   *pwaiter // the queue, oldest first; under mu
	_            [64]byte
}

// pwaiter is one call queued in a partition. Its fields are guarded by
// Partitioned.mu; ready is closed when it is granted a permit, after it has
// left the queue.
type pwaiter struct {
	next, prev *pwaiter
	ready      chan struct{}
	seq        uint64
	granted    bool
}

// NewPartitioned returns a Partitioned bulkhead for cfg. It fails, naming
// the field and the rule, when cfg is invalid.
func NewPartitioned(cfg PartitionedConfig) (*Partitioned, error) {
	l, err := cfg.layout()
	if err != nil {
		return nil, err
	}
	p := &Partitioned{
		parts:    make([]partition, len(l.names)),
		names:    make(map[string]int, len(l.names)),
		def:      l.def,
		name:     cfg.Name,
		listener: cfg.Listener,
		perCall:  perCallListener(cfg.Listener),
	}
	for i, n := range l.names {
		p.names[n] = i
		pt := &p.parts[i]
		pt.name = n
		pt.errFull = partitionFull(cfg.Name, n)
	}
	p.apply(l)
	return p, nil
}

// partitionFull is ErrFull labelled with the bulkhead's and the
// partition's names: "bulkhead: api: free: full".
func partitionFull(name, part string) error {
	if name != "" {
		part = name + ": " + part
	}
	return label(part, ErrFull)
}

// layout is a validated PartitionedConfig, worked out.
type layout struct {
	names      []string
	weights    []float64
	guarantees []uint64
	maxWait    []time.Duration
	maxWaiters []int64
	def        int
	capacity   uint64
	reserve    uint32
}

// layout validates cfg and works out its partitions.
func (cfg PartitionedConfig) layout() (layout, error) {
	var l layout
	n := cfg.MaxConcurrent
	if n < 0 || n > MaxConcurrentLimit {
		return l, fmt.Errorf("bulkhead: PartitionedConfig.MaxConcurrent must be in [0, %d] (0 means %d), got %d", MaxConcurrentLimit, DefaultMaxConcurrent, n)
	}
	if n == 0 {
		n = DefaultMaxConcurrent
	}
	switch r := cfg.Reserve; {
	case math.IsNaN(r) || r > 1:
		return l, fmt.Errorf("bulkhead: PartitionedConfig.Reserve must be at most 1 (0 means %v, negative means none), got %v", DefaultReserve, r)
	case r == 0:
		l.reserve = uint32(DefaultReserve * 65536)
	case r > 0:
		l.reserve = uint32(math.Ceil(r * 65536))
	}
	def := cfg.Default
	if def == "" {
		def = DefaultPartitionName
	}
	l.def = -1
	seen := map[string]bool{}
	for i, pc := range cfg.Partitions {
		field := "PartitionedConfig.Partitions[" + strconv.Itoa(i) + "]"
		if pc.Name == "" {
			return l, fmt.Errorf("bulkhead: %s.Name must not be empty", field)
		}
		if seen[pc.Name] {
			return l, fmt.Errorf("bulkhead: %s.Name %q is given twice: partition names must be unique", field, pc.Name)
		}
		seen[pc.Name] = true
		w, err := weight(field+".Weight", pc.Weight)
		if err != nil {
			return l, err
		}
		if pc.Name == def {
			l.def = i
		}
		l.add(pc.Name, w, cfg.waitOf(pc.MaxWait), cfg.roomOf(pc.MaxWaiters))
	}
	if l.def >= 0 && cfg.DefaultWeight != 0 {
		return l, fmt.Errorf("bulkhead: PartitionedConfig.DefaultWeight must be 0 when Default (%q) names one of Partitions: set that partition's Weight, got %v", def, cfg.DefaultWeight)
	}
	if l.def < 0 {
		w, err := weight("PartitionedConfig.DefaultWeight", cfg.DefaultWeight)
		if err != nil {
			return l, err
		}
		l.def = len(l.names)
		l.add(def, w, cfg.waitOf(0), cfg.roomOf(0))
	}
	if n < len(l.names) {
		return l, fmt.Errorf("bulkhead: PartitionedConfig.MaxConcurrent (%d) must be at least the number of partitions, the default one included (%d), so that each is guaranteed a permit", n, len(l.names))
	}
	l.capacity = uint64(n)
	l.guarantees = guarantees(l.capacity, l.weights)
	return l, nil
}

func (l *layout) add(name string, w float64, wait time.Duration, room int64) {
	l.names = append(l.names, name)
	l.weights = append(l.weights, w)
	l.maxWait = append(l.maxWait, wait)
	l.maxWaiters = append(l.maxWaiters, room)
}

// weight checks a weight and applies its default.
func weight(field string, w float64) (float64, error) {
	if math.IsNaN(w) || w < 0 || w > MaxWeight {
		return 0, fmt.Errorf("bulkhead: %s must be in [0, %d] (0 means 1), got %v", field, MaxWeight, w)
	}
	if w == 0 {
		return 1, nil
	}
	return w, nil
}

// waitOf is the effective MaxWait of a partition that asks for d: 0 for no
// wait, negative for no bound.
func (cfg PartitionedConfig) waitOf(d time.Duration) time.Duration {
	if d == 0 {
		d = cfg.MaxWait
	}
	if d == NoWait {
		return 0
	}
	return d
}

// roomOf is the effective queue bound of a partition that asks for n: -1
// for no bound.
func (cfg PartitionedConfig) roomOf(n int) int64 {
	if n == 0 {
		n = cfg.MaxWaiters
	}
	switch {
	case n < 0:
		return -1
	case n == 0:
		return DefaultMaxWaiters
	}
	return int64(n)
}

// guarantees splits n permits by weight (largest remainder, each at least
// 1, summing to n); n >= len(w) > 0.
func guarantees(n uint64, w []float64) []uint64 {
	var total float64
	for _, x := range w {
		total += x
	}
	g := make([]uint64, len(w))
	exact := make([]float64, len(w))
	var sum uint64
	for i, x := range w {
		exact[i] = float64(n) * x / total
		g[i] = max(1, uint64(exact[i]))
		sum += g[i]
	}
	order := make([]int, len(w))
	for i := range order {
		order[i] = i
	}
	// Hand out what is left one by one, largest remainder first; take back
	// what the minimum of 1 overspent from the partitions most above their
	// exact share.
	for sum != n {
		sort.SliceStable(order, func(a, b int) bool {
			ra, rb := exact[order[a]]-float64(g[order[a]]), exact[order[b]]-float64(g[order[b]])
			if sum < n {
				return ra > rb
			}
			return ra < rb
		})
		for _, i := range order {
			if sum == n {
				break
			}
			if sum < n {
				g[i]++
				sum++
			} else if g[i] > 1 {
				g[i]--
				sum--
			}
		}
	}
	return g
}

// apply sets the limits of l: by NewPartitioned, or by Reconfigure under
// mu.
func (p *Partitioned) apply(l layout) {
	for {
		g := p.gate.Load()
		if p.gate.CompareAndSwap(g, l.capacity<<32|g&gateLow) {
			break
		}
	}
	p.reserve.Store(l.reserve)
	for i := range p.parts {
		pt := &p.parts[i]
		pt.guaranteed.Store(l.guarantees[i])
		pt.weight.Store(math.Float64bits(l.weights[i]))
		pt.maxWait.Store(int64(l.maxWait[i]))
		pt.maxWaiters.Store(l.maxWaiters[i])
	}
}

// Reconfigure applies cfg while the bulkhead is in use, keeping the permits
// in flight: MaxConcurrent, the weights (so the guarantees), Reserve, and
// each partition's MaxWait and MaxWaiters. It validates cfg as
// NewPartitioned does, and also that it has the same partitions, in the
// same order, and the same default partition, since callers keep indexes;
// an invalid cfg is an error that changes nothing. Name and Listener stay
// what NewPartitioned set.
//
// Lowering MaxConcurrent or a guarantee takes no permit back: calls that
// hold one keep it, count against the new limits, and no permit is
// granted beyond the new cap until enough are given back. Raising them
// hands the new room to queued calls at once. Calls already waiting keep
// the MaxWait they started with, and keep their places in queues made
// shorter.
func (p *Partitioned) Reconfigure(cfg PartitionedConfig) error {
	if len(p.parts) == 0 {
		return errors.New("bulkhead: Reconfigure on a zero Partitioned: build it with NewPartitioned")
	}
	l, err := cfg.layout()
	if err != nil {
		return err
	}
	if len(l.names) != len(p.parts) || l.def != p.def {
		return fmt.Errorf("bulkhead: Reconfigure: the partitions must stay the same (%d, default %q), got %d, default %q: build a new Partitioned to change them", len(p.parts), p.parts[p.def].name, len(l.names), l.names[l.def])
	}
	for i, n := range l.names {
		if n != p.parts[i].name {
			return fmt.Errorf("bulkhead: Reconfigure: partition %d must stay %q, got %q: build a new Partitioned to change the partitions", i, p.parts[i].name, n)
		}
	}
	p.mu.Lock()
	p.apply(l)
	p.handoffLocked()
	p.mu.Unlock()
	return nil
}

// Index returns the index of the partition named name, for Acquire,
// TryAcquire and Release: the default partition's when no partition has
// that name. It takes no lock and allocates nothing; resolve a name once
// and keep the index when the hot path allows.
func (p *Partitioned) Index(name string) int {
	if i, ok := p.names[name]; ok {
		return i
	}
	return p.def
}

// Lookup returns the index of the partition named name, and false (with
// the default partition's index) when no partition has that name.
func (p *Partitioned) Lookup(name string) (int, bool) {
	i, ok := p.names[name]
	if !ok {
		return p.def, false
	}
	return i, true
}

// Partitions returns the number of partitions; their indexes are 0 to
// Partitions()-1, in the order of PartitionedConfig.Partitions, the added
// default partition last.
func (p *Partitioned) Partitions() int { return len(p.parts) }

// PartitionName returns the name of partition i, or "" when i is not a
// partition's index.
func (p *Partitioned) PartitionName(i int) string {
	if uint(i) >= uint(len(p.parts)) {
		return ""
	}
	return p.parts[i].name
}

// AcquireName is Acquire for the partition named name (Index: an unknown
// name is the default partition's). It returns the index to pass to
// Release.
func (p *Partitioned) AcquireName(ctx context.Context, name string) (int, error) {
	i := p.Index(name)
	return i, p.Acquire(ctx, i)
}

// TryAcquireName is TryAcquire for the partition named name (Index: an
// unknown name is the default partition's). It returns the index to pass
// to Release.
func (p *Partitioned) TryAcquireName(name string) (int, bool) {
	i := p.Index(name)
	return i, p.TryAcquire(i)
}

// Acquire takes a permit for partition i (see Index). When the rules (see
// Partitioned) give it none at once, it waits in the partition's queue
// until one is handed to it, the partition's MaxWait runs out (ErrFull) or
// ctx ends; it fails with ErrFull at once when the partition's MaxWait is
// zero or its queue is full. The error names the partition ("bulkhead:
// api: free: full") and wraps ErrFull: a rejection and a saturation.
//
// When ctx ends first, or has ended before the call, the error is ctx's,
// marked watertight.Ignored, counted in Canceled, with no event; a failed
// Acquire leaves the bulkhead as it found it (a permit handed over at the
// moment the wait ended is passed on).
//
// Every successful Acquire must be followed by exactly one Release(i).
func (p *Partitioned) Acquire(ctx context.Context, i int) error {
	if uint(i) >= uint(len(p.parts)) {
		return ErrNoPartition
	}
	pt := &p.parts[i]
	if ctx.Err() != nil {
		return p.canceledErr(ctx, pt)
	}
	if p.take(pt, true) {
		if p.perCall != nil {
			p.emitAcquired(pt, 0)
		}
		return nil
	}
	return p.acquireSlow(ctx, pt, true)
}

// TryAcquire takes a permit for partition i if the rules give it one at
// once, and reports whether it did. It never waits, and counts a false
// result as a rejection (and sends its event). It is false for an index
// that is not a partition's.
func (p *Partitioned) TryAcquire(i int) bool {
	if uint(i) >= uint(len(p.parts)) {
		return false
	}
	pt := &p.parts[i]
	if p.take(pt, true) {
		if p.perCall != nil {
			p.emitAcquired(pt, 0)
		}
		return true
	}
	return p.acquireSlow(context.Background(), pt, false) == nil
}

// Release gives back a permit of partition i, handing it to a waiting call
// if there is one (see Partitioned for which). It panics when i is not a
// partition's index or the partition holds no permit.
func (p *Partitioned) Release(i int) {
	if uint(i) >= uint(len(p.parts)) {
		panic("bulkhead: Partitioned.Release: " + strconv.Itoa(i) + " is not a partition's index")
	}
	pt := &p.parts[i]
	p.giveBack(pt)
	if p.waiting.Load() != 0 {
		p.releaseSlow()
	}
	if p.perCall != nil {
		p.emitReleased(pt)
	}
}

// giveBack takes a permit out of pt and then out of the gate, in that
// order (so that the partitions never hold more than the gate counts).
func (p *Partitioned) giveBack(pt *partition) {
	for {
		s := pt.state.Load()
		if s&activeMask == 0 {
			panic("bulkhead: Partitioned.Release without Acquire (partition " + strconv.Quote(pt.name) + " holds no permit)")
		}
		if pt.state.CompareAndSwap(s, s-1) {
			break
		}
	}
	p.gate.Add(^uint64(0))
}

// releaseSlow hands free permits to waiters.
func (p *Partitioned) releaseSlow() {
	p.mu.Lock()
	p.handoffLocked()
	p.mu.Unlock()
}

// take gives partition pt a permit if the rules allow it, and reports
// whether it did. fast is true for a newcomer outside the mutex: it does
// not overtake its partition's queue, nor borrow while anyone waits, and
// counts the acquisition in the state word. Otherwise mu is held and the
// caller counts the acquisition when it keeps the permit.
//
// The order of the steps: a permit of the gate first (the cap), then the
// partition's count, whose value says whether the permit is within the
// guarantee or borrowed (a borrowed one is checked against the reserve,
// and given back to the gate if the reserve says no).
func (p *Partitioned) take(pt *partition, fast bool) bool {
	if fast && pt.waiting.Load() != 0 {
		return false
	}
	g := pt.guaranteed.Load()
	checked := false
	if pt.state.Load()&activeMask >= g {
		if !p.mayBorrow(fast, 1) {
			return false
		}
		checked = true
	}
	for {
		gw := p.gate.Load()
		if gw&gateLow >= gw>>32 {
			return false
		}
		if p.gate.CompareAndSwap(gw, gw+1) {
			break
		}
	}
	add := uint64(1)
	if fast {
		add = acquiredOne + 1
	}
	for {
		s := pt.state.Load()
		if !checked && s&activeMask >= g {
			// Its last guaranteed permit was taken meanwhile: this one
			// is borrowed.
			if !p.mayBorrow(fast, 0) {
				p.gate.Add(^uint64(0))
				if fast && p.waiting.Load() != 0 { // see Release
					p.releaseSlow()
				}
				return false
			}
			checked = true
		}
		if pt.state.CompareAndSwap(s, s+add) {
			if fast && crossesWrapBit(s) {
				pt.wraps.Add(1)
			}
			return true
		}
	}
}

// mayBorrow reports whether a partition at or over its guarantee may take
// a permit: the permits free after it (pending is 1 when it is not yet
// counted in the gate) must stay at or above the reserve of the unused
// guarantees. A newcomer (fast) does not borrow while anyone waits.
func (p *Partitioned) mayBorrow(fast bool, pending uint64) bool {
	if fast && p.waiting.Load() != 0 {
		return false
	}
	gw := p.gate.Load()
	c, held := gw>>32, gw&gateLow+pending
	if held > c {
		return false
	}
	free := c - held
	f := uint64(p.reserve.Load())
	if f == 0 || free >= reserveOf(c, f) { // the unused guarantees are at most c
		return true
	}
	var unused uint64
	for j := range p.parts {
		q := &p.parts[j]
		if a, g := q.state.Load()&activeMask, q.guaranteed.Load(); a < g {
			unused += g - a
		}
	}
	return free >= reserveOf(unused, f)
}

// reserveOf is ⌈unused × f / 65536⌉.
func reserveOf(unused, f uint64) uint64 { return (unused*f + 65535) >> 16 }

// acquireSlow is Acquire (wait) or TryAcquire (!wait) when the fast path
// gave no permit: under mu, the waiters that can be served are served, then
// the newcomer takes a permit if its partition's queue is empty and the
// rules allow, or queues, or is refused.
func (p *Partitioned) acquireSlow(ctx context.Context, pt *partition, wait bool) error {
	maxWait := time.Duration(pt.maxWait.Load())
	p.mu.Lock()
	p.handoffLocked()
	if pt.head == nil && p.take(pt, false) {
		p.mu.Unlock()
		pt.acquiredSlow.Add(1)
		if p.perCall != nil {
			p.emitAcquired(pt, 0)
		}
		return nil
	}
	if !wait || maxWait == 0 {
		code := CodeNoPermit
		if pt.state.Load()&activeMask >= pt.guaranteed.Load() {
			code = CodeOverShare
		}
		p.mu.Unlock()
		return p.refuse(pt, code)
	}
	if room := pt.maxWaiters.Load(); room >= 0 && pt.waiting.Load() >= room {
		p.mu.Unlock()
		return p.refuse(pt, CodeWaitingRoomFull)
	}
	var start time.Time
	if p.perCall != nil {
		start = time.Now()
	}
	w := &pwaiter{ready: make(chan struct{}), seq: p.seq}
	p.seq++
	if pt.tail == nil {
		pt.head = w
	} else {
		pt.tail.next, w.prev = w, pt.tail
	}
	pt.tail = w
	pt.waiting.Add(1)
	p.waiting.Add(1) // before handoffLocked reads the gate: see Release
	p.handoffLocked()
	p.mu.Unlock()
	var expired <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.ready:
		if ctx.Err() != nil { // granted, but the caller is gone: pass it on
			p.giveBack(pt)
			if p.waiting.Load() != 0 {
				p.releaseSlow()
			}
			return p.canceledErr(ctx, pt)
		}
	case <-ctx.Done():
		p.giveUp(pt, w)
		return p.canceledErr(ctx, pt)
	case <-expired:
		p.giveUp(pt, w)
		return p.refuse(pt, CodeMaxWait)
	}
	pt.acquiredSlow.Add(1)
	if p.perCall != nil {
		p.emitAcquired(pt, time.Since(start))
	}
	return nil
}

// giveUp takes w out of pt's queue after its wait was cut short; if it was
// granted a permit meanwhile, the permit is passed on.
func (p *Partitioned) giveUp(pt *partition, w *pwaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		p.giveBack(pt)
		p.handoffLocked()
		return
	}
	p.removeLocked(pt, w)
}

func (p *Partitioned) removeLocked(pt *partition, w *pwaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		pt.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		pt.tail = w.prev
	}
	w.next, w.prev = nil, nil
	pt.waiting.Add(-1)
	p.waiting.Add(-1)
}

// handoffLocked grants free permits to waiters: first to the partitions
// below their guarantee, then to borrowers as the reserve allows; among
// either, the partition holding the smallest fraction of its guarantee
// first, then the one whose head has waited longest. It stops at the first
// waiter the rules refuse: the rules refuse every other waiter of the same
// kind then, and a waiter below its guarantee comes before any borrower.
// p.mu is held.
func (p *Partitioned) handoffLocked() {
	for p.waiting.Load() != 0 {
		var best *partition
		var bestUnder bool
		var bestA, bestG uint64
		for j := range p.parts {
			q := &p.parts[j]
			if q.head == nil {
				continue
			}
			a, g := q.state.Load()&activeMask, q.guaranteed.Load()
			under := a < g
			if best == nil || under && !bestUnder ||
				under == bestUnder && (a*bestG < bestA*g || a*bestG == bestA*g && q.head.seq < best.head.seq) {
				best, bestUnder, bestA, bestG = q, under, a, g
			}
		}
		if best == nil || !p.take(best, false) {
			return
		}
		w := best.head
		p.removeLocked(best, w)
		w.granted = true
		close(w.ready)
	}
}

// refuse counts a refusal of a call of pt, sends its event and returns its
// error. No lock is held.
func (p *Partitioned) refuse(pt *partition, code string) error {
	pt.rejected.Add(1)
	err := pt.errFull
	if err == nil {
		err = ErrFull
	}
	if p.listener != nil {
		p.emitFull(pt, err, code)
	}
	return err
}

var partitionedWords = map[string]string{
	CodeNoPermit:        "no permit free",
	CodeOverShare:       "the partition holds its guaranteed share and no permit could be lent",
	CodeWaitingRoomFull: "no permit free and the partition's queue full",
	CodeMaxWait:         "no permit free within MaxWait",
}

//go:noinline
func (p *Partitioned) emitFull(pt *partition, err error, code string) {
	watertight.Emit(p.listener, watertight.Event{
		Kind: watertight.EventBulkheadFull, Source: source, Name: p.name, Key: pt.name,
		Reason: partitionedWords[code], Err: err, Code: code,
	})
}

//go:noinline
func (p *Partitioned) emitAcquired(pt *partition, d time.Duration) {
	watertight.Emit(p.perCall, watertight.Event{
		Kind: watertight.EventAcquired, Source: source, Name: p.name, Key: pt.name, Permits: 1, Delay: d,
	})
}

//go:noinline
func (p *Partitioned) emitReleased(pt *partition) {
	watertight.Emit(p.perCall, watertight.Event{
		Kind: watertight.EventReleased, Source: source, Name: p.name, Key: pt.name, Permits: 1,
	})
}

// canceledErr counts and returns the error of a call of pt whose ctx ended
// before it got a permit: ctx's error marked Ignored.
func (p *Partitioned) canceledErr(ctx context.Context, pt *partition) error {
	pt.canceled.Add(1)
	return watertight.Mark(ctxErr(ctx), watertight.Ignored)
}

// PartitionSnapshot is one partition's state in a PartitionedSnapshot.
type PartitionSnapshot struct {
	// Name is the partition's name, Weight its weight.
	Name   string
	Weight float64
	// Guaranteed is the partition's guaranteed share of MaxConcurrent, in
	// permits.
	Guaranteed int
	// Active is the number of permits it holds; Borrowed is how many of
	// them are above its guarantee (Active - Guaranteed, at least 0).
	Active   int
	Borrowed int
	// Waiting is the number of its calls queued.
	Waiting int
	// Acquired, Rejected and Canceled count, since NewPartitioned, its
	// calls that took a permit, were refused (ErrFull, a false
	// TryAcquire), and gave up because their context ended.
	Acquired, Rejected, Canceled uint64
}

// PartitionedSnapshot is a point-in-time view of a Partitioned bulkhead.
// Its fields are read one by one without a lock, so under load they may not
// add up exactly.
type PartitionedSnapshot struct {
	// Name is PartitionedConfig.Name.
	Name string
	// MaxConcurrent is the cap shared by the partitions, Reserve the
	// lending reserve in force (0 for none, 1 for no lending).
	MaxConcurrent int
	Reserve       float64
	// Active, Borrowed, Waiting, Acquired, Rejected and Canceled are the
	// sums of the partitions'.
	Active, Borrowed, Waiting    int
	Acquired, Rejected, Canceled uint64
	// Available is the number of permits free: MaxConcurrent minus those
	// held, at least 0. A partition at or over its guarantee may find
	// them kept in reserve.
	Available int
	// Partitions are the partitions', by index.
	Partitions []PartitionSnapshot
}

// Snapshot returns the bulkhead's state and totals. It allocates the
// partitions' slice: it is meant for metrics, not for every call.
func (p *Partitioned) Snapshot() PartitionedSnapshot {
	gw := p.gate.Load()
	s := PartitionedSnapshot{
		Name:          p.name,
		MaxConcurrent: int(gw >> 32),
		Reserve:       float64(p.reserve.Load()) / 65536,
		Available:     max(0, int(gw>>32)-int(gw&gateLow)),
		Partitions:    make([]PartitionSnapshot, len(p.parts)),
	}
	for i := range p.parts {
		pt := &p.parts[i]
		wraps := pt.wraps.Load() // before state: see acquiredTotal
		st := pt.state.Load()
		a, g := int(st&activeMask), int(pt.guaranteed.Load())
		ps := PartitionSnapshot{
			Name:       pt.name,
			Weight:     math.Float64frombits(pt.weight.Load()),
			Guaranteed: g,
			Active:     a,
			Borrowed:   max(0, a-g),
			Waiting:    int(pt.waiting.Load()),
			Acquired:   acquiredTotal(wraps, st) + pt.acquiredSlow.Load(),
			Rejected:   pt.rejected.Load(),
			Canceled:   pt.canceled.Load(),
		}
		s.Partitions[i] = ps
		s.Active += ps.Active
		s.Borrowed += ps.Borrowed
		s.Waiting += ps.Waiting
		s.Acquired += ps.Acquired
		s.Rejected += ps.Rejected
		s.Canceled += ps.Canceled
	}
	return s
}
