package lab

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
)

// quickBackoff runs the quick backoff scenario (20 runs per point).
func quickBackoff(t *testing.T, seed uint64, clients ...int) (*Result, map[string]map[int]BackoffPoint) {
	t.Helper()
	r, err := runBackoff(context.Background(), Options{Seed: seed, Quick: true, Clients: clients, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := r.JSON.(BackoffJSON)
	if !ok {
		t.Fatalf("JSON is %T, want BackoffJSON", r.JSON)
	}
	if doc.Scenario != "backoff" {
		t.Fatalf("JSON scenario %q", doc.Scenario)
	}
	pts := map[string]map[int]BackoffPoint{}
	for _, p := range doc.Results {
		if pts[p.Algorithm] == nil {
			pts[p.Algorithm] = map[int]BackoffPoint{}
		}
		pts[p.Algorithm][p.Clients] = p
	}
	return r, pts
}

// The orderings of Brooker's two figures, with loose bounds.
func TestBackoffOrderings(t *testing.T) {
	r, pts := quickBackoff(t, 1)
	if got := len(pts); got != 5 {
		t.Fatalf("%d algorithms, want 5", got)
	}
	for _, n := range []int{50, 100} {
		calls := func(a string) float64 { return pts[a][n].Calls }
		secs := func(a string) float64 { return pts[a][n].TimeMS / 1000 }
		t.Logf("N=%d calls: none %.0f exponential %.0f decorrelated %.0f equal %.0f full %.0f", n,
			calls("none"), calls("exponential"), calls("decorrelated"), calls("equal"), calls("full"))
		t.Logf("N=%d time: exponential %.2fs equal %.2fs full %.2fs decorrelated %.2fs none %.2fs", n,
			secs("exponential"), secs("equal"), secs("full"), secs("decorrelated"), secs("none"))
		// Calls: none > exponential > decorrelated > equal ≈ full.
		if !(calls("none") > 1.05*calls("exponential")) {
			t.Errorf("N=%d: calls none %.0f not above exponential %.0f", n, calls("none"), calls("exponential"))
		}
		if !(calls("exponential") > 1.3*calls("decorrelated")) {
			t.Errorf("N=%d: calls exponential %.0f not well above decorrelated %.0f", n, calls("exponential"), calls("decorrelated"))
		}
		if !(calls("decorrelated") > calls("equal")) || !(calls("decorrelated") > calls("full")) {
			t.Errorf("N=%d: calls decorrelated %.0f not above equal %.0f and full %.0f", n, calls("decorrelated"), calls("equal"), calls("full"))
		}
		if d := calls("equal")/calls("full") - 1; d < -0.1 || d > 0.1 {
			t.Errorf("N=%d: calls equal %.0f and full %.0f differ by %.0f%%", n, calls("equal"), calls("full"), 100*d)
		}
		// Time: exponential slowest by far, none fastest, equal slower
		// than full and decorrelated.
		for _, a := range []string{"none", "full", "equal", "decorrelated"} {
			if !(secs("exponential") > 3*secs(a)) {
				t.Errorf("N=%d: time exponential %.2fs not well above %s %.2fs", n, secs("exponential"), a, secs(a))
			}
		}
		for _, a := range []string{"exponential", "full", "equal", "decorrelated"} {
			if !(secs("none") < secs(a)) {
				t.Errorf("N=%d: time none %.2fs not below %s %.2fs", n, secs("none"), a, secs(a))
			}
		}
		if !(secs("equal") > secs("full")) || !(secs("equal") > secs("decorrelated")) {
			t.Errorf("N=%d: time equal %.2fs not above full %.2fs and decorrelated %.2fs", n, secs("equal"), secs("full"), secs("decorrelated"))
		}
	}
	// More clients, more work, for every algorithm.
	for a, byN := range pts {
		if !(byN[10].Calls < byN[50].Calls && byN[50].Calls < byN[100].Calls) {
			t.Errorf("%s: calls not increasing with N: %.0f, %.0f, %.0f", a, byN[10].Calls, byN[50].Calls, byN[100].Calls)
		}
	}
	if len(r.Tables) != 3 || len(r.Charts) != 2 || len(r.Checks) != 10 {
		t.Errorf("%d tables, %d charts, %d checks; want 3, 2, 10", len(r.Tables), len(r.Charts), len(r.Checks))
	}
	for _, c := range r.Charts {
		if len(c.Series) != 5 {
			t.Errorf("chart %s: %d series, want 5", c.File, len(c.Series))
		}
	}
}

func TestBackoffSeed(t *testing.T) {
	_, a := quickBackoff(t, 42, 10, 50)
	_, b := quickBackoff(t, 42, 10, 50)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different results")
	}
	_, c := quickBackoff(t, 43, 10, 50)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same results")
	}
}

// The results do not depend on how many goroutines share the runs.
func TestBackoffScheduling(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	_, one := quickBackoff(t, 7, 30)
	runtime.GOMAXPROCS(4)
	_, four := quickBackoff(t, 7, 30)
	runtime.GOMAXPROCS(prev)
	if !reflect.DeepEqual(one, four) {
		t.Fatal("results depend on GOMAXPROCS")
	}
}

// The full 100 runs at N = 100 are within ±10% of the rerun of Brooker's
// simulator for all five algorithms.
func TestBackoffReference(t *testing.T) {
	if testing.Short() {
		t.Skip("100 runs per algorithm")
	}
	r, err := runBackoff(context.Background(), Options{Seed: 1, Clients: []int{backoffRefN}, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Checks) != 10 {
		t.Fatalf("%d checks, want 10", len(r.Checks))
	}
	for _, c := range r.Checks {
		if !c.OK {
			t.Errorf("FAIL %s: %s", c.Name, c.Detail)
		} else {
			t.Logf("PASS %s: %s", c.Name, c.Detail)
		}
	}
}

func TestBackoffBadClients(t *testing.T) {
	_, err := runBackoff(context.Background(), Options{Clients: []int{10, 0}, Progress: io.Discard})
	if err == nil {
		t.Fatal("clients 0 accepted")
	}
}

func TestBackoffCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := runBackoff(ctx, Options{Progress: io.Discard})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestBackoffNoReferencePoint(t *testing.T) {
	r, _ := quickBackoff(t, 1, 10, 20)
	if len(r.Checks) != 0 || len(r.Tables) != 2 {
		t.Fatalf("without N=100: %d checks, %d tables; want 0, 2", len(r.Checks), len(r.Tables))
	}
}

// One client: one write, four hops; two clients: at least two writes.
func TestSimulateOCC(t *testing.T) {
	for _, alg := range backoffAlgorithms {
		rng := rand.New(rand.NewPCG(1, 2))
		calls, ms := simulateOCC(1, alg, rng)
		if calls != 1 || ms < 20 || ms > 60 {
			t.Errorf("%s, one client: %d calls in %.1fms; want 1 call in about 40ms", alg.name, calls, ms)
		}
		for range 100 {
			calls, _ := simulateOCC(2, alg, rng)
			if calls < 2 {
				t.Fatalf("%s, two clients: %d calls", alg.name, calls)
			}
		}
	}
}

func BenchmarkSimulateOCC100(b *testing.B) {
	for _, alg := range backoffAlgorithms {
		b.Run(alg.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				simulateOCC(100, alg, rng)
			}
		})
	}
}
