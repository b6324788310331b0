package keyed_test

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/internal/keyed"
	"pgregory.net/rapid"
)

var errFull = errors.New("test: full")

type value struct {
	key  string
	idle atomic.Bool
}

// counter makes values and counts the calls per key.
type counter struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]error
}

func (c *counter) create(key string) (*value, error) {
	runtime.Gosched() // widen the window in which a second create could start
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[key]++
	if err := c.fail[key]; err != nil {
		return nil, err
	}
	return &value{key: key}, nil
}

func (c *counter) n(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

func idle(v *value) bool { return v.idle.Load() }

func TestGetCreatesOncePerKey(t *testing.T) {
	for _, keys := range []int{1, 10} {
		t.Run(strconv.Itoa(keys), func(t *testing.T) {
			var c counter
			m := keyed.New(-1, c.create, nil)
			const goroutines = 100
			start := make(chan struct{})
			got := make([]*value, goroutines)
			var wg sync.WaitGroup
			for i := range goroutines {
				wg.Go(func() {
					<-start
					v, err := m.Get("k"+strconv.Itoa(i%keys), errFull)
					if err != nil {
						t.Error(err)
					}
					got[i] = v
				})
			}
			close(start)
			wg.Wait()
			for k := range keys {
				key := "k" + strconv.Itoa(k)
				if n := c.n(key); n != 1 {
					t.Errorf("create(%q) called %d times, want 1", key, n)
				}
			}
			for i, v := range got {
				if first := got[i%keys]; v != first || v.key != "k"+strconv.Itoa(i%keys) {
					t.Errorf("goroutine %d got %p (%s), want %p", i, v, v.key, first)
				}
			}
			if n := m.Len(); n != keys {
				t.Errorf("Len = %d, want %d", n, keys)
			}
		})
	}
}

func TestGetExisting(t *testing.T) {
	var c counter
	m := keyed.New(1, c.create, nil)
	a, err := m.Get("a", errFull)
	if err != nil {
		t.Fatal(err)
	}
	// The map is full, but an existing key is no new value.
	for range 3 {
		if v, err := m.Get("a", errFull); v != a || err != nil {
			t.Fatalf("Get(a) = %p, %v; want %p, nil", v, err, a)
		}
	}
	if n := c.n("a"); n != 1 {
		t.Errorf("create called %d times, want 1", n)
	}
	if v, ok := m.Lookup("a"); v != a || !ok {
		t.Errorf("Lookup(a) = %p, %v", v, ok)
	}
	if v, ok := m.Lookup("b"); v != nil || ok {
		t.Errorf("Lookup(b) = %p, %v; want nil, false", v, ok)
	}
	if n := c.n("b"); n != 0 {
		t.Error("Lookup created a value")
	}
}

func TestBoundEvicts(t *testing.T) {
	var c counter
	m := keyed.New(2, c.create, idle)
	a, _ := m.Get("a", errFull)
	b, _ := m.Get("b", errFull)

	// Nothing idle: the new key is refused and nothing is created.
	if v, err := m.Get("c", errFull); err != errFull || v != nil {
		t.Fatalf("Get(c) = %v, %v; want nil, the full error", v, err)
	}
	if n := c.n("c"); n != 0 {
		t.Errorf("create(c) called %d times on a full map", n)
	}
	if n := m.Len(); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}

	// b idle: c takes its place.
	b.idle.Store(true)
	cv, err := m.Get("c", errFull)
	if err != nil || cv == nil || cv.key != "c" {
		t.Fatalf("Get(c) = %v, %v", cv, err)
	}
	if _, ok := m.Lookup("b"); ok {
		t.Error("the idle value was not evicted")
	}
	if v, ok := m.Lookup("a"); !ok || v != a {
		t.Error("the busy value was evicted")
	}
	if n := m.Len(); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}

	// b again: a fresh value, once a or c is idle.
	if _, err := m.Get("b", errFull); err != errFull {
		t.Errorf("Get(b) = %v, want the full error", err)
	}
	cv.idle.Store(true)
	b2, err := m.Get("b", errFull)
	if err != nil || b2 == b {
		t.Errorf("Get(b) = %p, %v; want a new value", b2, err)
	}
	if n := c.n("b"); n != 2 {
		t.Errorf("create(b) called %d times, want 2", n)
	}
	if keys := keysOf(m); fmt.Sprint(keys) != "[a b]" {
		t.Errorf("keys = %v, want [a b]", keys)
	}
}

func TestBoundNothingEvictable(t *testing.T) {
	var c counter
	m := keyed.New(1, c.create, nil)
	if _, err := m.Get("a", errFull); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("b", errFull); err != errFull {
		t.Errorf("Get(b) = %v, want the full error", err)
	}
	// max 0 holds nothing.
	m0 := keyed.New(0, c.create, func(*value) bool { return true })
	if _, err := m0.Get("x", errFull); err != errFull || m0.Len() != 0 {
		t.Errorf("Get on a map bounded to 0 = %v, Len %d", err, m0.Len())
	}
}

func TestUnbounded(t *testing.T) {
	var c counter
	m := keyed.New(-1, c.create, nil)
	for i := range 1000 {
		if _, err := m.Get(strconv.Itoa(i), errFull); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Len(); n != 1000 {
		t.Errorf("Len = %d, want 1000", n)
	}
}

func TestCreateError(t *testing.T) {
	errCreate := errors.New("bad key")
	c := counter{fail: map[string]error{"bad": errCreate}}
	m := keyed.New(2, c.create, idle)
	for range 2 {
		if v, err := m.Get("bad", errFull); err != errCreate || v != nil {
			t.Fatalf("Get(bad) = %v, %v; want nil, the create error", v, err)
		}
	}
	if n := c.n("bad"); n != 2 {
		t.Errorf("create(bad) called %d times, want 2 (a failure is not stored)", n)
	}
	if _, ok := m.Lookup("bad"); ok || m.Len() != 0 {
		t.Errorf("a failed create stored something: Len %d", m.Len())
	}
	if _, err := m.Get("good", errFull); err != nil || m.Len() != 1 {
		t.Errorf("Get(good) = %v, Len %d", err, m.Len())
	}
}

func TestDelete(t *testing.T) {
	var c counter
	m := keyed.New(2, c.create, nil)
	a, _ := m.Get("a", errFull)
	m.Get("b", errFull)
	m.Delete("a")
	m.Delete("a")       // twice
	m.Delete("missing") // never there
	if n := m.Len(); n != 1 {
		t.Errorf("Len = %d, want 1", n)
	}
	if _, ok := m.Lookup("a"); ok {
		t.Error("a still there")
	}
	// Room again, and a comes back fresh.
	a2, err := m.Get("a", errFull)
	if err != nil || a2 == a {
		t.Errorf("Get(a) = %p, %v; want a new value", a2, err)
	}
	if n := m.Len(); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}
}

func keysOf(m *keyed.Map[*value]) []string {
	var keys []string
	m.Range(func(k string, v *value) bool {
		if v.key != k {
			panic("Range: value " + v.key + " under key " + k)
		}
		keys = append(keys, k)
		return true
	})
	sort.Strings(keys)
	return keys
}

func TestRange(t *testing.T) {
	var c counter
	m := keyed.New(-1, c.create, nil)
	if keys := keysOf(m); len(keys) != 0 {
		t.Errorf("empty map: %v", keys)
	}
	for _, k := range []string{"c", "a", "b"} {
		m.Get(k, errFull)
	}
	if keys := keysOf(m); fmt.Sprint(keys) != "[a b c]" {
		t.Errorf("keys = %v, want [a b c]", keys)
	}
	n := 0
	m.Range(func(string, *value) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("Range went on after false: %d calls", n)
	}
}

// Concurrent Gets, Deletes and evictions keep Len equal to what the map
// holds and never above the bound.
func TestConcurrentChurn(t *testing.T) {
	var c counter
	const max = 8
	m := keyed.New(max, c.create, func(*value) bool { return true })
	var over atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := strconv.Itoa((g*7 + i) % 20)
				if i%5 == 0 {
					m.Delete(k)
					continue
				}
				v, err := m.Get(k, errFull)
				if err != nil || v.key != k {
					t.Errorf("Get(%s) = %v, %v", k, v, err)
					return
				}
				if m.Len() > max {
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Errorf("Len exceeded the bound %d times", n)
	}
	if n, k := m.Len(), len(keysOf(m)); n != k || n > max {
		t.Errorf("Len = %d, Range saw %d keys, bound %d", n, k, max)
	}
}

// Generation moves on every removal, eviction or Delete, and on nothing else.
func TestGeneration(t *testing.T) {
	var c counter
	m := keyed.New(2, c.create, idle)
	g0 := m.Generation()
	a, _ := m.Get("a", errFull)
	m.Get("b", errFull)
	m.Get("a", errFull)
	m.Delete("missing")
	m.Get("c", errFull) // refused: nothing idle
	if g := m.Generation(); g != g0 {
		t.Fatalf("Generation moved from %d to %d without a removal", g0, g)
	}
	a.idle.Store(true)
	m.Get("c", errFull) // evicts a
	g1 := m.Generation()
	if g1 == g0 {
		t.Fatal("Generation did not move on an eviction")
	}
	m.Delete("b")
	if g := m.Generation(); g == g1 {
		t.Fatal("Generation did not move on a Delete")
	}
}

// A value cached with the generation read before its lookup is its key's
// current value whenever the generation still reads the same, however Gets,
// Deletes and evictions interleave.
func TestGenerationGuardsCachedValues(t *testing.T) {
	var c counter
	m := keyed.New(4, c.create, func(*value) bool { return true })
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			type cached struct {
				v   *value
				gen uint64
			}
			cache := map[string]cached{}
			for i := range 3000 {
				k := strconv.Itoa((g*5 + i) % 7)
				if i%11 == 0 {
					m.Delete(k)
					continue
				}
				if e, ok := cache[k]; ok && m.Generation() == e.gen {
					// Stale only if the generation held all along.
					if cur, ok := m.Lookup(k); (!ok || cur != e.v) && m.Generation() == e.gen {
						t.Errorf("key %s: the cached value is stale under generation %d", k, e.gen)
						return
					}
					continue
				}
				gen := m.Generation()
				v, err := m.Get(k, errFull)
				if err != nil {
					t.Errorf("Get(%s): %v", k, err)
					return
				}
				cache[k] = cached{v, gen}
			}
		})
	}
	wg.Wait()
}

// A key in steady use keeps its value however many one-off keys pass
// through a full map: eviction takes the least recently used value, not
// whichever comes first in the map's order (issue 23: a key in an unlucky
// position got a fresh value on almost every call).
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	for _, hot := range []string{"pay", "a", "k3", "hot", "z", "db", "0", "user-42"} {
		t.Run(hot, func(t *testing.T) {
			var c counter
			m := keyed.New(8, c.create, func(*value) bool { return true })
			want, _ := m.Get(hot, errFull)
			for i := range 500 {
				if _, err := m.Get("one-off-"+strconv.Itoa(i), errFull); err != nil {
					t.Fatal(err)
				}
				if i%4 == 0 { // used once every 4 new keys: well within a turn of 8
					if v, _ := m.Get(hot, errFull); v != want {
						t.Fatalf("after %d one-off keys, %q got a new value: it was evicted", i+1, hot)
					}
				}
			}
			if n := c.n(hot); n != 1 {
				t.Errorf("create(%q) called %d times, want 1", hot, n)
			}
			if n := m.Len(); n != 8 {
				t.Errorf("Len = %d, want 8", n)
			}
		})
	}
}

// With every value used since the hand last passed, the sweep still finds
// the one evictable value, wherever it is: a refusal means none is.
func TestEvictionIsExhaustive(t *testing.T) {
	for target := range 16 {
		var c counter
		m := keyed.New(16, c.create, idle)
		vs := make([]*value, 16)
		for i := range vs {
			vs[i], _ = m.Get("k"+strconv.Itoa(i), errFull)
		}
		for _, v := range vs { // every flag set
			m.Get(v.key, errFull)
		}
		vs[target].idle.Store(true)
		if _, err := m.Get("new", errFull); err != nil {
			t.Fatalf("target %d: Get(new) = %v, want the idle value evicted", target, err)
		}
		if _, ok := m.Lookup(vs[target].key); ok {
			t.Errorf("target %d: the idle value is still there", target)
		}
		if n := m.Len(); n != 16 {
			t.Errorf("target %d: Len = %d", target, n)
		}
	}
}

// NewIdle's evictable gets a lower bound of the time since the value's last
// use: from its creation, or from the turn of the hand that saw its last use.
func TestIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c counter
		var idles []time.Duration
		m := keyed.NewIdle(1, c.create, func(_ *value, idle time.Duration) bool {
			idles = append(idles, idle)
			return true
		})
		m.Get("a", errFull)
		time.Sleep(5 * time.Second)
		m.Get("b", errFull) // a unused since its creation: idle 5s
		time.Sleep(3 * time.Second)
		m.Get("b", errFull) // used at 8s
		time.Sleep(4 * time.Second)
		m.Get("c", errFull) // the hand sees b used (dated 12s), then offers it
		if fmt.Sprint(idles) != "[5s 0s]" {
			t.Errorf("idle values %v, want [5s 0s]", idles)
		}
		if keys := keysOf(m); fmt.Sprint(keys) != "[c]" {
			t.Errorf("keys = %v, want [c]", keys)
		}
	})
}

// LimitSweep bounds the values one eviction examines; the next one goes on
// from where the hand stopped, so an evictable value is found in the end.
func TestLimitSweep(t *testing.T) {
	var c counter
	var examined int
	var target *value
	m := keyed.New(16, c.create, func(v *value) bool {
		examined++
		return v == target
	}).LimitSweep(4)
	vs := make([]*value, 16)
	for i := range vs {
		vs[i], _ = m.Get("k"+strconv.Itoa(i), errFull)
	}
	target = vs[13]
	refused := 0
	for {
		examined = 0
		_, err := m.Get("new", errFull)
		if examined > 4 {
			t.Fatalf("one eviction examined %d values, limit 4", examined)
		}
		if err == nil {
			break
		}
		if refused++; refused > 4 {
			t.Fatal("the sweep never reached the evictable value")
		}
	}
	if _, ok := m.Lookup("k13"); ok {
		t.Error("the evictable value is still there")
	}
	if refused == 0 {
		t.Error("the first sweep found a value 13 slots away, limit 4: not limited")
	}
}

// A create that fails after an eviction leaves the map consistent: the
// evicted value is gone, nothing takes its place, and the map fills again.
func TestCreateErrorAfterEviction(t *testing.T) {
	errCreate := errors.New("bad key")
	c := counter{fail: map[string]error{"bad": errCreate}}
	m := keyed.New(3, c.create, func(*value) bool { return true })
	for _, k := range []string{"a", "b", "c"} {
		m.Get(k, errFull)
	}
	for range 2 {
		if _, err := m.Get("bad", errFull); err != errCreate {
			t.Fatalf("Get(bad) = %v, want the create error", err)
		}
	}
	// The first failure evicted one value; the second found room.
	if n, keys := m.Len(), keysOf(m); n != 2 || len(keys) != 2 {
		t.Fatalf("Len %d, keys %v; want two values left", n, keys)
	}
	for _, k := range []string{"x", "y", "z", "w"} {
		if _, err := m.Get(k, errFull); err != nil {
			t.Fatal(err)
		}
	}
	if n, keys := m.Len(), keysOf(m); n != 3 || len(keys) != 3 {
		t.Fatalf("Len %d, keys %v; want 3", n, keys)
	}
	for _, k := range keysOf(m) {
		m.Delete(k)
	}
	if n := m.Len(); n != 0 {
		t.Fatalf("Len %d after deleting every key", n)
	}
}

// TestModel checks the map against a model, one operation at a time: a key
// held keeps its value; a new key on a full map is refused exactly when no
// value is evictable, else it replaces one evictable value; the map never
// holds more than its bound.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 5).Draw(t, "max")
		var c counter
		m := keyed.New(max, c.create, idle)
		held := map[string]*value{}
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		t.Repeat(map[string]func(*rapid.T){
			"get": func(t *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(t, "key")
				evictable := 0
				for _, v := range held {
					if v.idle.Load() {
						evictable++
					}
				}
				v, err := m.Get(k, errFull)
				switch old, ok := held[k]; {
				case ok:
					if v != old || err != nil {
						t.Fatalf("Get(%s) = %p, %v; want the value held, %p", k, v, err, old)
					}
				case len(held) < max:
					if err != nil || v == nil || v.key != k {
						t.Fatalf("Get(%s) on a map with room = %v, %v", k, v, err)
					}
					held[k] = v
				case evictable == 0:
					if err != errFull {
						t.Fatalf("Get(%s) on a full map of busy values = %v, %v; want the full error", k, v, err)
					}
				default:
					if err != nil || v == nil {
						t.Fatalf("Get(%s) on a full map with %d evictable = %v, %v", k, evictable, v, err)
					}
					gone := ""
					for hk, hv := range held {
						if cur, ok := m.Lookup(hk); !ok || cur != hv {
							if gone != "" {
								t.Fatalf("two values evicted for one new key: %s and %s", gone, hk)
							}
							if !hv.idle.Load() {
								t.Fatalf("the busy value of %s was evicted", hk)
							}
							gone = hk
						}
					}
					if gone == "" {
						t.Fatal("no value evicted for the new key")
					}
					delete(held, gone)
					held[k] = v
				}
			},
			"idle": func(t *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if v, ok := held[k]; ok {
					v.idle.Store(rapid.Bool().Draw(t, "idle"))
				}
			},
			"delete": func(t *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(t, "key")
				m.Delete(k)
				delete(held, k)
			},
			"": func(t *rapid.T) {
				if n := m.Len(); n != len(held) || n > max || len(keysOf(m)) != n {
					t.Fatalf("Len %d, keys %v, model %d, bound %d", n, keysOf(m), len(held), max)
				}
			},
		})
	})
}
