package watertightprom_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/budget"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/hedge"
)

func TestHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCollector(t, watertightprom.Config{})
		fast, err := hedge.New(hedge.Config{Name: "search", Delay: 10 * time.Millisecond, Idempotent: true})
		if err != nil {
			t.Fatal(err)
		}
		bud, _ := budget.New(budget.Config{Ratio: 0.1, MinPerSecond: -1})
		starved, err := hedge.New(hedge.Config{Name: "starved", Delay: 10 * time.Millisecond, Idempotent: true, Budget: bud})
		if err != nil {
			t.Fatal(err)
		}
		c.AddHedge(fast)
		c.AddHedge(starved)
		c.AddHedge(nil)()
		ctx := context.Background()
		slowFirst := func(ctx context.Context, attempt int) (int, error) {
			d := time.Millisecond
			if attempt == 1 {
				d = 100 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return attempt, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		if v, err := hedge.Do(ctx, fast, slowFirst); err != nil || v != 2 {
			t.Fatalf("Do = %v, %v; want the hedge (2) to win", v, err)
		}
		if _, err := hedge.Do(ctx, starved, slowFirst); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_hedge_calls_total{name="search"}`:                         1,
			`watertight_hedge_hedged_calls_total{name="search"}`:                  1,
			`watertight_hedge_sent_total{name="search"}`:                          1,
			`watertight_hedge_won_total{name="search"}`:                           1,
			`watertight_hedge_not_idempotent_total{name="search"}`:                0,
			`watertight_hedge_delay_seconds{name="search"}`:                       0.01,
			`watertight_hedge_overloaded{name="search"}`:                          0,
			`watertight_hedge_suppressed_total{name="search",reason="budget"}`:    0,
			`watertight_hedge_calls_total{name="starved"}`:                        1,
			`watertight_hedge_sent_total{name="starved"}`:                         0,
			`watertight_hedge_suppressed_total{name="starved",reason="budget"}`:   1,
			`watertight_hedge_suppressed_total{name="starved",reason="breaker"}`:  0,
			`watertight_hedge_suppressed_total{name="starved",reason="bulkhead"}`: 0,
			`watertight_hedge_suppressed_total{name="starved",reason="overload"}`: 0,
		})
	})
}
