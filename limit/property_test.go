package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/limit"
	"pgregory.net/rapid"
)

// algorithms are the four algorithms, each with options drawn from their
// valid ranges (zero, the default, among them).
var algorithms = []struct {
	name string
	draw func(rt *rapid.T) func() limit.Algorithm
}{
	{"aimd", func(rt *rapid.T) func() limit.Algorithm {
		o := limit.AIMDOptions{
			BackoffRatio: rapid.SampledFrom([]float64{0, 0.5, 0.75, 0.99}).Draw(rt, "backoff"),
			Timeout:      rapid.SampledFrom([]time.Duration{0, -1, time.Millisecond, 100 * time.Millisecond}).Draw(rt, "timeout"),
		}
		return func() limit.Algorithm { return limit.NewAIMD(o) }
	}},
	{"vegas", func(rt *rapid.T) func() limit.Algorithm {
		seed := rapid.Uint64().Draw(rt, "seed")
		o := limit.VegasOptions{
			Smoothing:       rapid.SampledFrom([]float64{0, 0.1, 0.5, 1}).Draw(rt, "smoothing"),
			ProbeMultiplier: rapid.SampledFrom([]int{0, -1, 1, 3}).Draw(rt, "probe"),
			Rand:            rand.New(rand.NewPCG(seed, 1)).Float64,
		}
		return func() limit.Algorithm { return limit.NewVegas(o) }
	}},
	{"gradient2", func(rt *rapid.T) func() limit.Algorithm {
		o := limit.Gradient2Options{
			Smoothing:    rapid.SampledFrom([]float64{0, 0.1, 0.5, 1}).Draw(rt, "smoothing"),
			RTTTolerance: rapid.SampledFrom([]float64{0, 1, 2, 10}).Draw(rt, "tolerance"),
			LongWindow:   rapid.SampledFrom([]int{0, 1, 10, 100}).Draw(rt, "longWindow"),
		}
		return func() limit.Algorithm { return limit.NewGradient2(o) }
	}},
	{"watertight", func(rt *rapid.T) func() limit.Algorithm {
		o := limit.DefaultOptions{BaselineWindows: rapid.SampledFrom([]int{0, 1, 5}).Draw(rt, "baseline")}
		return func() limit.Algorithm { return limit.NewDefault(o) }
	}},
}

// latency draws a latency spread over many scales, zero included.
var latency = rapid.Custom(func(rt *rapid.T) time.Duration {
	exp := rapid.IntRange(0, 12).Draw(rt, "exp") // 1ns .. 1000s
	return time.Duration(rapid.Int64Range(0, 9).Draw(rt, "digit")) * time.Duration(math.Pow10(exp))
})

// drawWindow draws a window a Limiter could hand over at limit lim.
func drawWindow(rt *rapid.T, lim int) limit.Window {
	w := limit.Window{
		Limit:    lim,
		InFlight: rapid.IntRange(0, 2*lim).Draw(rt, "inflight"), // above lim after a lowering
		Waiting:  rapid.IntRange(0, 100).Draw(rt, "waiting"),
		Samples:  rapid.IntRange(0, 1000).Draw(rt, "samples"),
		Drops:    rapid.IntRange(0, 1000).Draw(rt, "drops"),
	}
	if w.Samples+w.Drops == 0 {
		w.Samples = 1
	}
	if w.Samples > 0 {
		l := []time.Duration{latency.Draw(rt, "lat1"), latency.Draw(rt, "lat2"), latency.Draw(rt, "lat3")}
		slices.Sort(l)
		w.MinLatency, w.MeanLatency, w.MaxLatency = l[0], l[1], l[2]
		if rapid.Bool().Draw(rt, "deadline") {
			w.MinDeadline = latency.Draw(rt, "minDeadline")
		}
	}
	return w
}

// bounds draws MinLimit, MaxLimit and an initial limit between them.
func bounds(rt *rapid.T) (lo, hi, initial int) {
	lo = rapid.IntRange(1, 50).Draw(rt, "minLimit")
	hi = rapid.IntRange(lo, lo+rapid.SampledFrom([]int{0, 1, 10, 2000}).Draw(rt, "span")).Draw(rt, "maxLimit")
	return lo, hi, rapid.IntRange(lo, hi).Draw(rt, "initial")
}

// TestAlgorithmsFinite: over random sequences of valid windows, each
// fed the limit a Limiter would apply after the last one, no algorithm
// answers NaN or an infinity.
func TestAlgorithmsFinite(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				alg := a.draw(rt)()
				lo, hi, lim := bounds(rt)
				for i := range rapid.IntRange(1, 300).Draw(rt, "windows") {
					w := drawWindow(rt, lim)
					got := alg.Update(w)
					if math.IsNaN(got) || math.IsInf(got, 0) {
						rt.Fatalf("window %d %+v: Update = %v", i, w, got)
					}
					lim = int(math.Round(min(max(got, float64(lo)), float64(hi))))
				}
			})
		})
	}
}

// held is the test's count of the permits it holds, beside the Limiter's.
type held struct {
	permits []limit.Permit
}

// end ends a drawn held permit in a drawn way (Done with a drawn latency,
// Drop or Ignore).
func (h *held) end(rt *rapid.T) {
	if len(h.permits) == 0 {
		rt.Skip("nothing held")
	}
	i := rapid.IntRange(0, len(h.permits)-1).Draw(rt, "permit")
	p := h.permits[i]
	h.permits = slices.Delete(h.permits, i, i+1)
	switch rapid.IntRange(0, 5).Draw(rt, "end") {
	case 0:
		p.Drop()
	case 1:
		p.Ignore()
	default:
		p.Done(latency.Draw(rt, "latency"))
	}
}

// admitted checks a permit just taken against the limit in force when it
// was granted: at most lim held, with it.
func (h *held) admitted(rt *rapid.T, p limit.Permit, lim int, how string) {
	h.permits = append(h.permits, p)
	if len(h.permits) > lim {
		rt.Fatalf("%s admitted a call with %d held (it included) at limit %d", how, len(h.permits), lim)
	}
}

func (h *held) releaseAll() {
	for _, p := range h.permits {
		p.Ignore()
	}
	h.permits = nil
}

func inBounds(rt *rapid.T, l *limit.Limiter, lo, hi int) {
	if n := l.Limit(); n < lo || n > hi {
		rt.Fatalf("limit %d outside [%d, %d]", n, lo, hi)
	}
}

// TestLimiterModel drives a Limiter with each algorithm through random
// sequences of Acquire, TryAcquire, Done, Drop and Ignore (no waiting:
// windows close on their count alone), against a count of the permits the
// test holds: a call is admitted exactly when fewer than the limit are
// held, the limit stays within [MinLimit, MaxLimit], and nothing is held
// at the end.
func TestLimiterModel(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			var changes uint64
			rapid.Check(t, func(rt *rapid.T) {
				lo, hi, initial := bounds(rt)
				l := newLimiter(t, limit.Config{
					Algorithm: a.draw(rt), MinLimit: lo, MaxLimit: hi, InitialLimit: initial,
					WindowSamples: rapid.IntRange(1, 5).Draw(rt, "windowSamples"), MinWindow: -1,
				})
				var h held
				defer h.releaseAll()
				take := func(rt *rapid.T, how string, acquire func() (limit.Permit, bool)) {
					lim := l.Limit()
					p, ok := acquire()
					if ok {
						h.admitted(rt, p, lim, how)
					} else if len(h.permits) < lim {
						rt.Fatalf("%s refused with %d held at limit %d", how, len(h.permits), lim)
					}
				}
				rt.Repeat(map[string]func(*rapid.T){
					"acquire": func(rt *rapid.T) {
						take(rt, "Acquire", func() (limit.Permit, bool) {
							p, err := l.Acquire(context.Background())
							if err != nil && !errors.Is(err, limit.ErrLimited) {
								rt.Fatalf("Acquire = %v", err)
							}
							return p, err == nil
						})
					},
					"try": func(rt *rapid.T) { take(rt, "TryAcquire", l.TryAcquire) },
					"end": func(rt *rapid.T) {
						for range rapid.IntRange(1, 3).Draw(rt, "ends") {
							if len(h.permits) > 0 {
								h.end(rt)
							}
						}
					},
					"": func(rt *rapid.T) {
						inBounds(rt, l, lo, hi)
						if s := l.Snapshot(); s.InFlight != len(h.permits) {
							rt.Fatalf("Snapshot.InFlight %d, the test holds %d", s.InFlight, len(h.permits))
						}
					},
				})
				h.releaseAll()
				s := l.Snapshot()
				if s.InFlight != 0 || s.Waiting != 0 {
					rt.Fatalf("after releasing everything: %+v", s)
				}
				inBounds(rt, l, lo, hi)
				changes += s.Changes
			})
			if changes == 0 {
				coverageMiss(t, "no window changed the limit: the model checked nothing adaptive")
			}
		})
	}
}

// coverageMiss reports a model run that exercised too little. With -short,
// rapid runs a fifth of its cases and a miss is likely, so it is logged
// there; the full run (the README's test command) fails on it.
func coverageMiss(t *testing.T, msg string) {
	t.Helper()
	if testing.Short() {
		t.Log(msg + " (-short: rapid ran few cases)")
		return
	}
	t.Error(msg)
}

// bubbleTB hides the *testing.T from rapid, which asks a *testing.T for
// its Deadline: a call a synctest bubble forbids.
type bubbleTB struct{ *testing.T }

// TestLimiterModelTimed is TestLimiterModel on virtual time, with waiters:
// windows close on time (MinWindow) as well as count, callers queue for a
// permit (for MaxWait, or until cancelled), and time passes. A waiter is
// granted its permit by a call's end or by a raised limit; either way at
// most the larger of the limits before and after that step may be held
// then.
func TestLimiterModelTimed(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			var changes, granted uint64
			synctest.Test(t, func(t *testing.T) {
				rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
					c, g := timedModel(t, rt, a.draw(rt))
					changes, granted = changes+c, granted+g
				})
			})
			if changes == 0 || granted == 0 {
				coverageMiss(t, fmt.Sprintf("%d limit changes and %d granted waits: the model checked too little", changes, granted))
			}
		})
	}
}

type waiter struct {
	done   chan struct{}
	p      limit.Permit
	err    error
	cancel context.CancelFunc
}

// timedModel runs one sequence, and returns how many times the limit
// changed and how many waits were granted.
func timedModel(t *testing.T, rt *rapid.T, alg func() limit.Algorithm) (changes, granted uint64) {
	lo, hi, initial := bounds(rt)
	maxWait := rapid.SampledFrom([]time.Duration{-1, 5 * time.Millisecond}).Draw(rt, "maxWait")
	l := newLimiter(t, limit.Config{
		Algorithm: alg, MinLimit: lo, MaxLimit: hi, InitialLimit: initial, MaxWait: maxWait,
		WindowSamples: rapid.IntRange(1, 5).Draw(rt, "windowSamples"), MinWindow: 10 * time.Millisecond,
	})
	var h held
	var queue []*waiter
	defer func() { // also when a check failed: leave no goroutine in the bubble
		for _, w := range queue {
			w.cancel()
			<-w.done
			if w.err == nil {
				w.p.Ignore()
			}
		}
		h.releaseAll()
	}()
	// settle lets the waiters run, then takes in the permits granted
	// since the step began (at limit before) and the waits that ended.
	settle := func(rt *rapid.T, before int) {
		synctest.Wait()
		lim := max(before, l.Limit())
		for i := 0; i < len(queue); {
			w := queue[i]
			select {
			case <-w.done:
			default:
				i++
				continue
			}
			queue = slices.Delete(queue, i, i+1)
			w.cancel()
			switch {
			case w.err == nil:
				h.admitted(rt, w.p, lim, "a wait")
				granted++
			case errors.Is(w.err, limit.ErrLimited) && maxWait > 0, errors.Is(w.err, context.Canceled):
			default:
				rt.Fatalf("a wait ended with %v", w.err)
			}
		}
	}
	rt.Repeat(map[string]func(*rapid.T){
		"try": func(rt *rapid.T) {
			lim := l.Limit()
			if p, ok := l.TryAcquire(); ok {
				h.admitted(rt, p, lim, "TryAcquire")
			} else if len(h.permits) < lim && len(queue) == 0 {
				rt.Fatalf("TryAcquire refused with %d held at limit %d and nobody waiting", len(h.permits), lim)
			}
		},
		"wait": func(rt *rapid.T) {
			before := l.Limit()
			ctx, cancel := context.WithCancel(context.Background())
			w := &waiter{done: make(chan struct{}), cancel: cancel}
			go func() {
				defer close(w.done)
				w.p, w.err = l.Acquire(ctx)
			}()
			queue = append(queue, w)
			settle(rt, before)
		},
		"cancel": func(rt *rapid.T) {
			if len(queue) == 0 {
				rt.Skip("nobody waits")
			}
			before := l.Limit()
			queue[rapid.IntRange(0, len(queue)-1).Draw(rt, "waiter")].cancel()
			settle(rt, before)
		},
		"end": func(rt *rapid.T) {
			before := l.Limit()
			h.end(rt)
			settle(rt, before)
		},
		"sleep": func(rt *rapid.T) {
			before := l.Limit()
			time.Sleep(rapid.SampledFrom([]time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}).Draw(rt, "sleep"))
			settle(rt, before)
		},
		"": func(rt *rapid.T) {
			inBounds(rt, l, lo, hi)
			if s := l.Snapshot(); s.InFlight != len(h.permits) || s.Waiting != len(queue) {
				rt.Fatalf("Snapshot %+v; the test holds %d and has %d waiting", s, len(h.permits), len(queue))
			}
		},
	})
	for _, w := range queue {
		w.cancel()
	}
	settle(rt, l.Limit())
	h.releaseAll()
	s := l.Snapshot()
	if s.InFlight != 0 || s.Waiting != 0 {
		rt.Fatalf("after releasing everything: %+v", s)
	}
	inBounds(rt, l, lo, hi)
	return s.Changes, granted
}
