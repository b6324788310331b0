package keycache_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/watertight-go/watertight/internal/keycache"
)

func TestGetPut(t *testing.T) {
	c := keycache.New[int](16)
	if v, g, ok := c.Get("a"); ok {
		t.Fatalf("empty cache: Get = %d, %d, true", v, g)
	}
	c.Put("a", 3, 1)
	if v, g, ok := c.Get("a"); !ok || v != 1 || g != 3 {
		t.Errorf("Get(a) = %d, %d, %v; want 1, 3, true", v, g, ok)
	}
	c.Put("a", 4, 2)
	if v, g, ok := c.Get("a"); !ok || v != 2 || g != 4 {
		t.Errorf("Get(a) = %d, %d, %v; want 2, 4, true", v, g, ok)
	}
}

// More keys than the table has slots: every one is found, from the table
// or the map, until the generation moves.
func TestManyKeys(t *testing.T) {
	const n = 1000
	c := keycache.New[string](n)
	for gen := uint64(1); gen <= 2; gen++ {
		for i := range n {
			k := strconv.Itoa(i)
			c.Put(k, gen, fmt.Sprint(k, "@", gen))
		}
		for i := range n {
			k := strconv.Itoa(i)
			want := fmt.Sprint(k, "@", gen)
			if v, g, ok := c.Get(k); !ok || v != want || g != gen {
				t.Fatalf("generation %d: Get(%s) = %q, %d, %v; want %q", gen, k, v, g, ok, want)
			}
		}
	}
}

// Beyond its bound the map is emptied: keys are lost, never mixed up.
func TestBound(t *testing.T) {
	c := keycache.New[string](8)
	for i := range 500 {
		k := strconv.Itoa(i)
		c.Put(k, 1, k)
		if v, _, ok := c.Get(k); !ok || v != k {
			t.Fatalf("Get(%s) right after its Put = %q, %v", k, v, ok)
		}
	}
	found := 0
	for i := range 500 {
		k := strconv.Itoa(i)
		if v, _, ok := c.Get(k); ok {
			if v != k {
				t.Fatalf("Get(%s) = %q", k, v)
			}
			found++
		}
	}
	// At most the table's 64 slots and the map's 8.
	if found > 64+8 {
		t.Errorf("%d keys kept, more than 64 slots and a bound of 8", found)
	}
}

// Against a model: a value Get returns was put for that key under the
// generation it reports, and a Put is found by the next Get of its key.
// Generations only grow, as the registries' do.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := keycache.New[int](rapid.IntRange(1, 8).Draw(t, "limit"))
		type kg struct {
			k string
			g uint64
		}
		put := map[kg]map[int]bool{}
		gen := uint64(0)
		keys := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h"})
		next := 0
		t.Repeat(map[string]func(*rapid.T){
			"put": func(t *rapid.T) {
				k := keys.Draw(t, "key")
				next++
				c.Put(k, gen, next)
				if put[kg{k, gen}] == nil {
					put[kg{k, gen}] = map[int]bool{}
				}
				put[kg{k, gen}][next] = true
				if v, g, ok := c.Get(k); !ok || v != next || g != gen {
					t.Fatalf("Get(%s) right after Put of %d under %d = %d, %d, %v", k, next, gen, v, g, ok)
				}
			},
			"get": func(t *rapid.T) {
				k := keys.Draw(t, "key")
				if v, g, ok := c.Get(k); ok && !put[kg{k, g}][v] {
					t.Fatalf("Get(%s) = %d under %d, never put for it", k, v, g)
				}
				if v, g, ok := c.Get(k); ok && g == gen {
					// The latest value put under the current generation.
					for w := range put[kg{k, gen}] {
						if w > v {
							t.Fatalf("Get(%s) = %d under %d; %d was put since", k, v, g, w)
						}
					}
				}
			},
			"advance": func(t *rapid.T) { gen++ },
		})
	})
}

// Concurrent Puts and Gets of colliding keys under moving generations: a
// hit is always a value put for its key and generation (run with -race).
func TestConcurrent(t *testing.T) {
	c := keycache.New[string](4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				k := strconv.Itoa((g + i) % 150)
				gen := uint64(i / 1000)
				want := k + "@" + strconv.FormatUint(gen, 10)
				if v, g, ok := c.Get(k); ok && g == gen {
					if v != want {
						t.Errorf("Get(%s, %d) = %q, want %q", k, gen, v, want)
						return
					}
					continue
				}
				c.Put(k, gen, want)
			}
		})
	}
	wg.Wait()
}
