package watertightconfig

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/watertight-go/watertight/bulkhead"
)

// The waiting room in a file: max_waiters (or unlimited) and queue_order,
// written back, built, and reconfigured by a reload (the order excepted).
func TestBulkheadWaitingRoom(t *testing.T) {
	src := "bulkheads:\n" +
		"  room: {max_concurrent: 4, max_wait: 100ms, max_waiters: 8, queue_order: newest_first}\n" +
		"  open: {max_wait: unlimited, max_waiters: unlimited}\n" +
		"  dflt: {max_wait: 50ms}\n"
	f := mustParse(t, src)
	check := func(f *File, when string) {
		t.Helper()
		room, open, dflt := f.Bulkheads["room"].Config, f.Bulkheads["open"].Config, f.Bulkheads["dflt"].Config
		if room.MaxWaiters != 8 || room.QueueOrder != bulkhead.NewestFirst {
			t.Errorf("%s: room %+v", when, room)
		}
		if open.MaxWaiters != -1 || open.QueueOrder != bulkhead.OldestFirst {
			t.Errorf("%s: open %+v", when, open)
		}
		if dflt.MaxWaiters != 0 {
			t.Errorf("%s: dflt %+v", when, dflt)
		}
	}
	check(f, "parsed")
	var sb strings.Builder
	if err := f.Write(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "# max_waiters: 1024 (the default: 1024, or max_concurrent if larger)") {
		t.Errorf("the default room is not written:\n%s", sb.String())
	}
	check(mustParse(t, sb.String()), "written and read back")

	_, err := r0(t, f).Reload(mustParse(t, strings.Replace(src, "newest_first", "oldest_first", 1)))
	if err == nil || !strings.Contains(err.Error(), "bulkheads.room.queue_order: cannot change from newest_first to oldest_first on a reload") {
		t.Fatalf("changing the order on reload: %v", err)
	}
}

func r0(t *testing.T, f *File) *Registry {
	t.Helper()
	r, err := NewRegistry(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A reload that lowers max_waiters reconfigures the bulkhead in place: with
// its one permit held and one caller waiting, the next is refused at once.
func TestBulkheadWaitingRoomReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const src = "bulkheads:\n  one: {max_concurrent: 1, max_wait: 1h, max_waiters: 2}\n"
		r := r0(t, mustParse(t, src))
		b, _ := r.Bulkhead("one")
		if _, err := r.Reload(mustParse(t, strings.Replace(src, "max_waiters: 2", "max_waiters: 1", 1))); err != nil {
			t.Fatal(err)
		}
		if b2, _ := r.Bulkhead("one"); b2 != b {
			t.Fatal("the reload rebuilt the bulkhead")
		}
		if err := b.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- b.Acquire(context.Background()) }()
		synctest.Wait() // the first waiter is in the room
		if err := b.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("a second waiter with max_waiters 1: %v, want ErrFull at once", err)
		}
		b.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b.Release()
	})
}

func TestBulkheadWaitingRoomErrors(t *testing.T) {
	_, err := Parse("test.yaml", []byte("bulkheads:\n"+
		"  a: {max_wait: 1s, max_waiters: 0, queue_order: lifo}\n"+
		"  b: {max_waiters: 5, queue_order: newest_first}\n"))
	got := err.Error()
	for _, want := range []string{
		"test.yaml:2: bulkheads.a.max_waiters: must be > 0 or unlimited, got 0",
		`test.yaml:2: bulkheads.a.queue_order: must be one of oldest_first, newest_first, got "lifo"`,
		"test.yaml:3: bulkheads.b.max_waiters: has no effect with max_wait: 0s (nobody waits)",
		"test.yaml:3: bulkheads.b.queue_order: has no effect with max_wait: 0s (nobody waits)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}
