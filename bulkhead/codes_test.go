package bulkhead_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
)

// codeRecorder keeps "kind:code" of every refusal and drop (not the
// acquired and released events, which carry no code).
type codeRecorder struct {
	mu    sync.Mutex
	codes []string
}

func (r *codeRecorder) OnEvent(e watertight.Event) {
	if e.Kind == watertight.EventAcquired || e.Kind == watertight.EventReleased {
		return
	}
	r.mu.Lock()
	r.codes = append(r.codes, e.Kind.String()+":"+e.Code)
	r.mu.Unlock()
}

func (r *codeRecorder) expect(t *testing.T, want ...string) {
	t.Helper()
	r.mu.Lock()
	got := r.codes
	r.codes = nil
	r.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("codes\n got %q\nwant %q", got, want)
	}
}

func TestBulkheadEventCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		rec := &codeRecorder{}
		b := mustNew(t, bulkhead.Config{MaxConcurrent: 1, Listener: rec})
		_ = b.Acquire(ctx)
		_ = b.Acquire(ctx)
		_ = b.TryAcquire()
		_ = b.AcquireN(ctx, 2)
		rec.expect(t, "bulkhead_full:"+bulkhead.CodeNoPermit, "bulkhead_full:"+bulkhead.CodeNoPermit, "rejected:"+bulkhead.CodeTooManyPermits)

		w := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: time.Second, MaxWaiters: 1, Listener: rec})
		_ = w.Acquire(ctx)
		done := make(chan error)
		go func() { done <- w.Acquire(ctx) }() // waits MaxWait
		synctest.Wait()
		_ = w.Acquire(ctx) // the waiting room is full
		<-done
		rec.expect(t, "bulkhead_full:"+bulkhead.CodeWaitingRoomFull, "bulkhead_full:"+bulkhead.CodeMaxWait)

		l := mustNew(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: time.Second, MaxWaiters: 1, QueueOrder: bulkhead.NewestFirst, Listener: rec})
		_ = l.Acquire(ctx)
		go func() { done <- l.Acquire(ctx) }()
		synctest.Wait()
		go func() { done <- l.Acquire(ctx) }() // evicts the first waiter
		<-done
		<-done
		rec.expect(t, "bulkhead_full:"+bulkhead.CodeEvicted, "bulkhead_full:"+bulkhead.CodeMaxWait)

		r, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{MaxKeys: 1, Config: bulkhead.Config{MaxConcurrent: 1, Listener: rec}})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := r.Get("a")
		_ = a.Acquire(ctx) // held: never evicted
		if _, err := r.Get("b"); err == nil {
			t.Fatal("a full registry made a bulkhead")
		}
		rec.expect(t, "rejected:"+bulkhead.CodeTooManyKeys)
	})
}

func TestPoolEventCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &codeRecorder{}
		p := mustPool(t, bulkhead.PoolConfig{Workers: 1, QueueSize: 1, MaxQueueWait: time.Second, Listener: rec})
		g := make(gate)
		_ = p.Submit(context.Background(), g.wait) // runs
		synctest.Wait()
		_ = p.Submit(context.Background(), g.wait) // queued
		_ = p.Submit(context.Background(), g.wait) // refused: the queue is full
		time.Sleep(2 * time.Second)
		close(g) // the queued task is too old: dropped
		synctest.Wait()
		rec.expect(t, "bulkhead_full:"+bulkhead.CodeQueueFull, "dropped:"+bulkhead.CodeQueueTimeout)

		g2 := make(gate)
		_ = p.Submit(context.Background(), g2.wait) // runs
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		_ = p.Submit(ctx, g2.wait) // queued, then its context ends
		cancel()
		_ = p.Submit(context.Background(), g2.wait) // queued: makes room by dropping the cancelled one
		rec.expect(t, "dropped:"+bulkhead.CodeContextDone)

		sctx, scancel := context.WithCancel(context.Background())
		scancel()
		_ = p.Shutdown(sctx) // drops the queued task, and does not wait for the running one
		_ = p.Submit(context.Background(), g2.wait)
		rec.expect(t, "dropped:"+bulkhead.CodeShutdown, "rejected:"+bulkhead.CodeClosed)
		close(g2)
		shutdown(t, p)
	})
}
