package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// ErrInjected is the error an injected fault returns when its Rule.Err is
// nil. It is not a rejection: the protections around the call count it as a
// failure of the dependency, as they would a real one.
var ErrInjected = errors.New("chaos: injected fault")

// AnyKey is the key of a rule that applies to every key without a rule of
// its own. Use it knowingly: it widens the blast radius to every call the
// injector sees.
const AnyKey = "*"

// Rule says what to inject into the calls of one key. The zero Rule injects
// nothing. The decisions are drawn independently for each call: first
// whether to add latency, then whether to fail, replace the result, or let
// the call through.
type Rule struct {
	// ErrorRate is the share of calls, from 0 to 1, that fail with Err
	// without running.
	ErrorRate float64
	// Err is the injected error. If nil, ErrInjected. Mark it (with
	// retry.MarkTransient, say) to make it look like a failure your retries
	// handle.
	Err error
	// Status is the HTTP status a Handler answers an injected error with.
	// Zero means 503 Service Unavailable. It does not apply elsewhere.
	Status int
	// LatencyRate is the share of calls, from 0 to 1, delayed by Latency
	// before they go on (to run, or to fail, or to be replaced). The wait
	// ends early when the call's context is done.
	LatencyRate float64
	// Latency is the injected delay; it must be positive when LatencyRate
	// is.
	Latency time.Duration
	// ResultRate is the share of calls, from 0 to 1, answered with Result
	// without running. ErrorRate + ResultRate must not exceed 1.
	ResultRate float64
	// Result is the replacement answer: a value of the function's result
	// type for Do, a Response (or *Response) for Transport and Handler. A
	// Policy cannot replace results and leaves such calls alone.
	Result any
}

// validate checks r; where names it in the error.
func (r Rule) validate(where string) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"ErrorRate", r.ErrorRate}, {"LatencyRate", r.LatencyRate}, {"ResultRate", r.ResultRate}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return fmt.Errorf("chaos: %s.%s must be between 0 and 1, got %v", where, f.name, f.v)
		}
	}
	if r.ErrorRate+r.ResultRate > 1 {
		return fmt.Errorf("chaos: %s.ErrorRate + ResultRate must not exceed 1, got %v + %v", where, r.ErrorRate, r.ResultRate)
	}
	if r.Latency < 0 || (r.LatencyRate > 0 && r.Latency == 0) {
		return fmt.Errorf("chaos: %s.Latency must be > 0 when LatencyRate is > 0 (and never negative), got %v", where, r.Latency)
	}
	if r.ResultRate > 0 && r.Result == nil {
		return fmt.Errorf("chaos: %s.Result must not be nil when ResultRate is > 0", where)
	}
	if r.Status != 0 && (r.Status < 100 || r.Status > 599) {
		return fmt.Errorf("chaos: %s.Status must be 0 (503) or a status code from 100 to 599, got %d", where, r.Status)
	}
	return nil
}

// Config configures an Injector. The zero value is valid and injects
// nothing: no rules, and disabled.
type Config struct {
	// Name labels the injector in events. It may be empty.
	Name string
	// Enabled turns injection on from the start. If false (the default),
	// the injector injects nothing until Enable is called.
	Enabled bool
	// Rules maps keys (a dependency, a route, a method: whatever the key
	// function of the integration returns) to what to inject into their
	// calls. Calls whose key has no rule, and no AnyKey rule exists, are
	// left alone. The map is copied. If nil, no rules: add them with
	// SetRule.
	Rules map[string]Rule
	// Rand returns uniformly distributed numbers in [0, 1) and must be safe
	// for concurrent use. If nil, math/rand/v2's Float64. Tests pass
	// SeededRand(seed) for decisions that repeat.
	Rand func() float64
	// Listener receives an EventFaultInjected for every fault injected. If
	// nil, no events.
	Listener watertight.Listener
}

// DefaultConfig returns the zero Config, spelled out: disabled, no rules,
// math/rand/v2's Float64, no listener.
func DefaultConfig() Config { return Config{} }

// Injector injects faults — errors, latency, replacement results — into the
// calls that pass through its integrations (Policy, Do, Transport, Handler),
// at the rates its rules set per key. It is off unless enabled, and rules
// and the switch change at run time. Build it with New; it is safe for
// concurrent use. A nil *Injector injects nothing.
//
// When disabled, an integration costs one atomic load per call. When
// enabled, a call whose key has a rule costs a map lookup, one or two
// random draws and a few atomic adds.
type Injector struct {
	name     string
	on       atomic.Bool
	rules    atomic.Pointer[ruleSet]
	mu       sync.Mutex // serialises writers of rules
	rand     func() float64
	listener watertight.Listener

	calls, errors, latencies, results atomic.Uint64
}

type ruleSet struct {
	m map[string]Rule
}

// New returns an Injector for cfg, or an error naming the first invalid rule
// and field.
func New(cfg Config) (*Injector, error) {
	m := make(map[string]Rule, len(cfg.Rules))
	for k, r := range cfg.Rules {
		if err := r.validate(fmt.Sprintf("Config.Rules[%q]", k)); err != nil {
			return nil, err
		}
		m[k] = r
	}
	i := &Injector{name: cfg.Name, rand: cfg.Rand, listener: cfg.Listener}
	if i.rand == nil {
		i.rand = rand.Float64
	}
	i.rules.Store(&ruleSet{m: m})
	i.on.Store(cfg.Enabled)
	return i, nil
}

// SeededRand returns a source for Config.Rand that draws from a PCG
// generator seeded with seed, behind a mutex: the same seed and the same
// sequence of calls give the same faults.
func SeededRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// Enable turns injection on.
func (i *Injector) Enable() { i.on.Store(true) }

// Disable turns injection off: from the next call on, nothing is injected.
// Latency already being injected runs its course.
func (i *Injector) Disable() { i.on.Store(false) }

// Enabled reports whether injection is on. A nil Injector is never enabled.
func (i *Injector) Enabled() bool { return i != nil && i.on.Load() }

// SetRule sets the rule for key (AnyKey for every key without a rule of
// its own), replacing any previous one, or returns an error naming the
// invalid field. Calls that start after it returns see the new rule.
func (i *Injector) SetRule(key string, r Rule) error {
	if err := r.validate(fmt.Sprintf("Rule (key %q)", key)); err != nil {
		return err
	}
	i.update(func(m map[string]Rule) { m[key] = r })
	return nil
}

// DeleteRule removes key's rule, if any.
func (i *Injector) DeleteRule(key string) {
	i.update(func(m map[string]Rule) { delete(m, key) })
}

// Rule returns key's own rule, if it has one.
func (i *Injector) Rule(key string) (Rule, bool) {
	if i == nil {
		return Rule{}, false
	}
	r, ok := i.rules.Load().m[key]
	return r, ok
}

// Rules returns a copy of every rule, by key.
func (i *Injector) Rules() map[string]Rule {
	if i == nil {
		return map[string]Rule{}
	}
	src := i.rules.Load().m
	m := make(map[string]Rule, len(src))
	for k, r := range src {
		m[k] = r
	}
	return m
}

// update replaces the rule set with a modified copy.
func (i *Injector) update(f func(map[string]Rule)) {
	i.mu.Lock()
	defer i.mu.Unlock()
	m := i.Rules()
	f(m)
	i.rules.Store(&ruleSet{m: m})
}

// Stats counts what an Injector did since it was built.
type Stats struct {
	// Calls is the number of calls that found a rule while the injector was
	// enabled.
	Calls uint64
	// Errors, Latencies and Results count the faults injected of each kind.
	// One call may have both latency and an error or a result.
	Errors, Latencies, Results uint64
}

// Snapshot returns the counters. A nil Injector returns zeros.
func (i *Injector) Snapshot() Stats {
	if i == nil {
		return Stats{}
	}
	return Stats{
		Calls:     i.calls.Load(),
		Errors:    i.errors.Load(),
		Latencies: i.latencies.Load(),
		Results:   i.results.Load(),
	}
}

// Fault is what the Injector decided for one call. The zero Fault leaves the
// call alone.
type Fault struct {
	// Latency is how long to wait before going on; zero for none.
	Latency time.Duration
	// Err, if not nil, is the error to fail the call with, after Latency.
	Err error
	// Status is the HTTP status for Err (Rule.Status, or 503).
	Status int
	// Replace says to answer Result instead of running the call, after
	// Latency.
	Replace bool
	// Result is the replacement answer when Replace is set.
	Result any
}

// none reports whether f leaves the call alone. (Fault is not compared with
// ==: a Result of a type that is not comparable would make that panic.)
func (f Fault) none() bool { return f.Latency == 0 && f.Err == nil && !f.Replace }

// Decide draws the faults for one call with key, counts them and emits
// their events, and returns them for the caller to apply: it is how
// integrations other than this package's (a gRPC interceptor, a queue
// consumer) use an Injector. It returns the zero Fault when the injector is
// nil or disabled or when key has no rule.
func (i *Injector) Decide(key string) Fault {
	return i.decide(key, true)
}

// decide is Decide; results says whether the integration can replace
// results. When it cannot, a call drawn for a result is left alone and
// counts nothing.
func (i *Injector) decide(key string, results bool) (f Fault) {
	if i == nil || !i.on.Load() {
		return f
	}
	rules := i.rules.Load().m
	r, ok := rules[key]
	if !ok {
		if r, ok = rules[AnyKey]; !ok {
			return f
		}
	}
	i.calls.Add(1)
	if r.LatencyRate > 0 && i.rand() < r.LatencyRate {
		f.Latency = r.Latency
		i.latencies.Add(1)
		i.emit(key, CodeLatency, r.Latency, nil)
	}
	if r.ErrorRate == 0 && r.ResultRate == 0 {
		return f
	}
	switch u := i.rand(); {
	case u < r.ErrorRate:
		f.Err = r.Err
		if f.Err == nil {
			f.Err = ErrInjected
		}
		f.Status = r.Status
		if f.Status == 0 {
			f.Status = DefaultStatus
		}
		i.errors.Add(1)
		i.emit(key, CodeError, 0, f.Err)
	case u < r.ErrorRate+r.ResultRate && results:
		f.Replace, f.Result = true, r.Result
		i.results.Add(1)
		i.emit(key, CodeResult, 0, nil)
	}
	return f
}

// emit sends an EventFaultInjected whose Reason and Code are code.
func (i *Injector) emit(key, code string, d time.Duration, err error) {
	watertight.Emit(i.listener, watertight.Event{
		Kind:   watertight.EventFaultInjected,
		Source: "chaos",
		Name:   i.name,
		Key:    key,
		Reason: code,
		Delay:  d,
		Err:    err,
		Code:   code,
	})
}

// wait waits for d under ctx and returns ctx's error if it ended first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Do calls fn with key's faults applied: it waits the injected latency (and
// returns the context's error if the context ends first), fails with the
// injected error or answers the replacement result without calling fn, or
// else calls fn. A replacement result that is not a T makes Do fail with an
// error that says so. A nil or disabled inj calls fn directly, at the cost
// of one atomic load.
func Do[T any](ctx context.Context, inj *Injector, key string, fn func(context.Context) (T, error)) (T, error) {
	if !inj.Enabled() {
		return fn(ctx)
	}
	f := inj.decide(key, true)
	var zero T
	if err := wait(ctx, f.Latency); err != nil {
		return zero, err
	}
	if f.Err != nil {
		return zero, f.Err
	}
	if f.Replace {
		v, ok := f.Result.(T)
		if !ok {
			return zero, fmt.Errorf("chaos: the Rule.Result for key %q is a %T, not the %T the call returns", key, f.Result, zero)
		}
		return v, nil
	}
	return fn(ctx)
}

// Policy returns a watertight.Policy that injects key's errors and latency
// into a Pipeline: its Enter waits the injected latency (failing with the
// context's error if the context ends first) and fails with the injected
// error, so that the call does not run. Place it innermost, next to the
// call, so that every protection outside it sees the faults as the
// dependency's; the calls of a pipeline share one key, so build a pipeline
// per dependency. A Policy cannot replace results (use Do): calls drawn for
// a result are left alone and not counted. A Policy of a nil Injector
// injects nothing.
func (i *Injector) Policy(key string) *Policy { return &Policy{inj: i, key: key} }

// Policy is an Injector's watertight.Policy for one key; see
// Injector.Policy.
type Policy struct {
	inj *Injector
	key string
}

// Enter implements watertight.Policy.
func (p *Policy) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	if !p.inj.Enabled() {
		return ctx, watertight.Ticket{}, nil
	}
	f := p.inj.decide(p.key, false)
	if err := wait(ctx, f.Latency); err != nil {
		return ctx, watertight.Ticket{}, err
	}
	return ctx, watertight.Ticket{}, f.Err
}

// Exit implements watertight.Policy: it returns err unchanged.
func (p *Policy) Exit(ctx context.Context, t watertight.Ticket, err error) error { return err }
