package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

func mustRegistry(t testing.TB, cfg bulkhead.RegistryConfig) *bulkhead.Registry {
	t.Helper()
	r, err := bulkhead.NewRegistry(cfg)
	if err != nil {
		t.Fatalf("NewRegistry(%+v): %v", cfg, err)
	}
	return r
}

func mustGet(t testing.TB, r *bulkhead.Registry, key string) *bulkhead.Bulkhead {
	t.Helper()
	b, err := r.Get(key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return b
}

func TestRegistryOnePerKey(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 2}})
	a1, a2, b := mustGet(t, r, "a"), mustGet(t, r, "a"), mustGet(t, r, "b")
	if a1 != a2 {
		t.Fatal("two bulkheads for one key")
	}
	if a1 == b {
		t.Fatal("one bulkhead for two keys")
	}
	if s := a1.Snapshot(); s.Name != "a" || s.MaxConcurrent != 2 {
		t.Fatalf("key a: %+v, want Name a and the registry's config", s)
	}
	// Keys are isolated: a full "a" does not affect "b".
	a1.TryAcquire()
	a1.TryAcquire()
	if err := a1.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("a full: %v", err)
	}
	if !b.TryAcquire() {
		t.Fatal("b is full because a is")
	}
	if r.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", r.Len())
	}
}

func TestRegistryConcurrentGet(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{})
	var wg sync.WaitGroup
	got := make([]*bulkhead.Bulkhead, 64)
	for i := range got {
		wg.Go(func() { got[i], _ = r.Get("k") })
	}
	wg.Wait()
	for _, b := range got {
		if b == nil || b != got[0] {
			t.Fatal("concurrent Gets of one key returned different bulkheads")
		}
	}
}

func TestRegistryBoundAndEviction(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{MaxKeys: 2})
	a, b := mustGet(t, r, "a"), mustGet(t, r, "b")
	a.TryAcquire()
	b.TryAcquire()
	// Both busy: no room for c.
	_, err := r.Get("c")
	if !errors.Is(err, bulkhead.ErrTooManyKeys) || !watertight.IsRejection(err) {
		t.Fatalf("Get beyond MaxKeys with none idle = %v, want ErrTooManyKeys", err)
	}
	if r.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", r.Len())
	}
	// a becomes idle: c evicts it.
	a.Release()
	c := mustGet(t, r, "c")
	if r.Len() != 2 {
		t.Fatalf("Len() = %d after eviction, want 2", r.Len())
	}
	if keys := snapshotKeys(r); !slices.Equal(keys, []string{"b", "c"}) {
		t.Fatalf("keys %v, want [b c]: the idle a evicted, the busy b kept", keys)
	}
	// b is still the same bulkhead, still holding its permit.
	if b2 := mustGet(t, r, "b"); b2 != b || b2.Snapshot().Active != 1 {
		t.Fatal("the busy bulkhead was replaced")
	}
	// a comes back as a new bulkhead, evicting the idle c.
	if a2 := mustGet(t, r, "a"); a2 == a {
		t.Fatal("an evicted key came back as its old bulkhead")
	}
	if keys := snapshotKeys(r); !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %v, want [a b]: the idle c evicted", keys)
	}
	_ = c
	b.Release()
}

func TestRegistryDefaultBound(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{})
	for i := range bulkhead.DefaultMaxKeys {
		mustGet(t, r, fmt.Sprint(i)).TryAcquire() // keep each busy
	}
	if _, err := r.Get("one too many"); !errors.Is(err, bulkhead.ErrTooManyKeys) {
		t.Fatalf("Get beyond the default bound = %v, want ErrTooManyKeys", err)
	}
}

func TestRegistryUnbounded(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{MaxKeys: -1})
	for i := range 3 * bulkhead.DefaultMaxKeys {
		mustGet(t, r, fmt.Sprint(i)).TryAcquire()
	}
	if r.Len() != 3*bulkhead.DefaultMaxKeys {
		t.Fatalf("Len() = %d", r.Len())
	}
}

func TestRegistrySnapshots(t *testing.T) {
	r := mustRegistry(t, bulkhead.RegistryConfig{Config: bulkhead.Config{Name: "ignored", MaxConcurrent: 3}})
	for _, k := range []string{"zeta", "alpha", "mu"} {
		mustGet(t, r, k)
	}
	mustGet(t, r, "mu").TryAcquire()
	snaps := r.Snapshots()
	if keys := snapshotKeys(r); !slices.Equal(keys, []string{"alpha", "mu", "zeta"}) {
		t.Fatalf("Snapshots keys = %v, want sorted", keys)
	}
	if snaps[1].Active != 1 || snaps[1].MaxConcurrent != 3 || snaps[0].Active != 0 {
		t.Fatalf("Snapshots = %+v", snaps)
	}
}

func TestRegistryConfigErrors(t *testing.T) {
	_, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: -1}})
	if err == nil || !strings.Contains(err.Error(), "MaxConcurrent") {
		t.Fatalf("NewRegistry with MaxConcurrent -1 = %v, want an error naming MaxConcurrent", err)
	}
}

func snapshotKeys(r *bulkhead.Registry) []string {
	var keys []string
	for _, s := range r.Snapshots() {
		keys = append(keys, s.Name)
	}
	return keys
}

func TestRegistryEventsCarryKey(t *testing.T) {
	rec := &recorder{}
	r := mustRegistry(t, bulkhead.RegistryConfig{Config: bulkhead.Config{Name: "tenants", MaxConcurrent: 1, Listener: rec}, MaxKeys: 1})
	a := mustGet(t, r, "acme")
	_ = a.Acquire(context.Background())
	if a.TryAcquire() {
		t.Fatal("TryAcquire on a full bulkhead")
	}
	if _, err := r.Get("globex"); !errors.Is(err, bulkhead.ErrTooManyKeys) {
		t.Fatalf("Get on a full registry: %v", err)
	}
	a.Release()
	checkEvents(t, rec.take(),
		`acquired bulkhead/tenants/acme "" permits=1`,
		`bulkhead_full bulkhead/tenants/acme "no permit free" err=bulkhead: acme: full`,
		`rejected bulkhead/tenants/globex "" err=bulkhead: too many keys`,
		`released bulkhead/tenants/acme "" permits=1`)
}

// Issue 23: a full registry evicts the least recently used idle bulkhead,
// not whichever idle one comes first in its map: a key in steady use keeps
// its bulkhead (and so its limit's accounting) through a stream of one-off
// keys, and a key holding permits is never evicted.
func TestRegistryChurnKeepsKeysInUse(t *testing.T) {
	for _, hot := range []string{"pay", "db", "a", "tenant-7", "z", "0"} {
		t.Run(hot, func(t *testing.T) {
			r := mustRegistry(t, bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 2}, MaxKeys: 8})
			busy := mustGet(t, r, "busy")
			if !busy.TryAcquire() {
				t.Fatal("TryAcquire on a fresh bulkhead")
			}
			want := mustGet(t, r, hot)
			for i := range 1000 {
				one := mustGet(t, r, fmt.Sprintf("one-off-%d", i))
				if !one.TryAcquire() {
					t.Fatal("TryAcquire on a fresh bulkhead")
				}
				one.Release()
				if i%4 != 0 {
					continue
				}
				b := mustGet(t, r, hot)
				if b != want {
					t.Fatalf("after %d one-off keys, %q has a new bulkhead: it was evicted while in use", i+1, hot)
				}
				b.TryAcquire()
				b.Release()
			}
			if b := mustGet(t, r, "busy"); b != busy || b.Snapshot().Active != 1 {
				t.Fatal("the bulkhead holding a permit was evicted")
			}
			busy.Release()
		})
	}
}
