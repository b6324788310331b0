package balance

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/watertight-go/watertight"
)

// MaxShardSize is the largest ShardConfig.Size: a shard is kept in a fixed
// array of this many hosts, so that Balancer.Shard allocates nothing.
// Shuffle sharding isolates with small shards (docs/balance.md).
const MaxShardSize = 32

// ErrShardDown is the error to fail a call with when its shard has no host
// to take it (Shard.Pick returns nil: every host of the shard is ejected,
// and ShardConfig.Spill is off). It is a rejection (watertight.IsRejection):
// nothing was sent, and a retry would find the same shard.
var ErrShardDown = watertight.NewRejection("balance: every host of the shard is ejected")

// ShardConfig says how Balancer.Shard cuts a pool: its zero value gives
// every key the whole pool.
type ShardConfig struct {
	// Size is the number of hosts in a key's shard, at most MaxShardSize
	// (Shard panics above it). Zero, or a Size of the pool's size or more,
	// means the whole pool. docs/balance.md, "Shuffle sharding", says how
	// to choose it.
	Size int
	// Spill lets a call whose shard has no host to take it go to the rest
	// of the pool: when every host of the shard is ejected (Shard.Pick), or
	// ejected or skipped (Shard.Next). If false, Pick and Next return nil
	// then, and the call should fail with ErrShardDown: the key stays in
	// its shard, which is the isolation.
	Spill bool
}

// Shard is a key's shard of a Balancer's pool: ShardConfig.Size of its
// hosts, chosen by the key, or the whole pool. Get one from Balancer.Shard;
// the zero Shard is not usable. It is a value of about 150 bytes that
// holds no lock: compute it once per call (a request and its retries) and
// use it for every pick of the call. Its methods are safe for concurrent
// use.
type Shard struct {
	b     *Balancer
	n     int                 // hosts in idx; 0: the whole pool
	spill bool                // ShardConfig.Spill
	idx   [MaxShardSize]int32 // the shard's hosts, by index in Config.Hosts, in no order
}

// Shard returns key's shard of the pool: cfg.Size hosts, the same for the
// same key and Size while Config.Hosts holds the same addresses, in any
// order and in any process. Each host scores a hash of the key and its
// address, and the Size highest scores take the shard (rendezvous, or
// highest-random-weight, hashing), so a host added to or removed from a
// pool of n changes the shards of about Size/n of the keys, each by that
// one host. Ejections do not change a shard: its Pick and Next pass over
// its ejected hosts. For the empty key, a Size of zero, or one of the
// pool's size or more, the shard is the whole pool. Shard panics if
// cfg.Size is negative or above MaxShardSize. It costs a hash of the key
// and one mix per host of the pool, and allocates nothing.
func (b *Balancer) Shard(key string, cfg ShardConfig) Shard {
	k := cfg.Size
	if k < 0 || k > MaxShardSize {
		panic(fmt.Sprintf("balance: shard size %d: use 0 (the whole pool) to %d (MaxShardSize)", k, MaxShardSize))
	}
	s := Shard{b: b}
	if k == 0 || key == "" || k >= len(b.hosts) {
		return s
	}
	s.spill = cfg.Spill
	kh := hashString(key)
	hash := b.hash
	// The k highest scores, highest first, with their hosts in s.idx: the
	// first k hosts, then each host that scores above the lowest of them
	// (about k·ln(n/k) of the n) in its place.
	var top [MaxShardSize]uint64
	for i := range k {
		top[i], s.idx[i] = mix(kh^hash[i]), int32(i)
		for j := i; j > 0 && top[j-1] < top[j]; j-- {
			top[j-1], top[j] = top[j], top[j-1]
			s.idx[j-1], s.idx[j] = s.idx[j], s.idx[j-1]
		}
	}
	low := top[k-1]
	for i := k; i < len(hash); i++ {
		v := mix(kh ^ hash[i])
		if v <= low {
			continue
		}
		j := k - 1
		for ; j > 0 && top[j-1] < v; j-- {
			top[j], s.idx[j] = top[j-1], s.idx[j-1]
		}
		top[j], s.idx[j] = v, int32(i)
		low = top[k-1]
	}
	s.n = k
	return s
}

// Len returns the number of hosts in the shard.
func (s *Shard) Len() int {
	if s.n == 0 {
		return len(s.b.hosts)
	}
	return s.n
}

// Hosts returns the shard's hosts, in Config.Hosts order. The slice is the
// caller's.
func (s *Shard) Hosts() []*Host {
	if s.n == 0 {
		return s.b.Hosts()
	}
	hs := make([]*Host, s.n)
	for i, x := range s.idx[:s.n] {
		hs[i] = s.b.hosts[x]
	}
	slices.SortFunc(hs, func(a, c *Host) int { return a.index - c.index })
	return hs
}

// Contains reports whether h is one of the shard's hosts.
func (s *Shard) Contains(h *Host) bool {
	if h == nil || h.b != s.b {
		return false
	}
	if s.n == 0 {
		return true
	}
	return slices.Contains(s.idx[:s.n], int32(h.index))
}

// Pick is Balancer.Pick within the shard: of the shard's hosts not
// ejected, it draws two at random and takes the less loaded (returning
// avoid only when it is the only one), counted in flight; the caller ends
// the call with exactly one Host.Done. When every host of the shard is
// ejected, it returns nil, with nothing counted (fail the call with
// ErrShardDown), or with ShardConfig.Spill, Balancer.Pick's choice among
// the rest of the pool. For the whole pool, it is Balancer.Pick.
func (s *Shard) Pick(avoid *Host) *Host {
	b := s.b
	if s.n == 0 {
		return b.Pick(avoid)
	}
	var act [MaxShardSize]*Host
	m := 0
	for _, i := range s.idx[:s.n] {
		if h := b.hosts[i]; !h.down.Load() {
			act[m] = h
			m++
		}
	}
	if m == 0 {
		if s.spill {
			return b.Pick(avoid) // every active host is outside the shard
		}
		return nil
	}
	h := b.choose(act[:m], avoid)
	h.inFlight.Add(1)
	return h
}

// Next is for a caller that passes over hosts (those whose breaker refused
// the call, say) after Pick: it returns a host that is not ejected and for
// which skip is false (skip may be nil), counted in flight as Pick counts
// it, trying in turn
//
//   - the shard's hosts but avoid, from a random one;
//   - avoid (the host a failed attempt went to), if it is in the shard;
//   - with ShardConfig.Spill, the rest of the pool but avoid, from a
//     random host in Config.Hosts order; then avoid;
//
// and nil, with nothing counted, when none will do (fail the call with the
// last refusal, or ErrShardDown). For the whole pool, the first two steps
// take in every host. Like Balancer.Next, it does not weigh the hosts'
// loads.
func (s *Shard) Next(avoid *Host, skip func(*Host) bool) *Host {
	b := s.b
	if s.n == 0 {
		if h := scan(*b.active.Load(), avoid, skip); h != nil {
			return take(h)
		}
		if avoid != nil && avoid.b == b && usable(avoid, skip) {
			return take(avoid)
		}
		return nil
	}
	n := s.n
	r := int(rand.Uint32N(uint32(n)))
	for k := range n {
		if h := b.hosts[s.idx[(r+k)%n]]; h != avoid && usable(h, skip) {
			return take(h)
		}
	}
	inShard := s.Contains(avoid)
	if inShard && usable(avoid, skip) {
		return take(avoid)
	}
	if !s.spill {
		return nil
	}
	// The shard's hosts are all ejected or skipped: the scan passes over
	// them.
	if h := scan(*b.active.Load(), avoid, skip); h != nil {
		return take(h)
	}
	if !inShard && avoid != nil && avoid.b == b && usable(avoid, skip) {
		return take(avoid)
	}
	return nil
}

// scan returns the first of hs, from a random one, that is not avoid and
// is usable; nil if none.
func scan(hs []*Host, avoid *Host, skip func(*Host) bool) *Host {
	if len(hs) == 0 {
		return nil
	}
	i := int(rand.Uint32N(uint32(len(hs))))
	for k := range hs {
		if h := hs[(i+k)%len(hs)]; h != avoid && usable(h, skip) {
			return h
		}
	}
	return nil
}

// usable reports whether h is not ejected and skip (if not nil) is false
// for it.
func usable(h *Host, skip func(*Host) bool) bool {
	return !h.down.Load() && (skip == nil || !skip(h))
}

// take counts a call in flight on h and returns h.
func take(h *Host) *Host {
	h.inFlight.Add(1)
	return h
}

// hashString is a 64-bit hash of s that is the same in every process and
// on every platform: FNV-1a, then mix. (hash/maphash's seeds are random
// per process, which would give a tenant another shard in each gateway
// instance, and spread a poisonous tenant over all of their shards.)
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h)
}

// mix is MurmurHash3's 64-bit finaliser: a bijection whose every output bit
// depends on every input bit. A host's score for a key is mix(key hash ^
// host hash).
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
