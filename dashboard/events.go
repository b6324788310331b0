package dashboard

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// change is one state change, as the timeline shows it.
type change struct {
	Seq     uint64 `json:"seq"`
	Time    int64  `json:"t"` // Unix milliseconds
	Source  string `json:"source"`
	Name    string `json:"name"`
	Key     string `json:"key,omitempty"`
	From    string `json:"from"`
	To      string `json:"to"`
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	DelayMs int64  `json:"delay_ms,omitempty"`
}

// evKey names one emitter of state changes: a breaker is (circuit, its
// name or its registry's, its key).
type evKey struct{ source, name, key string }

// lastChange is what a breaker's rows need from its state changes: where
// it went last and when, and what opened it last.
type lastChange struct {
	to       string
	at       time.Time
	delay    time.Duration
	openCode string
}

// maxTracked bounds the breakers whose last change is remembered: a
// registry keyed by requests must not grow the Dashboard without end.
const maxTracked = 4096

// changeLog keeps the last state changes (the timeline) and each breaker's
// last change. State changes are rare: a mutex is enough.
type changeLog struct {
	mu   sync.Mutex
	seq  uint64
	ring []change // the last len(ring) changes; ring[(seq-1) % len] is the newest
	last map[evKey]lastChange
}

func (c *changeLog) init(n int) {
	c.ring = make([]change, n)
	c.last = map[evKey]lastChange{}
}

func (c *changeLog) record(e watertight.Event) {
	at := e.Time
	if at.IsZero() {
		at = time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if len(c.ring) > 0 {
		c.ring[(c.seq-1)%uint64(len(c.ring))] = change{
			Seq: c.seq, Time: at.UnixMilli(), Source: e.Source, Name: e.Name, Key: e.Key,
			From: e.From, To: e.To, Code: e.Code, Reason: e.Reason, DelayMs: e.Delay.Milliseconds(),
		}
	}
	if e.Source != "circuit" {
		return
	}
	k := evKey{e.Source, e.Name, e.Key}
	lc, ok := c.last[k]
	if !ok && len(c.last) >= maxTracked {
		for old := range c.last { // forget one, any
			delete(c.last, old)
			break
		}
	}
	lc.to, lc.at, lc.delay = e.To, at, e.Delay
	if e.To == "open" || e.To == "forced-open" {
		lc.openCode = e.Code
	}
	c.last[k] = lc
}

// since returns the changes kept with a sequence number above after (in
// order), and the newest sequence number.
func (c *changeLog) since(after uint64) ([]change, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rangeLocked(after, c.seq), c.seq
}

func (c *changeLog) rangeLocked(after, upTo uint64) []change {
	n := uint64(len(c.ring))
	if n == 0 || upTo <= after {
		return nil
	}
	first := max(after+1, c.seq-min(c.seq, n)+1) // the oldest still in the ring
	if first > upTo {
		return nil
	}
	out := make([]change, 0, upTo-first+1)
	for s := first; s <= upTo; s++ {
		out = append(out, c.ring[(s-1)%n])
	}
	return out
}

// upTo returns the changes kept with a sequence number at most upTo.
func (c *changeLog) upTo(upTo uint64) []change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rangeLocked(0, min(upTo, c.seq))
}

// lookup calls f with the last change of each key, under the lock.
func (c *changeLog) lookup(f func(get func(evKey) (lastChange, bool))) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(func(k evKey) (lastChange, bool) {
		lc, ok := c.last[k]
		return lc, ok
	})
}

// reasonKey is one series of counted events.
type reasonKey struct {
	kind               watertight.EventKind
	source, name, code string
}

// maxReasons bounds the series counted: codes are bounded by construction,
// names by the program, but a misbehaving emitter must not grow the
// Dashboard without end. Events past it are counted in overflow.
const maxReasons = 1024

// reasonCounts counts events by kind, source, name and code while a page is
// open. The map is read-locked on each event (its counters are atomic);
// a new series takes the write lock once.
type reasonCounts struct {
	mu       sync.RWMutex
	m        map[reasonKey]*atomic.Uint64
	overflow atomic.Uint64
}

func (r *reasonCounts) init() { r.m = map[reasonKey]*atomic.Uint64{} }

func (r *reasonCounts) count(e watertight.Event) {
	k := reasonKey{e.Kind, e.Source, e.Name, e.Code}
	r.mu.RLock()
	c := r.m[k]
	r.mu.RUnlock()
	if c == nil {
		r.mu.Lock()
		if c = r.m[k]; c == nil {
			if len(r.m) >= maxReasons {
				r.mu.Unlock()
				r.overflow.Add(1)
				return
			}
			c = new(atomic.Uint64)
			r.m[k] = c
		}
		r.mu.Unlock()
	}
	c.Add(1)
}

// reset forgets every series: counts start afresh when sampling starts.
func (r *reasonCounts) reset() {
	r.mu.Lock()
	clear(r.m)
	r.mu.Unlock()
	r.overflow.Store(0)
}

// totals calls f for each series with its count.
func (r *reasonCounts) totals(f func(reasonKey, uint64)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, c := range r.m {
		f(k, c.Load())
	}
}
