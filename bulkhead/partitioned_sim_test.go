package bulkhead_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
)

// The simulation of issue 20's claim: a route of 40 permits shared by a
// premium tier (weight 3, so 30 guaranteed) at a steady load of about half
// its share and a free tier (weight 1, 10 guaranteed) that spikes to 5× its
// share, both with the same service times. It runs in virtual time
// (testing/synctest): each request is a goroutine that takes a permit,
// sleeps its service time (the simulated upstream: the sleep is the work,
// not a synchronisation) and gives the permit back.
//
// Premium's requests are the same in the quiet run and the spike run
// (the same arrival times and service times, drawn from one seed: common
// random numbers), so its p99 moves only by what it waits for a permit.

const (
	simCapacity   = 40
	simDuration   = 5 * time.Second
	simWarmUp     = 500 * time.Millisecond // requests arriving before are not measured
	simMaxWait    = 100 * time.Millisecond
	simMedian     = 40 * time.Millisecond // lognormal service time: median 40ms, σ 0.5
	simSigma      = 0.5
	simPremiumC   = 15.0 // premium's mean concurrency: half its 30 guaranteed
	simFreeQuietC = 5.0  // free's mean concurrency when quiet: half its 10
	simFreeSpikeC = 50.0 // and in the spike: 5× its 10
)

// simMean is the mean service time, exp(μ + σ²/2).
var simMean = time.Duration(float64(simMedian) * math.Exp(simSigma*simSigma/2))

// admitter is what the simulation runs its requests through.
type admitter interface {
	acquire(ctx context.Context, tier int) error
	release(tier int)
}

type partitionedAdmitter struct{ p *bulkhead.Partitioned }

func (a partitionedAdmitter) acquire(ctx context.Context, tier int) error {
	return a.p.Acquire(ctx, tier)
}
func (a partitionedAdmitter) release(tier int) { a.p.Release(tier) }

type plainAdmitter struct{ b *bulkhead.Bulkhead }

func (a plainAdmitter) acquire(ctx context.Context, _ int) error { return a.b.Acquire(ctx) }
func (a plainAdmitter) release(int)                              { a.b.Release() }

const (
	tierPremium = 0
	tierFree    = 1
)

// simTier is one tier's outcome.
type simTier struct {
	latencies []time.Duration // wait + service of the admitted requests, after the warm-up
	refused   int             // requests refused (after the warm-up)
	admitted  int
	maxWait   time.Duration // the longest wait of an admitted request
	burstWait time.Duration // the longest wait of the requests of a burst
}

func (s *simTier) p99() time.Duration {
	if len(s.latencies) == 0 {
		return 0
	}
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	return l[(len(l)*99+99)/100-1]
}

// simLoad is one tier's arrivals: Poisson at a rate that keeps conc
// requests in flight on average (Little's law), from start to simDuration,
// with burst requests arriving together at start.
type simLoad struct {
	tier  int
	conc  float64
	seed  uint64
	start time.Duration
	burst int
}

// simulate runs loads through a, in a synctest bubble, and returns each
// tier's outcome.
func simulate(t *testing.T, a admitter, loads ...simLoad) [2]*simTier {
	var out [2]*simTier
	synctest.Test(t, func(t *testing.T) {
		out = [2]*simTier{{}, {}}
		var mu sync.Mutex
		var wg sync.WaitGroup
		t0 := time.Now()
		request := func(tier int, service time.Duration, burst bool) {
			defer wg.Done()
			start := time.Now()
			measured := start.Sub(t0) >= simWarmUp
			err := a.acquire(context.Background(), tier)
			waited := time.Since(start)
			if err == nil {
				time.Sleep(service)
				a.release(tier)
			}
			if !measured {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			o := out[tier]
			if err != nil {
				o.refused++
				return
			}
			o.admitted++
			o.maxWait = max(o.maxWait, waited)
			if burst {
				o.burstWait = max(o.burstWait, waited)
			}
			o.latencies = append(o.latencies, time.Since(start))
		}
		for _, l := range loads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(l.seed, 0x9e3779b97f4a7c15))
				service := func() time.Duration {
					return time.Duration(float64(simMedian) * math.Exp(simSigma*rng.NormFloat64()))
				}
				rate := l.conc / simMean.Seconds() // arrivals per second
				time.Sleep(l.start)
				for range l.burst {
					wg.Add(1)
					go request(l.tier, service(), true)
				}
				for time.Since(t0) < simDuration {
					time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
					wg.Add(1)
					go request(l.tier, service(), false)
				}
			}()
		}
		wg.Wait()
	})
	return out
}

func newSimPartitioned(t *testing.T, reserve float64) admitter {
	t.Helper()
	p, err := bulkhead.NewPartitioned(bulkhead.PartitionedConfig{
		Name:          "route",
		MaxConcurrent: simCapacity,
		Partitions:    []bulkhead.PartitionConfig{{Name: "premium", Weight: 3}, {Name: "free", Weight: 1}},
		Default:       "free",
		Reserve:       reserve,
		MaxWait:       simMaxWait,
		MaxWaiters:    simCapacity,
	})
	if err != nil {
		t.Fatal(err)
	}
	return partitionedAdmitter{p}
}

func newSimPlain(t *testing.T) admitter {
	t.Helper()
	return plainAdmitter{mustNew(t, bulkhead.Config{Name: "route", MaxConcurrent: simCapacity, MaxWait: simMaxWait, MaxWaiters: 2 * simCapacity})}
}

// spikeRuns runs the quiet and the spike load, drawn from seed, through
// admitters made by mk, and returns both outcomes.
func spikeRuns(t *testing.T, seed uint64, mk func() admitter) (quiet, spike [2]*simTier) {
	premium := simLoad{tier: tierPremium, conc: simPremiumC, seed: seed}
	quiet = simulate(t, mk(), premium, simLoad{tier: tierFree, conc: simFreeQuietC, seed: seed + 1000})
	spike = simulate(t, mk(), premium, simLoad{tier: tierFree, conc: simFreeSpikeC, seed: seed + 1000})
	return quiet, spike
}

// TestPartitionedSpike is the claim: during a free-tier spike to 5×
// its share, premium's p99 (wait + service) stays within 1.2× of its quiet
// p99 and the free tier is the one refused; through one plain Bulkhead of
// the same capacity, the same spike makes premium's p99 grow a lot.
func TestPartitionedSpike(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		quiet, spike := spikeRuns(t, seed, func() admitter { return newSimPartitioned(t, 0) })
		pq, ps := quiet[tierPremium].p99(), spike[tierPremium].p99()
		t.Logf("seed %d, partitioned: premium p99 quiet %v, spike %v (×%.3f); premium refused %d/%d; free admitted %d, refused %d (quiet: %d, %d)",
			seed, pq, ps, float64(ps)/float64(pq), spike[tierPremium].refused, spike[tierPremium].admitted+spike[tierPremium].refused,
			spike[tierFree].admitted, spike[tierFree].refused, quiet[tierFree].admitted, quiet[tierFree].refused)
		if quiet[tierPremium].admitted < 1000 {
			t.Fatalf("only %d premium requests measured: the simulation is too small for a p99", quiet[tierPremium].admitted)
		}
		if float64(ps) > 1.2*float64(pq) {
			t.Errorf("seed %d: premium p99 during the spike %v > 1.2 × its quiet p99 %v", seed, ps, pq)
		}
		if n := spike[tierPremium].refused; n != 0 {
			t.Errorf("seed %d: %d premium requests refused during the spike, want 0", seed, n)
		}
		if quiet[tierFree].refused != 0 || spike[tierFree].refused < spike[tierFree].admitted/10 {
			t.Errorf("seed %d: free refused %d when quiet (want 0) and %d of %d in the spike (want at least a tenth): the spike must be refused in its own tier",
				seed, quiet[tierFree].refused, spike[tierFree].refused, spike[tierFree].admitted+spike[tierFree].refused)
		}

		quiet, spike = spikeRuns(t, seed, func() admitter { return newSimPlain(t) })
		pq, ps = quiet[tierPremium].p99(), spike[tierPremium].p99()
		refused := spike[tierPremium].refused
		t.Logf("seed %d, plain bulkhead: premium p99 quiet %v, spike %v (×%.3f); premium refused %d/%d",
			seed, pq, ps, float64(ps)/float64(pq), refused, spike[tierPremium].admitted+refused)
		if float64(ps) < 1.5*float64(pq) && refused < spike[tierPremium].admitted/100 {
			t.Errorf("seed %d: through a plain bulkhead, premium p99 %v is within 1.5× of its quiet %v and %d refused: the simulation does not show the harm it guards against", seed, ps, pq, refused)
		}
	}
}

// TestPartitionedReserveTable prints, for several reserves, what the free
// spike does to premium, what premium coming back from idle into the spike
// waits (15 requests at once, its usual load, then its steady arrivals),
// and what free gets: the table in docs/bulkhead.md. Run with -v.
func TestPartitionedReserveTable(t *testing.T) {
	if testing.Short() {
		t.Skip("a table for the docs")
	}
	t.Logf("%-8s %10s %10s %7s %11s %11s %11s %12s", "reserve", "quiet p99", "spike p99", "ratio", "burst wait", "max wait", "free adm/s", "free refused")
	for _, r := range []float64{-1, 0.25, 0.5, 0.75, 1} {
		quiet, spike := spikeRuns(t, 1, func() admitter { return newSimPartitioned(t, r) })
		back := simulate(t, newSimPartitioned(t, r),
			simLoad{tier: tierPremium, conc: simPremiumC, seed: 1, start: 2 * time.Second, burst: int(simPremiumC)},
			simLoad{tier: tierFree, conc: simFreeSpikeC, seed: 1001})
		pq, ps := quiet[tierPremium].p99(), spike[tierPremium].p99()
		secs := (simDuration - simWarmUp).Seconds()
		t.Logf("%-8v %10v %10v %7.3f %11v %11v %11.0f %12d", r, pq.Round(time.Millisecond/10), ps.Round(time.Millisecond/10),
			float64(ps)/float64(pq), back[tierPremium].burstWait.Round(time.Millisecond/10), back[tierPremium].maxWait.Round(time.Millisecond/10),
			float64(spike[tierFree].admitted)/secs, spike[tierFree].refused)
		if float64(ps) > 1.2*float64(pq) || spike[tierPremium].refused != 0 {
			t.Errorf("reserve %v: premium p99 %v against %v quiet, %d refused", r, ps, pq, spike[tierPremium].refused)
		}
	}
}
