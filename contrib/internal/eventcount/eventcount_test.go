package eventcount_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeyOf(t *testing.T) {
	for _, c := range []struct {
		e    watertight.Event
		a, b string
	}{
		{watertight.Event{Kind: watertight.EventStateChange, From: "closed", To: "open"}, "closed", "open"},
		{watertight.Event{Kind: watertight.EventRetrySkipped, Err: retry.ErrNotIdempotent}, "not_idempotent", ""},
		{watertight.Event{Kind: watertight.EventRetrySkipped, Reason: "retry budget exhausted"}, "no_budget", ""},
		{watertight.Event{Kind: watertight.EventRetrySkipped, Reason: "something new"}, "other", ""},
		{watertight.Event{Kind: watertight.EventShed, Err: watertighthttp.ErrRouteFull}, "route_full", ""},
		{watertight.Event{Kind: watertight.EventShed, Err: fmt.Errorf("x: %w", watertighthttp.ErrClientLimit)}, "client_limit", ""},
		{watertight.Event{Kind: watertight.EventShed, Err: fmt.Errorf("x: %w", watertighthttp.ErrClientOverflow)}, "client_overflow", ""},
		{watertight.Event{Kind: watertight.EventShed, Reason: "client_overflow"}, "client_overflow", ""},
		{watertight.Event{Kind: watertight.EventShed, Reason: "free text"}, "other", ""},
		{watertight.Event{Kind: watertight.EventRejected, Reason: "unbounded text is not a label"}, "", ""},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Request-Timeout-Ms", Reason: "malformed"}, "malformed", ""},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "Grpc-Timeout", Reason: "absurd"}, "absurd", ""},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Criticality", Reason: "unknown_criticality"}, "unknown_criticality", ""},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Criticality", Reason: "value \"urgent\" names no criticality"}, "other", ""},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Criticality"}, "other", ""},
	} {
		k := eventcount.KeyOf(c.e)
		if k.A != c.a || k.B != c.b || k.Kind != c.e.Kind {
			t.Errorf("KeyOf(%+v) = %+v, want A=%q B=%q", c.e, k, c.a, c.b)
		}
	}
}

func TestCountsConcurrentAndBounded(t *testing.T) {
	c := &eventcount.Counts{Max: 3}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c.Inc(eventcount.Key{Name: fmt.Sprint((g + i) % 4)})
			}
		}()
	}
	wg.Wait()
	var total uint64
	sets := 0
	c.Each(func(_ eventcount.Key, v uint64) { total += v; sets++ })
	if sets != 3 {
		t.Fatalf("%d label sets, want the bound 3", sets)
	}
	if total+c.Overflow.Load() != 4000 || c.Overflow.Load() == 0 {
		t.Fatalf("counted %d + overflow %d, want 4000 with some overflow", total, c.Overflow.Load())
	}
}

func TestIncAllocatesNothingOnceSeen(t *testing.T) {
	c := &eventcount.Counts{Max: -1}
	k := eventcount.Key{Kind: watertight.EventRejected, Source: "circuit", Name: "payments"}
	for range 10 {
		c.Inc(k) // promoted to the read map
	}
	if n := testing.AllocsPerRun(100, func() { c.Inc(k) }); n != 0 {
		t.Fatalf("Inc allocates %v", n)
	}
}

func TestRegisterShedReason(t *testing.T) {
	errMine := watertight.NewSaturation("mine: at its limit")
	e := watertight.Event{Kind: watertight.EventShed, Err: fmt.Errorf("wrapped: %w", errMine), Reason: "free text"}
	if got := eventcount.ShedReason(e); got != "other" {
		t.Fatalf("before registering: %q, want other", got)
	}
	eventcount.RegisterShedReason(errMine, "route_full")
	if got := eventcount.ShedReason(e); got != "route_full" {
		t.Fatalf("after registering: %q, want route_full", got)
	}
	if got := eventcount.ShedReason(watertight.Event{Kind: watertight.EventShed, Err: watertighthttp.ErrDisplaced}); got != "displaced" {
		t.Fatalf("a built-in error after registering: %q, want displaced", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("RegisterShedReason with an unbounded label did not panic")
		}
	}()
	eventcount.RegisterShedReason(errMine, "free text")
}

// The labels of bad input: the reason is bounded whatever the event says,
// and the key (the header, from the emitter's configuration) is kept, also
// for a header that is none of the package constants.
func TestKeyOfBadInput(t *testing.T) {
	for _, r := range []deadline.Reason{deadline.Malformed, deadline.Absurd} {
		e := watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: deadline.DefaultHeader, Reason: r.String()}
		if k := eventcount.KeyOf(e); k.A != r.String() || k.Key != deadline.DefaultHeader || k.Name != "api" || k.Source != "deadline" || k.B != "" {
			t.Errorf("KeyOf(%+v) = %+v", e, k)
		}
	}
	e := watertight.Event{Kind: watertight.EventBadInput, Source: "http", Key: watertighthttp.HeaderCriticality, Reason: watertighthttp.ReasonUnknownCriticality}
	if k := eventcount.KeyOf(e); k.A != "unknown_criticality" || k.Key != watertighthttp.HeaderCriticality {
		t.Errorf("KeyOf(%+v) = %+v", e, k)
	}
	e = watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Key: "X-My-Timeout", Reason: "malformed"}
	if k := eventcount.KeyOf(e); k.Key != "X-My-Timeout" || k.A != "malformed" {
		t.Errorf("a configured header is not kept: KeyOf(%+v) = %+v", e, k)
	}
	// Whatever reasons arrive, they make at most the four label values.
	seen := map[string]bool{}
	for i := range 1000 {
		seen[eventcount.BadInputReason(watertight.Event{Kind: watertight.EventBadInput, Reason: fmt.Sprint("reason ", i)})] = true
	}
	for _, r := range []string{"malformed", "absurd", "unknown_criticality", ""} {
		seen[eventcount.BadInputReason(watertight.Event{Kind: watertight.EventBadInput, Reason: r})] = true
	}
	if len(seen) != 4 || !seen["other"] || !seen["malformed"] || !seen["absurd"] || !seen["unknown_criticality"] {
		t.Errorf("label values %v, want malformed, absurd, unknown_criticality, other", seen)
	}
}
