package watertightotel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	watertightotel "github.com/watertight-go/watertight/contrib/watertightotel"
	"github.com/watertight-go/watertight/hedge"
)

func TestHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, watertightotel.Config{})
		p, err := hedge.New(hedge.Config{Name: "search", Delay: 10 * time.Millisecond, Idempotent: true})
		if err != nil {
			t.Fatal(err)
		}
		h.m.AddHedge(p)
		h.m.AddHedge(nil)()
		_, err = hedge.Do(context.Background(), p, func(ctx context.Context, attempt int) (int, error) {
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
		})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, kinds := h.collect(t)
		want(t, got, map[string]float64{
			`watertight.hedge.calls{watertight.name="search"}`:                        1,
			`watertight.hedge.hedged_calls{watertight.name="search"}`:                 1,
			`watertight.hedge.sent{watertight.name="search"}`:                         1,
			`watertight.hedge.won{watertight.name="search"}`:                          1,
			`watertight.hedge.suppressed{reason="budget",watertight.name="search"}`:   0,
			`watertight.hedge.suppressed{reason="overload",watertight.name="search"}`: 0,
			`watertight.hedge.delay{watertight.name="search"}`:                        0.01,
			`watertight.hedge.overloaded{watertight.name="search"}`:                   0,
		})
		if k := kinds["watertight.hedge.delay"]; k.kind != "gauge" || k.unit != "s" {
			t.Errorf("watertight.hedge.delay is %+v", k)
		}
	})
}
