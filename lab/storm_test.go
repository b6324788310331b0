package lab

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestStormQuick runs the quick storm scenario and checks its figures with
// loose bounds: naive ≈ 27 calls per action, the budget ≤ 1.2, and with the
// breaker only the trial calls reach the provider once it has opened.
func TestStormQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("storm")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := s.Run(context.Background(), Options{Seed: 1, Quick: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick storm ran in %v", time.Since(began).Round(time.Millisecond))
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("check failed: %s: %s", c.Name, c.Detail)
		}
	}

	doc, ok := res.JSON.(stormJSON)
	if !ok {
		t.Fatalf("JSON is a %T", res.JSON)
	}
	if doc.Scenario != "storm" || len(doc.Results) != 3 {
		t.Fatalf("JSON %+v", doc)
	}
	got := map[string]stormJSONResult{}
	for _, r := range doc.Results {
		got[r.Config] = r
		if r.UserActions < 500 || r.RecoveryMS == nil {
			t.Errorf("%s: %d user actions, recovery %v", r.Config, r.UserActions, r.RecoveryMS)
		}
	}
	if a := got[stormNaive].Amplification; math.Abs(a-27) > 0.5 {
		t.Errorf("naive amplification %v, want 27 ± 0.5", a)
	}
	if a := got[stormBudget].Amplification; a > 1.2 || a < 1 {
		t.Errorf("budget amplification %v, want in [1, 1.2]", a)
	}
	brk := got[stormBreaker]
	if brk.BreakerOpenings == 0 || brk.CallsAfterOpening != brk.TrialCalls {
		t.Errorf("breaker: %d openings, %d calls after the first, %d trial calls", brk.BreakerOpenings, brk.CallsAfterOpening, brk.TrialCalls)
	}
	if brk.Amplification >= got[stormBudget].Amplification {
		t.Errorf("breaker amplification %v not below the budget's %v", brk.Amplification, got[stormBudget].Amplification)
	}

	// The document marshals in the shape the issue fixes.
	raw, err := json.Marshal(res.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string
		Results  []map[string]any
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		t.Fatal(err)
	}
	for _, r := range shape.Results {
		if _, ok := r["amplification"].(float64); !ok {
			t.Errorf("result without amplification: %s", raw)
		}
	}
	if len(res.Tables) == 0 || len(res.Charts) != 2 || res.Summary == "" {
		t.Errorf("%d tables, %d charts, summary %q", len(res.Tables), len(res.Charts), res.Summary)
	}

	goleak.VerifyNone(t, leaks)
}

func TestStormRecoveryWindow(t *testing.T) {
	ms := time.Millisecond
	var acts []stormAction
	for i := range 400 {
		acts = append(acts, stormAction{at: time.Duration(1000+i) * ms, ok: i >= 120})
	}
	// The window from the last failure holds 99 successes in 100: 99%.
	d, ok := stormRecovery(acts, 1000*ms, 100*ms)
	if !ok || d != 119*ms {
		t.Fatalf("recovery %v, %v; want 119ms", d, ok)
	}
	// One failure in a hundred keeps a window at 99%.
	acts[250].ok = false
	if d, ok := stormRecovery(acts, 1000*ms, 100*ms); !ok || d != 119*ms {
		t.Fatalf("with one late failure: %v, %v; want 119ms", d, ok)
	}
	// Two in one window do not: recovery comes with the first window that
	// holds only the second.
	acts[251].ok = false
	if d, ok := stormRecovery(acts, 1000*ms, 100*ms); !ok || d != 251*ms {
		t.Fatalf("with two late failures: %v, %v; want 251ms", d, ok)
	}
	// Failing to the end: not recovered.
	for i := range acts {
		acts[i].ok = false
	}
	if _, ok := stormRecovery(acts, 1000*ms, 100*ms); ok {
		t.Fatal("recovered without a success")
	}
}
