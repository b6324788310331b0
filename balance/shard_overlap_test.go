package balance_test

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/balance"
)

// binomial is C(n, k), exact for the pools of this file (C(128, 4) is
// about 10^7).
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	c := 1.0
	for i := range k {
		c = c * float64(n-i) / float64(i+1)
	}
	return math.Round(c)
}

// overlap is the chance that two tenants' shards of k hosts out of n, each
// a uniform draw, have exactly j hosts in common (the hypergeometric law):
// C(k, j)·C(n−k, k−j) / C(n, k).
func overlap(n, k, j int) float64 {
	return binomial(k, j) * binomial(n-k, k-j) / binomial(n, k)
}

// atLeast is the chance that they have m or more hosts in common.
func atLeast(n, k, m int) float64 {
	p := 0.0
	for j := m; j <= k; j++ {
		p += overlap(n, k, j)
	}
	return p
}

// pct formats a probability as a percentage of three significant digits.
func pct(p float64) string {
	s := fmt.Sprintf("%.3g%%", 100*p)
	if strings.Contains(s, "e") {
		s = fmt.Sprintf("%.2g%%", 100*p)
	}
	return s
}

// thousands formats n with commas.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

const (
	overlapTenants = 1000 // the T of the table's last column
	mcTenants      = 2000 // the tenants of the Monte Carlo run
)

// overlapTable returns the table of docs/balance.md, "Shuffle sharding":
// for pools of n hosts and shards of k, the number of distinct shards, the
// chances that another tenant shares at least one host, at least two, and
// all k with a given tenant, and the expected number of the other T−1
// tenants that share all of its shard, (T−1)/C(n, k).
func overlapTable() string {
	var b strings.Builder
	b.WriteString("| pool n | shard k | shards C(n,k) | shares ≥ 1 host | ≥ 2 hosts | all k hosts | of 1,000 tenants, others on all of one's k |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range []int{8, 16, 32, 64} {
		for _, k := range []int{2, 3, 4} {
			c := binomial(n, k)
			all := atLeast(n, k, k)
			fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s (1 in %s) | %.3g |\n",
				n, k, thousands(int(c)), pct(atLeast(n, k, 1)), pct(atLeast(n, k, 2)), pct(all), thousands(int(c)), float64(overlapTenants-1)/c)
		}
	}
	return b.String()
}

// TestShardOverlapTable computes the overlap table of docs/balance.md from
// the exact formulas, checks that the page holds it as computed, and checks
// the formulas against the real hashing: the shards of 2,000 tenants
// ("tenant-0" to "tenant-1999") over pools of "10.0.0.1:80" onwards, whose
// 1,999,000 pairs share at least one, at least two and all k hosts as
// often as the formulas say, within five standard deviations (for uniform
// independent shards the pairs' events are pairwise uncorrelated, so the
// count of pairs has the binomial variance). Run with -v to print the
// table and the Monte Carlo figures.
func TestShardOverlapTable(t *testing.T) {
	table := overlapTable()
	t.Logf("the table of docs/balance.md:\n%s", table)
	page, err := os.ReadFile("../docs/balance.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), table) {
		t.Errorf("docs/balance.md does not hold the overlap table as computed; paste it from `go test -run TestShardOverlapTable -v ./balance`")
	}
	var mc strings.Builder
	mc.WriteString("| pool n | shard k | pairs sharing ≥ 1 host: counted / expected | ≥ 2 hosts | all k hosts |\n")
	mc.WriteString("| --- | --- | --- | --- | --- |\n")
	pairs := mcTenants * (mcTenants - 1) / 2
	for _, n := range []int{8, 16, 32, 64} {
		b := newBalancer(t, balance.Config{Hosts: hosts(n)})
		for _, k := range []int{2, 3, 4} {
			masks := make([]uint64, mcTenants)
			for i := range masks {
				s := b.Shard(fmt.Sprintf("tenant-%d", i), balance.ShardConfig{Size: k})
				for _, h := range s.Hosts() {
					masks[i] |= 1 << h.Index()
				}
			}
			var shared [5]int // pairs by hosts in common
			for i, a := range masks {
				for _, c := range masks[i+1:] {
					shared[bits.OnesCount64(a&c)]++
				}
			}
			fmt.Fprintf(&mc, "| %d | %d |", n, k)
			for _, m := range []int{1, 2, k} {
				got := 0
				for j := m; j <= k; j++ {
					got += shared[j]
				}
				p := atLeast(n, k, m)
				want := float64(pairs) * p
				sd := math.Sqrt(float64(pairs) * p * (1 - p))
				fmt.Fprintf(&mc, " %s / %s |", thousands(got), thousands(int(math.Round(want))))
				if math.Abs(float64(got)-want) > 5*sd {
					t.Errorf("n=%d k=%d: %d pairs of %d tenants share at least %d hosts, want %.1f ± %.1f (5 sd)", n, k, got, mcTenants, m, want, 5*sd)
				}
			}
			mc.WriteString("\n")
		}
	}
	t.Logf("Monte Carlo, %s pairs of %s tenants:\n%s", thousands(pairs), thousands(mcTenants), mc.String())
	if !strings.Contains(string(page), mc.String()) {
		t.Errorf("docs/balance.md does not hold the Monte Carlo table as computed; paste it from `go test -run TestShardOverlapTable -v ./balance`")
	}
}
