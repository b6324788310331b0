package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
)

// The storm scenario: retry amplification. A user action goes gateway →
// orders → payments → payments provider, and the provider is 100% down.
// Three configurations of the same three layers are run side by side, in
// real time at a fixed arrival rate, through the shipped retry, budget and
// circuit packages:
//
//   - naive: every layer retries (3 attempts) whatever it gets, and every
//     service answers its caller a plain 503 when it fails, so the layer
//     above retries again: 3·3·3 = 27 provider calls per user action;
//   - budget: the same policies, but only the payments client's retries are
//     allowed by a retry budget (10% of requests), and the services pass the
//     lower layer's error up, so the "overloaded, don't retry" signal of an
//     exhausted or refused retry stops the layers above;
//   - budget+breaker: the same with a circuit breaker inside the payments
//     client's retry (retry → breaker → call).
//
// Then the provider recovers and the scenario measures how long each
// configuration takes to get the user actions' success rate back to 99%.

func init() {
	Register(Scenario{
		Name:        "storm",
		Description: "retry amplification through gateway → orders → payments over a provider that is down: naive retries (27×), a 10% retry budget, budget and breaker; then recovery",
		Run:         runStorm,
	})
}

// Configuration names, as they appear in the table and the JSON.
const (
	stormNaive   = "naive"
	stormBudget  = "budget"
	stormBreaker = "budget+breaker"
)

var stormConfigs = []string{stormNaive, stormBudget, stormBreaker}

// stormParams size a run.
type stormParams struct {
	interval     time.Duration // between user actions: the fixed arrival rate
	outage       time.Duration // arrivals while the provider is down
	recovery     time.Duration // arrivals after it has recovered
	window       time.Duration // success-rate window for the recovery time
	attempts     int           // per layer
	backoffBase  time.Duration
	backoffCap   time.Duration
	ratio        float64 // budget
	maxTokens    int     // budget
	minPerSecond float64 // budget floor; negative: none
	openDuration time.Duration
	halfOpen     int // trial calls
	minCalls     int // breaker
	threshold    float64
}

func stormParamsFor(quick bool) stormParams {
	p := stormParams{
		interval:     time.Millisecond, // 1000 user actions per second
		outage:       5 * time.Second,
		recovery:     time.Second,
		window:       100 * time.Millisecond,
		attempts:     3,
		backoffBase:  time.Millisecond,
		backoffCap:   8 * time.Millisecond,
		ratio:        0.1,
		maxTokens:    10,
		minPerSecond: -1,
		openDuration: 150 * time.Millisecond,
		halfOpen:     5,
		minCalls:     20,
		threshold:    50,
	}
	if quick {
		p.outage = time.Second
		p.recovery = 500 * time.Millisecond
	}
	return p
}

// errProviderDown is the down provider's answer: a refused connection, which
// retry.IsTransient takes as worth retrying and the breaker as a failure.
var errProviderDown = fmt.Errorf("payments provider: %w", syscall.ECONNREFUSED)

// A naive service answers 503 whatever went wrong below it: a fresh
// transient error that does not wrap, and so does not carry, the lower
// layer's "overloaded, don't retry" signal.
var (
	errOrders503   = retry.MarkTransient(errors.New("orders: 503 service unavailable"))
	errPayments503 = retry.MarkTransient(errors.New("payments: 503 service unavailable"))
)

// stormConn is the payments client's connection to the provider: one request
// at a time. It sits between the retry and the breaker, so that the breaker's
// Allow, the provider call and the recording of its outcome happen together:
// no other call can change the breaker's state in between, and each provider
// call is attributed exactly to the state that admitted it. The provider
// answers at once (down: connection refused; up: no work), so the lock costs
// no throughput.
type stormConn struct{ mu sync.Mutex }

func (c *stormConn) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	c.mu.Lock()
	return ctx, watertight.Ticket{}, nil
}

func (c *stormConn) Exit(_ context.Context, _ watertight.Ticket, err error) error {
	c.mu.Unlock()
	return err
}

// stormProvider is the payments provider. Its counters are guarded by the
// connection's lock: call runs only under it.
type stormProvider struct {
	start  time.Time
	down   atomic.Bool
	br     *circuit.Breaker // nil without a breaker
	opened atomic.Bool      // the breaker has opened at least once

	calls           int
	times           []time.Duration // of every call, since start
	trials          int             // calls admitted by a half-open breaker
	afterOpen       int             // calls made after the breaker first opened
	notTrialsAfter  int             // of those, calls admitted in another state than half-open
	closedAfterOpen int             // of those, calls admitted by a closed breaker
}

func (p *stormProvider) call(context.Context) (struct{}, error) {
	p.calls++
	p.times = append(p.times, time.Since(p.start))
	if p.br != nil {
		// Under the connection's lock the state is the one Allow saw: a
		// closed or half-open breaker changes state only when an outcome is
		// recorded (under the same lock), and its half-open timer
		// (MaxHalfOpenWait) is far longer than a trial takes.
		st := p.br.State()
		if st == circuit.HalfOpen {
			p.trials++
		}
		if p.opened.Load() {
			p.afterOpen++
			if st != circuit.HalfOpen {
				p.notTrialsAfter++
			}
			if st == circuit.Closed {
				p.closedAfterOpen++
			}
		}
	}
	if p.down.Load() {
		return struct{}{}, errProviderDown
	}
	return struct{}{}, nil
}

// stormEvent is a breaker state change, timed since the run's start.
type stormEvent struct {
	at       time.Duration
	from, to circuit.State
}

// stormAction is one user action: when it arrived (since the run's start)
// and whether it succeeded.
type stormAction struct {
	at time.Duration
	ok bool
}

// stormStack is one configuration of the three layers.
type stormStack struct {
	name  string
	naive bool
	start time.Time

	gateway *retry.Policy        // the gateway's retry of its calls to orders
	orders  *retry.Policy        // orders' retry of its calls to payments
	client  *watertight.Pipeline // the payments client: retry (→ conn) (→ breaker)
	prov    *stormProvider
	bud     *budget.Budget
	br      *circuit.Breaker

	upperRetries   atomic.Int64 // retries scheduled by the gateway and orders
	clientRetries  atomic.Int64 // retries scheduled by the payments client
	clientRefusals atomic.Int64 // payments client retries refused by the budget

	evMu   sync.Mutex
	events []stormEvent
}

// stormRand returns a seeded source that is safe for concurrent use (a
// Backoff shared by concurrent calls needs one).
func stormRand(seed, stream uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, stream))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

func newStormStack(name string, prm stormParams, seed uint64, idx int, start time.Time) (*stormStack, error) {
	s := &stormStack{name: name, naive: name == stormNaive, start: start}
	s.prov = &stormProvider{start: start}
	s.prov.down.Store(true)

	newBackoff := func(layer int) (*backoff.Backoff, error) {
		return backoff.New(backoff.Config{
			Jitter: backoff.Full,
			Base:   prm.backoffBase,
			Cap:    prm.backoffCap,
			Rand:   stormRand(seed, uint64(idx)<<8|uint64(layer)),
		})
	}
	var retryable func(error) bool // protected: retry.IsTransient
	if s.naive {
		// Naive: retry everything. (The policy still never retries an
		// overloaded error or a rejection: the naive services' plain 503s
		// are what make the layers above retry.)
		retryable = func(err error) bool { return err != nil }
	}
	upper := func(layer int, name string) (*retry.Policy, error) {
		b, err := newBackoff(layer)
		if err != nil {
			return nil, err
		}
		return retry.New(retry.Config{
			Name:        name,
			MaxAttempts: prm.attempts,
			Backoff:     b,
			Idempotent:  true,
			Retryable:   retryable,
			OnEvent: func(ev retry.Event) {
				if ev.Kind == retry.Scheduled {
					s.upperRetries.Add(1)
				}
			},
		})
	}
	var err error
	if s.gateway, err = upper(0, "gateway"); err != nil {
		return nil, err
	}
	if s.orders, err = upper(1, "orders"); err != nil {
		return nil, err
	}

	if !s.naive {
		s.bud, err = budget.New(budget.Config{Ratio: prm.ratio, MaxTokens: prm.maxTokens, MinPerSecond: prm.minPerSecond})
		if err != nil {
			return nil, err
		}
	}
	b, err := newBackoff(2)
	if err != nil {
		return nil, err
	}
	client, err := retry.New(retry.Config{
		Name:        "payments-client",
		MaxAttempts: prm.attempts,
		Backoff:     b,
		Idempotent:  true,
		Retryable:   retryable,
		Budget:      s.bud,
		OnEvent: func(ev retry.Event) {
			switch {
			case ev.Kind == retry.Scheduled:
				s.clientRetries.Add(1)
			case ev.Kind == retry.Skipped && errors.Is(ev.Reason, retry.ErrNoBudget):
				s.clientRefusals.Add(1)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	policies := []watertight.Policy{client, &stormConn{}}
	if name == stormBreaker {
		s.br, err = circuit.New(circuit.Config{
			Name:                 "payments-provider",
			MinCalls:             prm.minCalls,
			FailureRateThreshold: prm.threshold,
			OpenDuration:         prm.openDuration,
			HalfOpenCalls:        prm.halfOpen,
			MaxHalfOpenWait:      10 * time.Second,
			OnStateChange: func(ev circuit.StateChange) {
				if ev.To == circuit.Open {
					s.prov.opened.Store(true)
				}
				s.evMu.Lock()
				s.events = append(s.events, stormEvent{at: time.Since(s.start), from: ev.From, to: ev.To})
				s.evMu.Unlock()
			},
		})
		if err != nil {
			return nil, err
		}
		s.prov.br = s.br
		policies = append(policies, s.br)
	}
	s.client = watertight.MustNew(policies...)
	return s, nil
}

// action is one user action, as the user's request reaches the gateway.
func (s *stormStack) action(ctx context.Context) error {
	_, err := retry.Do(ctx, s.gateway, s.ordersService)
	return err
}

// ordersService is the orders service, as the gateway calls it: it calls
// payments under its retry policy.
func (s *stormStack) ordersService(ctx context.Context) (struct{}, error) {
	_, err := retry.Do(ctx, s.orders, s.paymentsService)
	return struct{}{}, s.answer(errOrders503, "orders", err)
}

// paymentsService is the payments service, as orders calls it: it calls the
// provider through its client's pipeline.
func (s *stormStack) paymentsService(ctx context.Context) (struct{}, error) {
	_, err := watertight.Do(ctx, s.client, s.prov.call)
	return struct{}{}, s.answer(errPayments503, "payments", err)
}

// answer is what a service returns to its caller when its own call failed:
// a naive service a plain 503, a protected one the error it got, wrapped,
// so that the "overloaded, don't retry" signal (or a rejection) goes up.
func (s *stormStack) answer(naive503 error, service string, err error) error {
	if err == nil {
		return nil
	}
	if s.naive {
		return naive503
	}
	return fmt.Errorf("%s: %w", service, err)
}

// arrive starts n user actions, one every interval from first (catching up
// at once if it falls behind), each in a goroutine of its own, and waits for
// them all to end.
func (s *stormStack) arrive(ctx context.Context, first time.Time, interval time.Duration, out []stormAction) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := range out {
		if d := time.Until(first.Add(time.Duration(i) * interval)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		a := &out[i]
		a.at = time.Since(s.start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.ok = s.action(ctx) == nil
		}()
	}
	return nil
}

// stormRun is what one configuration measured.
type stormRun struct {
	name string

	// The outage.
	outageActions []stormAction
	outageCalls   int
	outageTimes   []time.Duration
	arrivalsEnd   time.Duration // when the last outage action arrived
	recoverAt     time.Duration // when the provider recovered (the outage's actions all ended)
	upperRetries  int64
	clientRetries int64
	refusals      int64
	trials        int
	afterOpen     int
	notTrials     int
	closedAfter   int
	halfOpens     int
	opens         int
	budgetSnap    budget.Snapshot

	// The recovery.
	recActions []stormAction
	recCalls   int
	recovered  bool
	recovery   time.Duration // from recoverAt
	events     []stormEvent
}

func (r *stormRun) amplification() float64 {
	return float64(r.outageCalls) / float64(len(r.outageActions))
}

func runStormConfig(ctx context.Context, name string, prm stormParams, seed uint64, idx int) (*stormRun, error) {
	start := time.Now()
	s, err := newStormStack(name, prm, seed, idx, start)
	if err != nil {
		return nil, err
	}
	r := &stormRun{name: name}

	// The outage: user actions arrive at a fixed rate while the provider is
	// down; then the arrivals pause until the last of them has ended, so
	// that every outage action meets a provider that is down and every
	// recovery action one that is up.
	r.outageActions = make([]stormAction, int(prm.outage/prm.interval))
	if err := s.arrive(ctx, start, prm.interval, r.outageActions); err != nil {
		return nil, err
	}
	r.arrivalsEnd = r.outageActions[len(r.outageActions)-1].at
	p := s.prov
	r.outageCalls = p.calls
	r.outageTimes = p.times
	r.trials, r.afterOpen, r.notTrials, r.closedAfter = p.trials, p.afterOpen, p.notTrialsAfter, p.closedAfterOpen
	r.upperRetries = s.upperRetries.Load()
	r.clientRetries = s.clientRetries.Load()
	r.refusals = s.clientRefusals.Load()
	r.budgetSnap = s.bud.Snapshot()
	s.evMu.Lock()
	for _, ev := range s.events {
		switch ev.to {
		case circuit.HalfOpen:
			r.halfOpens++
		case circuit.Open:
			r.opens++
		}
	}
	s.evMu.Unlock()

	// The recovery.
	p.down.Store(false)
	rec := time.Now()
	r.recoverAt = rec.Sub(start)
	r.recActions = make([]stormAction, int(prm.recovery/prm.interval))
	if err := s.arrive(ctx, rec, prm.interval, r.recActions); err != nil {
		return nil, err
	}
	r.recCalls = p.calls - r.outageCalls
	r.recovery, r.recovered = stormRecovery(r.recActions, r.recoverAt, prm.window)
	s.evMu.Lock()
	r.events = append([]stormEvent(nil), s.events...)
	s.evMu.Unlock()
	return r, nil
}

// stormRecovery returns the time from rec to the arrival of the first user
// action from which on every window of arrivals (the actions that arrived
// within the next window, for each action that starts a complete window) has
// a success rate of at least 99%; ok is false if the last complete window
// is below it. acts is in arrival order.
func stormRecovery(acts []stormAction, rec, window time.Duration) (time.Duration, bool) {
	n := len(acts)
	if n == 0 {
		return 0, false
	}
	okPrefix := make([]int, n+1)
	for i, a := range acts {
		okPrefix[i+1] = okPrefix[i]
		if a.ok {
			okPrefix[i+1]++
		}
	}
	last := acts[n-1].at
	from := -1 // the earliest action after which all windows are good
	j := 0
	for i := range n {
		if acts[i].at+window > last {
			break // this and later windows are cut short by the end of the run
		}
		for j < n && acts[j].at < acts[i].at+window {
			j++
		}
		good := float64(okPrefix[j]-okPrefix[i]) >= 0.99*float64(j-i)
		switch {
		case !good:
			from = -1
		case from < 0:
			from = i
		}
	}
	if from < 0 {
		return 0, false
	}
	return max(acts[from].at-rec, 0), true
}

func runStorm(ctx context.Context, opts Options) (*Result, error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	prm := stormParamsFor(opts.Quick)
	began := time.Now()

	// The three configurations run side by side: each has its own provider,
	// budget and breaker, so they share nothing but the CPU.
	runs := make([]*stormRun, len(stormConfigs))
	errs := make([]error, len(stormConfigs))
	var wg sync.WaitGroup
	for i, name := range stormConfigs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = runStormConfig(ctx, name, prm, opts.Seed, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lab: storm: %w", err)
	}
	for _, r := range runs {
		fmt.Fprintf(progress, "storm: %s: %d user actions, %d provider calls (%.3g per action) during the outage; recovery %s\n",
			r.name, len(r.outageActions), r.outageCalls, r.amplification(), stormRecoveryText(r))
	}
	took := time.Since(began)
	fmt.Fprintf(progress, "storm: ran in %v\n", took.Round(time.Millisecond))
	return stormResult(prm, runs), nil
}

func stormRecoveryText(r *stormRun) string {
	if !r.recovered {
		return "not recovered"
	}
	return stormMS(r.recovery)
}

func stormMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + " ms"
}

func stormRoundTo(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// stormJSON is the scenario's JSON document.
type stormJSON struct {
	Scenario string            `json:"scenario"`
	Results  []stormJSONResult `json:"results"`
}

type stormJSONResult struct {
	Config        string  `json:"config"`
	Amplification float64 `json:"amplification"`
	LoadVsNormal  float64 `json:"load_vs_normal"`
	UserActions   int     `json:"user_actions"`
	ProviderCalls int     `json:"provider_calls"`
	// RecoveryMS is null when the success rate did not get back to 99%.
	RecoveryMS          *float64 `json:"recovery_ms"`
	UpperLayerRetries   int64    `json:"upper_layer_retries"`
	ClientRetries       int64    `json:"client_retries"`
	BudgetRefusals      int64    `json:"budget_refusals,omitempty"`
	BreakerOpenings     int      `json:"breaker_openings,omitempty"`
	TrialCalls          int      `json:"trial_calls,omitempty"`
	CallsAfterOpening   int      `json:"calls_after_opening,omitempty"`
	RecoveryActions     int      `json:"recovery_user_actions"`
	RecoveryCalls       int      `json:"recovery_provider_calls"`
	RecoverySuccessRate float64  `json:"recovery_success_rate"`
}

func stormSuccess(acts []stormAction) float64 {
	n := 0
	for _, a := range acts {
		if a.ok {
			n++
		}
	}
	return float64(n) / float64(len(acts))
}

// stormBreakerRecovery describes, for a breaker run, when the breaker went
// half-open and closed after the provider recovered.
func stormBreakerRecovery(r *stormRun) string {
	half, closed := time.Duration(-1), time.Duration(-1)
	for _, ev := range r.events {
		if ev.at < r.recoverAt {
			continue
		}
		if ev.to == circuit.HalfOpen && half < 0 {
			half = ev.at - r.recoverAt
		}
		if ev.to == circuit.Closed && closed < 0 {
			closed = ev.at - r.recoverAt
		}
	}
	if half < 0 || closed < 0 {
		return ""
	}
	return fmt.Sprintf("breaker half-open at +%s, closed at +%s", stormMS(half), stormMS(closed))
}

func stormResult(prm stormParams, runs []*stormRun) *Result {
	byName := map[string]*stormRun{}
	for _, r := range runs {
		byName[r.name] = r
	}
	naive, bud, brk := byName[stormNaive], byName[stormBudget], byName[stormBreaker]

	res := &Result{Scenario: "storm"}
	rate := float64(time.Second) / float64(prm.interval)
	res.Summary = fmt.Sprintf("A user action goes gateway → orders → payments → payments provider, and the provider is 100%% down (connection refused) for %v, then healthy for %v. "+
		"The three layers are functions that call the next one through the shipped retry, budget and circuit packages, run in real time: %.0f user actions per second at a fixed arrival rate, each in a goroutine of its own; every provider call made is counted. "+
		"Each layer has a retry.Policy of %d attempts (idempotent, full-jitter backoff from %v capped at %v, seeded). "+
		"Naive: every layer retries every error, and each service answers its caller a plain transient 503 when its own call fails — retry.Policy never retries the \"overloaded, don't retry\" signal whatever its Retryable says, so naivety is modelled as services that drop it, as a service that returns 503 does. "+
		"Budget: the services pass the lower error up (wrapped), so the ExhaustedError or budget SkippedError of the payments client, which carry the signal, stop the layers above; the payments client's retries draw on a budget (Ratio %.2g, MaxTokens %d, floor MinPerSecond disabled — a floor adds up to that many retries per second on top of the ratio; the budget starts empty and the outage starts at once, so no saved-up burst applies). "+
		"Budget+breaker: the same, with a breaker inside the payments client's retry (retry → breaker → call; MinCalls %d, failure rate %.0f%%, open %v, %d trial calls). "+
		"The payments client holds one connection to the provider (one request at a time, held from the breaker's Allow to the recording of the outcome), so that each provider call is attributed exactly to the breaker state that admitted it. "+
		"Amplification is provider calls per user action over the outage (load relative to normal: divided by the one call per action of a healthy system); arrivals pause while the outage's last actions end, then the provider recovers. "+
		"Recovery time is the time from the provider's recovery to the arrival of the first user action from which on every %v window of arrivals succeeds at least 99%%: immediate without a breaker; with one, it waits for the rest of the open duration and the half-open trials. "+
		"Real time makes the breaker's numbers vary a little from run to run; the naive and budget counts do not.",
		prm.outage, prm.recovery, rate, prm.attempts, prm.backoffBase, prm.backoffCap, prm.ratio, prm.maxTokens,
		prm.minCalls, prm.threshold, prm.openDuration, prm.halfOpen, prm.window)

	main := Table{
		Title:  fmt.Sprintf("Provider calls per user action while the provider is down (%v at %.0f actions/s), and recovery", prm.outage, rate),
		Header: []string{"config", "user actions", "provider calls", "calls per action", "load vs normal", "recovery to 99%"},
	}
	detail := Table{
		Title:  "What each layer did during the outage, and the traffic after recovery",
		Header: []string{"config", "upper-layer retries", "payments client retries", "budget refusals", "breaker openings", "trial calls", "calls after first opening", "recovery: actions", "recovery: provider calls", "recovery: success"},
	}
	doc := stormJSON{Scenario: "storm"}
	for _, r := range runs {
		amp := r.amplification()
		recText := stormRecoveryText(r)
		if r.br() {
			if s := stormBreakerRecovery(r); s != "" {
				recText += " (" + s + ")"
			}
		} else if r.recovered && r.recovery < time.Millisecond {
			recText += " (immediate)"
		}
		main.Rows = append(main.Rows, []string{
			r.name,
			strconv.Itoa(len(r.outageActions)),
			strconv.Itoa(r.outageCalls),
			strconv.FormatFloat(amp, 'f', 3, 64),
			strconv.FormatFloat(amp, 'f', 2, 64) + "×",
			recText,
		})
		dash := func(ok bool, v int64) string {
			if !ok {
				return "–"
			}
			return strconv.FormatInt(v, 10)
		}
		detail.Rows = append(detail.Rows, []string{
			r.name,
			strconv.FormatInt(r.upperRetries, 10),
			strconv.FormatInt(r.clientRetries, 10),
			dash(r.name != stormNaive, r.refusals),
			dash(r.br(), int64(r.opens)),
			dash(r.br(), int64(r.trials)),
			dash(r.br(), int64(r.afterOpen)),
			strconv.Itoa(len(r.recActions)),
			strconv.Itoa(r.recCalls),
			strconv.FormatFloat(100*stormSuccess(r.recActions), 'f', 1, 64) + "%",
		})
		jr := stormJSONResult{
			Config:              r.name,
			Amplification:       stormRoundTo(amp, 4),
			LoadVsNormal:        stormRoundTo(amp, 4),
			UserActions:         len(r.outageActions),
			ProviderCalls:       r.outageCalls,
			UpperLayerRetries:   r.upperRetries,
			ClientRetries:       r.clientRetries,
			BudgetRefusals:      r.refusals,
			RecoveryActions:     len(r.recActions),
			RecoveryCalls:       r.recCalls,
			RecoverySuccessRate: stormRoundTo(stormSuccess(r.recActions), 4),
		}
		if r.recovered {
			ms := stormRoundTo(float64(r.recovery)/float64(time.Millisecond), 1)
			jr.RecoveryMS = &ms
		}
		if r.br() {
			jr.BreakerOpenings, jr.TrialCalls, jr.CallsAfterOpening = r.opens, r.trials, r.afterOpen
		}
		doc.Results = append(doc.Results, jr)
	}
	res.Tables = []Table{main, detail}
	res.JSON = doc
	res.Charts = []Chart{stormCallsChart(prm, runs), stormRecoveryChart(runs)}

	// Checks.
	naiveAmp := naive.amplification()
	res.Checks = append(res.Checks, Within("naive: provider calls per user action within 27 ± 0.5 (3 layers × 3 attempts)",
		stormRoundTo(naiveAmp, 4), 26.5, 27.5, "", fmt.Sprintf("%d calls for %d actions", naive.outageCalls, len(naive.outageActions))))
	// In integers: calls ≤ (1+ratio)·actions, with ratio 0.1 exactly; the
	// value is the calls beyond that.
	budExcess := float64(bud.outageCalls) - (1+prm.ratio)*float64(len(bud.outageActions))
	res.Checks = append(res.Checks, AtMost(fmt.Sprintf("budget: provider calls per user action ≤ %.2g over the outage (calls beyond %.2g per action)", 1+prm.ratio, 1+prm.ratio),
		math.Round(budExcess*1e6)/1e6, 1e-9, "",
		fmt.Sprintf("%.4f per action (%d calls for %d actions: %d retries granted, %d refused; the budget's own counts: %d deposits, %d withdrawals, %d refused)",
			bud.amplification(), bud.outageCalls, len(bud.outageActions), bud.clientRetries, bud.refusals,
			bud.budgetSnap.Deposits, bud.budgetSnap.Withdrawals, bud.budgetSnap.Refused)))
	maxTrials := brk.halfOpens * prm.halfOpen
	brkDetail := fmt.Sprintf("%d provider calls during the outage after the first opening, %d of them admitted as trials (%d admitted otherwise, %d by a closed breaker); %d half-open periods × at most %d trials = %d; %d calls in all (%.4f per action)",
		brk.afterOpen, brk.trials, brk.notTrials, brk.closedAfter, brk.halfOpens, prm.halfOpen, maxTrials, brk.outageCalls, brk.amplification())
	res.Checks = append(res.Checks,
		AtLeast("budget+breaker: the breaker opened during the outage (openings)", float64(brk.opens), 1, "", ""),
		AtMost("budget+breaker: once the breaker has opened, the provider gets the half-open trial calls only (calls that were not trials)",
			math.Abs(float64(brk.afterOpen-brk.trials))+float64(brk.notTrials), 0, "", brkDetail),
		AtMost("budget+breaker: trial calls at most the half-open periods × the trials each allows",
			float64(brk.trials), float64(maxTrials), "", ""))
	res.Checks = append(res.Checks, AtMost("budget, budget+breaker: the \"overloaded, don't retry\" signal stopped the layers above (gateway and orders retries)",
		float64(bud.upperRetries+brk.upperRetries), 0, "",
		fmt.Sprintf("budget %d, budget+breaker %d (naive: %d)", bud.upperRetries, brk.upperRetries, naive.upperRetries)))
	notRecovered := 0
	var recs []string
	for _, r := range runs {
		if !r.recovered {
			notRecovered++
		}
		recs = append(recs, r.name+" "+stormRecoveryText(r))
	}
	res.Checks = append(res.Checks, AtMost("every configuration gets back to a 99% success rate after the provider recovers (configurations that did not)",
		float64(notRecovered), 0, "", strings.Join(recs, ", ")))
	return res
}

func (r *stormRun) br() bool { return r.name == stormBreaker }

// stormCallsChart plots provider calls per user action in buckets of the
// outage: calls made in the bucket over actions that arrived in it.
func stormCallsChart(prm stormParams, runs []*stormRun) Chart {
	const bucket = 250 * time.Millisecond
	c := Chart{
		File:   "storm-calls",
		Title:  "Provider calls per user action while the provider is down (250 ms bins)",
		XLabel: "time since the outage began (s)",
		// Short: gonum/plot makes the Y axis no shorter than its label.
		YLabel: "provider calls per action",
		LogY:   true,
	}
	nb := int(prm.outage / bucket)
	for _, r := range runs {
		calls := make([]int, nb)
		acts := make([]int, nb)
		for _, t := range r.outageTimes {
			if b := int(t / bucket); b < nb {
				calls[b]++
			}
		}
		for _, a := range r.outageActions {
			if b := int(a.at / bucket); b < nb {
				acts[b]++
			}
		}
		s := Series{Name: r.name}
		for b := range nb {
			if acts[b] == 0 {
				continue
			}
			s.X = append(s.X, (float64(b)+0.5)*bucket.Seconds())
			s.Y = append(s.Y, float64(calls[b])/float64(acts[b]))
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// stormRecoveryChart plots the success rate of user actions, by arrival, in
// buckets after the provider's recovery (during the outage it is 0% for
// every configuration).
func stormRecoveryChart(runs []*stormRun) Chart {
	const (
		bucket = 5 * time.Millisecond
		span   = 400 * time.Millisecond
	)
	c := Chart{
		File:   "storm-recovery",
		Title:  "User actions that succeed after the provider recovered (0% throughout the outage)",
		XLabel: "time since the provider recovered (ms), by arrival",
		YLabel: "success rate (%, per 5 ms)",
		YMax:   100,
	}
	nb := int(span / bucket)
	for _, r := range runs {
		n := make([]int, nb)
		ok := make([]int, nb)
		for _, a := range r.recActions {
			b := int((a.at - r.recoverAt) / bucket)
			if b < 0 || b >= nb {
				continue
			}
			n[b]++
			if a.ok {
				ok[b]++
			}
		}
		s := Series{Name: r.name}
		for b := range nb {
			if n[b] == 0 {
				continue
			}
			s.X = append(s.X, (float64(b)+0.5)*float64(bucket)/float64(time.Millisecond))
			s.Y = append(s.Y, 100*float64(ok[b])/float64(n[b]))
		}
		c.Series = append(c.Series, s)
	}
	return c
}
