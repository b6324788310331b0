package balance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// Strategy says how a Balancer chooses between the two hosts it draws.
type Strategy uint8

const (
	// LeastInFlight takes the one of the two with fewer calls in flight
	// (the default).
	LeastInFlight Strategy = iota
	// PeakEWMA takes the one of the two with the lower cost: its latency,
	// a moving average that jumps at once to a slower call and decays
	// over the following ones (Finagle's peak EWMA), times its calls in
	// flight plus one. A host not yet measured costs nothing while it has
	// no call in flight and the most while it has one, so a new host gets
	// one probe, not a flood.
	PeakEWMA
)

// String returns "least_in_flight" or "peak_ewma".
func (s Strategy) String() string {
	switch s {
	case LeastInFlight:
		return "least_in_flight"
	case PeakEWMA:
		return "peak_ewma"
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// Reasons a host is ejected, in Event.Reason of the EventStateChange that
// ejects it, and in HostSnapshot.Reason. They are stable codes, for
// metric labels and alerts.
const (
	// ReasonConsecutiveErrors: the host's last ConsecutiveErrors calls
	// all failed.
	ReasonConsecutiveErrors = "consecutive_errors"
	// ReasonSlow: the host's latency was more than SlowFactor times the
	// median of the other hosts'.
	ReasonSlow = "slow"
	// ReasonEjectionEnded: the host's ejection time passed and it takes
	// calls again (the EventStateChange back to "active").
	ReasonEjectionEnded = "ejection_ended"
)

// The states of a host, in Event.From and Event.To.
const (
	StateActive  = "active"
	StateEjected = "ejected"
)

// Config configures a Balancer. The zero value of every field but Hosts is
// a usable default.
type Config struct {
	// Name labels the balancer's events, errors and snapshots (the
	// upstream pool's name). It may be empty.
	Name string
	// Hosts are the pool's addresses (host:port, or any label the caller
	// dials by), at least one, none repeated. Their order is kept in
	// Hosts and Snapshot.
	Hosts []string
	// Strategy chooses between the two hosts drawn for each call. The
	// zero value is LeastInFlight.
	Strategy Strategy
	// ConsecutiveErrors ejects a host whose last ConsecutiveErrors calls
	// all ended in Failure. Zero means 5; a negative value turns it off.
	ConsecutiveErrors int
	// SlowFactor ejects a host whose median latency is more than
	// SlowFactor times the median of the other active hosts' (each a
	// streaming estimate of the host's median): both its own estimate and
	// more than half of its last MinSamples measured calls must be above
	// that line, so one call that hung does not count. Relative to the
	// pool, not a fixed
	// threshold, so a pool that is slow as a whole (the dependency
	// behind it, the network) ejects nothing, and a host that is slow
	// beside healthy peers goes however fast they are. Zero means 3; a
	// negative value turns it off. At least 1.5.
	SlowFactor float64
	// MinSamples is the number of measured calls (ended Success or
	// Failure with a latency) a host must end before its latency is
	// judged, and between two judgements of it; the hosts it is compared
	// with must have ended as many since they were last ejected. Zero
	// means 20.
	MinSamples int
	// MaxEjectedShare caps the share of the pool's hosts ejected at once,
	// rounded down but at least one host (when the pool has two or more).
	// When ejecting one more would pass it, the host stays: when that many
	// hosts look bad, the fault is likely not theirs, and sending all the
	// traffic to the rest would overload them. A pool of one host never
	// ejects it. Zero means 0.5; at most 1 (which still keeps one host).
	MaxEjectedShare float64
	// BaseEjection is how long a host is ejected the first time; each
	// ejection that follows within MaxEjection of the host's return
	// doubles it, up to MaxEjection. Zero means 30s.
	BaseEjection time.Duration
	// MaxEjection caps an ejection's length, and is how long a returned
	// host must go without an ejection for its next one to last
	// BaseEjection again. Zero means 5 minutes; not less than
	// BaseEjection.
	MaxEjection time.Duration
	// Listener, if not nil, receives an EventStateChange each time a host
	// is ejected (From "active", To "ejected", Key the host, Reason
	// ReasonConsecutiveErrors or ReasonSlow, Delay the ejection's length)
	// and each time it returns (Reason ReasonEjectionEnded), with Source
	// "balance" and Name this Name. It is never called from Pick.
	Listener watertight.Listener
}

// ErrConfig is wrapped by the errors New returns for an invalid Config.
var ErrConfig = errors.New("balance: invalid config")

const (
	defaultConsecutiveErrors = 5
	defaultSlowFactor        = 3
	defaultMinSamples        = 20
	defaultMaxEjectedShare   = 0.5
	defaultBaseEjection      = 30 * time.Second
	defaultMaxEjection       = 5 * time.Minute

	// peakDecay is the weight of a call faster than a host's peak EWMA.
	peakDecay = 0.1
	// medianStep is the relative step of a host's streaming median.
	medianStep = 1.0 / 16
)

// Balancer spreads calls over a pool of hosts by the power of two choices:
// each call draws two hosts at random and takes the less loaded (fewer
// calls in flight, or lower peak-EWMA cost), which keeps the load within a
// few calls of even at the cost of two loads, with no shared ordering to
// contend on (Mitzenmacher, "The Power of Two Choices in Randomized Load
// Balancing"). It watches how each host's calls end and ejects a host that
// fails them in a row or is much slower than its peers, for a time that
// grows each time it is ejected again, never more of the pool at once than
// MaxEjectedShare allows.
//
// Pick and Host.Done take no lock, read no clock and allocate nothing,
// but for the rare Done that judges or ejects: a host's latency is judged
// once every MinSamples of its calls, under a mutex of the Balancer's; an
// ejection reads the clock, publishes the new set of active hosts, sends
// its event on the caller's goroutine and starts the timer that brings the
// host back. A Balancer is safe for concurrent use.
type Balancer struct {
	name     string
	strategy Strategy
	consec   int64 // 0: off
	slow     float64
	minSamp  int64
	maxEject int64
	base     time.Duration
	max      time.Duration
	lis      watertight.Listener

	hosts   []*Host
	active  atomic.Pointer[[]*Host] // the hosts not ejected, in Config.Hosts order
	ejected atomic.Int64

	mu      sync.Mutex // judging latency, ejecting, returning
	scratch []float64

	hash []uint64 // of each host's address, for Shard (shard.go)
}

// Host is one address of a Balancer's pool. Its methods are safe for
// concurrent use.
type Host struct {
	addr  string
	index int
	b     *Balancer
	down  atomic.Bool // read by Ejected, judgements, ejections and Snapshot; written by ejections: apart from hot
	_     [64]byte

	// hot: written by every call, on one line of their own.
	inFlight atomic.Int64
	consec   atomic.Int64
	samples  atomic.Int64
	peak     atomic.Uint64 // float64 bits: peak EWMA, ns
	median   atomic.Uint64 // float64 bits: a streaming estimate of the median latency, ns
	_        [24]byte
	ring     []atomic.Int64 // ns: the latencies of the last MinSamples measured calls

	// under b.mu
	ejections  int       // ejections in the current run of them
	returnedAt time.Time // when the last ejection ended
	reason     string    // why the host is (or was last) ejected
	until      time.Time // when the current ejection ends
	total      int64     // ejections ever
}

// New returns a Balancer over cfg.Hosts, or an error wrapping ErrConfig
// that names the field and what is wrong with it.
func New(cfg Config) (*Balancer, error) {
	bad := func(field, rule string, v any) error {
		name := ""
		if cfg.Name != "" {
			name = fmt.Sprintf(" %q", cfg.Name)
		}
		return fmt.Errorf("%w%s: %s is %v: %s", ErrConfig, name, field, v, rule)
	}
	if len(cfg.Hosts) == 0 {
		return nil, bad("Hosts", "give at least one host", "empty")
	}
	seen := make(map[string]bool, len(cfg.Hosts))
	for _, h := range cfg.Hosts {
		if h == "" {
			return nil, bad("Hosts", "a host may not be empty", fmt.Sprintf("%q", cfg.Hosts))
		}
		if seen[h] {
			return nil, bad("Hosts", "each host may appear once; "+h+" is repeated", fmt.Sprintf("%q", cfg.Hosts))
		}
		seen[h] = true
	}
	if cfg.Strategy > PeakEWMA {
		return nil, bad("Strategy", "use LeastInFlight or PeakEWMA", cfg.Strategy)
	}
	b := &Balancer{
		name: cfg.Name, strategy: cfg.Strategy, lis: cfg.Listener,
		consec: defaultConsecutiveErrors, slow: defaultSlowFactor, minSamp: defaultMinSamples,
		base: defaultBaseEjection, max: defaultMaxEjection,
	}
	switch {
	case cfg.ConsecutiveErrors < 0:
		b.consec = 0
	case cfg.ConsecutiveErrors > 0:
		b.consec = int64(cfg.ConsecutiveErrors)
	}
	switch {
	case math.IsNaN(cfg.SlowFactor) || (cfg.SlowFactor > 0 && cfg.SlowFactor < 1.5) || math.IsInf(cfg.SlowFactor, 1):
		return nil, bad("SlowFactor", "use at least 1.5 (a host that much slower than the median is ejected), 0 for 3, or a negative value to turn it off", cfg.SlowFactor)
	case cfg.SlowFactor < 0:
		b.slow = 0
	case cfg.SlowFactor > 0:
		b.slow = cfg.SlowFactor
	}
	switch {
	case cfg.MinSamples < 0:
		return nil, bad("MinSamples", "use a positive count of calls, or 0 for 20", cfg.MinSamples)
	case cfg.MinSamples > 0:
		b.minSamp = int64(cfg.MinSamples)
	}
	share := cfg.MaxEjectedShare
	switch {
	case math.IsNaN(share) || share < 0 || share > 1:
		return nil, bad("MaxEjectedShare", "use a share in (0, 1], or 0 for 0.5", share)
	case share == 0:
		share = defaultMaxEjectedShare
	}
	if n := len(cfg.Hosts); n > 1 {
		// The floor, with room for the float error of share×n (0.29×100
		// is 28.999...).
		b.maxEject = max(1, min(int64(n)-1, int64(math.Floor(share*float64(n)+1e-9))))
	}
	if cfg.BaseEjection < 0 {
		return nil, bad("BaseEjection", "use a positive duration, or 0 for 30s", cfg.BaseEjection)
	} else if cfg.BaseEjection > 0 {
		b.base = cfg.BaseEjection
	}
	if cfg.MaxEjection < 0 {
		return nil, bad("MaxEjection", "use a positive duration, or 0 for 5m", cfg.MaxEjection)
	} else if cfg.MaxEjection > 0 {
		b.max = cfg.MaxEjection
	}
	if b.max < b.base {
		return nil, bad("MaxEjection", fmt.Sprintf("use at least BaseEjection (%v)", b.base), b.max)
	}
	b.hosts = make([]*Host, len(cfg.Hosts))
	b.hash = make([]uint64, len(cfg.Hosts))
	for i, a := range cfg.Hosts {
		b.hosts[i] = &Host{addr: a, index: i, b: b}
		b.hash[i] = hashString(a)
		if b.slow > 0 {
			b.hosts[i].ring = make([]atomic.Int64, b.minSamp)
		}
	}
	all := slices.Clone(b.hosts)
	b.active.Store(&all)
	b.scratch = make([]float64, 0, len(cfg.Hosts))
	return b, nil
}

// Name returns the balancer's Config.Name.
func (b *Balancer) Name() string { return b.name }

// Len returns the number of hosts in the pool.
func (b *Balancer) Len() int { return len(b.hosts) }

// Hosts returns the pool's hosts in Config.Hosts order. The slice is the
// caller's.
func (b *Balancer) Hosts() []*Host { return slices.Clone(b.hosts) }

// Pick returns the host the next call should go to and counts the call in
// flight on it: the caller must end it with exactly one Host.Done. It
// draws its two hosts from those not ejected, so the load stays even over
// them whatever is ejected, and returns avoid (the host a failed attempt
// went to; nil for none) only when it is the only host not ejected, so a
// retry goes elsewhere whenever the pool allows. Pick never fails:
// ejection always leaves a host. (A Pick that races an ejection may
// return the host being ejected.)
func (b *Balancer) Pick(avoid *Host) *Host {
	h := b.choose(*b.active.Load(), avoid)
	h.inFlight.Add(1)
	return h
}

// choose is Pick's choice among hs (at least one host), not counted.
func (b *Balancer) choose(hs []*Host, avoid *Host) *Host {
	n := len(hs)
	if n == 1 {
		return hs[0]
	}
	r := rand.Uint64()
	i := int(uint32(r) % uint32(n))
	j := int(uint32(r>>32) % uint32(n-1))
	if j >= i {
		j++
	}
	a, c := hs[i], hs[j]
	switch {
	case a == avoid:
		return c
	case c == avoid:
		return a
	}
	return b.better(a, c)
}

// Next is Pick for a caller that passes over hosts (those whose breaker
// refused a call, say): it returns the first host not ejected for which
// skip is false, scanning the active hosts from a random one, counted in
// flight as Pick counts it; nil, with nothing counted, when skip is true
// for every one. It does not weigh the hosts' loads: use it after Pick,
// not instead of it.
func (b *Balancer) Next(skip func(*Host) bool) *Host {
	hs := *b.active.Load()
	i := int(rand.Uint32N(uint32(len(hs))))
	for k := range hs {
		if h := hs[(i+k)%len(hs)]; !skip(h) {
			h.inFlight.Add(1)
			return h
		}
	}
	return nil
}

// better returns the less loaded of a and c, a on a tie. With PeakEWMA,
// the loser's peak decays by peakDecay when it has no call in flight: a
// host that one slow call made dear is passed over, not forgotten, and is
// tried again once its cost falls to its peers'. (A decay over time, as
// Finagle's, would read the clock in every Pick.)
func (b *Balancer) better(a, c *Host) *Host {
	if b.strategy == PeakEWMA {
		ca, cc := a.cost(), c.cost()
		win, lose := a, c
		if cc < ca {
			win, lose = c, a
		} else if cc == ca {
			return a
		}
		if lose.inFlight.Load() == 0 {
			if old := lose.peak.Load(); old != 0 {
				lose.peak.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)*(1-peakDecay)))
			}
		}
		return win
	}
	if c.inFlight.Load() < a.inFlight.Load() {
		return c
	}
	return a
}

// cost is the host's peak EWMA times its calls in flight plus one.
func (h *Host) cost() float64 {
	n := float64(h.inFlight.Load())
	p := math.Float64frombits(h.peak.Load())
	if p == 0 {
		if n > 0 {
			return math.MaxFloat64
		}
		return 0
	}
	return p * (n + 1)
}

// Addr returns the host's address, as given in Config.Hosts.
func (h *Host) Addr() string { return h.addr }

// Index returns the host's position in Config.Hosts.
func (h *Host) Index() int { return h.index }

// InFlight returns the calls Pick has counted on the host that have not
// ended.
func (h *Host) InFlight() int { return int(h.inFlight.Load()) }

// Ejected reports whether the host is ejected now.
func (h *Host) Ejected() bool { return h.down.Load() }

// Done ends a call Pick counted on the host: o is how it ended (Failure
// counts toward ConsecutiveErrors and Success ends a run of them; Ignored
// and Saturated, such as the caller's cancellation or a rejection by a
// protection in front of the host, say nothing about it and are not
// counted), latency how long it took (measured by the caller; zero or
// negative when not measured, and not counted in the latency then). Each
// Pick must be ended by exactly one Done.
func (h *Host) Done(o watertight.Outcome, latency time.Duration) {
	h.inFlight.Add(-1)
	if o != watertight.Success && o != watertight.Failure {
		return
	}
	b := h.b
	if o == watertight.Failure {
		if c := h.consec.Add(1); b.consec > 0 && c >= b.consec {
			b.eject(h, ReasonConsecutiveErrors)
		}
	} else if h.consec.Load() != 0 {
		h.consec.Store(0)
	}
	if latency <= 0 {
		return
	}
	ns := float64(latency)
	if b.strategy == PeakEWMA {
		for {
			old := h.peak.Load()
			p := math.Float64frombits(old)
			next := ns
			if ns < p {
				next = p + (ns-p)*peakDecay
			}
			if next == p || h.peak.CompareAndSwap(old, math.Float64bits(next)) {
				break
			}
		}
	}
	if b.slow == 0 {
		return
	}
	// The frugal streaming median (Ma, Muthukrishnan and Sandler): a step
	// of medianStep towards each call, up or down, which settles where
	// half the calls are above; one call that hung moves it one step.
	for {
		old := h.median.Load()
		m := math.Float64frombits(old)
		next := ns
		switch {
		case m == 0:
		case ns > m:
			next = m * (1 + medianStep)
		case ns < m:
			next = m * (1 - medianStep)
		default:
			next = m
		}
		if next == m || h.median.CompareAndSwap(old, math.Float64bits(next)) {
			break
		}
	}
	s := h.samples.Add(1)
	k := (s - 1) % b.minSamp
	h.ring[k].Store(int64(latency))
	if k == b.minSamp-1 {
		b.judge(h)
	}
}

// judge ejects h if its median latency is more than SlowFactor times the
// median of the other active hosts': both its streaming estimate of the
// median and the median of its last MinSamples calls (more than half of
// them above the line). The estimates of hosts that take calls at the
// same pace move at the same pace, so a pool that slows down as a whole
// ejects nothing (at low traffic, one call at a time, a sudden slowdown of
// many times SlowFactor can still eject a host now and then:
// docs/balance.md has the figures); the block's
// median is fresh, so a host whose first calls hung, whose estimate starts
// high, is not ejected for them. Medians, not means: one call that hung (an
// attempt timeout of 100 times the usual latency) must not eject a healthy
// host; most of its calls being slow does. Counting the calls above the
// line costs no sort. A judgement that finds the Balancer's mutex held (by
// another judgement, an ejection, a return, a Snapshot) is skipped, the
// next coming MinSamples calls later: judging never makes a caller wait.
func (b *Balancer) judge(h *Host) {
	if !b.mu.TryLock() {
		return
	}
	hm := math.Float64frombits(h.median.Load())
	others := b.scratch[:0]
	for _, o := range b.hosts {
		if o != h && !o.down.Load() && o.samples.Load() >= b.minSamp {
			others = append(others, math.Float64frombits(o.median.Load()))
		}
	}
	slow := false
	if len(others) > 0 {
		slices.Sort(others)
		m := len(others) / 2
		pool := others[m]
		if len(others)%2 == 0 {
			pool = (others[m-1] + others[m]) / 2
		}
		line, above := b.slow*pool, int64(0)
		for i := range h.ring {
			if float64(h.ring[i].Load()) > line {
				above++
			}
		}
		slow = above > b.minSamp/2 && hm > line
	}
	b.scratch = others[:0]
	b.mu.Unlock()
	if slow {
		b.eject(h, ReasonSlow)
	}
}

// eject takes h out of the pool for its ejection time, unless it is out
// already or the pool has as many out as MaxEjectedShare allows.
func (b *Balancer) eject(h *Host, reason string) {
	if b.maxEject == 0 || h.down.Load() || b.ejected.Load() >= b.maxEject {
		return
	}
	b.mu.Lock()
	if h.down.Load() || b.ejected.Load() >= b.maxEject {
		b.mu.Unlock()
		return
	}
	now := time.Now()
	if h.ejections > 0 && now.Sub(h.returnedAt) >= b.max {
		h.ejections = 0
	}
	d := b.base
	for range h.ejections {
		if d >= b.max/2 {
			d = b.max
			break
		}
		d *= 2
	}
	d = min(d, b.max)
	h.ejections++
	h.total++
	h.reason = reason
	h.until = now.Add(d)
	b.ejected.Add(1)
	h.down.Store(true)
	h.consec.Store(0)
	b.storeActive()
	b.mu.Unlock()
	watertight.Emit(b.lis, watertight.Event{
		Kind: watertight.EventStateChange, Source: "balance", Name: b.name, Key: h.addr,
		From: StateActive, To: StateEjected, Reason: reason, Delay: d, Code: reason, // the Reason constants are codes
	})
	time.AfterFunc(d, func() { b.restore(h) })
}

// storeActive publishes the hosts not ejected, under b.mu.
func (b *Balancer) storeActive() {
	act := make([]*Host, 0, len(b.hosts))
	for _, h := range b.hosts {
		if !h.down.Load() {
			act = append(act, h)
		}
	}
	b.active.Store(&act)
}

// restore brings h back when its ejection ends: it starts measured afresh.
func (b *Balancer) restore(h *Host) {
	b.mu.Lock()
	h.returnedAt = time.Now()
	h.samples.Store(0)
	h.median.Store(0)
	h.peak.Store(0)
	h.consec.Store(0)
	h.down.Store(false)
	b.ejected.Add(-1)
	b.storeActive()
	b.mu.Unlock()
	watertight.Emit(b.lis, watertight.Event{
		Kind: watertight.EventStateChange, Source: "balance", Name: b.name, Key: h.addr,
		From: StateEjected, To: StateActive, Reason: ReasonEjectionEnded, Code: CodeEjectionEnded,
	})
}

// HostSnapshot is one host's state at a moment.
type HostSnapshot struct {
	// Addr is the host's address.
	Addr string `json:"addr"`
	// InFlight is its calls in flight.
	InFlight int `json:"in_flight"`
	// Ejected reports whether it is ejected; Until is when it returns,
	// and Reason why it went (the last ejection's reason, also after it
	// returned; empty if it never was).
	Ejected bool      `json:"ejected"`
	Until   time.Time `json:"until,omitzero"`
	Reason  string    `json:"reason,omitempty"`
	// Ejections is how many times it was ejected since New.
	Ejections int64 `json:"ejections"`
	// ConsecutiveErrors is the length of its current run of failures.
	ConsecutiveErrors int64 `json:"consecutive_errors"`
	// Latency is its median latency, as estimated (zero before its first
	// measured call, or with SlowFactor off), PeakEWMA its peak
	// EWMA (PeakEWMA strategy only).
	Latency  time.Duration `json:"latency_ns"`
	PeakEWMA time.Duration `json:"peak_ewma_ns,omitempty"`
}

// Snapshot is a Balancer's state at a moment, for an admin view.
type Snapshot struct {
	// Name is the balancer's name.
	Name string `json:"name"`
	// Strategy is how it chooses.
	Strategy string `json:"strategy"`
	// Ejected is the number of hosts ejected now; MaxEjected the most
	// that may be at once.
	Ejected    int `json:"ejected"`
	MaxEjected int `json:"max_ejected"`
	// Hosts are the hosts, in Config.Hosts order.
	Hosts []HostSnapshot `json:"hosts"`
}

// Snapshot returns the balancer's state.
func (b *Balancer) Snapshot() Snapshot {
	s := Snapshot{Name: b.name, Strategy: b.strategy.String(), MaxEjected: int(b.maxEject)}
	b.mu.Lock()
	defer b.mu.Unlock()
	s.Ejected = int(b.ejected.Load())
	s.Hosts = make([]HostSnapshot, len(b.hosts))
	for i, h := range b.hosts {
		hs := HostSnapshot{
			Addr: h.addr, InFlight: int(h.inFlight.Load()), Ejected: h.down.Load(),
			Reason: h.reason, Ejections: h.total, ConsecutiveErrors: h.consec.Load(),
			Latency:  time.Duration(math.Float64frombits(h.median.Load())),
			PeakEWMA: time.Duration(math.Float64frombits(h.peak.Load())),
		}
		if hs.Ejected {
			hs.Until = h.until
		}
		s.Hosts[i] = hs
	}
	return s
}
