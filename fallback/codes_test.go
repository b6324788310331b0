package fallback_test

import (
	"context"
	"testing"

	"github.com/watertight-go/watertight/fallback"
)

// The code is the step's kind whatever the step is named: a name is for
// people, the code for metric labels.
func TestEventCodeIsTheKind(t *testing.T) {
	cache := mustCache[string](t, fallback.CacheConfig{})
	cache.Put("k", "cached")
	for _, tc := range []struct {
		step fallback.Step[string]
		code string
	}{
		{fallback.Stale(cache), fallback.CodeStale},
		{fallback.Default("d"), fallback.CodeDefault},
		{fallback.Reduced(func(context.Context, string, error) (string, error) { return "r", nil }), fallback.CodeReduced},
		{fallback.Defer(func(context.Context, string, error) error { return nil }, "queued"), fallback.CodeDefer},
		{fallback.Error[string](errUnavailable), fallback.CodeError},
	} {
		rec := &recorder{}
		c := mustChain(t, fallback.Config{Listener: rec}, tc.step.Named("my step"))
		_, _ = c.DoResult(context.Background(), "k", fail("", errDown))
		ev := rec.all()
		if len(ev) != 1 || ev[0].Code != tc.code || ev[0].Reason != "my step" {
			t.Errorf("events %+v, want one with Code %q and Reason %q", ev, tc.code, "my step")
		}
	}
}
