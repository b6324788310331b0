package lab

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"go.uber.org/goleak"
)

// TestOverloadQuick runs the quick overload scenario: with shedding, the
// goodput at 2× and 3× stays near the goodput at 1× (looser than the full
// run's check: CI runs it with -race on a loaded machine), it beats the
// goodput without shedding at 3×, and the JSON has the shape.
func TestOverloadQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("overload")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), Options{Seed: 1, Quick: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := res.JSON.(ovJSON)
	if !ok || doc.Scenario != "overload" || len(doc.Results) != 6 {
		t.Fatalf("JSON %#v", res.JSON)
	}
	got := map[string]map[int]ovJSONResult{ovShedding: {}, ovNoShedding: {}}
	for _, r := range doc.Results {
		got[r.Config][r.Load] = r
		t.Logf("%s %d×: offered %.0f/s goodput %.0f/s ratio %.2f served %.0f/s shed %d timed out %d other %d",
			r.Config, r.Load, r.Offered, r.Goodput, r.GoodputRatio, r.Served, r.Shed, r.TimedOut, r.Other)
	}
	for _, load := range []int{2, 3} {
		if r := got[ovShedding][load].GoodputRatio; r < 0.8 {
			t.Errorf("shedding at %d×: goodput ratio %.2f, want ≥ 0.8", load, r)
		}
	}
	if ns, sh := got[ovNoShedding][3].Goodput, got[ovShedding][3].Goodput; ns >= sh {
		t.Errorf("at 3×, goodput without shedding %.0f/s is not below goodput with shedding %.0f/s", ns, sh)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Config string   `json:"config"`
			Load   *int     `json:"load"`
			Ratio  *float64 `json:"goodput_ratio"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &shape); err != nil || shape.Scenario != "overload" || len(shape.Results) != 6 ||
		shape.Results[0].Ratio == nil || shape.Results[0].Load == nil || shape.Results[0].Config != ovNoShedding {
		t.Fatalf("JSON shape: %s (%v)", b, err)
	}
	goleak.VerifyNone(t, leaks)
}
