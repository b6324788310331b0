package lab

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"go.uber.org/goleak"
)

// TestDeadlineQuick runs the quick deadline scenario: propagated deadlines
// must waste at most a fifth of what fixed timeouts waste, and the JSON has
// the shape.
func TestDeadlineQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("deadline")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), Options{Seed: 1, Quick: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("check failed: %s: %s", c.Name, c.Detail)
		}
	}
	doc, ok := res.JSON.(dlJSON)
	if !ok || doc.Scenario != "deadline" || len(doc.Results) != 3 {
		t.Fatalf("JSON %#v", res.JSON)
	}
	got := map[string]dlJSONResult{}
	for _, r := range doc.Results {
		got[r.Config] = r
	}
	fixed, prop := got[dlFixed], got[dlPropagated]
	if fixed.WastedWorkRatio <= 0.02 {
		t.Errorf("fixed timeouts wasted only %.3f of the work: the scenario does not show the problem", fixed.WastedWorkRatio)
	}
	if prop.WastedWorkRatio > fixed.WastedWorkRatio/5 {
		t.Errorf("propagated wasted %.3f, fixed %.3f", prop.WastedWorkRatio, fixed.WastedWorkRatio)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Config string   `json:"config"`
			Ratio  *float64 `json:"wasted_work_ratio"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &shape); err != nil || shape.Results[0].Ratio == nil || shape.Results[0].Config != dlFixed {
		t.Fatalf("JSON shape: %s (%v)", b, err)
	}
	goleak.VerifyNone(t, leaks)
}
