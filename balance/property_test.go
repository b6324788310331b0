package balance_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"pgregory.net/rapid"
)

// bubbleTB hides the *testing.T from rapid, which asks a *testing.T for
// its Deadline: a call a synctest bubble forbids.
type bubbleTB struct{ *testing.T }

// modelHost is the reference model's view of a host.
type modelHost struct {
	inFlight   int
	consec     int
	ejected    bool
	until      time.Time
	ejections  int // in the current run
	returnedAt time.Time
}

// model is a plain, sequential statement of the ejection rules: a run of
// ConsecutiveErrors failures ejects a host unless the cap is reached; an
// ejection lasts BaseEjection doubled for each earlier one in the run, up
// to MaxEjection; a run ends when a host has been back for MaxEjection.
type model struct {
	hosts     []modelHost
	n, max    int
	base, cap time.Duration
}

func (m *model) ejected() int {
	k := 0
	for _, h := range m.hosts {
		if h.ejected {
			k++
		}
	}
	return k
}

func (m *model) end(i int, o watertight.Outcome, now time.Time) {
	h := &m.hosts[i]
	h.inFlight--
	switch o {
	case watertight.Success:
		h.consec = 0
	case watertight.Failure:
		h.consec++
		if h.consec < m.n || h.ejected || m.ejected() >= m.max {
			return
		}
		if h.ejections > 0 && now.Sub(h.returnedAt) >= m.cap {
			h.ejections = 0
		}
		d := m.base
		for range h.ejections {
			d = min(2*d, m.cap)
		}
		h.ejections++
		h.ejected, h.until, h.consec = true, now.Add(d), 0
	}
}

func (m *model) advance(now time.Time) {
	for i := range m.hosts {
		if h := &m.hosts[i]; h.ejected && !h.until.After(now) {
			h.ejected, h.returnedAt, h.consec = false, h.until, 0
		}
	}
}

// TestModel drives a Balancer through random picks (with and without a
// host to avoid), ends of every outcome, and the passing of (virtual)
// time, against the model: the same hosts are ejected and back at the same
// moments, Pick never returns an ejected host nor the avoided one when
// another could take the call, the counts in flight are exact, and the cap
// holds.
func TestModel(t *testing.T) {
	var ejections, returns, avoided int
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			nHosts := rapid.IntRange(1, 6).Draw(rt, "hosts")
			share := rapid.SampledFrom([]float64{0, 0.1, 0.34, 0.5, 1}).Draw(rt, "share")
			consec := rapid.IntRange(1, 4).Draw(rt, "consecutive")
			base := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second}).Draw(rt, "base")
			capd := base * time.Duration(rapid.SampledFrom([]int{1, 3, 8}).Draw(rt, "capTimes"))
			b := newBalancer(t, balance.Config{
				Hosts: hosts(nHosts), ConsecutiveErrors: consec, SlowFactor: -1,
				MaxEjectedShare: share, BaseEjection: base, MaxEjection: capd,
			})
			hs := b.Hosts()
			m := &model{hosts: make([]modelHost, nHosts), n: consec, base: base, cap: capd, max: b.Snapshot().MaxEjected}
			wantMax := 0
			if nHosts > 1 {
				if share == 0 {
					share = 0.5
				}
				wantMax = max(1, min(nHosts-1, int(math.Floor(share*float64(nHosts)+1e-9))))
			}
			if m.max != wantMax {
				rt.Fatalf("MaxEjected %d, want %d", m.max, wantMax)
			}
			var held []*balance.Host
			defer func() {
				for _, h := range held {
					h.Done(watertight.Ignored, 0)
				}
			}()
			rt.Repeat(map[string]func(*rapid.T){
				"pick": func(rt *rapid.T) {
					var avoid *balance.Host
					if k := rapid.IntRange(-1, nHosts-1).Draw(rt, "avoid"); k >= 0 {
						avoid = hs[k]
					}
					h := b.Pick(avoid)
					mh := &m.hosts[h.Index()]
					if mh.ejected {
						rt.Fatalf("Pick returned ejected host %d", h.Index())
					}
					if h == avoid {
						for i := range m.hosts {
							if i != h.Index() && !m.hosts[i].ejected {
								rt.Fatalf("Pick returned the avoided host %d; host %d was free", h.Index(), i)
							}
						}
					} else if avoid != nil {
						avoided++
					}
					mh.inFlight++
					held = append(held, h)
				},
				"end": func(rt *rapid.T) {
					if len(held) == 0 {
						rt.Skip("nothing held")
					}
					k := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
					h := held[k]
					held = append(held[:k], held[k+1:]...)
					o := rapid.SampledFrom([]watertight.Outcome{watertight.Success, watertight.Failure, watertight.Failure, watertight.Ignored, watertight.Saturated}).Draw(rt, "outcome")
					before := m.ejected()
					h.Done(o, time.Millisecond)
					m.end(h.Index(), o, time.Now())
					if m.ejected() > before {
						ejections++
					}
				},
				"wait": func(rt *rapid.T) {
					d := rapid.SampledFrom([]time.Duration{base / 2, base, 2 * base, capd, capd + base}).Draw(rt, "sleep")
					before := m.ejected()
					time.Sleep(d)
					synctest.Wait()
					m.advance(time.Now())
					if m.ejected() < before {
						returns++
					}
				},
				"": func(rt *rapid.T) {
					s := b.Snapshot()
					if s.Ejected != m.ejected() || s.Ejected > m.max {
						rt.Fatalf("%d ejected, model %d, cap %d", s.Ejected, m.ejected(), m.max)
					}
					for i, h := range s.Hosts {
						mh := m.hosts[i]
						if h.Ejected != mh.ejected || h.InFlight != mh.inFlight || int(h.ConsecutiveErrors) != mh.consec {
							rt.Fatalf("host %d: %+v, model %+v", i, h, mh)
						}
						if h.Ejected && !h.Until.Equal(mh.until) {
							rt.Fatalf("host %d returns at %v, model %v", i, h.Until, mh.until)
						}
					}
				},
			})
		})
	})
	if ejections == 0 || returns == 0 || avoided == 0 {
		t.Errorf("%d ejections, %d returns, %d avoided picks: the model checked too little", ejections, returns, avoided)
	}
}
