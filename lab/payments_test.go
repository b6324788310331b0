package lab

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"go.uber.org/goleak"
)

// TestPaymentsQuick runs the quick payments scenario twice with one seed:
// without keys some payments are charged twice, with keys every payment is
// charged exactly once, the counts do not depend on scheduling, and the JSON
// has the shape.
func TestPaymentsQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("payments")
	if err != nil {
		t.Fatal(err)
	}
	var docs []payJSON
	for range 2 {
		res, err := s.Run(context.Background(), Options{Seed: 7, Quick: true, Progress: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Checks {
			if !c.OK {
				t.Errorf("check failed: %s: %s", c.Name, c.Detail)
			}
		}
		doc, ok := res.JSON.(payJSON)
		if !ok || doc.Scenario != "payments" || len(doc.Results) != 2 {
			t.Fatalf("JSON %#v", res.JSON)
		}
		docs = append(docs, doc)
	}
	for i := range docs[0].Results {
		a, b := docs[0].Results[i], docs[1].Results[i]
		if a.Charges != b.Charges || a.DoubleCharges != b.DoubleCharges || a.ExtraCharges != b.ExtraCharges {
			t.Errorf("%s: two runs with one seed differ: %+v vs %+v", a.Config, a, b)
		}
	}
	naive, keyed := docs[0].Results[0], docs[0].Results[1]
	if naive.Config != payNoKeys || keyed.Config != payKeys {
		t.Fatalf("configs %q, %q", naive.Config, keyed.Config)
	}
	if naive.DoubleCharges == 0 || keyed.DoubleCharges != 0 || keyed.PaymentsLost != 0 || keyed.Charges != int64(keyed.Payments) {
		t.Errorf("no-keys %+v, keys %+v", naive, keyed)
	}
	b, err := json.Marshal(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Config        string `json:"config"`
			DoubleCharges *int   `json:"double_charges"`
			PaymentsLost  *int   `json:"payments_lost"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &shape); err != nil || shape.Results[1].DoubleCharges == nil || shape.Results[1].PaymentsLost == nil {
		t.Fatalf("JSON shape: %s (%v)", b, err)
	}
	goleak.VerifyNone(t, leaks)
}
