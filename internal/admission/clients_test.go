package admission

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"
)

// When every client in a full table has requests in flight, the clients
// that find no room share one overflow count, limited like one client
// (issue 23: they used to go uncounted); once a client is idle, a new client
// takes its place and is counted on its own.
func TestClientsFull(t *testing.T) {
	ct := NewClients(1, 1)
	a, over, ok := ct.Enter("a")
	if !ok || over || a == nil {
		t.Fatal("a: not admitted and counted on its own")
	}
	b, over, ok := ct.Enter("b")
	if !ok || !over || b == nil {
		t.Fatalf("b: admitted %v, overflow %v; want admitted through the overflow count", ok, over)
	}
	for _, id := range []string{"b", "x"} { // the overflow count is at its limit, for every newcomer
		if c, over, ok := ct.Enter(id); ok || !over || c != nil {
			t.Fatalf("%s: admitted %v, overflow %v; want refused by the overflow count", id, ok, over)
		}
	}
	if got := ct.Overflowed(); got != 1 {
		t.Errorf("Overflowed = %d, want 1", got)
	}
	if _, over, ok := ct.Enter("a"); ok || over {
		t.Fatal("a's second request admitted (or sent to overflow), limit 1")
	}
	b.Leave()
	if n := ct.OverflowInFlight(); n != 0 {
		t.Errorf("OverflowInFlight = %d after Leave, want 0", n)
	}
	a.Leave()
	c, over, ok := ct.Enter("c")
	if !ok || over || c == nil {
		t.Fatal("c: not counted on its own after a went idle")
	}
	if _, _, ok := ct.Enter("c"); ok {
		t.Fatal("c's second request admitted, limit 1")
	}
	if x, over, ok := ct.Enter("a"); !ok || !over {
		t.Fatalf("a after its eviction: admitted %v, overflow %v; want the overflow count (c is busy)", ok, over)
	} else {
		x.Leave()
	}
	c.Leave()
}

// However many clients pile up behind a table full of busy ones, together
// they never have more than maxPerClient requests in flight.
func TestClientsOverflowIsLimited(t *testing.T) {
	const maxPer = 2
	ct := NewClients(maxPer, 4)
	for i := range 4 {
		c, over, ok := ct.Enter(fmt.Sprint("busy-", i))
		if !ok || over {
			t.Fatal("a busy client not counted on its own")
		}
		defer c.Leave()
	}
	var inFlight, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			for i := range 200 {
				c, over, ok := ct.Enter(fmt.Sprint("new-", g, "-", i%3))
				if !over {
					t.Error("a new client was counted on its own in a table full of busy ones")
					return
				}
				if !ok {
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				runtime.Gosched()
				inFlight.Add(-1)
				c.Leave()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > maxPer {
		t.Errorf("the overflowing clients had %d requests in flight together, limit %d", p, maxPer)
	}
	if got := ct.Overflowed(); got != uint64(admitted.Load()) || got == 0 {
		t.Errorf("Overflowed = %d, admitted %d", got, admitted.Load())
	}
}

// TestClientsModel checks the table against a model, one operation at
// a time: a client at its limit is refused; below it, it is counted on its
// own, unless it has nothing in flight and maxClients other clients all
// have: then it goes to the overflow count, shared and limited like a
// client.
func TestClientsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxPer := rapid.IntRange(1, 3).Draw(t, "maxPer")
		maxClients := rapid.IntRange(1, 4).Draw(t, "maxClients")
		ct := NewClients(maxPer, maxClients)
		ids := []string{"a", "b", "c", "d", "e", "f"}
		count := map[string]int{} // requests in flight counted on their own
		overflow := 0             // requests in flight through the overflow count
		type hold struct {
			id string // "" for the overflow count
			c  *ClientCount
		}
		var held []hold
		busy := func() int {
			n := 0
			for _, v := range count {
				if v > 0 {
					n++
				}
			}
			return n
		}
		t.Repeat(map[string]func(*rapid.T){
			"enter": func(t *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(t, "id")
				c, over, ok := ct.Enter(id)
				switch {
				case count[id] >= maxPer:
					if ok || over {
						t.Fatalf("%s at %d of %d: admitted %v, overflow %v", id, count[id], maxPer, ok, over)
					}
				case count[id] > 0 || busy() < maxClients:
					if !ok || over || c == nil {
						t.Fatalf("%s at %d of %d, %d busy of %d: admitted %v, overflow %v; want counted on its own", id, count[id], maxPer, busy(), maxClients, ok, over)
					}
					count[id]++
					held = append(held, hold{id, c})
				case overflow >= maxPer:
					if ok || !over {
						t.Fatalf("%s idle, %d busy of %d, overflow at %d of %d: admitted %v, overflow %v; want refused by the overflow count", id, busy(), maxClients, overflow, maxPer, ok, over)
					}
				default:
					if !ok || !over || c == nil {
						t.Fatalf("%s idle, %d busy of %d: admitted %v, overflow %v; want the overflow count", id, busy(), maxClients, ok, over)
					}
					overflow++
					held = append(held, hold{"", c})
				}
				if got := ct.OverflowInFlight(); got != int64(overflow) {
					t.Fatalf("OverflowInFlight = %d, want %d", got, overflow)
				}
			},
			"leave": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "i")
				h := held[i]
				held = append(held[:i], held[i+1:]...)
				h.c.Leave()
				if h.id == "" {
					overflow--
				} else {
					count[h.id]--
				}
			},
		})
	})
}

// BenchmarkClients is the per-client limit's cost per request: a
// lookup and two atomic adds. parallel: each goroutine a client of its
// own, as requests of different clients are; parallel-one-client: all the
// same client, whose count every request writes.
func BenchmarkClients(b *testing.B) {
	ct := NewClients(1<<30, 10000)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, _, ok := ct.Enter("tenant-42")
			if !ok || c == nil {
				b.Fatal("not counted")
			}
			c.Leave()
		}
	})
	var next atomic.Int64
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := fmt.Sprint("tenant-", next.Add(1))
			for pb.Next() {
				c, _, ok := ct.Enter(id)
				if !ok || c == nil {
					panic("not counted")
				}
				c.Leave()
			}
		})
	})
	b.Run("parallel-one-client", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, _, ok := ct.Enter("tenant-42")
				if !ok || c == nil {
					panic("not counted")
				}
				c.Leave()
			}
		})
	})
}

// BenchmarkClientsOverflow is the cost of a request of a new client against
// a full table of busy ones: a bounded sweep under the table's lock, then
// the overflow count.
func BenchmarkClientsOverflow(b *testing.B) {
	ct := NewClients(1<<30, 10000)
	for i := range 10000 {
		if _, over, ok := ct.Enter(fmt.Sprint("busy-", i)); !ok || over {
			b.Fatal("a busy client not counted on its own")
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		c, over, ok := ct.Enter("flood")
		if !ok || !over {
			b.Fatal("not through the overflow count")
		}
		c.Leave()
	}
}
