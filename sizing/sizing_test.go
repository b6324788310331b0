package sizing_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/sizing"
)

// erlangB computes the loss probability directly, for checking ErlangSize.
func erlangB(n int, load float64) float64 {
	b := 1.0
	for i := 1; i <= n; i++ {
		b = load * b / (float64(i) + load*b)
	}
	return b
}

func TestErlangSizeIsTheFewestPermits(t *testing.T) {
	for _, load := range []float64{0.01, 0.5, 1, 2.5, 10, 37.2, 200} {
		for _, blocking := range []float64{0.1, 0.01, 0.001, 1e-4} {
			n := sizing.ErlangSize(load, blocking)
			if b := erlangB(n, load); b > blocking {
				t.Fatalf("load %v blocking %v: n=%d gives B=%v > target", load, blocking, n, b)
			}
			if n > 1 {
				if b := erlangB(n-1, load); b <= blocking {
					t.Fatalf("load %v blocking %v: n-1=%d already gives B=%v", load, blocking, n-1, b)
				}
			}
			if float64(n) < load && blocking <= 0.01 {
				t.Fatalf("load %v: %d permits is below the mean in flight", load, n)
			}
		}
	}
	// A textbook value: 10 erlangs at 1% blocking need 18 servers.
	if n := sizing.ErlangSize(10, 0.01); n != 18 {
		t.Fatalf("ErlangSize(10, 1%%) = %d, want 18", n)
	}
	if n := sizing.ErlangSize(0, 0.01); n != 1 {
		t.Fatalf("zero load: %d", n)
	}
}

func TestSuggest(t *testing.T) {
	obs := sizing.Observation{Rate: 200, P99: 50 * time.Millisecond, P999: 120 * time.Millisecond, Samples: 5000}
	a, err := sizing.Suggest(sizing.Config{}, obs)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(a.InFlight-10) > 1e-9 {
		t.Fatalf("InFlight %v, want 10", a.InFlight)
	}
	// 10 in flight × 1.25 headroom = 12.5 erlangs at 0.1% blocking.
	if want := sizing.ErlangSize(12.5, 0.001); a.MaxConcurrent != want {
		t.Fatalf("MaxConcurrent %d, want %d", a.MaxConcurrent, want)
	}
	if a.Timeout != 180*time.Millisecond || a.MaxWait != 50*time.Millisecond {
		t.Fatalf("Timeout %v MaxWait %v", a.Timeout, a.MaxWait)
	}
	if !strings.Contains(a.Explanation, "Erlang") {
		t.Fatalf("explanation: %q", a.Explanation)
	}

	// No headroom, floor on the timeout.
	fast := sizing.Observation{Rate: 10, P99: time.Millisecond, P999: 2 * time.Millisecond, Samples: 5000}
	a, err = sizing.Suggest(sizing.Config{Headroom: -1}, fast)
	if err != nil {
		t.Fatal(err)
	}
	if a.Timeout != sizing.DefaultMinTimeout || a.MaxConcurrent != sizing.ErlangSize(0.01, 0.001) {
		t.Fatalf("advice %+v", a)
	}
}

func TestSuggestRejectsBadInput(t *testing.T) {
	good := sizing.Observation{Rate: 1, P99: time.Millisecond, P999: time.Millisecond, Samples: 5000}
	cases := []struct {
		cfg  sizing.Config
		obs  sizing.Observation
		want string
	}{
		{sizing.Config{Blocking: 1}, good, "Config.Blocking"},
		{sizing.Config{Blocking: -0.1}, good, "Config.Blocking"},
		{sizing.Config{TimeoutFactor: 0.5}, good, "Config.TimeoutFactor"},
		{sizing.Config{Headroom: math.Inf(1)}, good, "Config.Headroom"},
		{sizing.Config{}, sizing.Observation{Rate: -1, Samples: 5000}, "Observation.Rate"},
		{sizing.Config{}, sizing.Observation{Rate: math.NaN(), Samples: 5000}, "Observation.Rate"},
		{sizing.Config{}, sizing.Observation{Rate: 1, P99: 2, P999: 1, Samples: 5000}, "P999"},
		{sizing.Config{}, sizing.Observation{Rate: 1, Samples: 10}, "too few samples"},
	}
	for _, c := range cases {
		_, err := sizing.Suggest(c.cfg, c.obs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Suggest(%+v, %+v) = %v, want an error about %q", c.cfg, c.obs, err, c.want)
		}
	}
	_, err := sizing.Suggest(sizing.Config{}, sizing.Observation{Rate: 1, Samples: 3})
	if !errors.Is(err, sizing.ErrTooFewSamples) {
		t.Fatalf("want ErrTooFewSamples, got %v", err)
	}
	if _, err := sizing.Suggest(sizing.Config{MinSamples: -1}, sizing.Observation{Rate: 1}); err != nil {
		t.Fatalf("MinSamples -1: %v", err)
	}
}
