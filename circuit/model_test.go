package circuit_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"pgregory.net/rapid"
)

// model is a deliberately plain reference for the breaker: slices and loops,
// no atomics, no cleverness. The property test drives a Breaker and a model
// through the same random sequence and requires them to agree after every
// step.
type model struct {
	cfg     circuit.Config // resolved by hand below
	now     time.Duration  // virtual time since the test began
	state   circuit.State
	gen     int
	origin  time.Duration // when the current window began (time windows)
	outs    []modelOut    // closed-state window
	since   time.Duration // when the current state began
	openEnd time.Duration // when Open ends
	hoEnd   time.Duration // when HalfOpen gives up (if MaxHalfOpenWait > 0)
	issued  int           // trials admitted in this half-open
	done    int
	fails   int
	slows   int
	bad     int // trials that failed or were slow
	streak  int // failures in a row in the closed window
	consec  int
	opens   int
	reject  int
	events  []string
	// evidence is what a Snapshot shows while open or half-open.
	evCalls, evFails, evSlows, evStreak int
}

// resolveModel fills the defaults the model relies on, as New does.
func resolveModel(c circuit.Config) circuit.Config {
	if c.MaxHalfOpenWait == 0 {
		c.MaxHalfOpenWait = circuit.DefaultMaxHalfOpenWait
	}
	if c.HalfOpenSuccesses == 0 && c.FailureRateThreshold < 0 {
		c.HalfOpenSuccesses = c.HalfOpenCalls
	}
	return c
}

// tripTest is the TripWhen of the sequences that draw one: it can become
// true only on a failure (a success ends the streak), as the breaker asks it.
func tripTest(c circuit.Counts) bool { return c.Failures >= 3 && c.ConsecutiveFailures >= 2 }

type modelOut struct {
	at   time.Duration
	fail bool
	slow bool
}

type modelPermit struct {
	gen   int
	state circuit.State
	start time.Duration
	timed bool // slow calls were measured when it was allowed
}

func (m *model) set(to circuit.State, rule circuit.Rule) {
	m.events = append(m.events, m.state.String()+">"+to.String()+":"+rule.String())
	switch {
	case to == circuit.Closed:
		m.evCalls, m.evFails, m.evSlows, m.evStreak = 0, 0, 0, 0
	case m.state == circuit.Closed:
		w := m.window()
		m.evCalls, m.evFails, m.evSlows = len(w), count(w, true), count(w, false)
		m.evStreak = m.streak
	case m.state == circuit.HalfOpen && to == circuit.Open:
		m.evCalls, m.evFails, m.evSlows, m.evStreak = m.done, m.fails, m.slows, 0
	}
	m.state = to
	m.gen++
	m.since = m.now
	switch to {
	case circuit.Closed:
		m.consec = 0
		m.outs = nil
		m.streak = 0
		m.origin = m.now
	case circuit.Open:
		m.opens++
		m.consec++
		m.openEnd = m.now + m.openDuration()
		if m.cfg.OpenDuration < 0 {
			m.set(circuit.HalfOpen, circuit.RuleNone)
		}
	case circuit.HalfOpen:
		m.issued, m.done, m.fails, m.slows, m.bad = 0, 0, 0, 0, 0
		m.hoEnd = m.now + m.cfg.MaxHalfOpenWait
	}
}

// count counts the failures (fail) or slow calls (!fail) in w.
func count(w []modelOut, fail bool) int {
	n := 0
	for _, x := range w {
		if fail && x.fail || !fail && x.slow {
			n++
		}
	}
	return n
}

// openDuration is the length of the current (m.consec-th) opening.
func (m *model) openDuration() time.Duration {
	if m.cfg.OpenDuration < 0 {
		return 0
	}
	d := m.cfg.OpenDuration
	for i := 1; i < m.consec; i++ {
		d = time.Duration(float64(d) * m.cfg.OpenDurationMultiplier)
		if d >= m.cfg.MaxOpenDuration {
			break
		}
	}
	return min(d, m.cfg.MaxOpenDuration)
}

// reconfigure is Breaker.Reconfigure: the state is kept, the window too
// when its shape is the same, and the timers are counted anew from when the
// state began.
func (m *model) reconfigure(c circuit.Config) {
	c = resolveModel(c)
	old := m.cfg
	m.cfg = c
	switch m.state {
	case circuit.Closed:
		same := old.WindowType == c.WindowType && (c.WindowType == circuit.CountBased && old.WindowSize == c.WindowSize ||
			c.WindowType == circuit.TimeBased && old.WindowDuration == c.WindowDuration && old.WindowBuckets == c.WindowBuckets)
		if !same {
			m.outs = nil
			m.streak = 0
			m.origin = m.now
		}
		m.judge()
	case circuit.Open: // a time already past fires now, not then
		m.openEnd = max(m.since+m.openDuration(), m.now)
	case circuit.HalfOpen:
		m.hoEnd = max(m.since+m.cfg.MaxHalfOpenWait, m.now)
		m.decideTrials()
	}
	m.advance(m.now) // timers now due fire at once
}

// judge opens a closed breaker whose window breaks a rule, naming the
// first rule that holds in the breaker's order.
func (m *model) judge() {
	w := m.window()
	f, sl := count(w, true), count(w, false)
	rate := func(k int) float64 { return float64(k) * 100 / float64(len(w)) }
	var rule circuit.Rule
	switch {
	case m.cfg.ConsecutiveFailures > 0 && m.streak >= m.cfg.ConsecutiveFailures:
		rule = circuit.RuleConsecutiveFailures
	case m.cfg.FailureCountThreshold > 0 && f >= m.cfg.FailureCountThreshold:
		rule = circuit.RuleFailureCount
	case len(w) >= m.cfg.MinCalls && len(w) > 0 && m.cfg.FailureRateThreshold > 0 && rate(f) >= m.cfg.FailureRateThreshold:
		rule = circuit.RuleFailureRate
	case len(w) >= m.cfg.MinCalls && len(w) > 0 && m.cfg.SlowCallDuration > 0 && rate(sl) >= m.cfg.SlowCallRateThreshold:
		rule = circuit.RuleSlowCallRate
	case m.cfg.TripWhen != nil && tripTest(circuit.Counts{Calls: int64(len(w)), Failures: int64(f), SlowCalls: int64(sl), ConsecutiveFailures: int64(m.streak)}):
		rule = circuit.RuleTripWhen
	default:
		return
	}
	m.set(circuit.Open, rule)
}

// decideTrials closes or reopens a half-open breaker its trials decide.
func (m *model) decideTrials() {
	n := m.cfg.HalfOpenCalls
	if k := m.cfg.HalfOpenSuccesses; k > 0 {
		switch {
		case m.done-m.bad >= k:
			m.set(circuit.Closed, circuit.RuleTrials)
		case m.bad > n-k:
			m.set(circuit.Open, circuit.RuleTrials)
		}
		return
	}
	switch {
	case m.cfg.FailureRateThreshold > 0 && float64(m.fails)*100/float64(n) >= m.cfg.FailureRateThreshold:
		m.set(circuit.Open, circuit.RuleTrials)
	case m.cfg.SlowCallDuration > 0 && float64(m.slows)*100/float64(n) >= m.cfg.SlowCallRateThreshold:
		m.set(circuit.Open, circuit.RuleTrials)
	case m.done >= n:
		m.set(circuit.Closed, circuit.RuleTrials)
	}
}

// advance moves time on to t, firing the timers that fall due on the way.
func (m *model) advance(t time.Duration) {
	for {
		switch {
		case m.state == circuit.Open && m.openEnd <= t:
			m.now = m.openEnd
			m.set(circuit.HalfOpen, circuit.RuleNone)
			continue
		case m.state == circuit.HalfOpen && m.cfg.MaxHalfOpenWait > 0 && m.hoEnd <= t:
			m.now = m.hoEnd
			// Decide on the trials that ended; none ended: open again.
			n := float64(m.done)
			switch {
			case m.done == 0, m.cfg.HalfOpenSuccesses > 0,
				m.cfg.FailureRateThreshold > 0 && float64(m.fails)*100/n >= m.cfg.FailureRateThreshold,
				m.cfg.SlowCallDuration > 0 && float64(m.slows)*100/n >= m.cfg.SlowCallRateThreshold:
				m.set(circuit.Open, circuit.RuleTrials)
			default:
				m.set(circuit.Closed, circuit.RuleTrials)
			}
			continue
		}
		break
	}
	m.now = t
}

func (m *model) allow() (modelPermit, bool) {
	switch m.state {
	case circuit.Closed:
		return modelPermit{m.gen, m.state, m.now, m.cfg.SlowCallDuration > 0}, true
	case circuit.HalfOpen:
		if m.issued < m.cfg.HalfOpenCalls {
			m.issued++
			return modelPermit{m.gen, m.state, m.now, m.cfg.SlowCallDuration > 0}, true
		}
	}
	m.reject++
	return modelPermit{}, false
}

// window returns the outcomes the closed window holds now.
func (m *model) window() []modelOut {
	if m.cfg.WindowType == circuit.CountBased {
		if len(m.outs) > m.cfg.WindowSize {
			return m.outs[len(m.outs)-m.cfg.WindowSize:]
		}
		return m.outs
	}
	width := m.cfg.WindowDuration / time.Duration(m.cfg.WindowBuckets)
	e := (m.now - m.origin) / width
	var in []modelOut
	for _, o := range m.outs {
		if oe := (o.at - m.origin) / width; oe > e-time.Duration(m.cfg.WindowBuckets) {
			in = append(in, o)
		}
	}
	return in
}

func (m *model) done_(p modelPermit, o watertight.Outcome) {
	if p.gen != m.gen {
		return // stale
	}
	if o == watertight.Ignored {
		if m.state == circuit.HalfOpen {
			m.issued--
		}
		return
	}
	fail := o == watertight.Failure
	slow := p.timed && m.cfg.SlowCallDuration > 0 && m.now-p.start >= m.cfg.SlowCallDuration
	switch m.state {
	case circuit.Closed:
		m.outs = append(m.outs, modelOut{m.now, fail, slow})
		// The breaker counts the streak only while a rule needs it.
		if m.cfg.ConsecutiveFailures > 0 || m.cfg.TripWhen != nil {
			if fail {
				m.streak++
			} else {
				m.streak = 0
			}
		}
		m.judge()
	case circuit.HalfOpen:
		m.done++
		if fail {
			m.fails++
		}
		if slow {
			m.slows++
		}
		if fail || slow {
			m.bad++
		}
		m.decideTrials()
	}
}

func genConfig(t *rapid.T) circuit.Config {
	c := circuit.Config{
		WindowType:             circuit.WindowType(rapid.IntRange(0, 1).Draw(t, "windowType")),
		WindowSize:             rapid.IntRange(1, 12).Draw(t, "windowSize"),
		WindowDuration:         time.Duration(rapid.IntRange(1, 10).Draw(t, "windowSeconds")) * time.Second,
		WindowBuckets:          rapid.IntRange(1, 5).Draw(t, "buckets"),
		FailureRateThreshold:   rapid.SampledFrom([]float64{10, 25, 50, 60, 100}).Draw(t, "failThreshold"),
		SlowCallRateThreshold:  rapid.SampledFrom([]float64{25, 50, 100}).Draw(t, "slowThreshold"),
		SlowCallDuration:       time.Duration(rapid.IntRange(0, 3).Draw(t, "slowSeconds")) * time.Second,
		OpenDuration:           time.Duration(rapid.IntRange(1, 10).Draw(t, "openSeconds")) * time.Second,
		OpenDurationMultiplier: rapid.SampledFrom([]float64{1, 2, 3}).Draw(t, "multiplier"),
		HalfOpenCalls:          rapid.IntRange(1, 4).Draw(t, "halfOpenCalls"),
		MaxHalfOpenWait:        time.Duration(rapid.SampledFrom([]int{-1, 5, 20}).Draw(t, "maxHalfOpenSeconds")) * time.Second,
		OpenJitter:             -1, // the model's open durations are exact
		ConsecutiveFailures:    rapid.SampledFrom([]int{0, 0, 1, 2, 3}).Draw(t, "consecutive"),
	}
	c.MinCalls = rapid.IntRange(1, c.WindowSize).Draw(t, "minCalls")
	c.MaxOpenDuration = c.OpenDuration * time.Duration(rapid.IntRange(1, 8).Draw(t, "maxOpenFactor"))
	if rapid.IntRange(0, 3).Draw(t, "failureCount") == 0 {
		c.FailureCountThreshold = rapid.IntRange(1, c.WindowSize).Draw(t, "failureCountThreshold")
	}
	if rapid.IntRange(0, 4).Draw(t, "rateOff") == 0 {
		c.FailureRateThreshold = -1
	}
	if rapid.IntRange(0, 4).Draw(t, "tripWhen") == 0 {
		c.TripWhen = tripTest
	}
	if rapid.IntRange(0, 2).Draw(t, "halfOpenSuccesses") == 0 {
		c.HalfOpenSuccesses = rapid.IntRange(1, c.HalfOpenCalls).Draw(t, "halfOpenSuccessesK")
	}
	if rapid.IntRange(0, 5).Draw(t, "noOpenWait") == 0 {
		c.OpenDuration, c.MaxOpenDuration = -1, 0
	}
	return c
}

// genReconfigs draws the configurations a sequence may reconfigure to: one
// with base's window shape (so the window is kept) and one drawn afresh.
func genReconfigs(t *rapid.T, base circuit.Config) []circuit.Config {
	same := genConfig(t)
	same.WindowType, same.WindowSize, same.WindowDuration, same.WindowBuckets =
		base.WindowType, base.WindowSize, base.WindowDuration, base.WindowBuckets
	same.MinCalls = min(same.MinCalls, same.WindowSize)
	same.FailureCountThreshold = min(same.FailureCountThreshold, same.WindowSize)
	return []circuit.Config{same, genConfig(t)}
}

type op struct {
	kind    int // 0-3 start a call, 4-7 end one, 8-9 let time pass, 10 reconfigure, 11 force half-open
	pick    int // which call ends (modulo the calls in flight)
	outcome watertight.Outcome
	advance time.Duration
}

// genOps draws a sequence of ops of kinds [0, kinds).
func genOps(t *rapid.T, kinds int) []op {
	outcomes := []watertight.Outcome{watertight.Success, watertight.Failure, watertight.Ignored}
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) op {
		return op{
			kind:    rapid.IntRange(0, kinds-1).Draw(t, "kind"),
			pick:    rapid.IntRange(0, 1000).Draw(t, "pick"),
			outcome: rapid.SampledFrom(outcomes).Draw(t, "outcome"),
			advance: time.Duration(rapid.IntRange(0, 12000).Draw(t, "advanceMs")) * time.Millisecond,
		}
	}), 1, 60).Draw(t, "ops")
}

// TestBreakerMatchesModel runs 100 × 100 = 10,000 random sequences of
// permits, outcomes, call durations and clock advances through a Breaker and
// the model. Each sequence runs in a synctest bubble of its own, so time is
// exact; rapid draws it outside the bubble and shrinks any failure.
func TestBreakerMatchesModel(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 5
	}
	for range rounds {
		rapid.Check(t, func(rt *rapid.T) {
			cfg := genConfig(rt)
			ops := genOps(rt, 12)
			var err error
			synctest.Test(t, func(*testing.T) { err = runAgainstModel(cfg, nil, ops) })
			if err != nil {
				rt.Fatal(err)
			}
		})
	}
}

// TestReconfigureMatchesModel is TestBreakerMatchesModel with
// reconfigurations in the sequences, to a configuration with the same
// window shape (the window is kept) or to another drawn afresh: the state,
// the open and half-open timers counted from when the state began, and the
// thresholds judged at once must agree with the model's.
func TestReconfigureMatchesModel(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 5
	}
	for range rounds {
		rapid.Check(t, func(rt *rapid.T) {
			cfg := genConfig(rt)
			alts := genReconfigs(rt, cfg)
			ops := genOps(rt, 12)
			var err error
			synctest.Test(t, func(*testing.T) { err = runAgainstModel(cfg, alts, ops) })
			if err != nil {
				rt.Fatal(err)
			}
		})
	}
}

func runAgainstModel(cfg circuit.Config, alts []circuit.Config, ops []op) error {
	var mu sync.Mutex
	var events []string
	cfg.OnStateChange = func(ev circuit.StateChange) {
		mu.Lock()
		events = append(events, ev.From.String()+">"+ev.To.String()+":"+ev.Rule.String())
		mu.Unlock()
	}
	b, err := circuit.New(cfg)
	if err != nil {
		return fmt.Errorf("New: %v", err)
	}
	m := &model{cfg: resolveModel(cfg), state: circuit.Closed}
	start := time.Now()
	type held struct {
		real circuit.Permit
		mod  modelPermit
	}
	var permits []held
	for i, o := range ops {
		switch {
		case o.kind < 4: // a call starts
			p, err := b.Allow()
			mp, ok := m.allow()
			if (err == nil) != ok {
				return fmt.Errorf("step %d: Allow err=%v, model admits=%v (state %v)", i, err, ok, m.state)
			}
			if ok {
				permits = append(permits, held{p, mp})
			}
		case o.kind < 8: // a call ends
			if len(permits) == 0 {
				continue
			}
			k := o.pick % len(permits)
			permits[k].real.Done(o.outcome)
			m.done_(permits[k].mod, o.outcome)
			permits = append(permits[:k], permits[k+1:]...)
			synctest.Wait()
		case o.kind < 10: // time passes
			time.Sleep(o.advance)
			synctest.Wait()
			m.advance(time.Since(start))
		case o.kind == 11: // an operator probes
			b.ForceHalfOpen()
			synctest.Wait()
			m.set(circuit.HalfOpen, circuit.RuleNone)
		default: // reconfigure; the timers it makes due fire at once
			if len(alts) == 0 {
				continue
			}
			c := alts[o.pick%len(alts)]
			c.OnStateChange = cfg.OnStateChange
			if err := b.Reconfigure(c); err != nil {
				return fmt.Errorf("step %d: Reconfigure: %v", i, err)
			}
			synctest.Wait()
			m.reconfigure(c)
		}
		if got := b.State(); got != m.state {
			return fmt.Errorf("step %d: state %v, model %v", i, got, m.state)
		}
		s := b.Snapshot()
		if m.state == circuit.Closed {
			w := m.window()
			var f, sl int64
			for _, x := range w {
				if x.fail {
					f++
				}
				if x.slow {
					sl++
				}
			}
			if s.Calls != int64(len(w)) || s.Failures != f || s.SlowCalls != sl {
				return fmt.Errorf("step %d: snapshot calls/failures/slow %d/%d/%d, model %d/%d/%d", i, s.Calls, s.Failures, s.SlowCalls, len(w), f, sl)
			}
			if s.ConsecutiveFailures != int64(m.streak) {
				return fmt.Errorf("step %d: snapshot streak %d, model %d", i, s.ConsecutiveFailures, m.streak)
			}
		} else if s.Calls != int64(m.evCalls) || s.Failures != int64(m.evFails) || s.SlowCalls != int64(m.evSlows) || s.ConsecutiveFailures != int64(m.evStreak) {
			return fmt.Errorf("step %d (%v): evidence calls/failures/slow/streak %d/%d/%d/%d, model %d/%d/%d/%d", i, m.state,
				s.Calls, s.Failures, s.SlowCalls, s.ConsecutiveFailures, m.evCalls, m.evFails, m.evSlows, m.evStreak)
		}
		if m.state == circuit.HalfOpen && (s.TrialCalls != m.done || s.TrialFailures != m.fails || s.TrialSlowCalls != m.slows) {
			return fmt.Errorf("step %d: trials %d/%d/%d, model %d/%d/%d", i, s.TrialCalls, s.TrialFailures, s.TrialSlowCalls, m.done, m.fails, m.slows)
		}
		if s.Rejected != uint64(m.reject) || s.Opens != uint64(m.opens) {
			return fmt.Errorf("step %d: rejected/opens %d/%d, model %d/%d", i, s.Rejected, s.Opens, m.reject, m.opens)
		}
	}
	b.ForceOpen() // stop the breaker's timers so the bubble can end
	mu.Lock()
	defer mu.Unlock()
	events = events[:len(events)-1]
	if fmt.Sprint(events) != fmt.Sprint(m.events) {
		return fmt.Errorf("events %v, model %v", events, m.events)
	}
	return nil
}
