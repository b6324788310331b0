package dashboard

import (
	"testing"

	"pgregory.net/rapid"
)

// The page lifecycle against a model: pages open, close, fall behind and
// are dropped, in any order. The sampler runs exactly while at least one
// page is open, OnEvent's page count matches, and Close ends it all.
func TestLifecycleModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d, err := New(Config{})
		if err != nil {
			rt.Fatal(err)
		}
		var open []*stream // the model: pages open, in opening order
		check := func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if len(d.subs) != len(open) || int(d.viewers.Load()) != len(open) {
				rt.Fatalf("%d pages subscribed, viewers %d; the model has %d", len(d.subs), d.viewers.Load(), len(open))
			}
			if (d.run != nil) != (len(open) > 0) {
				rt.Fatalf("sampler running %v with %d pages open", d.run != nil, len(open))
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"open": func(rt *rapid.T) {
				s := &stream{ch: make(chan []byte, streamBuffer)}
				if _, err := d.subscribe(s); err != nil {
					rt.Fatal(err)
				}
				open = append(open, s)
				check()
			},
			"close": func(rt *rapid.T) {
				if len(open) == 0 {
					rt.Skip("no page open")
				}
				i := rapid.IntRange(0, len(open)-1).Draw(rt, "page")
				d.unsubscribe(open[i])
				open = append(open[:i], open[i+1:]...)
				check()
			},
			"fall behind": func(rt *rapid.T) {
				if len(open) == 0 {
					rt.Skip("no page open")
				}
				i := rapid.IntRange(0, len(open)-1).Draw(rt, "page")
				s := open[i]
				d.mu.Lock()
				d.dropLocked(s) // what tick does to a page streamBuffer frames behind
				d.mu.Unlock()
				if _, ok := <-s.ch; ok {
					for range s.ch { // frames the sampler queued before the drop
					}
				}
				d.unsubscribe(s) // its handler returns: s is gone already, only counted out
				open = append(open[:i], open[i+1:]...)
				check()
			},
		})
		for _, s := range open {
			d.unsubscribe(s)
		}
		open = nil
		check()
		d.Close()
		if d.run != nil || !d.closed {
			rt.Fatal("Close left the sampler running")
		}
		if _, err := d.subscribe(&stream{ch: make(chan []byte, 1)}); err != ErrClosed {
			rt.Fatalf("a page after Close: %v, want ErrClosed", err)
		}
	})
}
