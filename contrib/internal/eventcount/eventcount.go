// Package eventcount counts watertight events by a bounded label set, for
// the metrics adapters (contrib/watertightprom, contrib/watertightotel): which labels an
// event is counted under (KeyOf, with the reasons of skipped retries, shed
// requests and bad client input mapped to a few fixed values), and a counter map that adds
// to a label set already seen without a lock or an allocation.
package eventcount

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// Key is the label set an event is counted under.
type Key struct {
	Kind              watertight.EventKind
	Source, Name, Key string
	A, B              string // the reason, or From and To
}

// KeyOf returns the label set of e: its kind, source, name and key, plus
// From and To for a state change and a bounded reason for a skipped retry
// (SkipReason), a shed request (ShedReason) or bad client input
// (BadInputReason). The key of bad input is the header it came in, which
// the emitter takes from its configuration, never from the request: it is
// kept as it is.
func KeyOf(e watertight.Event) Key {
	k := Key{Kind: e.Kind, Source: e.Source, Name: e.Name, Key: e.Key}
	switch e.Kind {
	case watertight.EventStateChange:
		k.A, k.B = e.From, e.To
	case watertight.EventRetrySkipped:
		k.A = SkipReason(e)
	case watertight.EventShed:
		k.A = ShedReason(e)
	case watertight.EventBadInput:
		k.A = BadInputReason(e)
	}
	return k
}

// badInputLabels are the values BadInputReason gives, but "other": the
// Reasons the emitters put on an EventBadInput.
var badInputLabels = map[string]bool{
	deadline.Malformed.String():             true, // "malformed"
	deadline.Absurd.String():                true, // "absurd"
	watertighthttp.ReasonUnknownCriticality: true, // "unknown_criticality"
}

// BadInputReason maps bad client input (EventBadInput) to a bounded label
// value: e.Reason when it is one of the stable labels the emitters use
// ("malformed", "absurd", "unknown_criticality"), else "other". The event
// is driven by clients, so nothing they send may add a series.
func BadInputReason(e watertight.Event) string {
	if badInputLabels[e.Reason] {
		return e.Reason
	}
	return "other"
}

// SkipReason maps a skipped retry to a bounded label value: from the
// reason's sentinel error when Err wraps it, else from the words of
// e.Reason (retry's "not idempotent", "not enough time left before the
// deadline", "retry budget exhausted"; the HTTP Transport's "request body
// cannot be replayed").
func SkipReason(e watertight.Event) string {
	switch {
	case errors.Is(e.Err, retry.ErrNotIdempotent):
		return "not_idempotent"
	case errors.Is(e.Err, retry.ErrNoTime):
		return "no_time"
	case errors.Is(e.Err, retry.ErrNoBudget), errors.Is(e.Err, budget.ErrExhausted):
		return "no_budget"
	case errors.Is(e.Err, watertighthttp.ErrBodyNotReplayable):
		return "body_not_replayable"
	}
	r := e.Reason
	switch {
	case r == "":
		return "other"
	case strings.Contains(r, "idempotent"):
		return "not_idempotent"
	case strings.Contains(r, "budget"):
		return "no_budget"
	case strings.Contains(r, "replay"):
		return "body_not_replayable"
	case strings.Contains(r, "time"), strings.Contains(r, "deadline"):
		return "no_time"
	}
	return "other"
}

// shedLabels are the values ShedReason gives, but "other".
var shedLabels = map[string]bool{"route_full": true, "displaced": true, "queue_gave_up": true, "client_limit": true, "client_overflow": true, "deadline": true}

// registeredShed is an error registered by RegisterShedReason and its label.
type registeredShed struct {
	err   error
	label string
}

// shedRegistry holds the registered errors, copied on write: ShedReason
// reads it without a lock.
var (
	shedRegistry   atomic.Pointer[[]registeredShed]
	shedRegistryMu sync.Mutex
)

// RegisterShedReason makes ShedReason label a shed event whose Err matches
// err (errors.Is) with label, one of "route_full", "displaced",
// "queue_gave_up", "client_limit", "client_overflow" (the clients beyond a
// full table of busy ones, at their shared limit) and "deadline". It is for the adapters
// this package cannot import (contrib/watertightgrpc, which depends on the root
// module), at their initialisation. It panics on any other label: the set
// of label values is bounded.
func RegisterShedReason(err error, label string) {
	if !shedLabels[label] || err == nil {
		panic("eventcount: RegisterShedReason: not a shed reason label: " + label)
	}
	shedRegistryMu.Lock()
	defer shedRegistryMu.Unlock()
	var rs []registeredShed
	if old := shedRegistry.Load(); old != nil {
		rs = append(rs, *old...)
	}
	rs = append(rs, registeredShed{err, label})
	shedRegistry.Store(&rs)
}

// ShedReason maps a shed request to a bounded label value: from the
// reason's sentinel error when Err wraps one (watertighthttp's, deadline's,
// or one registered with RegisterShedReason), else from e.Reason when it is
// a label value itself, else "other".
func ShedReason(e watertight.Event) string {
	if rs := shedRegistry.Load(); rs != nil && e.Err != nil {
		for _, r := range *rs {
			if errors.Is(e.Err, r.err) {
				return r.label
			}
		}
	}
	switch {
	case errors.Is(e.Err, watertighthttp.ErrRouteFull):
		return "route_full"
	case errors.Is(e.Err, watertighthttp.ErrDisplaced):
		return "displaced"
	case errors.Is(e.Err, watertighthttp.ErrQueueGaveUp):
		return "queue_gave_up"
	case errors.Is(e.Err, watertighthttp.ErrClientLimit):
		return "client_limit"
	case errors.Is(e.Err, watertighthttp.ErrClientOverflow):
		return "client_overflow"
	case errors.Is(e.Err, deadline.ErrTooShort), errors.Is(e.Err, deadline.ErrExpired):
		return "deadline"
	}
	if shedLabels[e.Reason] {
		return e.Reason
	}
	return "other"
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
