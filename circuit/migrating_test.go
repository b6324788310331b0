package circuit_test

// Documented cases of Resilience4j's and Polly's circuit breakers (JVM and
// .NET, not runnable here), each run through the watertight Config that
// docs/migrating.md maps the peer's settings to, checking the outcome the
// peer's documentation states. Each test quotes the sentence it checks.
//
// Run: go test -race -run Migrat ./circuit/

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

const (
	r4jDocs    = "https://resilience4j.readme.io/docs/circuitbreaker"
	r4jConfig  = "https://github.com/resilience4j/resilience4j/blob/master/resilience4j-circuitbreaker/src/main/java/io/github/resilience4j/circuitbreaker/CircuitBreakerConfig.java"
	r4jMachine = "https://github.com/resilience4j/resilience4j/blob/master/resilience4j-circuitbreaker/src/main/java/io/github/resilience4j/circuitbreaker/internal/CircuitBreakerStateMachine.java"
	pollyDocs  = "https://www.pollydocs.org/strategies/circuit-breaker.html"
)

// r4j holds the resilience4j.circuitbreaker instance keys that
// docs/migrating.md maps; its zero fields take Resilience4j's defaults.
type r4j struct {
	slidingWindowType                     string // COUNT_BASED (default) or TIME_BASED
	slidingWindowSize                     int    // 100
	minimumNumberOfCalls                  int    // 100
	failureRateThreshold                  float64
	slowCallRateThreshold                 float64       // 100
	slowCallDurationThreshold             time.Duration // 60s
	waitDurationInOpenState               time.Duration // 60s
	permittedNumberOfCallsInHalfOpenState int           // 10
	exponentialBackoffMultiplier          float64       // with enableExponentialBackoff
	exponentialMaxWaitDurationInOpenState time.Duration
	maxWaitDurationInHalfOpenState        time.Duration // 0: wait for the trials
}

// config is the mapping of docs/migrating.md, Resilience4j table.
func (r r4j) config() circuit.Config {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	defd := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	cfg := circuit.Config{
		WindowSize:            def(r.slidingWindowSize, 100),
		MinCalls:              def(r.minimumNumberOfCalls, 100),
		FailureRateThreshold:  r.failureRateThreshold, // 0: 50, both
		SlowCallRateThreshold: r.slowCallRateThreshold,
		// Resilience4j: slow when the duration is greater than the
		// threshold; watertight: at least SlowCallDuration.
		SlowCallDuration: defd(r.slowCallDurationThreshold, 60*time.Second) + time.Nanosecond,
		OpenDuration:     defd(r.waitDurationInOpenState, 60*time.Second),
		OpenJitter:       -1, // randomized wait is off by default
		// Half-open decides after min(minimumNumberOfCalls, permitted) calls.
		HalfOpenCalls:   min(def(r.permittedNumberOfCallsInHalfOpenState, 10), def(r.minimumNumberOfCalls, 100)),
		MaxHalfOpenWait: -1, // maxWaitDurationInHalfOpenState 0: no bound
	}
	if r.slidingWindowType == "TIME_BASED" {
		n := def(r.slidingWindowSize, 100)
		cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, time.Duration(n)*time.Second, n
		cfg.WindowSize = 0
	}
	if r.exponentialBackoffMultiplier != 0 {
		cfg.OpenDurationMultiplier = r.exponentialBackoffMultiplier
		// Resilience4j has no cap unless exponentialMaxWaitDurationInOpenState.
		cfg.MaxOpenDuration = defd(r.exponentialMaxWaitDurationInOpenState, 1000*cfg.OpenDuration)
	}
	if r.maxWaitDurationInHalfOpenState > 0 {
		cfg.MaxHalfOpenWait = r.maxWaitDurationInHalfOpenState
	}
	return cfg
}

// migrated is a breaker with a log of its state changes.
type migrated struct {
	*circuit.Breaker
	mu  sync.Mutex
	evs []circuit.StateChange
}

func newMigrated(t *testing.T, cfg circuit.Config) *migrated {
	t.Helper()
	m := &migrated{}
	cfg.OnStateChange = func(ev circuit.StateChange) {
		m.mu.Lock()
		m.evs = append(m.evs, ev)
		m.mu.Unlock()
	}
	b, err := circuit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Breaker = b
	return m
}

// calls makes one call per letter of seq: 'S' succeeds, 'F' fails. It
// returns how many were rejected.
func (m *migrated) calls(seq string) (rejected int) {
	for _, c := range seq {
		p, err := m.Allow()
		if err != nil {
			rejected++
			continue
		}
		if c == 'F' {
			p.Done(watertight.Failure)
		} else {
			p.Done(watertight.Success)
		}
	}
	return rejected
}

// wait sleeps in the bubble and lets the breaker's timers run.
func wait(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func (m *migrated) want(t *testing.T, s circuit.State, what string) {
	t.Helper()
	if got := m.State(); got != s {
		t.Fatalf("%s: %v, want %v", what, got, s)
	}
}

// "The failure rate and slow call rate can only be calculated, if a minimum
// number of calls were recorded. For example, if the minimum number of
// required calls is 10, then at least 10 calls must be recorded, before the
// failure rate can be calculated. If only 9 calls have been evaluated the
// CircuitBreaker will not trip open even if all 9 calls have failed."
// (r4jDocs)
func TestMigratingResilience4jMinimumNumberOfCalls(t *testing.T) {
	m := newMigrated(t, r4j{slidingWindowSize: 10, minimumNumberOfCalls: 10}.config())
	defer m.Reset()
	m.calls("FFFFFFFFF")
	m.want(t, circuit.Closed, "9 of 9 calls failed, minimumNumberOfCalls 10")
	m.calls("F")
	m.want(t, circuit.Open, "10 of 10 failed")
}

// "If the failure rate is equal to or greater than the threshold, the
// CircuitBreaker transitions to open and starts short-circuiting calls."
// (r4jConfig, failureRateThreshold). The check runs after every recorded
// call, a success too (CircuitBreakerMetrics.onSuccess), so the success that
// brings the window to the minimum can trip it — as watertight's does.
func TestMigratingResilience4jFailureRateThreshold(t *testing.T) {
	cfg := r4j{slidingWindowSize: 4, minimumNumberOfCalls: 4, failureRateThreshold: 50}.config()
	m := newMigrated(t, cfg)
	defer m.Reset()
	m.calls("FSF")
	m.want(t, circuit.Closed, "3 calls, below the minimum")
	m.calls("S")
	m.want(t, circuit.Open, "2 of 4 failed: equal to the threshold, on a success")
	m2 := newMigrated(t, cfg)
	defer m2.Reset()
	m2.calls("FSSSFSSS")
	m2.want(t, circuit.Closed, "25%")
	// "If slidingWindowSize is 100 and slidingWindowType is COUNT_BASED,
	// the last 100 calls are recorded and aggregated." (r4jConfig)
	m2.calls("SFF") // the last 4 calls: S S F F
	m2.want(t, circuit.Open, "the last 4 calls S S F F: 50%")
}

// "Configures a threshold in percentage. The CircuitBreaker considers a
// call as slow when the call duration is greater than
// slowCallDurationThreshold. When the percentage of slow calls is equal to
// or greater than the threshold, the CircuitBreaker transitions to open and
// starts short-circuiting calls." (r4jConfig, slowCallRateThreshold)
func TestMigratingResilience4jSlowCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 2, minimumNumberOfCalls: 2, slowCallRateThreshold: 50, slowCallDurationThreshold: 2 * time.Second}.config())
		defer m.Reset()
		call := func(d time.Duration) {
			p, err := m.Allow()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(d)
			p.Done(watertight.Success)
		}
		call(2 * time.Second) // exactly the threshold: not slow
		call(time.Second)
		m.want(t, circuit.Closed, "a call of exactly slowCallDurationThreshold is not slow")
		call(2*time.Second + time.Nanosecond)
		m.want(t, circuit.Open, "1 of 2 calls slower than the threshold, 50%")
	})
}

// "Configures the number of permitted calls when the CircuitBreaker is
// half open." (r4jConfig, permittedNumberOfCallsInHalfOpenState) and "If the
// failure rate or slow call rate is then equal or greater than the
// configured threshold, the state changes back to OPEN. If the failure rate
// and slow call rate is below the threshold, the state changes back to
// CLOSED." (r4jDocs). Rejections beyond the permitted calls are
// circuit.ErrHalfOpen (Resilience4j's CallNotPermittedException).
func TestMigratingResilience4jPermittedNumberOfCallsInHalfOpenState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 4, minimumNumberOfCalls: 4, waitDurationInOpenState: 10 * time.Second, permittedNumberOfCallsInHalfOpenState: 3}.config())
		defer m.Reset()
		m.calls("FFFF")
		wait(10 * time.Second)
		var trials []circuit.Permit
		for range 3 {
			p, err := m.Allow()
			if err != nil {
				t.Fatalf("a permitted trial: %v", err)
			}
			trials = append(trials, p)
		}
		if _, err := m.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("the 4th call in half-open: %v, want ErrHalfOpen", err)
		}
		trials[0].Done(watertight.Failure)
		trials[1].Done(watertight.Success)
		m.want(t, circuit.HalfOpen, "1 of 3 failed, one to come")
		trials[2].Done(watertight.Success)
		m.want(t, circuit.Closed, "1 of 3 failed: 33% below 50%")

		// Where watertight decides sooner: Resilience4j waits for the
		// three trials; two failures of three already make 67%, so
		// watertight opens at the second — the outcome the third could
		// not change.
		m.calls("FFFF")
		wait(10 * time.Second)
		m.calls("FF")
		m.want(t, circuit.Open, "2 of 3 trials failed")
	})
}

// Resilience4j judges half-open after min(minimumNumberOfCalls,
// permittedNumberOfCallsInHalfOpenState) trials (CircuitBreakerMetrics.
// forHalfOpen clamps the minimum to the permitted calls): the mapping sets
// HalfOpenCalls to that.
func TestMigratingResilience4jHalfOpenMinimum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 2, minimumNumberOfCalls: 2, waitDurationInOpenState: time.Second, permittedNumberOfCallsInHalfOpenState: 5}.config())
		defer m.Reset()
		m.calls("FF")
		wait(time.Second)
		m.calls("SS")
		m.want(t, circuit.Closed, "2 trials with minimumNumberOfCalls 2")
	})
}

// "If slidingWindowSize is 10 and slidingWindowType is TIME_BASED, the
// calls of the last 10 seconds are recorded and aggregated." (r4jConfig).
// Resilience4j's buckets are whole epoch seconds; watertight's are seconds
// from when the window began (see docs/migrating.md).
func TestMigratingResilience4jTimeBased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowType: "TIME_BASED", slidingWindowSize: 10, minimumNumberOfCalls: 4}.config())
		defer m.Reset()
		m.calls("FFF")
		wait(10 * time.Second)
		m.calls("SFSS")
		m.want(t, circuit.Closed, "the 3 failures are 10s old: 1 of 4")
		m.calls("FF")
		m.want(t, circuit.Open, "3 of 6 in the last 10s")
	})
}

// "If the slidingWindowType is COUNT_BASED, the minimumNumberOfCalls may not
// be greater than slidingWindowSize. If a greater value is provided,
// minimumNumberOfCalls will be equal to slidingWindowSize." (r4jConfig).
// watertight refuses instead: set min_calls to the window size.
func TestMigratingResilience4jMinimumAboveWindowDiffers(t *testing.T) {
	cfg := r4j{slidingWindowSize: 10, minimumNumberOfCalls: 20}.config()
	if _, err := circuit.New(cfg); err == nil {
		t.Fatal("MinCalls 20 above WindowSize 10: no error")
	}
	cfg.MinCalls = 10
	m := newMigrated(t, cfg)
	defer m.Reset()
	m.calls("FFFFFFFFFF")
	m.want(t, circuit.Open, "10 of 10 with the minimum clamped to the window")
}

// automaticTransitionFromOpenToHalfOpenEnabled: "Enables automatic
// transition from OPEN to HALF_OPEN state once the waitDurationInOpenState
// has passed." (r4jConfig). watertight always does (a timer); with the
// default false, Resilience4j reads OPEN until the next call, which then
// moves it and is its first trial — the same call watertight admits.
func TestMigratingResilience4jAutomaticTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 2, minimumNumberOfCalls: 2, waitDurationInOpenState: 5 * time.Second}.config())
		defer m.Reset()
		m.calls("FF")
		wait(5*time.Second - time.Nanosecond)
		m.want(t, circuit.Open, "before waitDurationInOpenState")
		wait(time.Nanosecond)
		m.want(t, circuit.HalfOpen, "at waitDurationInOpenState, no call made")
	})
}

// enableExponentialBackoff with exponentialBackoffMultiplier and
// exponentialMaxWaitDurationInOpenState: the wait of the n-th opening in a
// row is waitDurationInOpenState·multiplier^(n-1), capped
// (IntervalFunction.ofExponentialBackoff; attempts count openings since the
// last close, CircuitBreakerStateMachine). OpenDurationMultiplier and
// MaxOpenDuration are the same.
func TestMigratingResilience4jExponentialBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 1, minimumNumberOfCalls: 1, waitDurationInOpenState: 10 * time.Second,
			permittedNumberOfCallsInHalfOpenState: 1, exponentialBackoffMultiplier: 2, exponentialMaxWaitDurationInOpenState: 40 * time.Second}.config())
		defer m.Reset()
		m.calls("F")
		for _, d := range []time.Duration{20, 40, 40} {
			wait(time.Hour)
			m.calls("F")
			m.mu.Lock()
			got := m.evs[len(m.evs)-1].OpenFor
			m.mu.Unlock()
			if got != d*time.Second {
				t.Fatalf("open for %v, want %v", got, d*time.Second)
			}
		}
		wait(time.Hour)
		m.calls("S")
		m.calls("F")
		if m.evs[len(m.evs)-1].OpenFor != 10*time.Second {
			t.Fatalf("after a close: open for %v, want 10s", m.evs[len(m.evs)-1].OpenFor)
		}
	})
}

// maxWaitDurationInHalfOpenState: "Configures CircuitBreaker with a fixed
// wait duration which controls how long the CircuitBreaker should stay in
// Half Open state, before it switches to open." (r4jConfig; the state
// after it is transitionToStateAfterWaitDuration, OPEN by default).
// watertight's MaxHalfOpenWait decides on the trials that did end instead:
// closed if their rates are below the thresholds, open if none ended.
func TestMigratingResilience4jMaxWaitInHalfOpenDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, r4j{slidingWindowSize: 2, minimumNumberOfCalls: 2, waitDurationInOpenState: time.Second,
			permittedNumberOfCallsInHalfOpenState: 3, maxWaitDurationInHalfOpenState: 5 * time.Second}.config())
		defer m.Reset()
		m.calls("FF")
		wait(time.Second)
		m.calls("S") // one trial of two ended, the other never comes
		p, _ := m.Allow()
		_ = p
		wait(5 * time.Second)
		m.want(t, circuit.Closed, "after maxWaitDurationInHalfOpenState with 1 success (Resilience4j: OPEN)")
		m.calls("FF")
		wait(time.Second)
		wait(5 * time.Second)
		m.want(t, circuit.Open, "after maxWaitDurationInHalfOpenState with no trial (Resilience4j: OPEN too)")
	})
}

// polly holds CircuitBreakerStrategyOptions; zero fields take Polly's
// defaults.
type polly struct {
	FailureRatio      float64       // 0.1
	MinimumThroughput int           // 100
	SamplingDuration  time.Duration // 30s
	BreakDuration     time.Duration // 5s
}

// config is the mapping of docs/migrating.md, Polly table.
func (p polly) config() circuit.Config {
	if p.FailureRatio == 0 {
		p.FailureRatio = 0.1
	}
	if p.MinimumThroughput == 0 {
		p.MinimumThroughput = 100
	}
	if p.SamplingDuration == 0 {
		p.SamplingDuration = 30 * time.Second
	}
	if p.BreakDuration == 0 {
		p.BreakDuration = 5 * time.Second
	}
	return circuit.Config{
		WindowType:           circuit.TimeBased,
		WindowDuration:       p.SamplingDuration,
		WindowBuckets:        10, // Polly: 10 windows (one below 200ms)
		MinCalls:             p.MinimumThroughput,
		FailureRateThreshold: p.FailureRatio * 100,
		OpenDuration:         p.BreakDuration,
		OpenJitter:           -1,
		HalfOpenCalls:        1, // one probe
		HalfOpenSuccesses:    1,
		MaxHalfOpenWait:      -1, // Polly waits for the probe's outcome
	}
}

// The failure-handling example: FailureRatio 0.1, SamplingDuration 1s,
// MinimumThroughput 3, BreakDuration 30s, ten failing calls; "The output
// would look like this:" three times "Operation failed please try again."
// then seven times "Operation failed too many times please try again
// later." (pollyDocs, Failure handling)
func TestMigratingPollyFailureHandlingExample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, polly{FailureRatio: 0.1, SamplingDuration: time.Second, MinimumThroughput: 3, BreakDuration: 30 * time.Second}.config())
		defer m.Reset()
		if rejected := m.calls("FFFFFFFFFF"); rejected != 7 {
			t.Fatalf("%d of 10 rejected, want 7 (3 failures, then the circuit is broken)", rejected)
		}
	})
}

// Simple (SamplingDuration 2s, MinimumThroughput 2, FailureRatio 0.5):
// "The circuit will not break because the actual failure ratio (0.33) will
// be below the threshold (0.5) after the 3rd call." and "The circuit will
// break because the actual failure ratio meets the threshold (0.5) after
// the 2nd call." (pollyDocs, Simple)
func TestMigratingPollySimple(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := polly{SamplingDuration: 2 * time.Second, MinimumThroughput: 2, FailureRatio: 0.5}.config()
		happy := newMigrated(t, cfg)
		defer happy.Reset()
		happy.calls("SSF")
		happy.want(t, circuit.Closed, "happy path: 1 of 3")
		unhappy := newMigrated(t, cfg)
		defer unhappy.Reset()
		if rejected := unhappy.calls("SFS"); rejected != 1 {
			t.Fatalf("unhappy path: %d rejected, want the 3rd call", rejected)
		}
		unhappy.want(t, circuit.Open, "unhappy path: 1 of 2")
	})
}

// Complex (as Simple, BreakDuration 1s): "The circuit will break and later
// it will transition into the HalfOpen state. The probe will then succeed,
// so the circuit breaker will go back to the normal (Closed) state." and
// "The probe will then fail, so the circuit breaker will become broken
// again (the Open state)." (pollyDocs, Complex)
func TestMigratingPollyComplex(t *testing.T) {
	for _, probe := range []string{"S", "F"} {
		synctest.Test(t, func(t *testing.T) {
			m := newMigrated(t, polly{SamplingDuration: 2 * time.Second, MinimumThroughput: 2, FailureRatio: 0.5, BreakDuration: time.Second}.config())
			defer m.Reset()
			m.calls("FF")
			if m.calls("S") != 1 {
				t.Fatal("the 3rd call was not rejected")
			}
			wait(time.Second)
			m.calls(probe)
			if probe == "S" {
				m.want(t, circuit.Closed, "the probe succeeded")
			} else {
				m.want(t, circuit.Open, "the probe failed")
			}
		})
	}
}

// One probe: "If the first action after the break duration period results
// in a handled exception, the circuit will break again for another
// BreakDuration; if no exception is thrown, the circuit will reset."
// (CircuitBreakerStrategyOptions remarks). Calls beside the probe are
// rejected: Polly's BrokenCircuitException, watertight's ErrHalfOpen.
func TestMigratingPollySingleProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, polly{SamplingDuration: 2 * time.Second, MinimumThroughput: 2, FailureRatio: 0.5, BreakDuration: time.Second}.config())
		defer m.Reset()
		m.calls("FF")
		wait(time.Second)
		p, err := m.Allow()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("beside the probe: %v, want ErrHalfOpen", err)
		}
		wait(time.Hour) // Polly waits for the probe as long as it takes
		m.want(t, circuit.HalfOpen, "the probe still in flight")
		p.Done(watertight.Failure)
		m.want(t, circuit.Open, "the probe failed")
		wait(time.Second)
		m.calls("S")
		m.want(t, circuit.Closed, "the next probe succeeded")
	})
}

// "If the MinimumThroughput is not reached during the SamplingDuration then
// the FailureRatio is ignored. In other words, the circuit will not break
// even if all of the executions failed when their quantity is below the
// minimum throughput." (pollyDocs, Defaults)
func TestMigratingPollyMinimumThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, polly{SamplingDuration: 2 * time.Second, MinimumThroughput: 4, FailureRatio: 0.5}.config())
		defer m.Reset()
		m.calls("FFF")
		wait(2 * time.Second)
		m.calls("FFF")
		m.want(t, circuit.Closed, "3 failures in each of two sampling durations, minimum 4")
		m.calls("F")
		m.want(t, circuit.Open, "4 of 4 in the last 2s")
	})
}

// Where watertight differs: Polly judges the ratio only when an outcome is
// a failure (AdvancedCircuitBehavior.OnActionFailure); watertight also on
// the success that brings the window to MinCalls, and in a time window on
// every outcome. With MinimumThroughput 4 and FailureRatio 0.5, F F S S
// leaves Polly closed (until its next failure) and opens watertight.
func TestMigratingPollyMinimumSuccessDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMigrated(t, polly{SamplingDuration: 10 * time.Second, MinimumThroughput: 4, FailureRatio: 0.5}.config())
		defer m.Reset()
		m.calls("FFS")
		m.want(t, circuit.Closed, "3 calls")
		m.calls("S")
		m.want(t, circuit.Open, "2 of 4 on a success (Polly: still closed)")
	})
}
