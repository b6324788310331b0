package watertight_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
)

func TestEventKindString(t *testing.T) {
	seen := map[string]bool{}
	for k := watertight.EventStateChange; k <= watertight.EventBadInput; k++ {
		s := k.String()
		if s == "unknown" || s == "" || seen[s] {
			t.Fatalf("kind %d has name %q (duplicate or missing)", k, s)
		}
		seen[s] = true
	}
	if got := watertight.EventKind(0).String(); got != "unknown" {
		t.Fatalf("zero kind: %q", got)
	}
	if got := watertight.EventKind(200).String(); got != "unknown" {
		t.Fatalf("out of range kind: %q", got)
	}
}

func TestEmitFillsTimeOnlyForListeners(t *testing.T) {
	watertight.Emit(nil, watertight.Event{Kind: watertight.EventRejected}) // must not panic
	var got []watertight.Event
	l := watertight.ListenerFunc(func(e watertight.Event) { got = append(got, e) })
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	watertight.Emit(l, watertight.Event{Kind: watertight.EventRejected, Time: at})
	watertight.Emit(l, watertight.Event{Kind: watertight.EventShed})
	if len(got) != 2 || !got[0].Time.Equal(at) || got[1].Time.IsZero() {
		t.Fatalf("events: %+v", got)
	}
}

func TestListenersFanOut(t *testing.T) {
	if watertight.Listeners() != nil || watertight.Listeners(nil, nil) != nil {
		t.Fatal("Listeners of nothing must be nil")
	}
	var a, b int
	la := watertight.ListenerFunc(func(watertight.Event) { a++ })
	lb := watertight.ListenerFunc(func(watertight.Event) { b++ })
	one := watertight.Listeners(nil, la)
	one.OnEvent(watertight.Event{})
	if a != 1 {
		t.Fatalf("single listener not called: %d", a)
	}
	both := watertight.Listeners(la, nil, lb)
	both.OnEvent(watertight.Event{})
	if a != 2 || b != 1 {
		t.Fatalf("fan-out: a=%d b=%d", a, b)
	}
}

func TestAsyncListenerDeliversInOrderAndDropsWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		var got []int
		slow := watertight.ListenerFunc(func(e watertight.Event) {
			<-release
			mu.Lock()
			got = append(got, e.Attempt)
			mu.Unlock()
		})
		a := watertight.NewAsyncListener(slow, 2)
		// The goroutine takes event 1 and blocks in slow; 2 and 3 fill the
		// queue; 4 and 5 are dropped.
		a.OnEvent(watertight.Event{Attempt: 1})
		synctest.Wait()
		for i := 2; i <= 5; i++ {
			a.OnEvent(watertight.Event{Attempt: i})
		}
		if d := a.Dropped(); d != 2 {
			t.Fatalf("dropped %d, want 2", d)
		}
		close(release)
		a.Close()
		a.Close() // idempotent
		a.OnEvent(watertight.Event{Attempt: 6})
		if d := a.Dropped(); d != 3 {
			t.Fatalf("dropped after close %d, want 3", d)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("delivered %v, want [1 2 3]", got)
		}
	})
}

func TestAsyncListenerConcurrent(t *testing.T) {
	var mu sync.Mutex
	n := 0
	a := watertight.NewAsyncListener(watertight.ListenerFunc(func(watertight.Event) { mu.Lock(); n++; mu.Unlock() }), 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				a.OnEvent(watertight.Event{Kind: watertight.EventRejected, Err: errors.New("x")})
			}
		}()
	}
	wg.Wait()
	a.Close()
	mu.Lock()
	defer mu.Unlock()
	if uint64(n)+a.Dropped() != 4000 {
		t.Fatalf("delivered %d + dropped %d != 4000", n, a.Dropped())
	}
}

func ExampleListenerFunc() {
	l := watertight.ListenerFunc(func(e watertight.Event) {
		fmt.Println(e.Source, e.Name, e.Kind, e.From, "->", e.To)
	})
	watertight.Emit(l, watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "payments", From: "closed", To: "open"})
	// Output: circuit payments state_change closed -> open
}

// decliner takes only state changes.
type decliner struct{ got []watertight.EventKind }

func (d *decliner) OnEvent(e watertight.Event) { d.got = append(d.got, e.Kind) }
func (d *decliner) Wants(k watertight.EventKind) bool {
	return k == watertight.EventStateChange
}

func TestWants(t *testing.T) {
	var all []watertight.EventKind
	plain := watertight.ListenerFunc(func(e watertight.Event) { all = append(all, e.Kind) })
	d := &decliner{}
	switch {
	case watertight.Wants(nil, watertight.EventAcquired):
		t.Fatal("a nil listener wants events")
	case !watertight.Wants(plain, watertight.EventAcquired):
		t.Fatal("a listener without Wants declines events")
	case watertight.Wants(d, watertight.EventAcquired) || !watertight.Wants(d, watertight.EventStateChange):
		t.Fatal("Wants does not ask the listener")
	}
	only := watertight.Listeners(d, &decliner{})
	if watertight.Wants(only, watertight.EventAcquired) {
		t.Fatal("listeners that all decline a kind want it together")
	}
	both := watertight.Listeners(d, plain)
	if !watertight.Wants(both, watertight.EventAcquired) {
		t.Fatal("listeners of which one wants a kind decline it together")
	}
	both.OnEvent(watertight.Event{Kind: watertight.EventAcquired})
	both.OnEvent(watertight.Event{Kind: watertight.EventStateChange})
	if len(d.got) != 1 || d.got[0] != watertight.EventStateChange || len(all) != 2 {
		t.Fatalf("each listener gets what it wants: decliner %v, plain %v", d.got, all)
	}
	a := watertight.NewAsyncListener(&decliner{}, 4)
	defer a.Close()
	if watertight.Wants(a, watertight.EventAcquired) || !watertight.Wants(a, watertight.EventStateChange) {
		t.Fatal("an AsyncListener wants what the listener it delivers to wants")
	}
}
