package balance_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

// addrs returns the addresses of hs.
func addrs(hs []*balance.Host) []string {
	a := make([]string, len(hs))
	for i, h := range hs {
		a[i] = h.Addr()
	}
	return a
}

// shardOf returns the addresses of key's shard, sorted.
func shardOf(b *balance.Balancer, key string, size int) []string {
	s := b.Shard(key, balance.ShardConfig{Size: size})
	a := addrs(s.Hosts())
	slices.Sort(a)
	return a
}

// eject ejects h, a host of b, by failing ConsecutiveErrors (5) calls to
// it in a row.
func eject(t *testing.T, b *balance.Balancer, h *balance.Host) {
	t.Helper()
	for range 5 {
		c := b.Next(func(x *balance.Host) bool { return x != h })
		if c == nil {
			t.Fatalf("%s is ejected already", h.Addr())
		}
		c.Done(watertight.Failure, time.Millisecond)
	}
	if !h.Ejected() {
		t.Fatalf("%s not ejected", h.Addr())
	}
}

// A key's shard is the same on every call, in another Balancer over the
// same addresses in another order (another process), and after ejections;
// its size is the one asked for, and it holds the key's shard of any
// smaller size; the empty key, a size of zero or of the pool's size or more
// give the whole pool.
func TestShardStable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := hosts(16)
		b := newBalancer(t, balance.Config{Hosts: hs, SlowFactor: -1})
		rev := slices.Clone(hs)
		slices.Reverse(rev)
		other := newBalancer(t, balance.Config{Hosts: rev})
		for _, size := range []int{1, 2, 3, 4, 8, 15} {
			distinct := map[string]bool{}
			for i := range 200 {
				key := fmt.Sprintf("tenant-%d", i)
				want := shardOf(b, key, size)
				if len(want) != size {
					t.Fatalf("%s, size %d: %d hosts %v", key, size, len(want), want)
				}
				if got := shardOf(b, key, size); !slices.Equal(got, want) {
					t.Fatalf("%s: shard %v, then %v", key, want, got)
				}
				if got := shardOf(other, key, size); !slices.Equal(got, want) {
					t.Fatalf("%s: shard %v, and %v with the hosts in another order", key, want, got)
				}
				distinct[strings.Join(want, ",")] = true
				// The highest size+1 scores hold the highest size.
				if bigger := shardOf(b, key, size+1); len(diff(want, bigger)) != 0 {
					t.Fatalf("%s: shard of %d %v is not in its shard of %d %v", key, size, want, size+1, bigger)
				}
			}
			// 200 keys drawing from C(16, size) shards at random fill
			// C·(1 − (1 − 1/C)^200) of them on average.
			c := binomial(16, size)
			if e := c * (1 - math.Pow(1-1/c, 200)); float64(len(distinct)) < 0.9*e {
				t.Fatalf("size %d: %d distinct shards for 200 keys, want about %.0f", size, len(distinct), e)
			}
		}
		before := shardOf(b, "acme", 3)
		s := b.Shard("acme", balance.ShardConfig{Size: 3})
		eject(t, b, s.Hosts()[0])
		if got := shardOf(b, "acme", 3); !slices.Equal(got, before) {
			t.Fatalf("an ejection changed the shard: %v, then %v", before, got)
		}
		for _, c := range []struct {
			key  string
			size int
		}{{"", 3}, {"acme", 0}, {"acme", 16}, {"acme", 32}} {
			s := b.Shard(c.key, balance.ShardConfig{Size: c.size})
			if s.Len() != 16 || len(s.Hosts()) != 16 || !s.Contains(b.Hosts()[5]) {
				t.Fatalf("key %q, size %d: %d hosts, want the whole pool", c.key, c.size, s.Len())
			}
		}
		if s := b.Shard("acme", balance.ShardConfig{Size: 3}); s.Contains(other.Hosts()[0]) || s.Contains(nil) {
			t.Fatal("a shard contains another balancer's host, or nil")
		}
		for _, size := range []int{-1, balance.MaxShardSize + 1} {
			func() {
				defer func() {
					if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "MaxShardSize") {
						t.Fatalf("size %d: recovered %v, want a panic naming MaxShardSize", size, r)
					}
				}()
				b.Shard("acme", balance.ShardConfig{Size: size})
			}()
		}
	})
}

// chiSquareQuantile is the quantile of the chi-square distribution with
// df degrees of freedom at the standard normal's z (Wilson and Hilferty's
// approximation, within 1% for df ≥ 7 in the upper tail).
func chiSquareQuantile(df int, z float64) float64 {
	d := float64(df)
	c := 1 - 2/(9*d) + z*math.Sqrt(2/(9*d))
	return d * c * c * c
}

// Over 10,000 keys every host is in about size/n of the shards: the counts
// pass a chi-square test at 0.01% (z = 3.719). Were each shard an
// independent uniform draw of size of the n hosts, the statistic over the
// counts, scaled by (n−1)/(n−size), would be chi-square with n−1 degrees of
// freedom. Over 200 other key sets (keys "t0-0" to "t199-9999"), sizes 1
// and 3, it was: mean 7.3 and 6.8 (variance 15 and 14) for n = 8, 30.6 and
// 31.7 (58, 62) for 32, 130 and 127 (283, 248) for 128, where chi-square
// has a mean of n−1 and a variance of 2(n−1); 8 to 18 sets of 200 above the
// 5% line, none above the 0.01% one. The keys are fixed, so the test gives
// the same answer on every run.
func TestShardSpread(t *testing.T) {
	const keys = 10000
	for _, n := range []int{8, 32, 128} {
		b := newBalancer(t, balance.Config{Hosts: hosts(n)})
		for _, k := range []int{1, 2, 3, 4, 8} {
			if k >= n {
				continue
			}
			count := make([]int, n)
			for i := range keys {
				s := b.Shard(fmt.Sprintf("tenant-%d", i), balance.ShardConfig{Size: k})
				for _, h := range s.Hosts() {
					count[h.Index()]++
				}
			}
			e := float64(keys*k) / float64(n)
			x := 0.0
			for _, c := range count {
				x += (float64(c) - e) * (float64(c) - e) / e
			}
			x *= float64(n-1) / float64(n-k)
			q := chiSquareQuantile(n-1, 3.719)
			t.Logf("n=%d k=%d: scaled chi-square %.1f (df %d, 0.01%% line %.1f), counts %d..%d around %.0f",
				n, k, x, n-1, q, slices.Min(count), slices.Max(count), e)
			if x > q {
				t.Errorf("n=%d k=%d: chi-square %.1f above %.1f: counts %v, expected %.0f each", n, k, x, q, count, e)
			}
		}
	}
}

// A host added to or removed from a pool of n changes the shards of about
// size/(n+1) (added) or size/n (removed) of the keys, each by that host
// alone; within five standard deviations of those shares over 10,000 keys.
func TestShardMinimalDisruption(t *testing.T) {
	const keys = 10000
	for _, n := range []int{8, 32, 128} {
		all := hosts(n + 1)
		pool := all[:n]
		removed := pool[n/2]
		b := newBalancer(t, balance.Config{Hosts: pool})
		grown := newBalancer(t, balance.Config{Hosts: all})
		shrunk := newBalancer(t, balance.Config{Hosts: slices.Delete(slices.Clone(pool), n/2, n/2+1)})
		for _, k := range []int{2, 3, 4} {
			for _, c := range []struct {
				name      string
				after     *balance.Balancer
				host      string // the host added or removed
				want      float64
				wantShare string
			}{
				{"added", grown, all[n], float64(k) / float64(n+1), "size/(n+1)"},
				{"removed", shrunk, removed, float64(k) / float64(n), "size/n"},
			} {
				changed := 0
				for i := range keys {
					key := fmt.Sprintf("tenant-%d", i)
					was, now := shardOf(b, key, k), shardOf(c.after, key, k)
					if slices.Equal(was, now) {
						if c.name == "removed" && slices.Contains(was, removed) {
							t.Fatalf("n=%d k=%d %s: the shard kept the removed host %v", n, k, key, was)
						}
						continue
					}
					changed++
					gone, came := diff(was, now), diff(now, was)
					if len(gone) != 1 || len(came) != 1 || (c.name == "added" && came[0] != c.host) || (c.name == "removed" && gone[0] != c.host) {
						t.Fatalf("n=%d k=%d %s, host %s: shard %v became %v", n, k, c.name, c.host, was, now)
					}
				}
				got := float64(changed) / keys
				sd := math.Sqrt(c.want * (1 - c.want) / keys)
				t.Logf("n=%d k=%d, a host %s: %.2f%% of the shards changed, %s = %.2f%%", n, k, c.name, 100*got, c.wantShare, 100*c.want)
				if math.Abs(got-c.want) > 5*sd {
					t.Errorf("n=%d k=%d, a host %s: %.2f%% of the shards changed, want %.2f%% ± %.2f%%", n, k, c.name, 100*got, 100*c.want, 500*sd)
				}
			}
		}
	}
}

// diff returns the elements of a not in b.
func diff(a, b []string) []string {
	var d []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			d = append(d, x)
		}
	}
	return d
}

// Pick stays in the shard and spreads over its hosts by the two choices;
// an ejected host of the shard is passed over; when every one is ejected,
// Pick returns nil with nothing counted, or with Spill a host of the rest
// of the pool.
func TestShardPick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBalancer(t, balance.Config{Hosts: hosts(8), SlowFactor: -1})
		cfg := balance.ShardConfig{Size: 3}
		s := b.Shard("acme", cfg)
		in := s.Hosts()
		var held []*balance.Host
		for range 300 {
			h := s.Pick(nil)
			if !s.Contains(h) {
				t.Fatalf("Pick returned %s, outside the shard %v", h.Addr(), addrs(in))
			}
			held = append(held, h)
		}
		for _, h := range b.Hosts() {
			want := 0
			if s.Contains(h) {
				want = 100
			}
			// The two choices keep the three within a few calls of 100;
			// one random choice would put them 8 calls apart (one
			// standard deviation).
			if d := h.InFlight() - want; d < -5 || d > 5 {
				t.Fatalf("host %s: %d in flight after 300 picks, want %d ± 5", h.Addr(), h.InFlight(), want)
			}
		}
		for _, h := range held {
			h.Done(watertight.Success, time.Millisecond)
		}
		// Two of three ejected: every pick finds the third.
		eject(t, b, in[0])
		eject(t, b, in[2])
		for range 50 {
			if h := s.Pick(nil); h != in[1] {
				t.Fatalf("two of the shard ejected: Pick returned %s, want %s", h.Addr(), in[1].Addr())
			} else {
				h.Done(watertight.Success, time.Millisecond)
			}
		}
		// The third one ejected: nil, or with Spill, the rest of the pool.
		eject(t, b, in[1])
		if h := s.Pick(nil); h != nil {
			t.Fatalf("every host of the shard ejected: Pick returned %s", h.Addr())
		}
		spill := b.Shard("acme", balance.ShardConfig{Size: 3, Spill: true})
		for range 50 {
			h := spill.Pick(nil)
			if h == nil || spill.Contains(h) || h.Ejected() {
				t.Fatalf("spilling: Pick returned %v", h)
			}
			h.Done(watertight.Success, time.Millisecond)
		}
		for _, h := range b.Snapshot().Hosts {
			if h.InFlight != 0 {
				t.Fatalf("%s: %d in flight after every call ended", h.Addr, h.InFlight)
			}
		}
		// They come back: the shard is theirs again.
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if h := s.Pick(nil); h == nil || !s.Contains(h) {
			t.Fatalf("after the ejections: Pick returned %v", h)
		}
	})
}

// A retry's Pick avoids the failed host whenever the shard has another
// host not ejected, and never leaves the shard for it.
func TestShardPickAvoids(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBalancer(t, balance.Config{Hosts: hosts(8), SlowFactor: -1})
		s := b.Shard("acme", balance.ShardConfig{Size: 2, Spill: true})
		in := s.Hosts()
		for _, avoid := range in {
			for range 100 {
				h := s.Pick(avoid)
				if h == avoid || !s.Contains(h) {
					t.Fatalf("Pick(%s) returned %s; the shard is %v", avoid.Addr(), h.Addr(), addrs(in))
				}
				h.Done(watertight.Success, time.Millisecond)
			}
		}
		// The other one ejected: the avoided host is the shard's last, and
		// Pick returns it rather than spill.
		eject(t, b, in[1])
		if h := s.Pick(in[0]); h != in[0] {
			t.Fatalf("Pick(the shard's only active host) returned %s", h.Addr())
		}
	})
}

// Next tries the shard's hosts but the avoided one, then the avoided one,
// then, with Spill, the rest of the pool, the avoided one last; it counts
// what it returns in flight.
func TestShardNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBalancer(t, balance.Config{Hosts: hosts(8), SlowFactor: -1})
		s := b.Shard("acme", balance.ShardConfig{Size: 3})
		spill := b.Shard("acme", balance.ShardConfig{Size: 3, Spill: true})
		in := s.Hosts()
		refused := []*balance.Host{in[0]}
		skip := func(h *balance.Host) bool { return slices.Contains(refused, h) }
		seen := map[*balance.Host]int{}
		for range 100 {
			h := s.Next(in[1], skip)
			seen[h]++
			h.Done(watertight.Ignored, 0)
		}
		if seen[in[2]] != 100 {
			t.Fatalf("with %s refused and %s avoided, Next gave %v", in[0].Addr(), in[1].Addr(), seen)
		}
		refused = append(refused, in[2])
		if h := s.Next(in[1], skip); h != in[1] {
			t.Fatalf("all but the avoided host refused: Next gave %v, want it", h)
		} else {
			h.Done(watertight.Ignored, 0)
		}
		refused = append(refused, in[1])
		if h := s.Next(in[1], skip); h != nil {
			t.Fatalf("every host of the shard refused: Next gave %s", h.Addr())
		}
		if h := spill.Next(in[1], skip); h == nil || s.Contains(h) {
			t.Fatalf("every host of the shard refused, spilling: Next gave %v", h)
		} else {
			h.Done(watertight.Ignored, 0)
		}
		// Spilled already (the avoided host outside the shard): the rest of
		// the pool first, the avoided host last.
		out := b.Hosts()[slices.IndexFunc(b.Hosts(), func(h *balance.Host) bool { return !s.Contains(h) })]
		for range 50 {
			if h := spill.Next(out, skip); h == out || h == nil || s.Contains(h) {
				t.Fatalf("avoiding %s outside the shard: Next gave %v", out.Addr(), h)
			} else {
				h.Done(watertight.Ignored, 0)
			}
		}
		everyOther := func(h *balance.Host) bool { return h != out }
		if h := spill.Next(out, everyOther); h != out {
			t.Fatalf("all but the avoided host skipped: Next gave %v, want it", h)
		} else {
			h.Done(watertight.Ignored, 0)
		}
		if h := spill.Next(nil, func(*balance.Host) bool { return true }); h != nil {
			t.Fatal("every host skipped: want nil")
		}
		// An ejected host of the shard is passed over as a skipped one is.
		refused = nil
		eject(t, b, in[2])
		for range 20 {
			h := s.Next(nil, nil)
			if h == in[2] || !s.Contains(h) {
				t.Fatalf("Next gave %s (ejected: %v)", h.Addr(), h.Ejected())
			}
			h.Done(watertight.Ignored, 0)
		}
		// The whole pool: Balancer.Next's scan, then the avoided host.
		whole := b.Shard("", balance.ShardConfig{Size: 3})
		for range 20 {
			if h := whole.Next(in[0], nil); h == in[0] || h.Ejected() {
				t.Fatalf("whole pool: Next gave %s", h.Addr())
			} else {
				h.Done(watertight.Ignored, 0)
			}
		}
		if h := whole.Next(in[0], func(h *balance.Host) bool { return h != in[0] }); h != in[0] {
			t.Fatalf("whole pool, all but the avoided skipped: Next gave %v", h)
		} else {
			h.Done(watertight.Ignored, 0)
		}
		for _, h := range b.Snapshot().Hosts {
			if h.InFlight != 0 {
				t.Fatalf("%s: %d in flight", h.Addr, h.InFlight)
			}
		}
	})
}

// Concurrent picks within shards of many keys, with hosts ejected and back:
// no call is lost from the counts and no pick leaves its shard.
func TestShardConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBalancer(t, balance.Config{Hosts: hosts(12), MinSamples: 5, BaseEjection: time.Second, MaxEjection: 4 * time.Second})
		done := make(chan struct{})
		for g := range 400 {
			go func() {
				defer func() { done <- struct{}{} }()
				s := b.Shard(fmt.Sprintf("tenant-%d", g%40), balance.ShardConfig{Size: 1 + g%4, Spill: g%2 == 0})
				var last *balance.Host
				for k := range 5 {
					h := s.Pick(last)
					if h == nil {
						continue
					}
					if !s.Contains(h) && g%2 != 0 {
						t.Errorf("tenant %d: picked %s outside its shard", g%40, h.Addr())
					}
					time.Sleep(time.Duration(g%7) * time.Millisecond)
					o := watertight.Success
					if (g+k+h.Index())%3 == 0 {
						o = watertight.Failure
					}
					h.Done(o, time.Duration(1+h.Index())*time.Millisecond)
					last = h
				}
			}()
		}
		for range 400 {
			<-done
		}
		for _, h := range b.Snapshot().Hosts {
			if h.InFlight != 0 {
				t.Fatalf("host %s: %d in flight after every call ended", h.Addr, h.InFlight)
			}
		}
	})
}
