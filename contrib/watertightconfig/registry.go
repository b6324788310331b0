package watertightconfig

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
)

// ErrNotFound is matched (errors.Is) by the error of a Registry lookup for
// a name the configuration does not have.
var ErrNotFound = errors.New("config: no such instance")

var errNilFile = errors.New("config: nil File")

// Options are what a Registry adds to the file's configurations when it
// builds instances: what a file cannot say, such as functions.
type Options struct {
	// Listener, if not nil, is set as the Listener of every breaker,
	// bulkhead, retry policy, budget and hedging policy the registry
	// builds (their events carry the instance name as Name).
	Listener watertight.Listener
	// Breaker, if not nil, is called with each breaker's configuration
	// before the breaker is built, to set its function fields (Classify,
	// OnStateChange, OnReject, Rand). It is called again each time a reload
	// reconfigures the breaker. It should not change the fields the file
	// sets: a reload compares the file's values, not what Breaker made of
	// them.
	Breaker func(name string, c *circuit.Config)
	// Bulkhead, if not nil, is called with each bulkhead's configuration
	// before it is built (see Breaker).
	Bulkhead func(name string, c *bulkhead.Config)
	// Retry, if not nil, is called with each retry policy's configuration
	// before it is built, Backoff, Budget and Concurrency already set (see Breaker): to
	// set Retryable or OnEvent.
	Retry func(name string, c *retry.Config)
	// Budget, if not nil, is called with each budget's configuration before
	// it is built (see Breaker).
	Budget func(name string, c *budget.Config)
	// ConcurrencyBudget, if not nil, is called with each concurrent-retry
	// budget's configuration before it is built (see Breaker).
	ConcurrencyBudget func(name string, c *budget.ConcurrencyConfig)
	// Timeout, if not nil, is called with each timeout's configuration
	// before it is built (see Breaker).
	Timeout func(name string, c *timeout.Config)
	// Hedge, if not nil, is called with each hedging policy's
	// configuration before it is built, Budget, Breaker and Bulkhead
	// already set (see Breaker).
	Hedge func(name string, c *hedge.Config)
	// Limiter, if not nil, is called with each limiter's configuration
	// before it is built, Algorithm already set (see Breaker).
	Limiter func(name string, c *limit.Config)
}

// Registry holds the instances a File describes, built and ready, by name:
// one *circuit.Breaker per breaker, one *bulkhead.Bulkhead per bulkhead, and
// so on. Reload swaps in a new File and keeps every instance whose
// configuration did not change — with its state: an open breaker stays
// open. Breakers and bulkheads whose configuration changed are
// reconfigured in place, the same objects with their state (the permits in
// flight count against the new limit, an open breaker stays open); the
// other kinds that changed are rebuilt (a budget carries its balance over);
// those that are gone are dropped. docs/configuration.md ("What a reload
// keeps") has the table.
//
// Look instances up when you need them rather than keeping them for the
// life of the program: a lookup is a map read behind one atomic load, and
// after a reload that rebuilt an instance (Changes.Rebuilt), only a lookup
// returns the new one. The same holds for what RetryConfig and
// TransportConfig return: rebuild what you made from them (an HTTP
// Transport, say) when Reload reports that those names were rebuilt.
//
// A Registry is safe for concurrent use: lookups never wait for a reload.
type Registry struct {
	opts Options
	mu   sync.Mutex // serialises reloads
	st   atomic.Pointer[state]
}

// state is one configuration's instances; it never changes once published.
type state struct {
	file      *File
	breakers  map[string]*breakerEntry
	bulkheads map[string]*bulkheadEntry
	retries   map[string]*retryEntry
	budgets   map[string]*budgetEntry
	conc      map[string]*concurrencyEntry
	timeouts  map[string]*timeoutEntry
	hedges    map[string]*hedgeEntry
	limiters  map[string]*limiterEntry
}

type breakerEntry struct {
	spec  Breaker
	b     *circuit.Breaker
	keyed *lazyKeyed[circuit.Config, *circuit.Registry]
}

type bulkheadEntry struct {
	spec  Bulkhead
	b     *bulkhead.Bulkhead
	keyed *lazyKeyed[bulkhead.Config, *bulkhead.Registry]
}

// lazyKeyed is the keyed registry of a breaker or bulkhead, built on first
// use from the instance's configuration and MaxKeys. A reload hands the
// new configuration to set: a keyed registry already built is
// reconfigured in place if it can be (every breaker or bulkhead it holds,
// and the ones it makes from then on), otherwise dropped, so that the next
// lookup builds one with the new configuration.
type lazyKeyed[C any, R comparable] struct {
	reg     atomic.Pointer[R] // nil until built
	mu      sync.Mutex        // serialises building and set
	cfg     C
	maxKeys int
	make    func(cfg C, maxKeys int) (R, error)
}

func newLazyKeyed[C any, R comparable](cfg C, maxKeys int, make func(C, int) (R, error)) *lazyKeyed[C, R] {
	return &lazyKeyed[C, R]{cfg: cfg, maxKeys: maxKeys, make: make}
}

// get returns the keyed registry, building it on first use.
func (l *lazyKeyed[C, R]) get() (R, error) {
	if p := l.reg.Load(); p != nil {
		return *p, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.reg.Load(); p != nil {
		return *p, nil
	}
	r, err := l.make(l.cfg, l.maxKeys)
	if err != nil {
		var zero R
		return zero, err
	}
	l.reg.Store(&r)
	return r, nil
}

// set makes cfg and maxKeys the keyed registry's configuration. A
// registry already built with the same MaxKeys is reconfigured in place
// when it has a Reconfigure method; otherwise it is dropped and the next
// get builds a fresh one. It reports whether it dropped one.
func (l *lazyKeyed[C, R]) set(cfg C, maxKeys int) (dropped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sameKeys := maxKeys == l.maxKeys
	l.cfg, l.maxKeys = cfg, maxKeys
	p := l.reg.Load()
	if p == nil {
		return false
	}
	if rc, ok := any(*p).(interface{ Reconfigure(C) error }); ok && sameKeys && rc.Reconfigure(cfg) == nil {
		return false
	}
	l.reg.Store(nil)
	return true
}

type retryEntry struct {
	spec Retry
	cfg  retry.Config // Backoff and Budget set, Options applied
	p    *retry.Policy
	bud  *budget.Budget // the budget cfg uses, to notice it was rebuilt
	conc *budget.Concurrency
}

type concurrencyEntry struct {
	spec ConcurrencyBudget
	c    *budget.Concurrency
}

type budgetEntry struct {
	spec Budget
	b    *budget.Budget
}

type hedgeEntry struct {
	spec Hedge
	p    *hedge.Policy
	// The objects the policy was built with, to notice they were rebuilt.
	bud *budget.Budget
	br  *circuit.Breaker
	bh  *bulkhead.Bulkhead
}

type limiterEntry struct {
	spec  Limiter
	l     *limit.Limiter
	keyed *lazyKeyed[limit.Config, *limit.Registry]
}

type timeoutEntry struct {
	spec Timeout
	t    *timeout.Timeout
}

// NewRegistry builds every instance of f. It fails only if a package
// refuses a configuration (possible for a File not made by Load or Parse,
// or changed by an Options hook).
func NewRegistry(f *File, opts Options) (*Registry, error) {
	if f == nil {
		return nil, errNilFile
	}
	r := &Registry{opts: opts}
	st, _, _, err := r.build(&state{}, f) // nothing to reconfigure: no old state
	if err != nil {
		return nil, err
	}
	r.st.Store(st)
	return r, nil
}

// File returns the configuration the registry holds now. Do not modify it:
// reloads compare against it.
func (r *Registry) File() *File { return r.st.Load().file }

// Changes says what a Reload did, naming instances as "breakers.payment".
type Changes struct {
	// Added are the instances that are new.
	Added []string
	// Changed are the instances whose configuration changed. Breakers and
	// bulkheads are reconfigured in place, keeping their objects and state;
	// the others are rebuilt (and listed in Rebuilt too).
	Changed []string
	// Rebuilt are the changed instances that are new objects: budgets
	// (their balance carried over), retry and hedging policies, timeouts,
	// and the keyed registries that had to be made afresh (named as
	// "breakers.payment.keyed"; see Registry.CircuitRegistry). Whatever was
	// built from the old objects (an HTTP Transport) should be built again.
	Rebuilt []string
	// Removed are the instances that are gone.
	Removed []string
	// Kept are the instances that did not change: the same objects, with
	// their state.
	Kept []string
}

// String sums the changes up in one line.
func (c Changes) String() string {
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", c.Added}, {"changed", c.Changed}, {"removed", c.Removed}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	parts = append(parts, fmt.Sprintf("%d unchanged", len(c.Kept)))
	return strings.Join(parts, "; ")
}

// Reload replaces the configuration with f. Instances whose resolved
// configuration is the same as before keep their objects and state.
// Breakers and bulkheads that changed are reconfigured in place
// (circuit.Breaker.Reconfigure, bulkhead.Bulkhead.Reconfigure): callers
// holding them see the new settings, a bulkhead's permits in flight count
// against its new limit, an open breaker stays open. Their keyed registries
// are reconfigured too (every breaker or bulkhead they hold, and the ones
// they make from then on) when the keyed registry can be and MaxKeys did
// not change; otherwise they are made afresh on next use. The other kinds
// that changed are rebuilt: a budget starts with the old one's balance
// (capped at its new MaxTokens), a retry policy is rebuilt too when the
// budget it names is, and a hedging policy when its budget is. Instances f
// does not name are dropped (callers that still hold them may go on using
// them, unseen by the registry). If an instance cannot be built or
// reconfigured, nothing changes and the error is returned.
func (r *Registry) Reload(f *File) (Changes, error) {
	if f == nil {
		return Changes{}, errNilFile
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ch, apply, err := r.build(r.st.Load(), f)
	if err != nil {
		return Changes{}, err
	}
	// Everything is valid: reconfigure in place, then publish.
	for _, fn := range apply {
		ch.Rebuilt = append(ch.Rebuilt, fn()...)
	}
	slices.Sort(ch.Rebuilt)
	r.st.Store(st)
	return ch, nil
}

// ReloadFrom loads the file at path and reloads from it (see Reload). An
// invalid file is rejected whole: the registry keeps its configuration and
// the error lists every problem (an Errors value).
func (r *Registry) ReloadFrom(path string) (Changes, error) {
	f, err := Load(path)
	if err != nil {
		return Changes{}, err
	}
	return r.Reload(f)
}

// build makes the state for f, reusing old's unchanged entries and
// preparing the in-place reconfiguration of the changed breakers and
// bulkheads: apply runs them (each returns what it had to rebuild) once
// the whole of f is known to be valid.
func (r *Registry) build(old *state, f *File) (_ *state, _ Changes, apply []func() []string, _ error) {
	var ch Changes
	st := &state{file: f}
	var err error
	st.breakers, err = reuse(old.breakers, f.Breakers, "breakers", &ch,
		func(o *breakerEntry, s Breaker) bool {
			return o.spec.MaxKeys == s.MaxKeys && reflect.DeepEqual(o.spec.Config, s.Config)
		},
		func(name string, o *breakerEntry, s Breaker) (*breakerEntry, error) {
			c := r.breakerConfig(name, s)
			if _, err := circuit.New(c); err != nil { // validate before changing anything
				return nil, fmt.Errorf("config: breakers.%s: %w", name, err)
			}
			apply = append(apply, func() []string {
				_ = o.b.Reconfigure(c) // validated above
				return keyedRebuilt("breakers."+name, o.keyed.set(c, s.MaxKeys))
			})
			return &breakerEntry{spec: s, b: o.b, keyed: o.keyed}, nil
		},
		r.newBreaker)
	if err != nil {
		return nil, ch, nil, err
	}
	st.bulkheads, err = reuse(old.bulkheads, f.Bulkheads, "bulkheads", &ch,
		func(o *bulkheadEntry, s Bulkhead) bool {
			return o.spec.MaxKeys == s.MaxKeys && reflect.DeepEqual(o.spec.Config, s.Config)
		},
		func(name string, o *bulkheadEntry, s Bulkhead) (*bulkheadEntry, error) {
			c := r.bulkheadConfig(name, s)
			if _, err := bulkhead.New(c); err != nil {
				return nil, fmt.Errorf("config: bulkheads.%s: %w", name, err)
			}
			if s.Config.QueueOrder != o.spec.Config.QueueOrder {
				// Reconfigure keeps the waiters' queue, and its order with it.
				return nil, fmt.Errorf("config: bulkheads.%s.queue_order: cannot change from %v to %v on a reload (the bulkhead is reconfigured in place, keeping its waiters); restart the process to change it", name, o.spec.Config.QueueOrder, s.Config.QueueOrder)
			}
			apply = append(apply, func() []string {
				_ = o.b.Reconfigure(c) // validated above
				return keyedRebuilt("bulkheads."+name, o.keyed.set(c, s.MaxKeys))
			})
			return &bulkheadEntry{spec: s, b: o.b, keyed: o.keyed}, nil
		},
		r.newBulkhead)
	if err != nil {
		return nil, ch, nil, err
	}
	st.budgets, err = reuse(old.budgets, f.Budgets, "budgets", &ch,
		func(o *budgetEntry, s Budget) bool { return reflect.DeepEqual(o.spec.Config, s.Config) },
		nil,
		func(name string, s Budget) (*budgetEntry, error) {
			var from *budget.Budget
			if o := old.budgets[name]; o != nil {
				from = o.b
			}
			return r.newBudget(name, s, from)
		})
	if err != nil {
		return nil, ch, nil, err
	}
	budgetOf := func(name string) *budget.Budget {
		if e := st.budgets[name]; e != nil {
			return e.b
		}
		return nil
	}
	// A concurrent-retry budget holds only counts of calls in progress,
	// which the policies built on it give back: a changed one is rebuilt,
	// and so are the policies that name it; calls in flight finish on the
	// old pair.
	st.conc, err = reuse(old.conc, f.ConcurrencyBudgets, "concurrency_budgets", &ch,
		func(o *concurrencyEntry, s ConcurrencyBudget) bool { return reflect.DeepEqual(o.spec.Config, s.Config) },
		nil, r.newConcurrency)
	if err != nil {
		return nil, ch, nil, err
	}
	concOf := func(name string) *budget.Concurrency {
		if e := st.conc[name]; e != nil {
			return e.c
		}
		return nil
	}
	st.retries, err = reuse(old.retries, f.Retries, "retries", &ch,
		func(o *retryEntry, s Retry) bool {
			return o.spec.Budget == s.Budget && o.bud == budgetOf(s.Budget) &&
				o.spec.Concurrency == s.Concurrency && o.conc == concOf(s.Concurrency) &&
				reflect.DeepEqual(o.spec.Config, s.Config) && reflect.DeepEqual(o.spec.Backoff, s.Backoff)
		},
		nil,
		func(name string, s Retry) (*retryEntry, error) {
			if s.Budget != "" && budgetOf(s.Budget) == nil {
				return nil, fmt.Errorf("config: retries.%s.budget: no budget named %q", name, s.Budget)
			}
			if s.Concurrency != "" && concOf(s.Concurrency) == nil {
				return nil, fmt.Errorf("config: retries.%s.concurrency: no concurrency budget named %q", name, s.Concurrency)
			}
			return r.newRetry(name, s, budgetOf(s.Budget), concOf(s.Concurrency))
		})
	if err != nil {
		return nil, ch, nil, err
	}
	st.timeouts, err = reuse(old.timeouts, f.Timeouts, "timeouts", &ch,
		func(o *timeoutEntry, s Timeout) bool { return reflect.DeepEqual(o.spec.Config, s.Config) },
		nil, r.newTimeout)
	if err != nil {
		return nil, ch, nil, err
	}
	breakerOf := func(name string) *circuit.Breaker {
		if e := st.breakers[name]; e != nil {
			return e.b
		}
		return nil
	}
	bulkheadOf := func(name string) *bulkhead.Bulkhead {
		if e := st.bulkheads[name]; e != nil {
			return e.b
		}
		return nil
	}
	st.hedges, err = reuse(old.hedges, f.Hedges, "hedges", &ch,
		func(o *hedgeEntry, s Hedge) bool {
			return o.spec.Budget == s.Budget && o.spec.Breaker == s.Breaker && o.spec.Bulkhead == s.Bulkhead &&
				o.bud == budgetOf(s.Budget) && o.br == breakerOf(s.Breaker) && o.bh == bulkheadOf(s.Bulkhead) &&
				reflect.DeepEqual(o.spec.Config, s.Config)
		},
		nil,
		func(name string, s Hedge) (*hedgeEntry, error) {
			e := &hedgeEntry{spec: s, bud: budgetOf(s.Budget), br: breakerOf(s.Breaker), bh: bulkheadOf(s.Bulkhead)}
			if (s.Budget != "" && e.bud == nil) || (s.Breaker != "" && e.br == nil) || (s.Bulkhead != "" && e.bh == nil) {
				return nil, fmt.Errorf("config: hedges.%s: names a budget, breaker or bulkhead the file does not have", name)
			}
			c := s.Config
			c.Name, c.Budget, c.Breaker, c.Bulkhead = name, e.bud, e.br, e.bh
			if r.opts.Listener != nil {
				c.Listener = r.opts.Listener
			}
			if r.opts.Hedge != nil {
				r.opts.Hedge(name, &c)
			}
			p, err := hedge.New(c)
			if err != nil {
				return nil, fmt.Errorf("config: hedges.%s: %w", name, err)
			}
			e.p = p
			return e, nil
		})
	if err != nil {
		return nil, ch, nil, err
	}
	st.limiters, err = reuse(old.limiters, f.Limiters, "limiters", &ch,
		func(o *limiterEntry, s Limiter) bool {
			return o.spec.Algorithm == s.Algorithm && o.spec.MaxKeys == s.MaxKeys && reflect.DeepEqual(o.spec.Config, s.Config)
		},
		func(name string, o *limiterEntry, s Limiter) (*limiterEntry, error) {
			if s.Config.QueueOrder != o.spec.Config.QueueOrder {
				return nil, fmt.Errorf("config: limiters.%s.queue_order: cannot change from %v to %v on a reload (the limiter is reconfigured in place, keeping its waiters); restart the process to change it", name, o.spec.Config.QueueOrder, s.Config.QueueOrder)
			}
			c := r.limiterConfig(name, s)
			if _, err := limit.New(c); err != nil {
				return nil, fmt.Errorf("config: limiters.%s: %w", name, err)
			}
			live := c
			if s.Algorithm == o.spec.Algorithm {
				live.Algorithm = nil // keep the algorithm and what it has learnt
			}
			apply = append(apply, func() []string {
				_ = o.l.Reconfigure(live) // validated above
				// The keyed registry keeps its limiters: Reconfigure.
				return keyedRebuilt("limiters."+name, setLimiters(o.keyed, live, c, s.MaxKeys))
			})
			return &limiterEntry{spec: s, l: o.l, keyed: o.keyed}, nil
		},
		r.newLimiter)
	if err != nil {
		return nil, ch, nil, err
	}
	return st, ch, apply, nil
}

func (r *Registry) newLimiter(name string, s Limiter) (*limiterEntry, error) {
	c := r.limiterConfig(name, s)
	l, err := limit.New(c)
	if err != nil {
		return nil, fmt.Errorf("config: limiters.%s: %w", name, err)
	}
	return &limiterEntry{spec: s, l: l, keyed: newLazyKeyed(c, s.MaxKeys, func(c limit.Config, maxKeys int) (*limit.Registry, error) {
		return limit.NewRegistry(limit.RegistryConfig{Config: c, MaxKeys: maxKeys})
	})}, nil
}

// setLimiters is lazyKeyed.set for a keyed limiter registry: a built
// registry is reconfigured with live (whose nil Algorithm keeps what its
// limiters have learnt), and full (the algorithm's constructor included) is
// what a registry built later starts from.
func setLimiters(l *lazyKeyed[limit.Config, *limit.Registry], live, full limit.Config, maxKeys int) (dropped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sameKeys := maxKeys == l.maxKeys
	l.cfg, l.maxKeys = full, maxKeys
	p := l.reg.Load()
	if p == nil {
		return false
	}
	if sameKeys && (*p).Reconfigure(live) == nil {
		return false
	}
	l.reg.Store(nil)
	return true
}

func (r *Registry) limiterConfig(name string, s Limiter) limit.Config {
	c := s.Config
	c.Name = name
	c.Algorithm = algorithms[s.Algorithm]
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.Limiter != nil {
		r.opts.Limiter(name, &c)
	}
	return c
}

// LimiterRegistry returns a keyed limit.Registry whose limiters (one per
// key: a host, an endpoint) all take the configuration of the limiter
// named name, and its max_keys; built on first use, and kept across
// reloads that change the limiter (each keyed limiter is reconfigured in
// place, keeping what it has learnt unless the algorithm changed) or
// rebuilt when max_keys changed (Changes.Rebuilt names
// "limiters.<name>.keyed").
func (r *Registry) LimiterRegistry(name string) (*limit.Registry, error) {
	m := r.st.Load().limiters
	if e, ok := m[name]; ok {
		return e.keyed.get()
	}
	return nil, notFound("limiter", name, m)
}

// Limiter returns the adaptive concurrency limiter named name (section
// limiters:). A reload reconfigures it in place (Limiter.Reconfigure),
// keeping its permits in flight, its waiters and, unless the algorithm
// changed, what its algorithm has learnt.
func (r *Registry) Limiter(name string) (*limit.Limiter, error) {
	m := r.st.Load().limiters
	if e, ok := m[name]; ok {
		return e.l, nil
	}
	return nil, notFound("limiter", name, m)
}

// keyedRebuilt names the keyed registry of instance id when a reload
// dropped it.
func keyedRebuilt(id string, dropped bool) []string {
	if !dropped {
		return nil
	}
	return []string{id + ".keyed"}
}

// reuse builds the entries of one section, keeping old's unchanged ones.
// A changed entry is passed to update, if not nil, to be reconfigured in
// place; otherwise it is built anew (and counted as rebuilt).
func reuse[S any, E any](old map[string]*E, specs map[string]S, section string, ch *Changes,
	same func(*E, S) bool, update func(string, *E, S) (*E, error), build func(string, S) (*E, error)) (map[string]*E, error) {
	out := make(map[string]*E, len(specs))
	for _, name := range sortedKeys(specs) {
		s := specs[name]
		id := section + "." + name
		o, ok := old[name]
		if ok && same(o, s) {
			out[name] = o
			ch.Kept = append(ch.Kept, id)
			continue
		}
		if ok && update != nil {
			e, err := update(name, o, s)
			if err != nil {
				return nil, err
			}
			out[name] = e
			ch.Changed = append(ch.Changed, id)
			continue
		}
		e, err := build(name, s)
		if err != nil {
			return nil, err
		}
		out[name] = e
		if ok {
			ch.Changed = append(ch.Changed, id)
			ch.Rebuilt = append(ch.Rebuilt, id)
		} else {
			ch.Added = append(ch.Added, id)
		}
	}
	for _, name := range sortedKeys(old) {
		if _, ok := specs[name]; !ok {
			ch.Removed = append(ch.Removed, section+"."+name)
		}
	}
	return out, nil
}

func (r *Registry) breakerConfig(name string, s Breaker) circuit.Config {
	c := s.Config
	c.Name = name
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.Breaker != nil {
		r.opts.Breaker(name, &c)
	}
	return c
}

func (r *Registry) newBreaker(name string, s Breaker) (*breakerEntry, error) {
	c := r.breakerConfig(name, s)
	b, err := circuit.New(c)
	if err != nil {
		return nil, fmt.Errorf("config: breakers.%s: %w", name, err)
	}
	return &breakerEntry{spec: s, b: b, keyed: newLazyKeyed(c, s.MaxKeys, func(c circuit.Config, maxKeys int) (*circuit.Registry, error) {
		return circuit.NewRegistry(circuit.RegistryConfig{Config: c, MaxKeys: maxKeys})
	})}, nil
}

func (r *Registry) bulkheadConfig(name string, s Bulkhead) bulkhead.Config {
	c := s.Config
	c.Name = name
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.Bulkhead != nil {
		r.opts.Bulkhead(name, &c)
	}
	return c
}

func (r *Registry) newBulkhead(name string, s Bulkhead) (*bulkheadEntry, error) {
	c := r.bulkheadConfig(name, s)
	b, err := bulkhead.New(c)
	if err != nil {
		return nil, fmt.Errorf("config: bulkheads.%s: %w", name, err)
	}
	return &bulkheadEntry{spec: s, b: b, keyed: newLazyKeyed(c, s.MaxKeys, func(c bulkhead.Config, maxKeys int) (*bulkhead.Registry, error) {
		return bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: c, MaxKeys: maxKeys})
	})}, nil
}

// newBudget builds a budget; from, if not nil, is the budget it replaces,
// whose balance it starts with.
func (r *Registry) newBudget(name string, s Budget, from *budget.Budget) (*budgetEntry, error) {
	c := s.Config
	c.Name = name
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.Budget != nil {
		r.opts.Budget(name, &c)
	}
	b, err := budget.NewFrom(c, from)
	if err != nil {
		return nil, fmt.Errorf("config: budgets.%s: %w", name, err)
	}
	return &budgetEntry{spec: s, b: b}, nil
}

func (r *Registry) newConcurrency(name string, s ConcurrencyBudget) (*concurrencyEntry, error) {
	c := s.Config
	c.Name = name
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.ConcurrencyBudget != nil {
		r.opts.ConcurrencyBudget(name, &c)
	}
	b, err := budget.NewConcurrency(c)
	if err != nil {
		return nil, fmt.Errorf("config: concurrency_budgets.%s: %w", name, err)
	}
	return &concurrencyEntry{spec: s, c: b}, nil
}

func (r *Registry) newRetry(name string, s Retry, bud *budget.Budget, conc *budget.Concurrency) (*retryEntry, error) {
	bo, err := backoff.New(s.Backoff)
	if err != nil {
		return nil, fmt.Errorf("config: retries.%s.backoff: %w", name, err)
	}
	c := s.Config
	c.Name = name
	c.Backoff = bo
	c.Budget = bud
	c.Concurrency = conc
	if r.opts.Listener != nil {
		c.Listener = r.opts.Listener
	}
	if r.opts.Retry != nil {
		r.opts.Retry(name, &c)
	}
	p, err := retry.New(c)
	if err != nil {
		return nil, fmt.Errorf("config: retries.%s: %w", name, err)
	}
	return &retryEntry{spec: s, cfg: c, p: p, bud: bud, conc: conc}, nil
}

func (r *Registry) newTimeout(name string, s Timeout) (*timeoutEntry, error) {
	c := s.Config
	c.Name = name
	if r.opts.Timeout != nil {
		r.opts.Timeout(name, &c)
	}
	t, err := timeout.New(c)
	if err != nil {
		return nil, fmt.Errorf("config: timeouts.%s: %w", name, err)
	}
	return &timeoutEntry{spec: s, t: t}, nil
}

// notFound is the error of a lookup of a missing name.
func notFound[E any](what, name string, m map[string]*E) error {
	have := strings.Join(sortedKeys(m), ", ")
	if have == "" {
		have = "none"
	}
	return fmt.Errorf("%w: no %s named %q (have: %s)", ErrNotFound, what, name, have)
}

// Breaker returns the breaker named name (section breakers:).
func (r *Registry) Breaker(name string) (*circuit.Breaker, error) {
	m := r.st.Load().breakers
	if e, ok := m[name]; ok {
		return e.b, nil
	}
	return nil, notFound("breaker", name, m)
}

// Bulkhead returns the bulkhead named name (section bulkheads:).
func (r *Registry) Bulkhead(name string) (*bulkhead.Bulkhead, error) {
	m := r.st.Load().bulkheads
	if e, ok := m[name]; ok {
		return e.b, nil
	}
	return nil, notFound("bulkhead", name, m)
}

// Retry returns the retry policy named name (section retries:), drawing
// on the budget the file names for it.
func (r *Registry) Retry(name string) (*retry.Policy, error) {
	m := r.st.Load().retries
	if e, ok := m[name]; ok {
		return e.p, nil
	}
	return nil, notFound("retry policy", name, m)
}

// RetryConfig returns the configuration of the retry policy named name,
// with its Backoff and its shared Budget set and the Options applied: what
// watertighthttp.TransportConfig.Retry takes.
func (r *Registry) RetryConfig(name string) (retry.Config, error) {
	m := r.st.Load().retries
	if e, ok := m[name]; ok {
		return e.cfg, nil
	}
	return retry.Config{}, notFound("retry policy", name, m)
}

// Budget returns the budget named name (section budgets:): the one every
// retry policy naming it draws on.
func (r *Registry) Budget(name string) (*budget.Budget, error) {
	m := r.st.Load().budgets
	if e, ok := m[name]; ok {
		return e.b, nil
	}
	return nil, notFound("budget", name, m)
}

// ConcurrencyBudget returns the concurrent-retry budget named name (section
// concurrency_budgets:): the one every retry policy naming it shares.
func (r *Registry) ConcurrencyBudget(name string) (*budget.Concurrency, error) {
	m := r.st.Load().conc
	if e, ok := m[name]; ok {
		return e.c, nil
	}
	return nil, notFound("concurrency budget", name, m)
}

// Timeout returns the timeout named name (section timeouts:).
func (r *Registry) Timeout(name string) (*timeout.Timeout, error) {
	m := r.st.Load().timeouts
	if e, ok := m[name]; ok {
		return e.t, nil
	}
	return nil, notFound("timeout", name, m)
}

// Hedge returns the hedging policy named name (section hedges:), with the
// budget, breaker and bulkhead the file names for it: what
// watertighthttp.HedgeConfig.Policy and hedge.Do take.
func (r *Registry) Hedge(name string) (*hedge.Policy, error) {
	m := r.st.Load().hedges
	if e, ok := m[name]; ok {
		return e.p, nil
	}
	return nil, notFound("hedging policy", name, m)
}

// CircuitRegistry returns a keyed circuit.Registry whose breakers (one per
// key: a host, a route) all take the configuration of the breaker named
// name, and its max_keys. The same *circuit.Registry is returned, with its
// breakers' state, across reloads: one that changes the breaker's
// configuration reconfigures every breaker the keyed registry holds, and
// the ones it makes after, in place, if the circuit.Registry has a
// Reconfigure method. Otherwise, and when max_keys changes, the reload
// drops it (Changes.Rebuilt names "breakers.<name>.keyed") and the next call
// returns a fresh one.
func (r *Registry) CircuitRegistry(name string) (*circuit.Registry, error) {
	m := r.st.Load().breakers
	if e, ok := m[name]; ok {
		return e.keyed.get()
	}
	return nil, notFound("breaker", name, m)
}

// BulkheadRegistry returns a keyed bulkhead.Registry whose bulkheads (one
// per key) all take the configuration of the bulkhead named name, and its
// max_keys. It is kept across reloads as CircuitRegistry's is (Changes.Rebuilt
// names "bulkheads.<name>.keyed" when it could not be).
func (r *Registry) BulkheadRegistry(name string) (*bulkhead.Registry, error) {
	m := r.st.Load().bulkheads
	if e, ok := m[name]; ok {
		return e.keyed.get()
	}
	return nil, notFound("bulkhead", name, m)
}
