package lab

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// TestTenantsQuick runs the quick tenants scenario and checks, with bounds
// looser than the full run's (CI runs it with -race on a loaded machine),
// that per-client limits keep the quiet tenants served, that without them
// the quiet tenants get markedly less, that the server stays busy with
// them, and that the JSON has the shape.
func TestTenantsQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("tenants")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), Options{Seed: 1, Quick: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := res.JSON.(tnJSON)
	if !ok || doc.Scenario != "tenants" || len(doc.Results) != 4 {
		t.Fatalf("JSON %#v", res.JSON)
	}
	p := tnParamsFor(true)
	got := map[string]map[string]tnJSONResult{tnRouteLimits: {}, tnPerClient: {}}
	for _, r := range doc.Results {
		got[r.Config][r.Tenant] = r
		t.Logf("%s %s: offered %.0f/s goodput %.0f/s success %.3f p99 %.0fms 429 %d 503 %d timed out %d other %d",
			r.Config, r.Tenant, r.Offered, r.Goodput, r.SuccessRatio, r.P99Ms, r.Limited, r.Shed, r.TimedOut, r.Other)
	}
	for _, c := range res.Checks {
		t.Logf("full run's check, for information: %s %s: %s", passFail(c.OK), c.Name, c.Detail)
	}
	rlQ, pcQ, pcN := got[tnRouteLimits][tnQuiet], got[tnPerClient][tnQuiet], got[tnPerClient][tnNoisy]
	if pcQ.SuccessRatio < 0.85 {
		t.Errorf("per-client: quiet success ratio %.3f, want ≥ 0.85", pcQ.SuccessRatio)
	}
	if rlQ.SuccessRatio > pcQ.SuccessRatio-0.3 {
		t.Errorf("route-limits: quiet success ratio %.3f, want ≤ %.3f (per-client's %.3f less 0.3)",
			rlQ.SuccessRatio, pcQ.SuccessRatio-0.3, pcQ.SuccessRatio)
	}
	if total := pcQ.Goodput + pcN.Goodput; total < 0.7*p.capacity() {
		t.Errorf("per-client: total goodput %.0f/s, want ≥ 0.7 × %.0f/s", total, p.capacity())
	}
	if pcN.Limited == 0 || pcQ.Limited > pcQ.Sent/20 || got[tnRouteLimits][tnNoisy].Limited != 0 || rlQ.Limited != 0 {
		t.Errorf("429s: per-client noisy %d, quiet %d; route-limits noisy %d, quiet %d: want only the noisy tenant's, and only per client",
			pcN.Limited, pcQ.Limited, got[tnRouteLimits][tnNoisy].Limited, rlQ.Limited)
	}
	for _, cfg := range []string{tnRouteLimits, tnPerClient} {
		for _, class := range []string{tnNoisy, tnQuiet} {
			r := got[cfg][class]
			if r.Sent == 0 || r.Good+r.Limited+r.Shed+r.TimedOut+r.Other != r.Sent {
				t.Errorf("%s %s: %d sent, %d+%d+%d+%d+%d outcomes", cfg, class, r.Sent, r.Good, r.Limited, r.Shed, r.TimedOut, r.Other)
			}
		}
	}
	if len(res.Charts) != 1 || len(res.Charts[0].Series) != 4 {
		t.Errorf("charts: %d, want 1 with 4 series", len(res.Charts))
	}

	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Config       string   `json:"config"`
			Tenant       string   `json:"tenant"`
			Offered      *float64 `json:"offered"`
			Goodput      *float64 `json:"goodput"`
			SuccessRatio *float64 `json:"success_ratio"`
			Limited      *int     `json:"rejected_429"`
			Shed         *int     `json:"shed_503"`
			TimedOut     *int     `json:"timed_out"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &shape); err != nil || shape.Scenario != "tenants" || len(shape.Results) != 4 {
		t.Fatalf("JSON shape: %s (%v)", b, err)
	}
	want := [][2]string{{tnRouteLimits, tnQuiet}, {tnRouteLimits, tnNoisy}, {tnPerClient, tnQuiet}, {tnPerClient, tnNoisy}}
	for i, r := range shape.Results {
		if r.Config != want[i][0] || r.Tenant != want[i][1] || r.Offered == nil || r.Goodput == nil ||
			r.SuccessRatio == nil || r.Limited == nil || r.Shed == nil || r.TimedOut == nil {
			t.Fatalf("JSON shape, result %d: %s", i, b)
		}
	}
	goleak.VerifyNone(t, leaks)
}

// TestTenantsArrivals checks the load the scenario offers: rate × D
// requests per tenant, in time order within [0, D), the same for the same
// seed and different for another.
func TestTenantsArrivals(t *testing.T) {
	for _, quick := range []bool{false, true} {
		p := tnParamsFor(quick)
		a, b, c := tnArrivals(p, 1), tnArrivals(p, 1), tnArrivals(p, 2)
		if !slices.Equal(a, b) {
			t.Errorf("quick %v: seed 1 gave two different arrival lists", quick)
		}
		if slices.Equal(a, c) {
			t.Errorf("quick %v: seeds 1 and 2 gave the same arrivals", quick)
		}
		count := map[string]int{}
		for i, x := range a {
			count[x.tenant]++
			if x.at < 0 || x.at >= p.duration || (i > 0 && x.at < a[i-1].at) {
				t.Fatalf("quick %v: arrival %d at %v (previous %v), want in order within [0, %v)", quick, i, x.at, a[max(i-1, 0)].at, p.duration)
			}
			if wantClass := map[bool]string{true: tnNoisy, false: tnQuiet}[x.tenant == tnNoisy]; x.class != wantClass {
				t.Fatalf("quick %v: tenant %q in class %q", quick, x.tenant, x.class)
			}
		}
		secs := p.duration.Seconds()
		if got, want := count[tnNoisy], int(math.Round(p.noisyLoad*p.capacity()*secs)); got != want {
			t.Errorf("quick %v: noisy sent %d, want %d", quick, got, want)
		}
		if len(count) != 1+p.quiet {
			t.Errorf("quick %v: tenants %v, want noisy and %d quiet", quick, count, p.quiet)
		}
		for i := range p.quiet {
			name := tnQuiet + "-" + strconv.Itoa(i+1)
			if got, want := count[name], int(math.Round(p.quietLoad*p.capacity()*secs)); got != want {
				t.Errorf("quick %v: %s sent %d, want %d", quick, name, got, want)
			}
		}
	}
}
