package circuit_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// codeLog records the code of every event a listener gets, and checks that
// the typed hook's StateChange carries the same.
type codeLog struct {
	mu    sync.Mutex
	codes []string
}

func (l *codeLog) OnEvent(e watertight.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes = append(l.codes, e.Kind.String()+":"+e.From+">"+e.To+":"+e.Code)
}

func (l *codeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.codes
	l.codes = nil
	return c
}

func expectCodes(t *testing.T, l *codeLog, want ...string) {
	t.Helper()
	if got := l.take(); !slices.Equal(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}
}

// Each rule that trips a breaker gives the event its own code, and the
// typed StateChange the same one.
func TestEventCodesOfTripRules(t *testing.T) {
	for _, c := range []struct {
		cfg  circuit.Config
		run  func(b *circuit.Breaker)
		code string
	}{
		{circuit.Config{MinCalls: 4, WindowSize: 4}, func(b *circuit.Breaker) { fail(b, 4) }, circuit.CodeFailureRate},
		{circuit.Config{FailureRateThreshold: -1, ConsecutiveFailures: 3}, func(b *circuit.Breaker) { fail(b, 3) }, circuit.CodeConsecutiveFailures},
		{circuit.Config{FailureRateThreshold: -1, WindowSize: 10, FailureCountThreshold: 2}, func(b *circuit.Breaker) { succeed(b, 1); fail(b, 2) }, circuit.CodeFailureCount},
		{circuit.Config{FailureRateThreshold: -1, TripWhen: func(c circuit.Counts) bool { return c.Failures >= 1 }}, func(b *circuit.Breaker) { fail(b, 1) }, circuit.CodeTripWhen},
	} {
		l := &codeLog{}
		var hook []string
		cfg := c.cfg
		cfg.Name, cfg.Listener = "x", l
		cfg.OnStateChange = func(sc circuit.StateChange) { hook = append(hook, sc.Code) }
		b := mustNew(t, cfg)
		c.run(b)
		expectCodes(t, l, "state_change:closed>open:"+c.code)
		if !slices.Equal(hook, []string{c.code}) {
			t.Errorf("StateChange codes %q, want %q", hook, c.code)
		}
	}
}

func TestEventCodeOfSlowCallRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &codeLog{}
		b := mustNew(t, circuit.Config{MinCalls: 2, WindowSize: 2, SlowCallDuration: time.Second, SlowCallRateThreshold: 50, Listener: l})
		for range 2 {
			p, _ := b.Allow()
			time.Sleep(2 * time.Second) // virtual time: the call is slow
			p.Done(watertight.Success)
		}
		expectCodes(t, l, "state_change:closed>open:"+circuit.CodeSlowCallRate)
	})
}

// The codes of the way back: the timer, the trials either way, trials that
// time out, manual changes, and rejections.
func TestEventCodesOfRecoveryAndRejections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &codeLog{}
		b := mustNew(t, circuit.Config{
			MinCalls: 2, WindowSize: 2, OpenDuration: time.Second, OpenJitter: -1,
			HalfOpenCalls: 1, MaxHalfOpenWait: 5 * time.Second, Listener: l,
		})
		fail(b, 2)
		if _, err := b.Allow(); err == nil {
			t.Fatal("an open breaker let a call through")
		}
		expectCodes(t, l, "state_change:closed>open:failure_rate", "rejected:>:open")

		time.Sleep(time.Second)
		synctest.Wait()
		p, err := b.Allow() // the one trial
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Allow(); err == nil {
			t.Fatal("a second trial was let through")
		}
		p.Done(watertight.Failure)
		expectCodes(t, l, "state_change:open>half-open:timer", "rejected:>:half_open_full", "state_change:half-open>open:trials_failed")

		time.Sleep(2 * time.Second)
		synctest.Wait()
		succeed(b, 1)
		expectCodes(t, l, "state_change:open>half-open:timer", "state_change:half-open>closed:trials_succeeded")

		fail(b, 2)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if _, err := b.Allow(); err != nil { // a trial that never ends
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second) // half-open since a second ago: MaxHalfOpenWait ends now
		synctest.Wait()
		expectCodes(t, l, "state_change:closed>open:failure_rate", "state_change:open>half-open:timer", "state_change:half-open>open:trials_timed_out")

		b.ForceHalfOpen() // from open: manual, not the timer
		b.ForceOpen()
		b.Reset()
		expectCodes(t, l, "state_change:open>half-open:manual", "state_change:half-open>forced-open:manual", "state_change:forced-open>closed:manual")
	})
}

func TestEventCodeOfFullRegistry(t *testing.T) {
	l := &codeLog{}
	r, err := circuit.NewRegistry(circuit.RegistryConfig{MaxKeys: 1, Config: circuit.Config{Name: "hosts", Listener: l}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	a.ForceOpen() // a forced breaker is never evicted
	l.take()
	if _, err := r.Get("b"); err == nil {
		t.Fatal("a full registry made a breaker")
	}
	expectCodes(t, l, "rejected:>:"+circuit.CodeTooManyKeys)
}
