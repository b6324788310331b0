package eventcount_test

import (
	"fmt"
	"go/build"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/internal/eventcount"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeyOf(t *testing.T) {
	for _, c := range []struct {
		e                watertight.Event
		from, to, reason string
	}{
		{watertight.Event{Kind: watertight.EventStateChange, From: "closed", To: "open", Code: "failure_rate"}, "closed", "open", "failure_rate"},
		{watertight.Event{Kind: watertight.EventStateChange, From: "closed", To: "open"}, "closed", "open", ""},
		{watertight.Event{Kind: watertight.EventRetrySkipped, Code: "not_idempotent", Reason: "words do not matter"}, "", "", "not_idempotent"},
		{watertight.Event{Kind: watertight.EventRetrySkipped, Reason: "retry budget exhausted"}, "", "", "other"},
		{watertight.Event{Kind: watertight.EventShed, Code: "route_full"}, "", "", "route_full"},
		{watertight.Event{Kind: watertight.EventShed, Code: "a_code_of_a_protection_added_later"}, "", "", "a_code_of_a_protection_added_later"},
		{watertight.Event{Kind: watertight.EventShed, Reason: "route_full"}, "", "", "other"}, // a Reason is never a label
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Criticality", Code: "unknown_criticality"}, "", "", "unknown_criticality"},
		{watertight.Event{Kind: watertight.EventBadInput, Key: "X-Criticality"}, "", "", "other"},
		{watertight.Event{Kind: watertight.EventRejected, Reason: "unbounded text is not a label"}, "", "", ""},
		{watertight.Event{Kind: watertight.EventRejected, Code: "open"}, "", "", "open"},
		{watertight.Event{Kind: watertight.EventHedgeSent}, "", "", ""},
		// Free text in Code, from a listener outside the module, is not a label.
		{watertight.Event{Kind: watertight.EventRejected, Code: "circuit: open"}, "", "", "other"},
		{watertight.Event{Kind: watertight.EventShed, Code: "Route_Full"}, "", "", "other"},
		{watertight.Event{Kind: watertight.EventShed, Code: "9lives"}, "", "", "other"},
		{watertight.Event{Kind: watertight.EventShed, Code: strings.Repeat("a", eventcount.MaxCodeLen)}, "", "", strings.Repeat("a", eventcount.MaxCodeLen)},
		{watertight.Event{Kind: watertight.EventShed, Code: strings.Repeat("a", eventcount.MaxCodeLen+1)}, "", "", "other"},
	} {
		k := eventcount.KeyOf(c.e)
		if k.From != c.from || k.To != c.to || k.Code != c.reason || k.Kind != c.e.Kind {
			t.Errorf("KeyOf(%+v) = %+v, want From=%q To=%q Code=%q", c.e, k, c.from, c.to, c.reason)
		}
	}
}

// The key of bad input is the header it came in, which the emitter takes
// from its configuration, never from the request: it is kept as it is.
func TestKeyOfKeepsNameAndKey(t *testing.T) {
	e := watertight.Event{Kind: watertight.EventBadInput, Source: "deadline", Name: "api", Key: "X-My-Timeout", Code: "malformed"}
	if k := eventcount.KeyOf(e); k.Source != "deadline" || k.Name != "api" || k.Key != "X-My-Timeout" || k.Code != "malformed" || k.From != "" {
		t.Errorf("KeyOf(%+v) = %+v", e, k)
	}
}

// Whatever events say in words or in a malformed Code, the reason labels
// are the codes sent and "other".
func TestReasonLabelsAreBounded(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1000 {
		for _, e := range []watertight.Event{
			{Kind: watertight.EventBadInput, Reason: fmt.Sprint("reason ", i)},
			{Kind: watertight.EventShed, Code: fmt.Sprint("value ", i)},
			{Kind: watertight.EventRetrySkipped, Code: fmt.Sprintf("%x!", i)},
			{Kind: watertight.EventShed, Code: "displaced"},
		} {
			seen[eventcount.CodeLabel(e)] = true
		}
	}
	if len(seen) != 2 || !seen["other"] || !seen["displaced"] {
		t.Errorf("label values %v, want displaced and other", seen)
	}
}

// The package knows no protection: it imports the root package and the
// standard library only, so that a new protection needs no edit here.
func TestImportsOnlyTheRoot(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if strings.Contains(imp, ".") && imp != "github.com/watertight-go/watertight" {
			t.Errorf("eventcount imports %s", imp)
		}
	}
	if !slices.Contains(p.Imports, "github.com/watertight-go/watertight") {
		t.Errorf("imports %v", p.Imports)
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
	k := eventcount.Key{Kind: watertight.EventRejected, Source: "circuit", Name: "payments", Code: "open"}
	for range 10 {
		c.Inc(k) // promoted to the read map
	}
	if n := testing.AllocsPerRun(100, func() { c.Inc(k) }); n != 0 {
		t.Fatalf("Inc allocates %v", n)
	}
}

func BenchmarkKeyOf(b *testing.B) {
	e := watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Key: "/checkout", Code: "route_full"}
	b.ReportAllocs()
	for b.Loop() {
		_ = eventcount.KeyOf(e)
	}
}

// Whatever an event's Code holds, its label is the code itself when it has
// the shape of one, else "other" (or "" for an empty code of a kind without
// a reason label): never free text.
func FuzzCodeLabel(f *testing.F) {
	for _, s := range []string{"", "route_full", "circuit: open", "Route_Full", "9lives", "a", "a_b_c_1", strings.Repeat("x", 41), "é", "no\x00"} {
		f.Add(s, uint8(watertight.EventShed))
		f.Add(s, uint8(watertight.EventRejected))
	}
	f.Fuzz(func(t *testing.T, code string, kind uint8) {
		e := watertight.Event{Kind: watertight.EventKind(kind), Code: code}
		got := eventcount.CodeLabel(e)
		switch {
		case got == code:
			if code != "" && (len(code) > eventcount.MaxCodeLen || strings.Trim(code, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || code[0] < 'a' || code[0] > 'z') {
				t.Fatalf("CodeLabel(%q) took a value that is not shaped like a code", code)
			}
		case got == eventcount.Other:
		default:
			t.Fatalf("CodeLabel(%q) = %q", code, got)
		}
		if k := eventcount.KeyOf(e); k.Code != got {
			t.Fatalf("KeyOf's code %q, CodeLabel's %q", k.Code, got)
		}
	})
}
