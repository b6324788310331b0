package admission

import (
	"fmt"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"
)

// When every client in a full table has requests in flight, a new
// client's requests go uncounted; once one is idle, a new client takes its
// place and is counted.
func TestClientsFull(t *testing.T) {
	ct := NewClients(1, 1)
	a, ok := ct.Enter("a")
	if !ok || a == nil {
		t.Fatal("a: not admitted and counted")
	}
	for range 2 { // b twice: uncounted, so never at its limit
		if c, ok := ct.Enter("b"); !ok || c != nil {
			t.Fatalf("b: admitted %v, counted %v; want admitted uncounted", ok, c != nil)
		}
	}
	if _, ok := ct.Enter("a"); ok {
		t.Fatal("a's second request admitted, limit 1")
	}
	a.Leave()
	c, ok := ct.Enter("c")
	if !ok || c == nil {
		t.Fatal("c: not counted after a went idle")
	}
	if _, ok := ct.Enter("c"); ok {
		t.Fatal("c's second request admitted, limit 1")
	}
	if x, ok := ct.Enter("a"); !ok || x != nil {
		t.Fatalf("a after its eviction: admitted %v, counted %v; want uncounted (c is busy)", ok, x != nil)
	}
}

// TestClientsModel checks the table against a model, one operation at
// a time: a client at its limit is refused; below it, it is counted, unless
// it has nothing in flight and maxClients other clients all have.
func TestClientsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxPer := rapid.IntRange(1, 3).Draw(t, "maxPer")
		maxClients := rapid.IntRange(1, 4).Draw(t, "maxClients")
		ct := NewClients(maxPer, maxClients)
		ids := []string{"a", "b", "c", "d", "e", "f"}
		count := map[string]int{} // counted requests in flight
		var held []struct {
			id string
			c  *ClientCount
		}
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
				c, ok := ct.Enter(id)
				switch {
				case count[id] >= maxPer:
					if ok {
						t.Fatalf("%s at %d of %d: admitted", id, count[id], maxPer)
					}
				case count[id] > 0 || busy() < maxClients:
					if !ok || c == nil {
						t.Fatalf("%s at %d of %d, %d busy of %d: admitted %v, counted %v; want counted", id, count[id], maxPer, busy(), maxClients, ok, c != nil)
					}
					count[id]++
					held = append(held, struct {
						id string
						c  *ClientCount
					}{id, c})
				default:
					if !ok || c != nil {
						t.Fatalf("%s idle, %d busy of %d: admitted %v, counted %v; want uncounted", id, busy(), maxClients, ok, c != nil)
					}
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
				count[h.id]--
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
			c, ok := ct.Enter("tenant-42")
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
				c, ok := ct.Enter(id)
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
				c, ok := ct.Enter("tenant-42")
				if !ok || c == nil {
					panic("not counted")
				}
				c.Leave()
			}
		})
	})
}
