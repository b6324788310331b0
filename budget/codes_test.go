package budget_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
)

// Each refusal carries the code of what refused it.
func TestEventCodes(t *testing.T) {
	var got []string
	l := watertight.ListenerFunc(func(e watertight.Event) { got = append(got, e.Kind.String()+":"+e.Code) })

	b := mustNew(t, budget.Config{MinPerSecond: -1, Listener: l}) // empty: refuses
	_ = b.Withdraw()
	c := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1, Listener: l})
	c.TryAcquire()
	c.TryAcquire() // refused: the one slot is held
	c.Release()
	rt, err := budget.NewRetryThrottle(budget.RetryThrottleConfig{MaxTokens: 2, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	_ = rt.Failed() // leaves 1 of 2 tokens, not more than half: refused
	th := mustThrottler(t, budget.ThrottleConfig{Rand: constant(0), Listener: l})
	for range 2 {
		if err := th.Allow(); err != nil && !errors.Is(err, budget.ErrThrottled) {
			t.Fatal(err)
		}
	}
	want := []string{
		"budget_exhausted:" + budget.CodeNoTokens,
		"budget_exhausted:" + budget.CodeConcurrencyLimit,
		"budget_exhausted:" + budget.CodeTokensBelowHalf,
		"rejected:" + budget.CodeThrottled,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("codes\n got %q\nwant %q", got, want)
	}
}
