package balance_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"pgregory.net/rapid"
)

// TestShardModel drives shards of random sizes, with and without Spill,
// through ejections, returns, picks (with and without a host to avoid) and
// passes over random hosts, and checks each answer against the rules
// stated plainly: Pick takes an active host of the shard, not the avoided
// one while another is active, and when none is, nil or (Spill) an active
// host outside; Next takes, in this order, an active unskipped host of the
// shard but the avoided one, the avoided one if it is of the shard, and
// with Spill an active unskipped host outside the shard but the avoided
// one, then the avoided one; nil when none. Every answer is counted in
// flight and ended, and the counts end at zero.
func TestShardModel(t *testing.T) {
	var nils, spills, avoidedLast int
	synctest.Test(t, func(t *testing.T) {
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			n := rapid.IntRange(2, 10).Draw(rt, "hosts")
			size := rapid.IntRange(1, n).Draw(rt, "size")
			spill := rapid.Bool().Draw(rt, "spill")
			key := rapid.StringN(1, 8, -1).Draw(rt, "key")
			b := newBalancer(t, balance.Config{
				Hosts: hosts(n), ConsecutiveErrors: 1, SlowFactor: -1, MaxEjectedShare: 1, BaseEjection: time.Second,
			})
			hs := b.Hosts()
			s := b.Shard(key, balance.ShardConfig{Size: size, Spill: spill})
			if size < n && s.Len() != size || size == n && s.Len() != n {
				rt.Fatalf("size %d of %d: Len %d", size, n, s.Len())
			}
			in := func(h *balance.Host) bool { return slices.Contains(s.Hosts(), h) }
			whole := s.Len() == n
			hostOrNil := func(label string) *balance.Host {
				if k := rapid.IntRange(-1, n-1).Draw(rt, label); k >= 0 {
					return hs[k]
				}
				return nil
			}
			// check ends h's call and fails if it is not one of want (nil
			// in want: nil allowed).
			check := func(op string, h *balance.Host, want []*balance.Host) {
				if !slices.Contains(want, h) {
					rt.Fatalf("%s returned %v, want one of %v (ejected %v)", op, name(h), names(want), names(ejected(hs)))
				}
				if h != nil {
					h.Done(watertight.Ignored, 0)
				} else {
					nils++
				}
				if h != nil && !in(h) && !whole {
					spills++
				}
			}
			rt.Repeat(map[string]func(*rapid.T){
				"eject": func(rt *rapid.T) {
					// A failed call on an active host ejects it (one
					// failure, the cap at all hosts but one).
					h := hs[rapid.IntRange(0, n-1).Draw(rt, "host")]
					if c := b.Next(func(x *balance.Host) bool { return x != h }); c != nil {
						c.Done(watertight.Failure, time.Millisecond)
					}
				},
				"wait": func(rt *rapid.T) {
					time.Sleep(time.Second)
					synctest.Wait()
				},
				"pick": func(rt *rapid.T) {
					avoid := hostOrNil("avoid")
					var act []*balance.Host
					for _, h := range hs {
						if in(h) && !h.Ejected() {
							act = append(act, h)
						}
					}
					want := act
					switch {
					case len(act) == 0 && spill:
						want = nil
						for _, h := range hs {
							if !h.Ejected() {
								want = append(want, h)
							}
						}
						if len(want) > 1 {
							want = slices.DeleteFunc(want, func(h *balance.Host) bool { return h == avoid })
						}
					case len(act) == 0:
						want = []*balance.Host{nil}
					case len(act) > 1:
						want = slices.DeleteFunc(slices.Clone(act), func(h *balance.Host) bool { return h == avoid })
					}
					check("Pick", s.Pick(avoid), want)
				},
				"next": func(rt *rapid.T) {
					avoid := hostOrNil("avoid")
					skipped := map[*balance.Host]bool{}
					for _, h := range hs {
						skipped[h] = rapid.Bool().Draw(rt, "skip "+h.Addr())
					}
					ok := func(h *balance.Host) bool { return !h.Ejected() && !skipped[h] }
					var tiers [][]*balance.Host
					tier := func(keep func(*balance.Host) bool) {
						var t []*balance.Host
						for _, h := range hs {
							if keep(h) {
								t = append(t, h)
							}
						}
						tiers = append(tiers, t)
					}
					tier(func(h *balance.Host) bool { return in(h) && h != avoid && ok(h) })
					tier(func(h *balance.Host) bool { return in(h) && h == avoid && ok(h) })
					if spill && !whole {
						tier(func(h *balance.Host) bool { return !in(h) && h != avoid && ok(h) })
						tier(func(h *balance.Host) bool { return !in(h) && h == avoid && ok(h) })
					}
					want := []*balance.Host{nil}
					for i, t := range tiers {
						if len(t) > 0 {
							want = t
							if i%2 == 1 {
								avoidedLast++
							}
							break
						}
					}
					check("Next", s.Next(avoid, func(h *balance.Host) bool { return skipped[h] }), want)
				},
				"": func(rt *rapid.T) {
					for _, h := range b.Snapshot().Hosts {
						if h.InFlight != 0 {
							rt.Fatalf("%s: %d in flight with no call open", h.Addr, h.InFlight)
						}
					}
				},
			})
		})
	})
	if nils == 0 || spills == 0 || avoidedLast == 0 {
		t.Errorf("%d nil answers, %d spills, %d avoided hosts taken last: the model checked too little", nils, spills, avoidedLast)
	}
}

func name(h *balance.Host) string {
	if h == nil {
		return "nil"
	}
	return h.Addr()
}

func names(hs []*balance.Host) []string {
	a := make([]string, len(hs))
	for i, h := range hs {
		a[i] = name(h)
	}
	return a
}

func ejected(hs []*balance.Host) []*balance.Host {
	var e []*balance.Host
	for _, h := range hs {
		if h.Ejected() {
			e = append(e, h)
		}
	}
	return e
}
