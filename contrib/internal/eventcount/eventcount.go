// Package eventcount counts watertight events by a bounded label set, for
// the metrics adapters (contrib/watertightprom, contrib/watertightotel):
// which labels an event is counted under (KeyOf: its kind, source, name and
// key, From and To of a state change, and its Code), and a counter map that
// adds to a label set already seen without a lock or an allocation.
//
// The reason label is the event's Code, which the emitting package defines
// and bounds by construction. This package knows no package's codes, errors
// or words: a new protection that sets Code on its events is counted under
// its codes with no edit here.
package eventcount

import (
	"sync"
	"sync/atomic"

	"github.com/watertight-go/watertight"
)

// Key is the label set an event is counted under.
type Key struct {
	Kind              watertight.EventKind
	Source, Name, Key string
	From, To          string // EventStateChange only
	Code              string // the reason label: see CodeLabel
}

// Other is the reason label of an event whose Code is empty or not a code
// (see CodeLabel).
const Other = "other"

// MaxCodeLen is the longest Code taken as a label value.
const MaxCodeLen = 40

// KeyOf returns the label set of e: its kind, source, name and key, From
// and To for a state change, and the reason label CodeLabel(e).
func KeyOf(e watertight.Event) Key {
	k := Key{Kind: e.Kind, Source: e.Source, Name: e.Name, Key: e.Key, Code: CodeLabel(e)}
	if e.Kind == watertight.EventStateChange {
		k.From, k.To = e.From, e.To
	}
	return k
}

// CodeLabel returns the reason label of e: its Code when it has the shape
// of a code (1 to MaxCodeLen bytes of a-z, 0-9 and '_', beginning with a
// letter), else Other; and for an empty Code, "" or, for the kinds whose
// metrics have a reason label (EventRetrySkipped, EventShed,
// EventBadInput), Other.
//
// Codes are bounded by construction: each is a constant of the package
// that emits the event, never taken from a request or an error's text. The
// shape check only keeps a listener outside this module that fills Code
// with free text (an error message, a value a client sent) from naming a
// series after it; such events are counted as Other.
func CodeLabel(e watertight.Event) string {
	if e.Code == "" {
		switch e.Kind {
		case watertight.EventRetrySkipped, watertight.EventShed, watertight.EventBadInput:
			return Other
		}
		return ""
	}
	if !isCode(e.Code) {
		return Other
	}
	return e.Code
}

// isCode reports whether s has the shape of a code.
func isCode(s string) bool {
	if len(s) > MaxCodeLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

type counterMap = map[Key]*atomic.Uint64

// Counts counts events by label set. Lookups of a label set already
// promoted to the read map take no lock and allocate nothing; new label sets
// go to a dirty map under a mutex and are promoted in bulk once the misses
// have paid for the copy (as sync.Map does), so n label sets cost O(n)
// copying in all.
type Counts struct {
	// Max bounds the label sets; negative means none. Set it before use.
	Max int
	// Overflow counts the events not counted because Max label sets
	// were already in use.
	Overflow atomic.Uint64

	read atomic.Pointer[counterMap]

	mu     sync.Mutex
	dirty  counterMap // label sets not in read
	misses int
	n      int // label sets in read and dirty
}

// Inc adds one to the count of k.
func (ec *Counts) Inc(k Key) {
	if m := ec.read.Load(); m != nil {
		if n := (*m)[k]; n != nil {
			n.Add(1)
			return
		}
	}
	ec.incSlow(k)
}

func (ec *Counts) incSlow(k Key) {
	ec.mu.Lock()
	var read counterMap
	if m := ec.read.Load(); m != nil {
		read = *m
	}
	n := read[k]
	if n == nil {
		n = ec.dirty[k]
	}
	if n == nil {
		if ec.Max >= 0 && ec.n >= ec.Max {
			ec.mu.Unlock()
			ec.Overflow.Add(1)
			return
		}
		n = new(atomic.Uint64)
		if ec.dirty == nil {
			ec.dirty = counterMap{}
		}
		ec.dirty[k] = n
		ec.n++
	}
	if len(ec.dirty) > 0 {
		ec.misses++
		if ec.misses >= len(read) {
			merged := make(counterMap, len(read)+len(ec.dirty))
			for k, v := range read {
				merged[k] = v
			}
			for k, v := range ec.dirty {
				merged[k] = v
			}
			ec.read.Store(&merged)
			ec.dirty, ec.misses = nil, 0
		}
	}
	ec.mu.Unlock()
	n.Add(1)
}

// Each calls f for every label set counted so far, under the mutex (f must
// not call back into ec).
func (ec *Counts) Each(f func(Key, uint64)) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if m := ec.read.Load(); m != nil {
		for k, v := range *m {
			f(k, v.Load())
		}
	}
	for k, v := range ec.dirty {
		f(k, v.Load())
	}
}
