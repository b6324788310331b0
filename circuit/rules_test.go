package circuit_test

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// changeLog collects a breaker's state changes.
type changeLog struct {
	mu  sync.Mutex
	evs []circuit.StateChange
}

func (r *changeLog) on(ev circuit.StateChange) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *changeLog) transitions() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, ev := range r.evs {
		s = append(s, ev.From.String()+">"+ev.To.String())
	}
	return strings.Join(s, " ")
}

func (r *changeLog) last() circuit.StateChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.evs) == 0 {
		return circuit.StateChange{}
	}
	return r.evs[len(r.evs)-1]
}

func newRecorded(t *testing.T, cfg circuit.Config) (*circuit.Breaker, *changeLog) {
	t.Helper()
	r := &changeLog{}
	cfg.OnStateChange = r.on
	b, err := circuit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, r
}

func outcomes(b *circuit.Breaker, seq string) {
	for _, c := range seq {
		p, err := b.Allow()
		if err != nil {
			continue
		}
		switch c {
		case 'S':
			p.Done(watertight.Success)
		case 'F':
			p.Done(watertight.Failure)
		case 'I':
			p.Done(watertight.Ignored)
		case 'X':
			p.Done(watertight.Saturated)
		}
	}
}

// The seed's example: five failures in a row trip the breaker, although the
// window holds far fewer than MinCalls calls; a success ends a streak, an
// ignored outcome does not.
func TestConsecutiveFailures(t *testing.T) {
	b, r := newRecorded(t, circuit.Config{ConsecutiveFailures: 5})
	outcomes(b, "FFFFSFFIFFS")
	if b.State() != circuit.Closed {
		t.Fatalf("after FFFFSFFIFFS: %v (%s), want closed: a success ends a streak", b.State(), r.last().Reason)
	}
	if s := b.Snapshot(); s.ConsecutiveFailures != 0 || s.Failures != 8 {
		t.Fatalf("snapshot %+v, want a streak of 0 and 8 failures", s)
	}
	outcomes(b, "FFFFIF")
	if b.State() != circuit.Open {
		t.Fatalf("after 5 failures in a row (one ignored between): %v, want open", b.State())
	}
	ev := r.last()
	if ev.Rule != circuit.RuleConsecutiveFailures || !strings.HasPrefix(ev.Reason, "consecutive failures: 5 in a row") {
		t.Fatalf("state change %+v, want rule consecutive failures", ev)
	}
	s := b.Snapshot()
	if s.Rule != circuit.RuleConsecutiveFailures || s.ConsecutiveFailures != 5 || s.Calls != 15 || s.Failures != 13 || s.Reason != ev.Reason {
		t.Fatalf("open snapshot %+v, want the evidence: 15 calls, 13 failures, 5 in a row", s)
	}
}

// Saturations extend a streak only when they count.
func TestConsecutiveFailuresSaturation(t *testing.T) {
	b, _ := newRecorded(t, circuit.Config{ConsecutiveFailures: 3})
	outcomes(b, "FXXF")
	if b.State() != circuit.Closed {
		t.Fatalf("saturations not counted: %v, want closed", b.State())
	}
	b, _ = newRecorded(t, circuit.Config{ConsecutiveFailures: 3, CountSaturation: true})
	outcomes(b, "FXX")
	if b.State() != circuit.Open {
		t.Fatalf("saturations counted: %v, want open", b.State())
	}
}

// "k failures among the last n calls", failsafe-go's ratio threshold: no
// minimum number of calls, and the window slides.
func TestFailureCountThreshold(t *testing.T) {
	cfg := circuit.Config{WindowSize: 5, FailureCountThreshold: 3, FailureRateThreshold: -1}
	b, r := newRecorded(t, cfg)
	outcomes(b, "FFF")
	if b.State() != circuit.Open || r.last().Rule != circuit.RuleFailureCount {
		t.Fatalf("the first 3 calls failed: %v (%+v), want open by failure count", b.State(), r.last())
	}
	b, _ = newRecorded(t, cfg)
	outcomes(b, "FSFSSSFSF") // the last 5: S S F S F
	if b.State() != circuit.Closed {
		t.Fatalf("2 failures among the last 5: %v, want closed", b.State())
	}
	outcomes(b, "SF") // the last 5: F S F S F
	if b.State() != circuit.Open {
		t.Fatalf("3 failures among the last 5: %v, want open", b.State())
	}
	if s := b.Snapshot(); s.Calls != 5 || s.Failures != 3 || s.FailureRate != 60 {
		t.Fatalf("open snapshot %+v, want the window that tripped it: 3 of 5", s)
	}
}

// The same in a time window: k failures in the last WindowDuration.
func TestFailureCountThresholdTimeWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newRecorded(t, circuit.Config{WindowType: circuit.TimeBased, WindowDuration: 10 * time.Second, WindowBuckets: 10, FailureCountThreshold: 3, FailureRateThreshold: -1})
		defer b.ForceOpen()
		outcomes(b, "FF")
		time.Sleep(11 * time.Second)
		outcomes(b, "SF")
		if b.State() != circuit.Closed {
			t.Fatalf("two failures slid out: %v, want closed", b.State())
		}
		outcomes(b, "FF")
		if b.State() != circuit.Open {
			t.Fatalf("3 failures in the window: %v, want open", b.State())
		}
	})
}

// TripWhen sees the window's counts, decides without MinCalls, and runs with
// no lock held (it calls back into the breaker), from an outcome and from
// Reconfigure alike.
func TestTripWhen(t *testing.T) {
	var b *circuit.Breaker
	var seen []circuit.Counts
	cfg := circuit.Config{TripWhen: func(c circuit.Counts) bool {
		_ = b.Snapshot() // would deadlock under the breaker's lock
		seen = append(seen, c)
		return c.Failures >= 2 && c.ConsecutiveFailures >= 2
	}}
	b, r := newRecorded(t, cfg)
	outcomes(b, "SFSF")
	if b.State() != circuit.Closed {
		t.Fatalf("no two failures in a row: %v", b.State())
	}
	outcomes(b, "F")
	if b.State() != circuit.Open || r.last().Rule != circuit.RuleTripWhen || !strings.HasPrefix(r.last().Reason, "TripWhen: true over 5 calls (3 failures") {
		t.Fatalf("%v %+v, want open by TripWhen", b.State(), r.last())
	}
	if got := seen[len(seen)-1]; got != (circuit.Counts{Calls: 5, Failures: 3, ConsecutiveFailures: 2}) {
		t.Fatalf("TripWhen saw %+v", got)
	}
	// Asked only when a rate could rise: after failures, not successes.
	if len(seen) != 3 {
		t.Fatalf("TripWhen asked %d times for SFSFF, want 3 (once per failure)", len(seen))
	}

	// Reconfigure judges the kept window by the new predicate, outside the lock.
	b2, r2 := newRecorded(t, circuit.Config{})
	outcomes(b2, "FFS")
	cfg2 := circuit.Config{OnStateChange: r2.on, TripWhen: func(c circuit.Counts) bool {
		_ = b2.Snapshot()
		return c.Failures >= 2
	}}
	if err := b2.Reconfigure(cfg2); err != nil {
		t.Fatal(err)
	}
	if b2.State() != circuit.Open || r2.last().Rule != circuit.RuleTripWhen {
		t.Fatalf("after Reconfigure: %v %+v, want open by TripWhen", b2.State(), r2.last())
	}
}

// Rules combine: whichever holds first trips, and says so.
func TestRulesCombine(t *testing.T) {
	cfg := circuit.Config{WindowSize: 10, MinCalls: 4, ConsecutiveFailures: 3}
	b, r := newRecorded(t, cfg)
	outcomes(b, "FSFS")
	if b.State() != circuit.Open || r.last().Rule != circuit.RuleFailureRate {
		t.Fatalf("50%% over 4 calls: %v %+v, want open by failure rate", b.State(), r.last())
	}
	b, r = newRecorded(t, cfg)
	outcomes(b, "SSSSSFFF")
	if b.State() != circuit.Open || r.last().Rule != circuit.RuleConsecutiveFailures {
		t.Fatalf("3 in a row at 37.5%%: %v %+v, want open by consecutive failures", b.State(), r.last())
	}
}

// Half-open by counting: k successes close, and the first failure that
// makes k unreachable opens again.
func TestHalfOpenSuccesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := circuit.Config{ConsecutiveFailures: 1, FailureRateThreshold: -1, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 3, HalfOpenSuccesses: 2}
		b, r := newRecorded(t, cfg)
		defer b.ForceOpen()
		outcomes(b, "F")
		time.Sleep(time.Second)
		synctest.Wait()
		if b.State() != circuit.HalfOpen {
			t.Fatalf("after the open duration: %v", b.State())
		}
		if s := b.Snapshot(); s.Rule != circuit.RuleConsecutiveFailures || s.Failures != 1 {
			t.Fatalf("half-open snapshot %+v, want the evidence that opened it", s)
		}
		outcomes(b, "S")
		if s := b.Snapshot(); s.TrialCalls != 1 || s.TrialFailures != 0 || s.State != circuit.HalfOpen {
			t.Fatalf("after one trial success: %+v", s)
		}
		outcomes(b, "F")
		if b.State() != circuit.HalfOpen {
			t.Fatalf("1 success, 1 failure of 3 with 2 needed: %v, want still half-open", b.State())
		}
		outcomes(b, "S")
		if b.State() != circuit.Closed || r.last().Rule != circuit.RuleTrials || !strings.HasPrefix(r.last().Reason, "trials: 2 of 3 trial calls succeeded") {
			t.Fatalf("2 successes: %v %+v, want closed by trials", b.State(), r.last())
		}
		outcomes(b, "F")
		time.Sleep(time.Second)
		synctest.Wait()
		outcomes(b, "FF")
		if b.State() != circuit.Open || r.last().Rule != circuit.RuleTrials {
			t.Fatalf("2 failures of 3 trials with 2 successes needed: %v %+v, want open", b.State(), r.last())
		}
		if s := b.Snapshot(); s.Calls != 2 || s.Failures != 2 || s.FailureRate != 100 {
			t.Fatalf("reopened snapshot %+v, want the trials as evidence", s)
		}
	})
}

// Every trial must succeed when HalfOpenSuccesses equals HalfOpenCalls
// (gobreaker's MaxRequests), and by default when no failure rate is set.
func TestHalfOpenFirstFailureOpens(t *testing.T) {
	for _, cfg := range []circuit.Config{
		{ConsecutiveFailures: 1, HalfOpenCalls: 3, HalfOpenSuccesses: 3},
		{ConsecutiveFailures: 1, HalfOpenCalls: 3, FailureRateThreshold: -1},
	} {
		synctest.Test(t, func(t *testing.T) {
			cfg.OpenDuration, cfg.OpenJitter = time.Second, -1
			b, _ := newRecorded(t, cfg)
			defer b.ForceOpen()
			outcomes(b, "F")
			time.Sleep(time.Second)
			synctest.Wait()
			outcomes(b, "SSF")
			if b.State() != circuit.Open {
				t.Fatalf("%+v: SSF in half-open: %v, want open", cfg, b.State())
			}
			time.Sleep(2 * time.Second)
			synctest.Wait()
			outcomes(b, "SS")
			if b.State() != circuit.HalfOpen {
				t.Fatalf("two of three trials: %v, want half-open", b.State())
			}
			outcomes(b, "S")
			if b.State() != circuit.Closed {
				t.Fatalf("three of three trials: %v, want closed", b.State())
			}
		})
	}
}

// When MaxHalfOpenWait runs out before k trials succeeded, the breaker opens.
func TestHalfOpenSuccessesExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, r := newRecorded(t, circuit.Config{ConsecutiveFailures: 1, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 3, HalfOpenSuccesses: 2, MaxHalfOpenWait: 5 * time.Second})
		defer b.ForceOpen()
		outcomes(b, "F")
		time.Sleep(time.Second)
		synctest.Wait()
		outcomes(b, "S")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if b.State() != circuit.Open || !strings.HasPrefix(r.last().Reason, "trials: 1 of the 1 trial calls that ended within 5s succeeded (< 2)") {
			t.Fatalf("%v %q, want open after the half-open wait", b.State(), r.last().Reason)
		}
	})
}

// ForceHalfOpen probes from any state; the trials decide as usual.
func TestForceHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, r := newRecorded(t, circuit.Config{HalfOpenCalls: 2, OpenJitter: -1})
		defer b.ForceOpen()
		b.ForceOpen()
		b.ForceHalfOpen()
		if b.State() != circuit.HalfOpen || r.last().Reason != "forced half-open" {
			t.Fatalf("%v %+v", b.State(), r.last())
		}
		outcomes(b, "SSS")
		if b.State() != circuit.Closed {
			t.Fatalf("two trial successes: %v", b.State())
		}
		b.ForceHalfOpen()
		outcomes(b, "FF")
		if b.State() != circuit.Open {
			t.Fatalf("two trial failures: %v", b.State())
		}
		if got := r.transitions(); got != "closed>forced-open forced-open>half-open half-open>closed closed>half-open half-open>open" {
			t.Fatalf("transitions %s", got)
		}
		// Probing early from open: the open timer is void.
		b.ForceHalfOpen()
		time.Sleep(40 * time.Second) // past the 30s open timer, before the 60s half-open wait
		synctest.Wait()
		if b.State() != circuit.HalfOpen {
			t.Fatalf("the old open timer fired: %v", b.State())
		}
	})
}

// A negative OpenDuration is a real zero: the trip goes straight on to
// half-open, reported as two changes, and the next calls are trials.
func TestOpenDurationZero(t *testing.T) {
	b, r := newRecorded(t, circuit.Config{ConsecutiveFailures: 2, OpenDuration: -1, HalfOpenCalls: 1})
	outcomes(b, "FF")
	if b.State() != circuit.HalfOpen {
		t.Fatalf("after the trip: %v, want half-open at once", b.State())
	}
	if got := r.transitions(); got != "closed>open open>half-open" {
		t.Fatalf("transitions %s", got)
	}
	if s := b.Snapshot(); s.Opens != 1 || s.Rule != circuit.RuleConsecutiveFailures || s.Failures != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	outcomes(b, "F")
	if got := r.transitions(); got != "closed>open open>half-open half-open>open open>half-open" || b.State() != circuit.HalfOpen {
		t.Fatalf("a failed trial: %v, transitions %s", b.State(), got)
	}
	outcomes(b, "S")
	if b.State() != circuit.Closed {
		t.Fatalf("a trial success: %v", b.State())
	}
}

// Snapshots keep the evidence while open and half-open, and the rates that
// opened the breaker; closing clears it.
func TestSnapshotKeepsEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newRecorded(t, circuit.Config{WindowSize: 10, MinCalls: 4, OpenDuration: time.Second, OpenJitter: -1, HalfOpenCalls: 2})
		defer b.ForceOpen()
		outcomes(b, "SFFS")
		want := circuit.Snapshot{Name: "", State: circuit.Open, Calls: 4, Failures: 2, FailureRate: 50, Rule: circuit.RuleFailureRate, Reason: "failure rate 50% >= 50% over 4 calls", Opens: 1, OpenLeft: time.Second}
		if s := b.Snapshot(); s != want {
			t.Fatalf("open:\n got %+v\nwant %+v", s, want)
		}
		outcomes(b, "S") // rejected
		time.Sleep(time.Second)
		synctest.Wait()
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		want.State, want.Rejected, want.TrialsInFlight, want.OpenLeft = circuit.HalfOpen, 1, 1, 0
		if s := b.Snapshot(); s != want {
			t.Fatalf("half-open:\n got %+v\nwant %+v", s, want)
		}
		p.Done(watertight.Success)
		outcomes(b, "S")
		if s := b.Snapshot(); s.State != circuit.Closed || s.Calls != 0 || s.FailureRate != 0 || s.Rule != circuit.RuleTrials {
			t.Fatalf("closed: %+v", s)
		}
	})
}
