package bench

// Differential tests for docs/migrating.md: each mapping row that claims
// equivalence between a Go peer's breaker and a watertight circuit.Config is
// proved here by driving both through the same sequences of outcomes — fixed
// cases and seeded random ones — and requiring that after every step they
// agree on whether the call was allowed and on the state. Where a peer and
// watertight legitimately differ, a test named ...Differs states the
// difference and checks it.
//
// Time: gobreaker and failsafe-go read time.Now, so everything runs in a
// testing/synctest bubble, where both they and watertight's timers see the
// same virtual clock. hystrix-go is the exception, see hystrixCircuit.
//
// Run: cd bench && go test -race -run Migrat .

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/afex/hystrix-go/hystrix"
	fscircuit "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// A sequence is a string of steps: 'S' a call that succeeds, 'F' one that
// fails, 'I' one whose outcome is ignored (gobreaker's IsExcluded,
// watertight.Ignored), '.' a wait of one tick. A rejected call is not made.

// subject is one breaker under test, peer or watertight.
type subject interface {
	// allow asks for a call; if allowed, done records its outcome ('S',
	// 'F' or 'I').
	allow() (ok bool, done func(outcome rune))
	// state is "closed", "open" or "half-open".
	state() string
}

// wt adapts a watertight breaker. With noHalfOpen its half-open state reads
// "open" (for hystrix-go, which has no half-open state to compare with).
type wt struct {
	b          *circuit.Breaker
	noHalfOpen bool
}

func newWT(t *testing.T, cfg circuit.Config) *wt {
	t.Helper()
	b, err := circuit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &wt{b: b}
}

func (w *wt) allow() (bool, func(rune)) {
	p, err := w.b.Allow()
	if err != nil {
		if !watertight.IsRejection(err) {
			panic(err)
		}
		return false, nil
	}
	return true, func(c rune) {
		switch c {
		case 'S':
			p.Done(watertight.Success)
		case 'F':
			p.Done(watertight.Failure)
		default:
			p.Done(watertight.Ignored)
		}
	}
}

func (w *wt) state() string {
	s := w.b.State()
	if s == circuit.HalfOpen && w.noHalfOpen {
		return "open"
	}
	return s.String()
}

var (
	errFail    = errors.New("fail")
	errIgnored = errors.New("ignored")
)

// gb adapts a gobreaker two-step breaker. Its State reads the clock and
// moves open → half-open itself, as its next call would.
type gb struct {
	cb *gobreaker.TwoStepCircuitBreaker[any]
}

func newGB(st gobreaker.Settings) *gb {
	st.IsExcluded = func(err error) bool { return errors.Is(err, errIgnored) }
	return &gb{cb: gobreaker.NewTwoStepCircuitBreaker[any](st)}
}

func (g *gb) allow() (bool, func(rune)) {
	done, err := g.cb.Allow()
	if err != nil {
		return false, nil
	}
	return true, func(c rune) {
		switch c {
		case 'S':
			done(nil)
		case 'F':
			done(errFail)
		default:
			done(errIgnored)
		}
	}
}

func (g *gb) state() string { return g.cb.State().String() }

// fs adapts a failsafe-go breaker. Its open state moves to half-open only
// on the next permit request; State does not, so an open breaker whose
// delay has passed reads "half-open": its next call is a trial, as
// watertight's is.
type fs struct{ cb fscircuit.CircuitBreaker[any] }

func (f *fs) allow() (bool, func(rune)) {
	if !f.cb.TryAcquirePermit() {
		return false, nil
	}
	return true, func(c rune) {
		if c == 'S' {
			f.cb.RecordSuccess()
		} else {
			f.cb.RecordFailure()
		}
	}
}

func (f *fs) state() string {
	if f.cb.State() == fscircuit.OpenState && f.cb.RemainingDelay() == 0 {
		return "half-open"
	}
	return f.cb.State().String()
}

// drive runs seq through peer and w, one tick per '.', and reports the
// first step where they disagree. It runs inside a synctest bubble.
func drive(t *testing.T, seq string, tick time.Duration, peer subject, w subject) bool {
	t.Helper()
	for i, c := range seq {
		if c == '.' {
			time.Sleep(tick)
			synctest.Wait() // watertight's open timer fires
		} else {
			pok, pdone := peer.allow()
			wok, wdone := w.allow()
			if pok != wok {
				t.Errorf("%q step %d (%c): peer allowed=%v, watertight allowed=%v", seq, i, c, pok, wok)
				return false
			}
			if pok {
				pdone(c)
				wdone(c)
			}
		}
		if ps, ws := peer.state(), w.state(); ps != ws {
			t.Errorf("%q after step %d (%c): peer %s, watertight %s", seq, i, c, ps, ws)
			return false
		}
	}
	return true
}

// randomSeqs returns n sequences of length size drawn from alphabet (a
// letter repeated weighs more), from a fixed seed: the same every run.
func randomSeqs(seed uint64, n, size int, alphabet string) []string {
	r := rand.New(rand.NewPCG(seed, 17))
	seqs := make([]string, n)
	for i := range seqs {
		var b strings.Builder
		for range size {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		seqs[i] = b.String()
	}
	return seqs
}

// differential runs fixed and random sequences through a fresh pair of
// breakers each, made inside the bubble.
func differential(t *testing.T, tick time.Duration, fixed, random []string, pair func(t *testing.T) (peer subject, w *wt)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bad := 0
	for _, seq := range append(fixed, random...) {
		synctest.Test(t, func(t *testing.T) {
			peer, w := pair(t)
			defer w.b.Reset() // no timer left to run the bubble's clock on
			if !drive(t, seq, tick, peer, w) {
				bad++
			}
		})
		if bad >= 3 {
			t.Fatal("stopping after 3 disagreements")
		}
	}
}

// gobreakerDefaults is watertight's config for gobreaker.Settings{}: trips
// when ConsecutiveFailures > 5, counts never cleared while closed, open for
// 60s, one trial in half-open, no bound on half-open.
func gobreakerDefaults() circuit.Config {
	return circuit.Config{
		ConsecutiveFailures:  6,  // ReadyToTrip: ConsecutiveFailures > 5
		FailureRateThreshold: -1, // no rate rule
		// gobreaker leaves open strictly after Timeout (expiry.Before(now)),
		// watertight at OpenDuration: 1ns later is the same instant.
		OpenDuration:      60*time.Second + time.Nanosecond,
		OpenJitter:        -1, // gobreaker does not jitter
		HalfOpenCalls:     1,  // MaxRequests 0 means 1
		HalfOpenSuccesses: 1,
		MaxHalfOpenWait:   -1, // gobreaker has no bound on half-open
	}
}

func TestMigratingGobreakerDefaults(t *testing.T) {
	fixed := []string{
		"FFFFFF",          // the sixth failure in a row trips
		"FFFFFSFFFFFF",    // a success ends the streak
		"FFFFFIFSFFFFFF",  // an excluded outcome neither extends nor ends it
		"FFFFFF...S",      // half-open after 60s (+1ns): one success closes
		"FFFFFF...FS...S", // a failed trial opens again; the next 60s on, a trial
		"FFFFFF..S.S",     // still open at exactly 60s
	}
	differential(t, 20*time.Second, fixed, randomSeqs(1, 300, 60, "SFFFFI.."), func(t *testing.T) (subject, *wt) {
		return newGB(gobreaker.Settings{}), newWT(t, gobreakerDefaults())
	})
}

// MaxRequests k: k trials, k successes close, the first failure opens.
func TestMigratingGobreakerMaxRequests(t *testing.T) {
	fixed := []string{"FFFFFF.SSS", "FFFFFF.SSF.", "FFFFFF.SIS.S"}
	differential(t, 10*time.Second, fixed, randomSeqs(2, 300, 60, "SSFFFFI."), func(t *testing.T) (subject, *wt) {
		cfg := gobreakerDefaults()
		cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = 3, 3
		cfg.OpenDuration = 10*time.Second + time.Nanosecond
		return newGB(gobreaker.Settings{MaxRequests: 3, Timeout: 10 * time.Second}), newWT(t, cfg)
	})
}

// gobreakerCounts gives a gobreaker ReadyToTrip what watertight's TripWhen
// sees. Requests is the calls that ended (gobreaker counts in-flight and
// excluded requests too; see TestMigratingGobreakerInFlightDiffers).
func gobreakerCounts(c circuit.Counts) gobreaker.Counts {
	return gobreaker.Counts{
		Requests:            uint32(c.Calls),
		TotalFailures:       uint32(c.Failures),
		TotalSuccesses:      uint32(c.Calls - c.Failures),
		ConsecutiveFailures: uint32(c.ConsecutiveFailures),
	}
}

// A custom ReadyToTrip becomes TripWhen. With Interval 0 gobreaker never
// clears its counts while closed: a time window longer than any run, in one
// bucket, is the same.
func TestMigratingGobreakerReadyToTrip(t *testing.T) {
	ready := func(c gobreaker.Counts) bool { return c.TotalFailures >= 3 || c.ConsecutiveFailures >= 2 }
	fixed := []string{"FSFSF", "SFF", "FSFSSSSSSF.....S"}
	differential(t, 5*time.Second, fixed, randomSeqs(3, 300, 60, "SSSSFFI."), func(t *testing.T) (subject, *wt) {
		cfg := gobreakerDefaults()
		cfg.ConsecutiveFailures = 0
		cfg.TripWhen = func(c circuit.Counts) bool { return ready(gobreakerCounts(c)) }
		cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, 100*365*24*time.Hour, 1
		cfg.OpenDuration = 10*time.Second + time.Nanosecond
		return newGB(gobreaker.Settings{ReadyToTrip: ready, Timeout: 10 * time.Second}), newWT(t, cfg)
	})
}

// Interval with BucketPeriod is a rolling window whose buckets start when
// the breaker closed, as watertight's time window's do.
func TestMigratingGobreakerBucketPeriod(t *testing.T) {
	ready := func(c gobreaker.Counts) bool { return c.TotalFailures >= 3 }
	fixed := []string{"FF..........F", "FF.........F", "F...F...F", "FFF.....................S"}
	differential(t, 400*time.Millisecond, fixed, randomSeqs(4, 300, 80, "SSFI...."), func(t *testing.T) (subject, *wt) {
		cfg := gobreakerDefaults()
		cfg.ConsecutiveFailures = 0
		cfg.TripWhen = func(c circuit.Counts) bool { return ready(gobreakerCounts(c)) }
		cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, 4*time.Second, 4
		cfg.OpenDuration = 5*time.Second + time.Nanosecond
		return newGB(gobreaker.Settings{ReadyToTrip: ready, Interval: 4 * time.Second, BucketPeriod: time.Second, Timeout: 5 * time.Second}), newWT(t, cfg)
	})
}

// At exactly Timeout gobreaker is still open (it leaves strictly after);
// watertight's timer fires at OpenDuration. Hence the 1ns in the mapping.
func TestMigratingGobreakerTimeoutBoundaryDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGB(gobreaker.Settings{Timeout: time.Minute})
		cfg := gobreakerDefaults()
		cfg.OpenDuration = time.Minute
		w := newWT(t, cfg)
		defer w.b.Reset()
		drive(t, "FFFFFF", 0, g, w)
		time.Sleep(time.Minute)
		synctest.Wait()
		if g.state() != "open" || w.state() != "half-open" {
			t.Fatalf("at exactly Timeout: gobreaker %s (want open), watertight %s (want half-open)", g.state(), w.state())
		}
		time.Sleep(time.Nanosecond)
		if g.state() != "half-open" {
			t.Fatalf("1ns later: gobreaker %s, want half-open", g.state())
		}
	})
}

// gobreaker's Interval without BucketPeriod clears the counts (the streak
// too) when Interval has passed, and the next interval starts at the first
// call after that, not on a grid. watertight's nearest, a one-bucket time
// window, is aligned to when the breaker closed and never clears the streak.
func TestMigratingGobreakerIntervalDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready := func(c gobreaker.Counts) bool { return c.TotalFailures >= 2 }
		g := newGB(gobreaker.Settings{ReadyToTrip: ready, Interval: 10 * time.Second})
		cfg := gobreakerDefaults()
		cfg.ConsecutiveFailures = 0
		cfg.TripWhen = func(c circuit.Counts) bool { return ready(gobreakerCounts(c)) }
		cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, 10*time.Second, 1
		w := newWT(t, cfg)
		defer w.b.Reset()
		// At 15s gobreaker clears and starts an interval [15s, 25s];
		// watertight's bucket is [10s, 20s), so at 22s it has a new one.
		time.Sleep(15 * time.Second)
		drive(t, "F", 0, g, w)
		time.Sleep(7 * time.Second)
		g.allow()
		okG, doneG := g.allow()
		okW, doneW := w.allow()
		if !okG || !okW {
			t.Fatal("closed breakers rejected")
		}
		doneG('F')
		doneW('F')
		if g.state() != "open" || w.state() != "closed" {
			t.Fatalf("failures at 15s and 22s: gobreaker %s (want open: one interval from 15s), watertight %s (want closed: buckets [10s,20s) and [20s,30s))", g.state(), w.state())
		}
	})
}

// gobreaker counts a request in Counts.Requests when it starts; watertight's
// Counts.Calls holds the calls that ended.
func TestMigratingGobreakerInFlightDiffers(t *testing.T) {
	ready := func(c gobreaker.Counts) bool { return c.Requests >= 2 && c.TotalFailures >= 1 }
	g := newGB(gobreaker.Settings{ReadyToTrip: ready})
	cfg := gobreakerDefaults()
	cfg.ConsecutiveFailures = 0
	cfg.TripWhen = func(c circuit.Counts) bool { return ready(gobreakerCounts(c)) }
	w := newWT(t, cfg)
	_, g1 := g.allow()
	_, g2 := g.allow() // in flight
	_, w1 := w.allow()
	_, w2 := w.allow()
	g1('F')
	w1('F')
	if g.state() != "open" || w.state() != "closed" {
		t.Fatalf("one failure, one call in flight: gobreaker %s (want open: Requests is 2), watertight %s (want closed: Calls is 1)", g.state(), w.state())
	}
	g2('S')
	w2('S')
}

// A ratio with a minimum: gobreaker asks ReadyToTrip only after a failure,
// watertight asks TripWhen also on the success that brings the window to
// MinCalls (and, in a time window, on every outcome), so it trips one call
// earlier. Rules written with MinCalls and FailureRateThreshold do the same.
func TestMigratingGobreakerMinimumSuccessDiffers(t *testing.T) {
	ready := func(c gobreaker.Counts) bool {
		return c.Requests >= 4 && c.TotalFailures*2 >= c.Requests
	}
	g := newGB(gobreaker.Settings{ReadyToTrip: ready})
	w := newWT(t, circuit.Config{WindowSize: 100, MinCalls: 4, FailureRateThreshold: 50, OpenJitter: -1, HalfOpenCalls: 1, MaxHalfOpenWait: -1})
	defer w.b.Reset()
	for _, c := range "FFS" {
		drive(t, string(c), 0, g, w)
	}
	_, gd := g.allow()
	_, wd := w.allow()
	gd('S')
	wd('S')
	if g.state() != "closed" || w.state() != "open" {
		t.Fatalf("FFSS: gobreaker %s (want closed: a success never trips it), watertight %s (want open: 50%% over 4 calls)", g.state(), w.state())
	}
	_, gd = g.allow()
	gd('F') // gobreaker: the next failure trips
	if g.state() != "open" {
		t.Fatalf("FFSSF: gobreaker %s, want open", g.state())
	}
}

func mustNew(t *testing.T, cfg circuit.Config) *circuit.Breaker {
	t.Helper()
	b, err := circuit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Both drop the outcome of a call that started in an earlier state
// (gobreaker's generation, watertight's generation), and both reject the
// calls beyond the trials: gobreaker.ErrTooManyRequests is circuit.ErrHalfOpen.
func TestMigratingGobreakerEarlierStateAndTooManyRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})
		w := mustNew(t, gobreakerDefaults())
		defer w.Reset()
		gOld, _ := g.Allow() // starts closed, ends half-open
		wOld, _ := w.Allow()
		for range 6 {
			d, _ := g.Allow()
			d(errFail)
			p, _ := w.Allow()
			p.Done(watertight.Failure)
		}
		time.Sleep(time.Minute + time.Nanosecond)
		synctest.Wait()
		gTrial, gErr := g.Allow()
		wTrial, wErr := w.Allow()
		if gErr != nil || wErr != nil {
			t.Fatalf("trial: %v, %v", gErr, wErr)
		}
		_, gErr = g.Allow()
		_, wErr = w.Allow()
		if !errors.Is(gErr, gobreaker.ErrTooManyRequests) || !errors.Is(wErr, circuit.ErrHalfOpen) {
			t.Fatalf("beyond the trials: gobreaker %v, watertight %v", gErr, wErr)
		}
		gOld(nil)
		wOld.Done(watertight.Success)
		if g.State() != gobreaker.StateHalfOpen || w.State() != circuit.HalfOpen {
			t.Fatalf("a success from the closed state: gobreaker %v, watertight %v, want both still half-open", g.State(), w.State())
		}
		gTrial(errFail)
		wTrial.Done(watertight.Failure)
		_, gErr = g.Allow()
		_, wErr = w.Allow()
		if !errors.Is(gErr, gobreaker.ErrOpenState) || !errors.Is(wErr, circuit.ErrOpen) {
			t.Fatalf("open: gobreaker %v, watertight %v", gErr, wErr)
		}
	})
}

// failsafe-go's NewWithDefaults: opens on one failure, one trial, closes on
// its success, open for one minute.
func failsafeDefaults() circuit.Config {
	return circuit.Config{
		ConsecutiveFailures:  1,
		FailureRateThreshold: -1,
		OpenDuration:         time.Minute,
		OpenJitter:           -1,
		HalfOpenCalls:        1,
		HalfOpenSuccesses:    1,
		MaxHalfOpenWait:      -1,
	}
}

func failsafePair(b fscircuit.Builder[any], cfg circuit.Config) func(t *testing.T) (subject, *wt) {
	return func(t *testing.T) (subject, *wt) { return &fs{cb: b.Build()}, newWT(t, cfg) }
}

func TestMigratingFailsafeDefaults(t *testing.T) {
	fixed := []string{"SSF", "F...S", "F...FS...S", "F..S"}
	differential(t, 20*time.Second, fixed, randomSeqs(5, 300, 60, "SSSF."),
		failsafePair(fscircuit.NewBuilder[any](), failsafeDefaults()))
}

// WithFailureThreshold(k): k failures in a row (the last k executions all
// failed); in half-open, k trials, the first success closes, k failures open.
func TestMigratingFailsafeFailureThreshold(t *testing.T) {
	cfg := failsafeDefaults()
	cfg.ConsecutiveFailures, cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = 3, 3, 1
	cfg.OpenDuration = 10 * time.Second
	fixed := []string{"FFSFFF", "FFF.FFS", "FFF.FFF.S"}
	differential(t, 5*time.Second, fixed, randomSeqs(6, 300, 60, "SFF."),
		failsafePair(fscircuit.NewBuilder[any]().WithFailureThreshold(3).WithDelay(10*time.Second), cfg))
}

// WithFailureThresholdRatio(k, n): k failures among the last n executions,
// from the first execution on; in half-open, n trials, k failures open,
// n-k+1 successes close.
func TestMigratingFailsafeFailureThresholdRatio(t *testing.T) {
	cfg := failsafeDefaults()
	cfg.ConsecutiveFailures = 0
	cfg.WindowSize, cfg.FailureCountThreshold = 5, 3
	cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = 5, 3
	cfg.OpenDuration = 10 * time.Second
	fixed := []string{"FFF", "FSFSSSFSF", "FSFSSSFSFSF", "FFF..SFSFS", "FFF..FSFSF"}
	differential(t, 5*time.Second, fixed, randomSeqs(7, 300, 80, "SSFF."),
		failsafePair(fscircuit.NewBuilder[any]().WithFailureThresholdRatio(3, 5).WithDelay(10*time.Second), cfg))
}

// WithSuccessThreshold(k): k trials, all must succeed.
func TestMigratingFailsafeSuccessThreshold(t *testing.T) {
	cfg := failsafeDefaults()
	cfg.ConsecutiveFailures, cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = 2, 2, 2
	fixed := []string{"FF...SS", "FF...SF...SS"}
	differential(t, 20*time.Second, fixed, randomSeqs(8, 300, 60, "SSFF."),
		failsafePair(fscircuit.NewBuilder[any]().WithFailureThreshold(2).WithSuccessThreshold(2), cfg))
}

// WithSuccessThresholdRatio(k, n): n trials, k successes close, n-k+1
// failures open.
func TestMigratingFailsafeSuccessThresholdRatio(t *testing.T) {
	cfg := failsafeDefaults()
	cfg.ConsecutiveFailures, cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = 2, 4, 3
	fixed := []string{"FF...SFSS", "FF...SFF", "FF...FFSS...SSS"}
	differential(t, 20*time.Second, fixed, randomSeqs(9, 300, 60, "SSSFF."),
		failsafePair(fscircuit.NewBuilder[any]().WithFailureThreshold(2).WithSuccessThresholdRatio(3, 4), cfg))
}

// WithDelay(0): straight to half-open. failsafe-go's State still reads open
// until the next call; its next call is a trial, as watertight's is.
func TestMigratingFailsafeDelayZero(t *testing.T) {
	cfg := failsafeDefaults()
	cfg.OpenDuration = -1 // a real zero
	fixed := []string{"FS", "FFFS", "SFFSF"}
	differential(t, time.Second, fixed, randomSeqs(10, 300, 40, "SSF."),
		failsafePair(fscircuit.NewBuilder[any]().WithDelay(0), cfg))
}

// WithFailureRateThreshold(rate, minExecutions, period): a time window of
// period in 10 buckets, MinCalls, the rate in percent; in half-open,
// minExecutions trials judged by the same rate. failsafe-go decides
// half-open after all the trials, watertight opens as soon as the failures
// reach the rate (the outcome is then certain): the trials of each half-open
// state are given as one batch, at one instant, and the states compared
// after it. Ticks are whole buckets, so both windows' buckets line up (see
// TestMigratingFailsafeBucketAlignmentDiffers).
func TestMigratingFailsafeFailureRateThreshold(t *testing.T) {
	const minExec = 4
	cfg := failsafeDefaults()
	cfg.ConsecutiveFailures = 0
	cfg.FailureRateThreshold, cfg.MinCalls = 50, minExec
	cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, 10*time.Second, 10
	cfg.HalfOpenCalls, cfg.HalfOpenSuccesses = minExec, 0
	cfg.OpenDuration = 5 * time.Second
	b := fscircuit.NewBuilder[any]().WithFailureRateThreshold(0.5, minExec, 10*time.Second).WithDelay(5 * time.Second)
	seqs := append([]string{"SFSF", "SSSF.F", "SFSF.....FFSS", "SFSF.....SSSF", "SSSSSSF..........FFF"}, randomSeqs(11, 300, 80, "SSSF...")...)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, seq := range seqs {
		synctest.Test(t, func(t *testing.T) {
			peer, w := &fs{cb: b.Build()}, newWT(t, cfg)
			defer w.b.Reset()
			driveBatched(t, seq, time.Second, minExec, peer, w)
		})
		if t.Failed() {
			return
		}
	}
}

// driveBatched is drive, but the trials of a half-open state are a batch
// of n outcomes (waits in it count as successes).
func driveBatched(t *testing.T, seq string, tick time.Duration, n int, peer *fs, w *wt) {
	t.Helper()
	for i := 0; i < len(seq); i++ {
		if peer.state() == "half-open" && w.state() == "half-open" && seq[i] != '.' {
			batch := []rune(strings.ReplaceAll(seq[i:min(i+n, len(seq))], ".", "S"))
			for len(batch) < n {
				batch = append(batch, 'S')
			}
			decidedEarly := false
			for j, c := range batch {
				pok, pdone := peer.allow()
				if !pok {
					t.Errorf("%q trial %d: failsafe-go rejected one of its %d trials", seq, j, n)
					return
				}
				pdone(c)
				if wok, wdone := w.allow(); wok {
					wdone(c)
				} else if w.state() == "open" {
					decidedEarly = true // watertight already knew
				} else {
					t.Errorf("%q trial %d: watertight rejected in %s", seq, j, w.state())
					return
				}
			}
			if ps, ws := peer.state(), w.state(); ps != ws {
				t.Errorf("%q after the trials at %d: failsafe-go %s, watertight %s (decided early: %v)", seq, i, ps, ws, decidedEarly)
				return
			}
			i += n - 1
			continue
		}
		if !drive(t, seq[i:i+1], tick, peer, w) {
			t.Errorf("in %q at step %d", seq, i)
			return
		}
	}
}

// failsafe-go records the outcome of a call that started in an earlier
// state in the current one: a call allowed while closed that succeeds once
// the breaker is half-open is counted as the trial and closes it. watertight
// drops it (a permit carries its generation).
func TestMigratingFailsafeEarlierStateDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fs{cb: fscircuit.NewBuilder[any]().Build()}
		w := newWT(t, failsafeDefaults())
		defer w.b.Reset()
		_, fOld := f.allow()
		_, wOld := w.allow()
		drive(t, "F", 0, f, w)
		time.Sleep(time.Minute)
		synctest.Wait()
		drive(t, "", 0, f, w)
		f.cb.TryAcquirePermit() // failsafe-go moves to half-open on a permit request
		fOld('S')
		wOld('S')
		if f.cb.State() != fscircuit.ClosedState || w.state() != "half-open" {
			t.Fatalf("a success from the closed state: failsafe-go %s (want closed), watertight %s (want half-open)", f.cb.State(), w.state())
		}
	})
}

// failsafe-go's time buckets are aligned to the Unix epoch (now/bucket);
// watertight's to when the window began, the breaker's last close.
func TestMigratingFailsafeBucketAlignmentDiffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(500 * time.Millisecond) // the breakers start mid-bucket
		f := &fs{cb: fscircuit.NewBuilder[any]().WithFailureRateThreshold(0.5, 2, 10*time.Second).Build()}
		cfg := failsafeDefaults()
		cfg.ConsecutiveFailures, cfg.FailureRateThreshold, cfg.MinCalls = 0, 50, 2
		cfg.WindowType, cfg.WindowDuration, cfg.WindowBuckets = circuit.TimeBased, 10*time.Second, 10
		w := newWT(t, cfg)
		defer w.b.Reset()
		// A success at 0.5s after start, then 9.6s later (10.1s since the
		// epoch's bucket began) a failure: failsafe-go's bucket of the
		// success [0s,1s) has left its window [1s, 11s); watertight's
		// [0.5s, 1.5s) has not left [0.5s+1s, ...) — it is in (e-10, e].
		drive(t, "S", 0, f, w)
		time.Sleep(9600 * time.Millisecond)
		fok, fdone := f.allow()
		wok, wdone := w.allow()
		if !fok || !wok {
			t.Fatal("rejected")
		}
		fdone('F')
		wdone('F')
		if f.state() != "closed" || w.state() != "open" {
			t.Fatalf("S then F 9.6s later: failsafe-go %s (want closed: 1 call in its window), watertight %s (want open: 1 of 2 failed)", f.state(), w.state())
		}
	})
}

// hystrixCircuit makes a hystrix-go circuit with its own name and settings.
//
// hystrix-go keeps circuits and settings in globals and starts, for each
// circuit, a metrics goroutine that never ends (it ranges over a channel
// that is never closed). A goroutine started in a synctest bubble must end
// before the bubble does, so the circuit is made outside the bubble and only
// driven from inside it. Two consequences: the goroutine leaks by design
// (goleak ignores it), and it files outcomes into 1-second buckets by the
// real clock while the bubble asks with the virtual one, so within a test
// its 10-second window never rolls: these tests cover RequestVolumeThreshold,
// ErrorPercentThreshold, SleepWindow and the single test, not the window.
// The metrics are also applied asynchronously; hystrixSettle waits for them.
func hystrixCircuit(t *testing.T, cfg hystrix.CommandConfig) *hystrix.CircuitBreaker {
	t.Helper()
	name := fmt.Sprintf("watertight-migrating-%s-%d", t.Name(), hystrixSeq)
	hystrixSeq++
	hystrix.ConfigureCommand(name, cfg)
	cb, _, err := hystrix.GetCircuit(name)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

var hystrixSeq int

// hystrixSettle waits until every hystrix-go metrics goroutine is idle,
// waiting on its empty channel: then every reported event has been counted.
func hystrixSettle(t *testing.T) {
	buf := make([]byte, 1<<20)
	for range 100000 {
		n := runtime.Stack(buf, true)
		if hystrixIdle(string(buf[:n])) {
			return
		}
		runtime.Gosched()
	}
	t.Fatal("hystrix-go's metrics goroutine never became idle")
}

func hystrixIdle(stacks string) bool {
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "hystrix.(*metricExchange).IncrementMetrics") {
			return false
		}
		if strings.Contains(g, "hystrix.(*metricExchange).Monitor") && !strings.Contains(strings.SplitN(g, "\n", 2)[0], "[chan receive") {
			return false
		}
	}
	return true
}

// hx adapts a hystrix-go circuit, driven as hystrix.Go drives it:
// AllowRequest, then ReportEvent with "success", "failure" or, for a
// rejected call, "short-circuit". IsOpen reads the state — and trips the
// circuit when its health says so, as the next request would.
type hx struct {
	t  *testing.T
	cb *hystrix.CircuitBreaker
}

func (h *hx) report(event string) {
	if err := h.cb.ReportEvent([]string{event}, time.Now(), 0); err != nil {
		h.t.Fatal(err)
	}
	hystrixSettle(h.t)
}

func (h *hx) allow() (bool, func(rune)) {
	if !h.cb.AllowRequest() {
		h.report("short-circuit")
		return false, nil
	}
	return true, func(c rune) {
		if c == 'S' {
			h.report("success")
		} else {
			h.report("failure")
		}
	}
}

func (h *hx) state() string {
	if h.cb.IsOpen() {
		return "open"
	}
	return "closed"
}

// hystrixConfig is watertight's config for hystrix-go's settings.
func hystrixConfig(volume, percent int, sleep time.Duration) circuit.Config {
	return circuit.Config{
		WindowType: circuit.TimeBased, WindowDuration: 10 * time.Second, WindowBuckets: 10,
		MinCalls: volume,
		// hystrix-go rounds the error percentage to the nearest integer
		// before comparing it with ErrorPercentThreshold.
		FailureRateThreshold: float64(percent) - 0.5,
		// The single test is allowed strictly after SleepWindow.
		OpenDuration:      sleep + time.Nanosecond,
		OpenJitter:        -1,
		HalfOpenCalls:     1,
		HalfOpenSuccesses: 1,
		MaxHalfOpenWait:   -1,
		CountSaturation:   true, // hystrix-go counts its own pool's rejections as errors
	}
}

func hystrixIgnore() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/afex/hystrix-go/hystrix.(*metricExchange).Monitor")
}

func hystrixIgnorePool() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/afex/hystrix-go/hystrix.(*poolMetrics).Monitor")
}

// RequestVolumeThreshold, ErrorPercentThreshold and SleepWindow, with the
// single test: random sequences whose waits stay within 8s of the start, so
// that neither window rolls.
func TestMigratingHystrix(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	fixed := []string{
		"FFFS",             // 3 of 4: tripped, seen by the next request
		"SSSSSSFFFFFF",     // 50% over 12
		"SSSSSFFFFF",       // 50% over 10
		"SSFF....S.SS",     // open 2s, then one test that closes
		"SSFF.....FS....S", // a failed test: open again from the test
	}
	random := randomSeqs(12, 60, 40, "SSSSFFF.")
	for i, s := range random { // at most 16 waits of 500ms
		if n := strings.Count(s, "."); n > 16 {
			random[i] = strings.Replace(s, ".", "S", n-16)
		}
	}
	for _, seq := range append(fixed, random...) {
		cb := hystrixCircuit(t, hystrix.CommandConfig{RequestVolumeThreshold: 4, ErrorPercentThreshold: 30, SleepWindow: 2000})
		synctest.Test(t, func(t *testing.T) {
			w := newWT(t, hystrixConfig(4, 30, 2*time.Second))
			w.noHalfOpen = true
			defer w.b.Reset()
			h := &hx{t: t, cb: cb}
			for i := range seq {
				before := w.b.State()
				if !drive(t, seq[i:i+1], 500*time.Millisecond, h, w) {
					t.Errorf("in %q at step %d", seq, i)
					return
				}
				if before == circuit.HalfOpen && w.b.State() == circuit.Closed {
					return // see TestMigratingHystrixClosingSuccessDiffers
				}
			}
		})
		if t.Failed() {
			return
		}
	}
}

// hystrix-go rounds the error percentage: 13 errors in 44 requests is
// 29.5%, which rounds to 30 and trips ErrorPercentThreshold 30. The mapped
// threshold, 29.5, trips too; 30 would not.
func TestMigratingHystrixRounding(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	cb := hystrixCircuit(t, hystrix.CommandConfig{RequestVolumeThreshold: 44, ErrorPercentThreshold: 30})
	synctest.Test(t, func(t *testing.T) {
		w := newWT(t, hystrixConfig(44, 30, 5*time.Second))
		w.noHalfOpen = true
		defer w.b.Reset()
		plain := mustNew(t, circuit.Config{WindowType: circuit.TimeBased, WindowDuration: 10 * time.Second, MinCalls: 44, FailureRateThreshold: 30})
		defer plain.Reset()
		seq := strings.Repeat("SSF", 13) + "SSSSS"
		drive(t, seq, 0, &hx{t: t, cb: cb}, w)
		outcomesWT(plain, seq)
		if w.state() != "open" || plain.State() != circuit.Closed {
			t.Fatalf("13 of 44: mapped %s (want open), unmapped threshold 30 %v (want closed)", w.state(), plain.State())
		}
	})
}

func outcomesWT(b *circuit.Breaker, seq string) {
	w := &wt{b: b}
	for _, c := range seq {
		if ok, done := w.allow(); ok {
			done(c)
		}
	}
}

// hystrix-go judges its health when a request arrives, not when an outcome
// does: with no request in between, the SleepWindow counts from the next
// request. watertight opens at the outcome.
func TestMigratingHystrixTripOnRequestDiffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	cb := hystrixCircuit(t, hystrix.CommandConfig{RequestVolumeThreshold: 2, ErrorPercentThreshold: 50, SleepWindow: 2000})
	synctest.Test(t, func(t *testing.T) {
		h := &hx{t: t, cb: cb}
		w := newWT(t, hystrixConfig(2, 50, 2*time.Second))
		defer w.b.Reset()
		for range 2 {
			_, hd := h.allow()
			hd('F')
			_, wd := w.allow()
			wd('F')
		}
		time.Sleep(time.Second) // no request: hystrix-go has not looked
		synctest.Wait()
		if ok, _ := h.allow(); ok { // this request opens it, from now
			t.Fatal("hystrix-go allowed a request after 2 failures of 2")
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		hok, hd := h.allow()
		wok, wd := w.allow()
		if hok || !wok {
			t.Fatalf("2.5s after the failures: hystrix-go allowed=%v (want false: opened 1.5s ago), watertight allowed=%v (want true: half-open)", hok, wok)
		}
		_ = hd
		wd('S')
	})
}

// While the single test is in flight, both reject (hystrix-go with
// ErrCircuitOpen, watertight with ErrHalfOpen); a hystrix-go test that
// never ends lets another through after SleepWindow, watertight's trial
// holds half-open until MaxHalfOpenWait (unbounded here, as mapped).
func TestMigratingHystrixSingleTest(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	cb := hystrixCircuit(t, hystrix.CommandConfig{RequestVolumeThreshold: 2, ErrorPercentThreshold: 50, SleepWindow: 2000})
	synctest.Test(t, func(t *testing.T) {
		h := &hx{t: t, cb: cb}
		w := newWT(t, hystrixConfig(2, 50, 2*time.Second))
		w.noHalfOpen = true
		defer w.b.Reset()
		drive(t, "FF.....", 500*time.Millisecond, h, w) // 2.5s > SleepWindow
		hok, hd := h.allow()
		wok, wd := w.allow()
		if !hok || !wok {
			t.Fatalf("the test: hystrix-go %v, watertight %v", hok, wok)
		}
		if ok, _ := h.allow(); ok {
			t.Fatal("hystrix-go allowed a second call beside its test")
		}
		if _, err := w.b.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("watertight beside its trial: %v, want ErrHalfOpen", err)
		}
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		if ok, _ := h.allow(); !ok {
			t.Fatal("hystrix-go: no second test after another SleepWindow")
		}
		if _, err := w.b.Allow(); !errors.Is(err, circuit.ErrHalfOpen) {
			t.Fatalf("watertight with its trial still in flight: %v, want ErrHalfOpen", err)
		}
		hd('S')
		wd('S')
		if h.state() != "closed" || w.state() != "closed" {
			t.Fatalf("after the test succeeded: hystrix-go %s, watertight %s", h.state(), w.state())
		}
	})
}

// hystrix-go closes on the single test's success and then counts that
// success in its fresh window; watertight's new window starts empty. After
// the close, one more failure is 1 of 2 for watertight and 1 of 3 for
// hystrix-go. (TestMigratingHystrix compares up to the first such close.)
func TestMigratingHystrixClosingSuccessDiffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), hystrixIgnore(), hystrixIgnorePool())
	cb := hystrixCircuit(t, hystrix.CommandConfig{RequestVolumeThreshold: 2, ErrorPercentThreshold: 50, SleepWindow: 2000})
	synctest.Test(t, func(t *testing.T) {
		h := &hx{t: t, cb: cb}
		w := newWT(t, hystrixConfig(2, 50, 2*time.Second))
		w.noHalfOpen = true
		defer w.b.Reset()
		if !drive(t, "FF.....SS", 500*time.Millisecond, h, w) {
			return
		}
		_, hd := h.allow()
		hd('F')
		outcomesWT(w.b, "F")
		if h.state() != "closed" || w.state() != "open" {
			t.Fatalf("test success, S, F: hystrix-go %s (want closed: 1 failure of 3), watertight %s (want open: 1 of 2)", h.state(), w.state())
		}
	})
}
