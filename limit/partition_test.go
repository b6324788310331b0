package limit_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight/limit"
)

func newPartitioned(t *testing.T, cfg limit.PartitionedConfig) *limit.Partitioned {
	t.Helper()
	p, err := limit.NewPartitioned(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Each partition is guaranteed its share and borrows what the others leave:
// when the limit is reached, only a partition below its share gets in.
func TestPartitionedShares(t *testing.T) {
	p := newPartitioned(t, limit.PartitionedConfig{
		Config:     limit.Config{InitialLimit: 10, MinWindow: -1, Algorithm: func() limit.Algorithm { return &fixed{next: 10} }},
		Partitions: []limit.Partition{{Name: "premium", Share: 0.7}, {Name: "free", Share: 0.3}},
	})
	premium, _ := p.Index("premium")
	free, ok := p.Index("free")
	if !ok {
		t.Fatal("Index")
	}
	var held []limit.PartitionPermit
	for range 10 { // free borrows the whole idle limit
		pp, ok := p.TryAcquire(free)
		if !ok {
			t.Fatalf("free refused with %d held and premium idle", len(held))
		}
		held = append(held, pp)
	}
	if _, ok := p.TryAcquire(free); ok {
		t.Fatal("free admitted beyond the limit and above its share")
	}
	for i := range 7 { // premium gets its share at once, above the limit
		pp, ok := p.TryAcquire(premium)
		if !ok {
			t.Fatalf("premium refused at %d of its 7 guaranteed", i)
		}
		held = append(held, pp)
	}
	if _, ok := p.TryAcquire(premium); ok {
		t.Fatal("premium admitted beyond its share with the limit reached")
	}
	s := p.Snapshot()
	if s.InFlight != 17 || s.Partitions[0].Guaranteed != 7 || s.Partitions[1].Guaranteed != 3 ||
		s.Partitions[0].Rejected != 1 || s.Partitions[1].Rejected != 1 || s.Rejected != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	// As free's calls end, free gives way: with the limit reached it is
	// refused until it is back under its share of 3.
	for _, pp := range held[:8] { // 8 of free's 10 end
		pp.Ignore()
	}
	if _, ok := p.TryAcquire(free); !ok {
		t.Fatal("free refused with 2 held, below its share of 3")
	}
	for _, pp := range held[8:] {
		pp.Done(time.Millisecond)
	}
}

// The guarantees follow the limit the algorithm decides.
func TestPartitionedAdapts(t *testing.T) {
	alg := &fixed{next: 40}
	p := newPartitioned(t, limit.PartitionedConfig{
		Config:     limit.Config{InitialLimit: 10, WindowSamples: 2, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }},
		Partitions: []limit.Partition{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}},
	})
	for range 2 {
		pp, _ := p.TryAcquire(0)
		pp.Done(time.Millisecond)
	}
	if s := p.Snapshot(); s.Limit != 40 || s.Partitions[0].Guaranteed != 20 || s.Partitions[1].Guaranteed != 10 {
		t.Fatalf("after a window asking for 40: %+v", s)
	}
}

func TestPartitionedBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  limit.PartitionedConfig
		want string
	}{
		{limit.PartitionedConfig{}, "Partitions must hold at least one partition"},
		{limit.PartitionedConfig{Partitions: []limit.Partition{{Name: "a", Share: 0}}}, "Partitions[0].Share must be in (0, 1], got 0"},
		{limit.PartitionedConfig{Partitions: []limit.Partition{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.6}}}, "shares must add up to at most 1, got 1.2"},
		{limit.PartitionedConfig{Partitions: []limit.Partition{{Name: "a", Share: 0.2}, {Name: "a", Share: 0.2}}}, `Partitions[1].Name "a" is given twice`},
		{limit.PartitionedConfig{Config: limit.Config{MinLimit: -1}, Partitions: []limit.Partition{{Name: "a", Share: 1}}}, "MinLimit"},
	} {
		if _, err := limit.NewPartitioned(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPartitioned(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Under many goroutines no partition is ever admitted above its share
// while the total is above the limit, and nothing is held at the end.
func TestPartitionedHammer(t *testing.T) {
	p := newPartitioned(t, limit.PartitionedConfig{
		Config:     limit.Config{InitialLimit: 8, MinLimit: 8, MaxLimit: 8, MinWindow: -1},
		Partitions: []limit.Partition{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}},
	})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				pp, ok := p.TryAcquire(g % 3)
				if !ok {
					continue
				}
				admitted.Add(1)
				if i%2 == 0 {
					pp.Done(time.Microsecond)
				} else {
					pp.Drop()
				}
			}
		}()
	}
	wg.Wait()
	s := p.Snapshot()
	if s.InFlight != 0 || admitted.Load() == 0 {
		t.Fatalf("after the hammer: %+v (admitted %d)", s, admitted.Load())
	}
	for _, pt := range s.Partitions {
		if pt.InFlight != 0 {
			t.Fatalf("partition %s holds %d", pt.Name, pt.InFlight)
		}
	}
}

func BenchmarkPartitioned(b *testing.B) {
	p, _ := limit.NewPartitioned(limit.PartitionedConfig{
		Config:     limit.Config{InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000},
		Partitions: []limit.Partition{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
	})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pp, ok := p.TryAcquire(0)
			if !ok {
				b.Error("refused")
				return
			}
			pp.Done(time.Millisecond)
		}
	})
}
