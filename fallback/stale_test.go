package fallback_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/fallback"
	"pgregory.net/rapid"
)

func TestLastKnownGoodMaxStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustCache[string](t, fallback.CacheConfig{MaxStale: 10 * time.Second})
		if c.MaxStale() != 10*time.Second {
			t.Fatalf("MaxStale = %v", c.MaxStale())
		}
		if _, _, ok := c.Get("k"); ok {
			t.Fatal("empty cache served a value")
		}
		c.Put("k", "v1")
		time.Sleep(10 * time.Second)
		v, age, ok := c.Get("k")
		if !ok || v != "v1" || age != 10*time.Second {
			t.Fatalf("at exactly MaxStale: %q, %v, %v; want v1, 10s, true", v, age, ok)
		}
		time.Sleep(time.Nanosecond)
		if _, _, ok := c.Get("k"); ok {
			t.Fatal("served a value older than MaxStale")
		}
		if n := c.Len(); n != 0 {
			t.Fatalf("Len = %d after a stale lookup, want the entry dropped", n)
		}
		// A new Put restarts the clock.
		c.Put("k", "v2")
		time.Sleep(5 * time.Second)
		c.Put("k", "v3")
		time.Sleep(6 * time.Second)
		if v, age, ok := c.Get("k"); !ok || v != "v3" || age != 6*time.Second {
			t.Fatalf("after re-Put: %q, %v, %v", v, age, ok)
		}
	})
}

func TestLastKnownGoodDefaultsAndNoLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		def := mustCache[int](t, fallback.CacheConfig{})
		if def.MaxStale() != fallback.DefaultMaxStale {
			t.Fatalf("default MaxStale = %v", def.MaxStale())
		}
		forever := mustCache[int](t, fallback.CacheConfig{MaxStale: -1, MaxEntries: -1})
		def.Put("k", 1)
		forever.Put("k", 1)
		time.Sleep(fallback.DefaultMaxStale + time.Second)
		if _, _, ok := def.Get("k"); ok {
			t.Fatal("default cache served a value older than DefaultMaxStale")
		}
		if _, age, ok := forever.Get("k"); !ok || age != fallback.DefaultMaxStale+time.Second {
			t.Fatalf("MaxStale < 0: %v, %v; want the value, however old", age, ok)
		}
		for i := range 3 * fallback.DefaultMaxEntries {
			forever.Put(fmt.Sprint(i), i)
		}
		if n := forever.Len(); n != 3*fallback.DefaultMaxEntries+1 { // and "k"
			t.Fatalf("unbounded cache holds %d, want all %d", n, 3*fallback.DefaultMaxEntries+1)
		}
		for i := range 2 * fallback.DefaultMaxEntries {
			def.Put(fmt.Sprint(i), i)
		}
		if n := def.Len(); n != fallback.DefaultMaxEntries {
			t.Fatalf("default cache holds %d, want DefaultMaxEntries", n)
		}
	})
}

// A small cache evicts exactly the entry recorded longest ago.
func TestLastKnownGoodEvictsOldest(t *testing.T) {
	c := mustCache[int](t, fallback.CacheConfig{MaxEntries: 3})
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("c", 3)
	c.Put("a", 10) // a is now the newest
	c.Put("d", 4)  // evicts b
	if _, _, ok := c.Get("b"); ok {
		t.Fatal("b should have been evicted")
	}
	for k, want := range map[string]int{"a": 10, "c": 3, "d": 4} {
		if v, _, ok := c.Get(k); !ok || v != want {
			t.Errorf("%s = %v, %v; want %d", k, v, ok, want)
		}
	}
	c.Delete("c")
	c.Delete("nothing")
	c.Put("e", 5) // room after the delete: nothing evicted
	if n := c.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	if _, _, ok := c.Get("a"); !ok {
		t.Fatal("a was evicted though there was room")
	}
}

// A large cache is sharded; its bound is still exact.
func TestLastKnownGoodShardedBound(t *testing.T) {
	for _, max := range []int{65, 100, 1000, 1001} {
		c := mustCache[int](t, fallback.CacheConfig{MaxEntries: max})
		for i := range 20 * max {
			c.Put(fmt.Sprint(i), i)
		}
		if n := c.Len(); n != max {
			t.Errorf("MaxEntries %d: Len = %d", max, n)
		}
		// The most recent keys of each shard are kept: the very last key is.
		last := 20*max - 1
		if v, _, ok := c.Get(fmt.Sprint(last)); !ok || v != last {
			t.Errorf("MaxEntries %d: newest key missing", max)
		}
	}
}

// A property test against a plain model: a single-shard cache behaves as a
// list ordered by last Put, cut to MaxEntries from the old end, with entries
// older than MaxStale invisible.
func TestLastKnownGoodModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		max := rapid.IntRange(1, 8).Draw(rt, "max")
		maxStale := time.Duration(rapid.IntRange(1, 20).Draw(rt, "maxStale")) * time.Second
		ops := rapid.SliceOfN(rapid.IntRange(0, 99), 1, 60).Draw(rt, "ops")
		failed := ""
		synctest.Test(t, func(t *testing.T) {
			c := mustCache[int](t, fallback.CacheConfig{MaxEntries: max, MaxStale: maxStale})
			type rec struct {
				key string
				v   int
				at  time.Duration
			}
			var model []rec // oldest first
			var now time.Duration
			find := func(k string) int {
				return slices.IndexFunc(model, func(r rec) bool { return r.key == k })
			}
			for i, op := range ops {
				key := fmt.Sprint(op % 6)
				switch op / 25 {
				case 0, 1: // Put
					if j := find(key); j >= 0 {
						model = slices.Delete(model, j, j+1)
					} else if len(model) == max {
						model = model[1:]
					}
					model = append(model, rec{key, i, now})
					c.Put(key, i)
				case 2: // Get
					v, age, ok := c.Get(key)
					j := find(key)
					wantOK := j >= 0 && now-model[j].at <= maxStale
					if j >= 0 && !wantOK {
						model = slices.Delete(model, j, j+1)
					}
					if ok != wantOK || (ok && (v != model[j].v || age != now-model[j].at)) {
						failed = fmt.Sprintf("op %d Get(%s) = %v, %v, %v; model %+v at %v", i, key, v, age, ok, model, now)
						return
					}
				case 3: // time passes
					d := time.Duration(op%7) * time.Second
					time.Sleep(d)
					now += d
				}
				if c.Len() != len(model) {
					failed = fmt.Sprintf("op %d: Len = %d, model %+v", i, c.Len(), model)
					return
				}
			}
		})
		if failed != "" {
			rt.Fatal(failed)
		}
	})
}

func TestLastKnownGoodConcurrent(t *testing.T) {
	c := mustCache[int](t, fallback.CacheConfig{MaxEntries: 200})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				k := fmt.Sprint((i * (g + 1)) % 500)
				c.Put(k, i)
				if v, _, ok := c.Get(k); ok && v < 0 {
					t.Error("negative value")
				}
				if i%10 == 0 {
					c.Delete(k)
				}
			}
		})
	}
	wg.Wait()
	if n := c.Len(); n > 200 {
		t.Fatalf("Len = %d over the bound 200", n)
	}
}

func TestDefaultConfigs(t *testing.T) {
	c := mustCache[int](t, fallback.DefaultCacheConfig())
	if c.MaxStale() != fallback.DefaultMaxStale {
		t.Errorf("MaxStale = %v", c.MaxStale())
	}
	ch := mustChain(t, fallback.DefaultConfig(), fallback.Default(1))
	if v, err := ch.Do(context.Background(), "k", fail(0, errDown)); v != 1 || err != nil {
		t.Errorf("Do = %v, %v", v, err)
	}
}

// MaxStale is exact for every entry, without jitter (see LastKnownGood):
// many values recorded at once are all served at exactly MaxStale, and none
// a nanosecond after.
func TestLastKnownGoodMaxStaleExactForAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustCache[int](t, fallback.CacheConfig{MaxStale: time.Minute, MaxEntries: -1})
		const n = 1000
		for i := range n {
			c.Put(fmt.Sprint(i), i)
		}
		time.Sleep(time.Minute)
		for i := range n {
			if v, age, ok := c.Get(fmt.Sprint(i)); !ok || v != i || age != time.Minute {
				t.Fatalf("key %d at exactly MaxStale: %v, %v, %v; want served", i, v, age, ok)
			}
		}
		time.Sleep(time.Nanosecond)
		for i := range n {
			if _, _, ok := c.Get(fmt.Sprint(i)); ok {
				t.Fatalf("key %d served 1ns past MaxStale", i)
			}
		}
	})
}
