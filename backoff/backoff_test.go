package backoff_test

import (
	"cmp"
	"math"
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/watertight-go/watertight/backoff"
	"pgregory.net/rapid"
)

var jitters = []backoff.Jitter{backoff.Full, backoff.None, backoff.Equal, backoff.Decorrelated, backoff.Constant}

func mustNew(t interface {
	Helper()
	Fatalf(string, ...any)
}, cfg backoff.Config) *backoff.Backoff {
	t.Helper()
	b, err := backoff.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return b
}

// fixed returns a Rand that always returns r.
func fixed(r float64) func() float64 { return func() float64 { return r } }

// seeded returns a reproducible Rand.
func seeded(seed uint64) func() float64 { return rand.New(rand.NewPCG(seed, 42)).Float64 }

// refExp is min(cap, base·mult^n) computed exactly (to 256 bits), rounded
// to the nanosecond; n below 1 is 1.
func refExp(base, cap time.Duration, mult float64, n int) time.Duration {
	n = max(n, 1)
	x := new(big.Float).SetPrec(256).SetInt64(int64(base))
	m := new(big.Float).SetPrec(256).SetFloat64(mult)
	c := new(big.Float).SetPrec(256).SetInt64(int64(cap))
	for range n {
		if x.Cmp(c) >= 0 {
			return cap
		}
		x.Mul(x, m)
	}
	if x.Cmp(c) >= 0 {
		return cap
	}
	v, _ := x.Add(x, big.NewFloat(0.5)).Int64()
	return min(time.Duration(v), cap)
}

func TestJitterString(t *testing.T) {
	want := []string{"full", "none", "equal", "decorrelated", "constant"}
	for i, j := range jitters {
		if got := j.String(); got != want[i] {
			t.Errorf("Jitter(%d).String() = %q, want %q", uint8(j), got, want[i])
		}
	}
	if got := backoff.Jitter(9).String(); got != "Jitter(9)" {
		t.Errorf("Jitter(9).String() = %q", got)
	}
	if backoff.Jitter(0) != backoff.Full {
		t.Error("the zero Jitter is not Full")
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  backoff.Config
		want string
	}{
		{backoff.Config{Jitter: 5}, "backoff: Config.Jitter must be Full, None, Equal, Decorrelated or Constant, got Jitter(5)"},
		{backoff.Config{Base: -time.Second}, "backoff: Config.Base must be >= 0 (0 means 100ms), got -1s"},
		{backoff.Config{Cap: -1}, "backoff: Config.Cap must be >= 0 (0 means 10s), got -1ns"},
		{backoff.Config{Base: time.Second, Cap: time.Millisecond}, "backoff: Config.Cap must be >= Base (1s), got 1ms"},
		{backoff.Config{Base: time.Minute}, "backoff: Config.Cap must be >= Base (1m0s), got 0, which means 10s: set Cap with a Base above 10s"},
		{backoff.Config{Multiplier: 0.5}, "backoff: Config.Multiplier must be 0 (meaning 2) or a finite number >= 1, got 0.5"},
		{backoff.Config{Multiplier: -2}, "backoff: Config.Multiplier must be 0 (meaning 2) or a finite number >= 1, got -2"},
		{backoff.Config{Multiplier: math.NaN()}, "backoff: Config.Multiplier must be 0 (meaning 2) or a finite number >= 1, got NaN"},
		{backoff.Config{Multiplier: math.Inf(1)}, "backoff: Config.Multiplier must be 0 (meaning 2) or a finite number >= 1, got +Inf"},
	} {
		b, err := backoff.New(tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want error %q", tc.cfg, err, tc.want)
		}
		if b != nil {
			t.Errorf("New(%+v) returned a Backoff with its error", tc.cfg)
		}
	}
	// The boundaries are valid.
	for _, cfg := range []backoff.Config{
		{},
		backoff.DefaultConfig(),
		{Base: time.Second, Cap: time.Second},
		{Base: 1, Cap: math.MaxInt64},
		{Multiplier: 1},
		{Multiplier: math.Nextafter(1, 2)},
		{Multiplier: math.MaxFloat64},
	} {
		if _, err := backoff.New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

func TestResolvedConfig(t *testing.T) {
	got := mustNew(t, backoff.Config{}).Config()
	want := backoff.DefaultConfig()
	if got.Jitter != want.Jitter || got.Base != want.Base || got.Cap != want.Cap || got.Multiplier != want.Multiplier {
		t.Errorf("zero Config resolves to %+v, want %+v", got, want)
	}
	if want.Jitter != backoff.Full || want.Base != 100*time.Millisecond || want.Cap != 10*time.Second || want.Multiplier != 2 || want.Rand != nil {
		t.Errorf("DefaultConfig() = %+v", want)
	}
	if got.Rand == nil {
		t.Fatal("resolved Rand is nil")
	}
	if r := got.Rand(); r < 0 || r >= 1 {
		t.Errorf("resolved Rand() = %v", r)
	}
	// The resolved configuration builds an equal Backoff.
	a := mustNew(t, backoff.Config{Jitter: backoff.None, Base: 3 * time.Millisecond, Multiplier: 1.5})
	b := mustNew(t, a.Config())
	for n := range 40 {
		if x, y := a.Delay(n, 0), b.Delay(n, 0); x != y {
			t.Fatalf("Delay(%d): %v from the original, %v from its Config()", n, x, y)
		}
	}
}

func TestNilBackoff(t *testing.T) {
	var b *backoff.Backoff
	for _, n := range []int{-1, 0, 1, 1000} {
		if d := b.Delay(n, time.Second); d != 0 {
			t.Errorf("nil.Delay(%d) = %v, want 0", n, d)
		}
	}
	var zero backoff.Backoff
	if d := zero.Delay(3, time.Second); d != 0 {
		t.Errorf("Backoff{}.Delay = %v, want 0", d)
	}
	if c := b.Config(); c.Jitter != 0 || c.Base != 0 || c.Cap != 0 || c.Multiplier != 0 || c.Rand != nil {
		t.Errorf("nil.Config() = %+v, want the zero Config", c)
	}
}

// The first retry is n = 1: its exponential is Base·2, Brooker's convention.
func TestExponentialSequence(t *testing.T) {
	b := mustNew(t, backoff.Config{Jitter: backoff.None})
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if d := b.Delay(i+1, 0); d != w {
			t.Errorf("Delay(%d) = %v, want %v", i+1, d, w)
		}
	}
	// Full jitter's first delay is drawn from [0, 2·Base].
	f := mustNew(t, backoff.Config{Rand: fixed(0.999999)})
	if d := f.Delay(1, 0); d < 199*time.Millisecond || d > 200*time.Millisecond {
		t.Errorf("full jitter's first delay with Rand near 1 = %v, want near 200ms", d)
	}
	// Another multiplier.
	g := mustNew(t, backoff.Config{Jitter: backoff.None, Base: time.Second, Cap: time.Hour, Multiplier: 1.5})
	for n, w := range map[int]time.Duration{1: 1500 * time.Millisecond, 2: 2250 * time.Millisecond, 3: 3375 * time.Millisecond} {
		if d := g.Delay(n, 0); d != w {
			t.Errorf("multiplier 1.5: Delay(%d) = %v, want %v", n, d, w)
		}
	}
}

func TestOutOfRangeN(t *testing.T) {
	for _, mult := range []float64{0, 1, math.Nextafter(1, 2), 1.001, 1.5, 2, 3, 10, 1e6, math.MaxFloat64} {
		for _, lim := range []struct{ base, cap time.Duration }{
			{100 * time.Millisecond, 10 * time.Second},
			{1, math.MaxInt64},
			{time.Second, time.Second},
			{math.MaxInt64, math.MaxInt64},
		} {
			cfg := backoff.Config{Jitter: backoff.None, Base: lim.base, Cap: lim.cap, Multiplier: mult}
			b := mustNew(t, cfg)
			one := b.Delay(1, 0)
			for _, n := range []int{0, -1, -1000, math.MinInt} {
				if d := b.Delay(n, 0); d != one {
					t.Errorf("%+v: Delay(%d) = %v, want Delay(1) = %v", cfg, n, d, one)
				}
			}
			for _, n := range []int{1000, 10_000, math.MaxInt32, math.MaxInt} {
				d := b.Delay(n, 0)
				m := cmp.Or(mult, 2)
				switch over := float64(n)*math.Log(m) - math.Log(float64(lim.cap)/float64(lim.base)); {
				case m == 1 && d != lim.base:
					t.Errorf("%+v: Delay(%d) = %v, want Base %v", cfg, n, d, lim.base)
				case over > 1e-9 && d != lim.cap:
					t.Errorf("%+v: Delay(%d) = %v, want Cap %v", cfg, n, d, lim.cap)
				case d < lim.base || d > lim.cap:
					t.Errorf("%+v: Delay(%d) = %v, out of [Base, Cap]", cfg, n, d)
				}
			}
			// Every jitter, at the ends of the random range, stays in [0, Cap].
			for _, j := range jitters {
				for _, r := range []float64{0, 0.5, 0.999999999, 1, -1, 2, math.NaN(), math.Inf(1)} {
					cfg.Jitter, cfg.Rand = j, fixed(r)
					b := mustNew(t, cfg)
					for _, n := range []int{math.MinInt, 0, 1, 2, 63, 64, 65, 10_000, math.MaxInt} {
						for _, prev := range []time.Duration{math.MinInt64, 0, lim.base, lim.cap, math.MaxInt64} {
							if d := b.Delay(n, prev); d < 0 || d > lim.cap {
								t.Fatalf("%v, Rand %v: Delay(%d, %v) = %v, out of [0, %v]", cfg, r, n, prev, d, lim.cap)
							}
						}
					}
				}
			}
		}
	}
}

func TestBaseEqualsCap(t *testing.T) {
	const c = 3 * time.Second
	for _, r := range []float64{0, 0.25, 0.999999} {
		for _, j := range jitters {
			b := mustNew(t, backoff.Config{Jitter: j, Base: c, Cap: c, Rand: fixed(r)})
			for _, n := range []int{0, 1, 2, 100} {
				d := b.Delay(n, c)
				var lo time.Duration
				switch j {
				case backoff.Equal:
					lo = c / 2
				case backoff.None, backoff.Decorrelated, backoff.Constant:
					lo = c
				}
				if d < lo || d > c {
					t.Errorf("%v, Rand %v: Delay(%d) = %v, want in [%v, %v]", j, r, n, d, lo, c)
				}
			}
		}
	}
}

func TestMultiplierOneIsJitteredConstant(t *testing.T) {
	b := mustNew(t, backoff.Config{Jitter: backoff.None, Base: time.Second, Cap: time.Hour, Multiplier: 1})
	for _, n := range []int{1, 2, 64, 65, 1000, math.MaxInt} {
		if d := b.Delay(n, 0); d != time.Second {
			t.Errorf("Delay(%d) = %v, want 1s", n, d)
		}
	}
}

func TestDecorrelatedStartsAtBaseAndIgnoresN(t *testing.T) {
	b := mustNew(t, backoff.Config{Jitter: backoff.Decorrelated, Base: time.Second, Cap: time.Hour, Rand: fixed(0.5)})
	// prev 0 is taken as Base: U(1s, 3s) at 0.5 is 2s.
	for _, n := range []int{1, 7, 1000} {
		if d := b.Delay(n, 0); d != 2*time.Second {
			t.Errorf("Delay(%d, 0) = %v, want 2s", n, d)
		}
	}
	// prev 4s: U(1s, 12s) at 0.5 is 6.5s.
	if d := b.Delay(3, 4*time.Second); d != 6500*time.Millisecond {
		t.Errorf("Delay(3, 4s) = %v, want 6.5s", d)
	}
	// Near the cap, the cap.
	if d := b.Delay(3, 50*time.Minute); d != time.Hour {
		t.Errorf("Delay(3, 50m) = %v, want 1h", d)
	}
}

// drawConfig draws a valid configuration whose Rand draws from rapid.
func drawConfig(t *rapid.T, j backoff.Jitter) backoff.Config {
	base := time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "base"))
	cap := base + time.Duration(rapid.Int64Range(0, int64(48*time.Hour)).Draw(t, "cap-base"))
	mult := rapid.OneOf(rapid.Just(0.0), rapid.Just(2.0), rapid.Just(1.0), rapid.Float64Range(1, 16)).Draw(t, "multiplier")
	rnd := rapid.Uint64Range(0, 1<<53-1)
	return backoff.Config{
		Jitter:     j,
		Base:       base,
		Cap:        cap,
		Multiplier: mult,
		Rand:       func() float64 { return float64(rnd.Draw(t, "rand")) / (1 << 53) },
	}
}

// expOf returns min(Cap, Base·Multiplier^n) as the package computes it,
// checked against the exact value.
func expOf(t *rapid.T, cfg backoff.Config, n int) time.Duration {
	cfg.Jitter = backoff.None
	e := mustNew(t, cfg).Delay(n, 0)
	want := refExp(cfg.Base, cfg.Cap, cmp.Or(cfg.Multiplier, 2), n)
	if cfg.Multiplier == 0 || cfg.Multiplier == 2 || cfg.Multiplier == 1 {
		if e != want {
			t.Fatalf("exponential(%d) = %v, want exactly %v", n, e, want)
		}
	} else if diff := math.Abs(float64(e - want)); diff > 1+1e-12*float64(want) {
		t.Fatalf("exponential(%d) = %v, want %v", n, e, want)
	}
	return e
}

func TestBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		j := rapid.SampledFrom(jitters).Draw(t, "jitter")
		cfg := drawConfig(t, j)
		b := mustNew(t, cfg)
		var prev time.Duration
		for range rapid.IntRange(1, 20).Draw(t, "retries") {
			n := rapid.OneOf(rapid.IntRange(-3, 80), rapid.IntRange(80, 5000)).Draw(t, "n")
			if j == backoff.Decorrelated && rapid.Bool().Draw(t, "arbitrary prev") {
				prev = time.Duration(rapid.Int64Range(-int64(time.Hour), 2*int64(cfg.Cap)).Draw(t, "prev"))
			}
			d := b.Delay(n, prev)
			if d < 0 || d > cfg.Cap {
				t.Fatalf("Delay(%d, %v) = %v, out of [0, Cap %v]", n, prev, d, cfg.Cap)
			}
			switch j {
			case backoff.Full:
				if e := expOf(t, cfg, n); d > e {
					t.Fatalf("full: Delay(%d) = %v, above e = %v", n, d, e)
				}
			case backoff.None:
				if e := expOf(t, cfg, n); d != e {
					t.Fatalf("none: Delay(%d) = %v, want e = %v", n, d, e)
				}
			case backoff.Equal:
				if e := expOf(t, cfg, n); d < e/2 || d > e {
					t.Fatalf("equal: Delay(%d) = %v, out of [e/2, e] = [%v, %v]", n, d, e/2, e)
				}
			case backoff.Decorrelated:
				p := max(prev, cfg.Base)
				hi := cfg.Cap
				if p <= cfg.Cap/3 {
					hi = 3 * p
				}
				if d < cfg.Base || d > hi {
					t.Fatalf("decorrelated: Delay(%d, %v) = %v, out of [Base, min(Cap, 3·prev)] = [%v, %v]", n, prev, d, cfg.Base, hi)
				}
			case backoff.Constant:
				if d != cfg.Base {
					t.Fatalf("constant: Delay(%d) = %v, want Base %v", n, d, cfg.Base)
				}
			}
			prev = d
		}
	})
}

// With Rand at 0 and just below 1 the delays reach the ends of their ranges.
func TestBoundsAreTight(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		j := rapid.SampledFrom(jitters[:4]).Draw(t, "jitter")
		cfg := drawConfig(t, j)
		n := rapid.IntRange(1, 100).Draw(t, "n")
		prev := time.Duration(rapid.Int64Range(0, int64(cfg.Cap)).Draw(t, "prev"))
		e := expOf(t, cfg, n)
		p := max(prev, cfg.Base)
		hi := cfg.Cap
		if p <= cfg.Cap/3 {
			hi = 3 * p
		}

		cfg.Rand = fixed(0)
		lo := mustNew(t, cfg).Delay(n, prev)
		var wantLo time.Duration
		switch j {
		case backoff.None:
			wantLo = e
		case backoff.Equal:
			wantLo = e - e/2 // e/2, rounded up
		case backoff.Decorrelated:
			wantLo = cfg.Base
		}
		if lo != wantLo {
			t.Fatalf("%v with Rand 0: Delay(%d, %v) = %v, want %v", j, n, prev, lo, wantLo)
		}

		const top = 0.999999
		cfg.Rand = fixed(top)
		up := mustNew(t, cfg).Delay(n, prev)
		wantUp := e
		if j == backoff.Decorrelated {
			wantUp = hi
		}
		slack := time.Duration((1-top)*float64(wantUp)) + 2
		if up > wantUp || up < wantUp-slack {
			t.Fatalf("%v with Rand %v: Delay(%d, %v) = %v, want within %v below %v", j, top, n, prev, up, slack, wantUp)
		}
	})
}

func TestFullJitterMean(t *testing.T) {
	const draws = 100_000
	for _, tc := range []struct {
		j    backoff.Jitter
		n    int
		want float64 // mean, in units of e
	}{
		{backoff.Full, 3, 0.5},
		{backoff.Full, 20, 0.5}, // at the cap
		{backoff.Equal, 3, 0.75},
	} {
		b := mustNew(t, backoff.Config{Jitter: tc.j, Rand: seeded(7)})
		e := mustNew(t, backoff.Config{Jitter: backoff.None}).Delay(tc.n, 0)
		var sum float64
		for range draws {
			sum += float64(b.Delay(tc.n, 0))
		}
		mean := sum / draws / float64(e)
		if math.Abs(mean-tc.want)/tc.want > 0.02 {
			t.Errorf("%v, n = %d: mean delay %.4f·e, want %.2f·e within 2%%", tc.j, tc.n, mean, tc.want)
		}
	}
}

func TestReproducible(t *testing.T) {
	for _, j := range jitters {
		cfg := backoff.Config{Jitter: j, Base: 10 * time.Millisecond, Cap: time.Minute}
		cfg.Rand = seeded(1)
		a := mustNew(t, cfg)
		cfg.Rand = seeded(1)
		b := mustNew(t, cfg)
		cfg.Rand = seeded(2)
		other := mustNew(t, cfg)
		var pa, pb, po time.Duration
		differ := false
		for n := 1; n <= 50; n++ {
			pa, pb, po = a.Delay(n, pa), b.Delay(n, pb), other.Delay(n, po)
			if pa != pb {
				t.Fatalf("%v: retry %d: %v and %v from equal seeds", j, n, pa, pb)
			}
			differ = differ || pa != po
		}
		if random := j != backoff.None && j != backoff.Constant; differ != random {
			t.Errorf("%v: sequences from different seeds differ: %v", j, differ)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	for _, j := range jitters {
		for _, rnd := range []func() float64{nil, seeded(3)} {
			b := mustNew(t, backoff.Config{Jitter: j, Multiplier: 1.3, Rand: rnd})
			var prev time.Duration
			n := 0
			if a := testing.AllocsPerRun(1000, func() {
				n++
				prev = b.Delay(n, prev)
			}); a != 0 {
				t.Errorf("%v: %v allocations per Delay", j, a)
			}
		}
	}
}

// Run with -race: the default source makes a shared Backoff safe to use
// from many goroutines.
func TestConcurrentUse(t *testing.T) {
	for _, j := range jitters {
		b := mustNew(t, backoff.Config{Jitter: j})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				var prev time.Duration
				for n := range 1000 {
					prev = b.Delay(n%40, prev)
					if prev < 0 || prev > backoff.DefaultCap {
						t.Errorf("%v: Delay = %v", j, prev)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
