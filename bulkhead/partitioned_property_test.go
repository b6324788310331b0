package bulkhead_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"pgregory.net/rapid"
)

// pmodel is the reference model of a Partitioned bulkhead: counts, one FIFO
// queue per partition, and the rules of the type's doc written as plainly
// as possible.
type pmodel struct {
	capacity int
	g        []int // guarantees, read from the bulkhead (TestPartitionedGuarantees checks them)
	reserve  float64
	used     []int
	queues   [][]*pmwaiter
	maxWait  []time.Duration // 0: no wait; negative: until ctx ends
	room     []int           // -1: no bound
	seq      int
	now      time.Duration // virtual time since the start

	acquired, rejected, canceled []uint64
}

type pmwaiter struct {
	seq      int
	part     int
	deadline time.Duration // -1: none
	errc     chan error
	cancel   context.CancelFunc
}

func (m *pmodel) held() int {
	n := 0
	for _, u := range m.used {
		n += u
	}
	return n
}

func (m *pmodel) waiting() int {
	n := 0
	for _, q := range m.queues {
		n += len(q)
	}
	return n
}

// mayBorrow: after taking one permit, the free permits must stay at or
// above ⌈reserve × Σ max(0, g - used)⌉.
func (m *pmodel) mayBorrow() bool {
	free := m.capacity - m.held() - 1
	if free < 0 {
		return false
	}
	unused := 0
	for j, u := range m.used {
		unused += max(0, m.g[j]-u)
	}
	// The bulkhead keeps the reserve in 1/65536ths, rounded up.
	f := math.Ceil(m.reserve*65536) / 65536
	return float64(free) >= math.Ceil(f*float64(unused)-1e-9)
}

func (m *pmodel) canTake(i int) bool {
	if m.held() >= m.capacity {
		return false
	}
	return m.used[i] < m.g[i] || m.mayBorrow()
}

// handoff grants what the rules grant, in their order, and returns the
// waiters granted.
func (m *pmodel) handoff() []*pmwaiter {
	var granted []*pmwaiter
	for {
		best := -1
		for j, q := range m.queues {
			if len(q) == 0 {
				continue
			}
			if best < 0 {
				best = j
				continue
			}
			under, bestUnder := m.used[j] < m.g[j], m.used[best] < m.g[best]
			rj, rb := float64(m.used[j])/float64(m.g[j]), float64(m.used[best])/float64(m.g[best])
			if under && !bestUnder || under == bestUnder && (rj < rb || rj == rb && q[0].seq < m.queues[best][0].seq) {
				best = j
			}
		}
		if best < 0 || !m.canTake(best) {
			return granted
		}
		w := m.queues[best][0]
		m.queues[best] = m.queues[best][1:]
		m.used[best]++
		m.acquired[best]++
		granted = append(granted, w)
	}
}

func (m *pmodel) remove(w *pmwaiter) {
	q := m.queues[w.part]
	i := slices.Index(q, w)
	m.queues[w.part] = slices.Delete(q, i, i+1)
}

// TestPartitionedModel runs random sequences of tries, acquires that may
// queue, releases, cancellations, waits that run out, acquires with a done
// context and reconfigurations against pmodel, and checks after every step
// exactly which calls were granted, refused or still wait (so: the cap,
// the guarantees, the reserve, FIFO within a partition and the order
// between partitions), and that the Snapshot agrees.
func TestPartitionedModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			n := rapid.IntRange(1, 3).Draw(rt, "partitions")
			waits := []time.Duration{bulkhead.NoWait, -1, 20 * time.Millisecond, 50 * time.Millisecond}
			drawCfg := func(rt *rapid.T) bulkhead.PartitionedConfig {
				cfg := bulkhead.PartitionedConfig{
					MaxConcurrent: rapid.IntRange(n+1, 9).Draw(rt, "MaxConcurrent"),
					Reserve:       rapid.SampledFrom([]float64{0, -1, 0.25, 0.5, 0.75, 1}).Draw(rt, "Reserve"),
					MaxWait:       rapid.SampledFrom(waits[1:]).Draw(rt, "MaxWait"),
					DefaultWeight: float64(rapid.IntRange(0, 3).Draw(rt, "DefaultWeight")),
				}
				for j := range n {
					cfg.Partitions = append(cfg.Partitions, bulkhead.PartitionConfig{
						Name:       string(rune('a' + j)),
						Weight:     float64(rapid.IntRange(1, 4).Draw(rt, "Weight")),
						MaxWait:    rapid.SampledFrom(waits).Draw(rt, "PartitionMaxWait"),
						MaxWaiters: rapid.SampledFrom([]int{-1, 1, 2}).Draw(rt, "MaxWaiters"),
					})
				}
				return cfg
			}
			cfg := drawCfg(rt)
			p, err := bulkhead.NewPartitioned(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			parts := n + 1 // the default partition is added last
			m := &pmodel{
				used: make([]int, parts), queues: make([][]*pmwaiter, parts),
				acquired: make([]uint64, parts), rejected: make([]uint64, parts), canceled: make([]uint64, parts),
			}
			configure := func(cfg bulkhead.PartitionedConfig) {
				m.capacity = cfg.MaxConcurrent
				m.reserve = cfg.Reserve
				switch {
				case m.reserve == 0:
					m.reserve = bulkhead.DefaultReserve
				case m.reserve < 0:
					m.reserve = 0
				}
				s := p.Snapshot()
				m.g = make([]int, parts)
				m.maxWait = make([]time.Duration, parts)
				m.room = make([]int, parts)
				for j := range parts {
					m.g[j] = s.Partitions[j].Guaranteed
					d, r := cfg.MaxWait, bulkhead.DefaultMaxWaiters
					if j < n {
						if pc := cfg.Partitions[j]; pc.MaxWait != 0 {
							d = pc.MaxWait
						}
						r = cfg.Partitions[j].MaxWaiters
					}
					if d == bulkhead.NoWait {
						d = 0
					}
					m.maxWait[j], m.room[j] = d, max(r, -1)
				}
			}
			configure(cfg)
			// If the check fails half-way, its waiters must still end: the
			// bubble does not end while they wait.
			var cancels []context.CancelFunc
			defer func() {
				for _, c := range cancels {
					c()
				}
			}()

			// settle checks that exactly the waiters the model granted got
			// their permit, and that the others still wait.
			settle := func(rt *rapid.T, granted []*pmwaiter) {
				synctest.Wait()
				for _, w := range granted {
					select {
					case err := <-w.errc:
						if err != nil {
							rt.Fatalf("waiter %d of partition %d: %v, want a permit", w.seq, w.part, err)
						}
					default:
						rt.Fatalf("waiter %d of partition %d still waits; the model granted it (used %v, g %v, capacity %d)", w.seq, w.part, m.used, m.g, m.capacity)
					}
				}
				for _, q := range m.queues {
					for _, w := range q {
						select {
						case err := <-w.errc:
							rt.Fatalf("waiter %d of partition %d ended with %v; the model has it waiting (used %v, g %v, capacity %d, queued %d)",
								w.seq, w.part, err, m.used, m.g, m.capacity, m.waiting())
						default:
						}
					}
				}
			}
			refused := func(rt *rapid.T, what string, err error, i int) {
				if !errors.Is(err, bulkhead.ErrFull) || !watertight.IsRejection(err) {
					rt.Fatalf("%s in partition %d: %v, want ErrFull", what, i, err)
				}
				m.rejected[i]++
			}

			rt.Repeat(map[string]func(*rapid.T){
				"try": func(rt *rapid.T) {
					i := rapid.IntRange(0, parts-1).Draw(rt, "partition")
					want := len(m.queues[i]) == 0 && m.canTake(i)
					if ok := p.TryAcquire(i); ok != want {
						rt.Fatalf("TryAcquire(%d) = %v, want %v (used %v, g %v, capacity %d, reserve %v, queued %d)",
							i, ok, want, m.used, m.g, m.capacity, m.reserve, m.waiting())
					}
					if want {
						m.used[i]++
						m.acquired[i]++
					} else {
						m.rejected[i]++
					}
				},
				"acquire": func(rt *rapid.T) {
					i := rapid.IntRange(0, parts-1).Draw(rt, "partition")
					ctx, cancel := context.WithCancel(context.Background())
					w := &pmwaiter{seq: m.seq, part: i, deadline: -1, errc: make(chan error, 1), cancel: cancel}
					m.seq++
					cancels = append(cancels, cancel)
					go func() { w.errc <- p.Acquire(ctx, i) }()
					synctest.Wait()
					var err error
					done := true
					select {
					case err = <-w.errc:
					default:
						done = false
					}
					switch {
					case len(m.queues[i]) == 0 && m.canTake(i):
						if !done || err != nil {
							rt.Fatalf("Acquire(%d) with a permit for it: done %v, %v (used %v, g %v)", i, done, err, m.used, m.g)
						}
						m.used[i]++
						m.acquired[i]++
					case m.maxWait[i] == 0 || m.room[i] >= 0 && len(m.queues[i]) >= m.room[i]:
						if !done {
							rt.Fatalf("Acquire(%d) waits; want a refusal (MaxWait %v, queue %d of %d)", i, m.maxWait[i], len(m.queues[i]), m.room[i])
						}
						refused(rt, "Acquire", err, i)
					default:
						if done {
							rt.Fatalf("Acquire(%d) = %v; want it to wait (used %v, g %v, capacity %d, queued %d)", i, err, m.used, m.g, m.capacity, m.waiting())
						}
						if d := m.maxWait[i]; d > 0 {
							w.deadline = m.now + d
						}
						m.queues[i] = append(m.queues[i], w)
					}
				},
				"done context": func(rt *rapid.T) {
					i := rapid.IntRange(0, parts-1).Draw(rt, "partition")
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					if err := p.Acquire(ctx, i); !errors.Is(err, context.Canceled) || watertight.Classify(ctx, err) != watertight.Ignored {
						rt.Fatalf("Acquire with a done context = %v", err)
					}
					m.canceled[i]++
				},
				"release": func(rt *rapid.T) {
					i := rapid.IntRange(0, parts-1).Draw(rt, "partition")
					if m.used[i] == 0 {
						rt.Skip("nothing held")
					}
					p.Release(i)
					m.used[i]--
					settle(rt, m.handoff())
				},
				"cancel": func(rt *rapid.T) {
					var all []*pmwaiter
					for _, q := range m.queues {
						all = append(all, q...)
					}
					if len(all) == 0 {
						rt.Skip("nobody waits")
					}
					w := rapid.SampledFrom(all).Draw(rt, "waiter")
					w.cancel()
					if err := <-w.errc; !errors.Is(err, context.Canceled) || errors.Is(err, bulkhead.ErrFull) {
						rt.Fatalf("cancelled wait = %v", err)
					}
					m.remove(w)
					m.canceled[w.part]++
					settle(rt, m.handoff())
				},
				"time passes": func(rt *rapid.T) {
					d := rapid.SampledFrom([]time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond}).Draw(rt, "d")
					time.Sleep(d)
					m.now += d
					synctest.Wait()
					var expired []*pmwaiter
					for _, q := range m.queues {
						for _, w := range q {
							if w.deadline >= 0 && w.deadline <= m.now {
								expired = append(expired, w)
							}
						}
					}
					for _, w := range expired {
						m.remove(w)
						select {
						case err := <-w.errc:
							refused(rt, "a wait past MaxWait", err, w.part)
						default:
							rt.Fatalf("waiter %d of partition %d still waits %v after its MaxWait %v", w.seq, w.part, m.now-w.deadline+m.maxWait[w.part], m.maxWait[w.part])
						}
						w.cancel()
					}
					settle(rt, nil)
				},
				"reconfigure": func(rt *rapid.T) {
					c := drawCfg(rt)
					if err := p.Reconfigure(c); err != nil {
						rt.Fatal(err)
					}
					configure(c)
					settle(rt, m.handoff())
				},
				"": func(rt *rapid.T) {
					s := p.Snapshot()
					if s.MaxConcurrent != m.capacity || s.Active != m.held() || s.Waiting != m.waiting() ||
						s.Available != max(0, m.capacity-m.held()) || len(s.Partitions) != parts {
						rt.Fatalf("Snapshot %+v; model capacity %d, used %v, %d waiting", s, m.capacity, m.used, m.waiting())
					}
					var acquired, rejected, canceled uint64
					for j, ps := range s.Partitions {
						if ps.Active != m.used[j] || ps.Guaranteed != m.g[j] || ps.Borrowed != max(0, m.used[j]-m.g[j]) ||
							ps.Waiting != len(m.queues[j]) || ps.Acquired != m.acquired[j] || ps.Rejected != m.rejected[j] || ps.Canceled != m.canceled[j] {
							rt.Fatalf("partition %d: %+v; model used %d, g %d, waiting %d, acquired %d, rejected %d, canceled %d",
								j, ps, m.used[j], m.g[j], len(m.queues[j]), m.acquired[j], m.rejected[j], m.canceled[j])
						}
						acquired += m.acquired[j]
						rejected += m.rejected[j]
						canceled += m.canceled[j]
					}
					if s.Acquired != acquired || s.Rejected != rejected || s.Canceled != canceled {
						rt.Fatalf("Snapshot totals %+v; model %d, %d, %d", s, acquired, rejected, canceled)
					}
				},
			})
			for _, q := range m.queues {
				for _, w := range q {
					w.cancel()
					if err := <-w.errc; err == nil { // granted as those before it left
						m.used[w.part]++
					}
				}
			}
			for j, u := range m.used {
				for range u {
					p.Release(j)
				}
			}
			if s := p.Snapshot(); s.Active != 0 || s.Waiting != 0 {
				rt.Fatalf("after releasing everything: %+v", s)
			}
		})
	})
}

// TestPartitionedGuarantees checks how MaxConcurrent is split by weight:
// the guarantees add up to MaxConcurrent, each is at least 1, a heavier
// partition never gets fewer permits than a lighter one, and when no
// partition needs the minimum of 1, each is its exact share rounded down or
// up.
func TestPartitionedGuarantees(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "partitions")
		c := rapid.IntRange(n, 200).Draw(rt, "MaxConcurrent")
		cfg := bulkhead.PartitionedConfig{MaxConcurrent: c, Default: "p0"}
		var weights []float64
		var total float64
		for j := range n {
			w := rapid.SampledFrom([]float64{0.1, 0.5, 1, 1.5, 2, 3, 10, 100}).Draw(rt, "weight")
			weights = append(weights, w)
			total += w
			cfg.Partitions = append(cfg.Partitions, bulkhead.PartitionConfig{Name: "p" + string(rune('0'+j)), Weight: w})
		}
		p, err := bulkhead.NewPartitioned(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		s := p.Snapshot()
		if len(s.Partitions) != n {
			rt.Fatalf("%d partitions, want %d (Default names one of them)", len(s.Partitions), n)
		}
		sum, needMin := 0, false
		for j, ps := range s.Partitions {
			exact := float64(c) * weights[j] / total
			needMin = needMin || exact < 1
			sum += ps.Guaranteed
			if ps.Guaranteed < 1 {
				rt.Fatalf("partition %d guaranteed %d", j, ps.Guaranteed)
			}
			for k, qs := range s.Partitions {
				if weights[j] > weights[k] && ps.Guaranteed < qs.Guaranteed {
					rt.Fatalf("partition %d (weight %v) guaranteed %d < partition %d (weight %v) %d", j, weights[j], ps.Guaranteed, k, weights[k], qs.Guaranteed)
				}
			}
		}
		if sum != c {
			rt.Fatalf("guarantees add up to %d, want %d: %+v", sum, c, s.Partitions)
		}
		if needMin {
			return
		}
		for j, ps := range s.Partitions {
			exact := float64(c) * weights[j] / total
			if float64(ps.Guaranteed) < math.Floor(exact+1e-9)-1e-9 || float64(ps.Guaranteed) > math.Ceil(exact-1e-9)+1e-9 {
				rt.Fatalf("partition %d: guaranteed %d, exact share %v", j, ps.Guaranteed, exact)
			}
		}
	})
}
