package retry_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
)

// Every way a retry stops carries its code, in the watertight.Event and in
// the typed Event alike.
func TestEventCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var codes, typed []string
		l := watertight.ListenerFunc(func(e watertight.Event) {
			if e.Kind != watertight.EventRetryScheduled {
				codes = append(codes, e.Kind.String()+":"+e.Code)
			}
		})
		on := func(e retry.Event) {
			if e.Kind != retry.Scheduled {
				typed = append(typed, e.Code)
			} else if e.Code != "" {
				t.Errorf("a scheduled retry has code %q", e.Code)
			}
		}
		cfg := retry.Config{Backoff: constant(t, 100*time.Millisecond), Listener: l, OnEvent: on}
		p := mustPolicy(t, cfg)
		ctx := retry.Idempotent(context.Background())
		calls := 0
		_, _ = retry.Do(ctx, p, failing(&calls, errRefused))                  // exhausted
		_, _ = retry.Do(context.Background(), p, failing(&calls, errRefused)) // not idempotent
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _ = retry.Do(short, p, failing(&calls, errRefused)) // no time for a 100ms wait
		cancel()
		_, _ = retry.Do(ctx, p, failing(&calls, retry.After(errRefused, time.Hour))) // the server asks too much

		bud, _ := budget.New(budget.Config{MinPerSecond: -1}) // empty: refuses
		cfg.Budget = bud
		_, _ = retry.Do(ctx, mustPolicy(t, cfg), failing(&calls, errRefused))
		one := mustConcurrency(t, budget.ConcurrencyConfig{Percent: -1, MinConcurrency: 1})
		one.TryAcquire() // the one slot, held elsewhere
		defer one.Release()
		cfg.Budget, cfg.Concurrency = nil, one
		_, _ = retry.Do(ctx, mustPolicy(t, cfg), failing(&calls, errRefused))

		want := []string{
			retry.CodeMaxAttempts, retry.CodeNotIdempotent, retry.CodeNoTime,
			retry.CodeRetryAfterTooLong, retry.CodeNoBudget, retry.CodeNoConcurrency,
		}
		if !slices.Equal(typed, want) {
			t.Errorf("typed codes %q, want %q", typed, want)
		}
		for i, w := range want {
			kind := "retry_skipped:"
			if i == 0 {
				kind = "retry_exhausted:"
			}
			want[i] = kind + w
		}
		if !slices.Equal(codes, want) {
			t.Errorf("event codes %q, want %q", codes, want)
		}
	})
}
