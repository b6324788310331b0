package bulkhead_test

// Tests for the bulkhead rows of docs/migrating.md whose peers are not Go
// (.NET's System.Threading.RateLimiting ConcurrencyLimiter, which Polly v8's
// concurrency limiter is; Resilience4j's semaphore and thread-pool
// bulkheads): each runs one case that the peer's documentation or source
// describes, quoted with its address, through the mapped bulkhead.Config.
// The Go peers are tested against watertight directly, in
// bench/migrating_bulkhead_test.go.
//
// Read at: dotnet/runtime 03a2886e (ConcurrencyLimiter.cs,
// ConcurrencyLimiterOptions.cs), Polly 38d903e9 and 122cc891
// (RateLimiterStrategyOptions.cs,
// RateLimiterResiliencePipelineBuilderExtensions.cs), Resilience4j master
// af9e7c97 of 2026-05-05.
//
// Run: go test -race -run Migrat ./bulkhead/

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
)

const (
	dotnetLimiter = "https://github.com/dotnet/runtime/blob/03a2886e6c6e5706ecacc3d168c9311e440d53a7/src/libraries/System.Threading.RateLimiting/src/System/Threading/RateLimiting/ConcurrencyLimiter.cs"
	dotnetOrder   = "https://learn.microsoft.com/dotnet/api/system.threading.ratelimiting.queueprocessingorder"
	dotnetOptions = "https://learn.microsoft.com/dotnet/api/system.threading.ratelimiting.concurrencylimiteroptions"
	pollyOptions  = "https://github.com/App-vNext/Polly/blob/main/src/Polly.RateLimiting/RateLimiterStrategyOptions.cs"
	r4jConfig     = "https://github.com/resilience4j/resilience4j/blob/af9e7c979f17804f23cc1b76dd7cf268fb58b5c7/resilience4j-bulkhead/src/main/java/io/github/resilience4j/bulkhead/BulkheadConfig.java"
	r4jPool       = "https://github.com/resilience4j/resilience4j/blob/af9e7c979f17804f23cc1b76dd7cf268fb58b5c7/resilience4j-bulkhead/src/main/java/io/github/resilience4j/bulkhead/internal/FixedThreadPoolBulkhead.java"
	r4jPoolConfig = "https://github.com/resilience4j/resilience4j/blob/af9e7c979f17804f23cc1b76dd7cf268fb58b5c7/resilience4j-bulkhead/src/main/java/io/github/resilience4j/bulkhead/ThreadPoolBulkheadConfig.java"
)

func mustBulkhead(t *testing.T, cfg bulkhead.Config) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waiters starts callers that each wait for a permit, in order (each is
// queued before the next starts), and returns their results: a channel per
// caller that receives its Acquire's error.
func waiters(ctx context.Context, b *bulkhead.Bulkhead, n int) []chan error {
	res := make([]chan error, n)
	for i := range res {
		res[i] = make(chan error, 1)
		go func() { res[i] <- b.Acquire(ctx) }()
		synctest.Wait()
	}
	return res
}

// served returns the indexes of the callers that have an answer, and the
// answers, without waiting.
func served(res []chan error) map[int]error {
	got := map[int]error{}
	for i, c := range res {
		select {
		case err := <-c:
			got[i] = err
			c <- err // keep it for the next look
		default:
		}
	}
	return got
}

// grantOrder releases one permit at a time and returns the order in which
// the waiters were granted; it releases every permit it hands out.
func grantOrder(t *testing.T, b *bulkhead.Bulkhead, res []chan error) []int {
	t.Helper()
	var order []int
	done := map[int]bool{}
	for range len(res) {
		b.Release()
		synctest.Wait()
		for i, err := range served(res) {
			if !done[i] && err == nil {
				done[i] = true
				order = append(order, i)
			}
		}
	}
	return order
}

// "OldestFirst: Lease the oldest queued AcquireAsync(Int32,
// CancellationToken) call." (dotnetOrder) — QueueProcessingOrder.OldestFirst,
// the default there as here, is QueueOrder: OldestFirst.
func TestMigratingDotnetOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 3})
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		res := waiters(t.Context(), b, 3)
		if got := fmt.Sprint(grantOrder(t, b, res)); got != "[0 1 2]" {
			t.Errorf("OldestFirst served %s, want [0 1 2] (%s)", got, dotnetOrder)
		}
	})
}

// "NewestFirst: Lease the newest queued AcquireAsync(Int32,
// CancellationToken) call." (dotnetOrder) — QueueOrder: NewestFirst.
func TestMigratingDotnetNewestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 3, QueueOrder: bulkhead.NewestFirst})
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		res := waiters(t.Context(), b, 3)
		if got := fmt.Sprint(grantOrder(t, b, res)); got != "[2 1 0]" {
			t.Errorf("NewestFirst served %s, want [2 1 0] (%s)", got, dotnetOrder)
		}
	})
}

// "QueueLimit: Maximum number of permits that can be queued concurrently."
// (dotnetOptions), and with OldestFirst a full queue turns the newcomer
// away: "Don't queue if queue limit reached and QueueProcessingOrder is
// OldestFirst" (dotnetLimiter, WaitAndAcquireAsyncCore) — QueueLimit: q is
// MaxWaiters: q with MaxWait: -1 (the .NET caller waits until its
// cancellation token fires), and the newcomer gets ErrFull at once.
func TestMigratingDotnetQueueLimitOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 2})
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		res := waiters(t.Context(), b, 3)
		got := served(res)
		if len(got) != 1 || !errors.Is(got[2], bulkhead.ErrFull) {
			t.Fatalf("queue of 2 full: answered %v, want only the third turned away with ErrFull (%s)", got, dotnetLimiter)
		}
		if got := fmt.Sprint(grantOrder(t, b, res[:2])); got != "[0 1]" {
			t.Errorf("served %s, want [0 1]", got)
		}
	})
}

// With NewestFirst, a full queue makes room for the newcomer: "remove oldest
// items from queue until there is space for the newest request", the oldest
// getting a failed lease (dotnetLimiter, WaitAndAcquireAsyncCore) —
// QueueOrder: NewestFirst evicts the oldest waiter, which gets ErrFull.
func TestMigratingDotnetQueueLimitNewestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 2, QueueOrder: bulkhead.NewestFirst})
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		res := waiters(t.Context(), b, 4)
		got := served(res)
		if len(got) != 2 || !errors.Is(got[0], bulkhead.ErrFull) || !errors.Is(got[1], bulkhead.ErrFull) {
			t.Fatalf("queue of 2, 4 newcomers: answered %v, want the two oldest evicted with ErrFull (%s)", got, dotnetLimiter)
		}
		if got := fmt.Sprint(grantOrder(t, b, res[2:])); got != "[1 0]" {
			t.Errorf("served %s of the two kept, want [1 0] (the newest first)", got)
		}
	})
}

// QueueLimit 0: "Maximum number of permits that can be queued concurrently"
// is none, so a call that finds no permit fails at once — MaxWait: 0 (not
// MaxWaiters: 0, which means the default room of 1024).
// "PermitLimit: Maximum number of permits that can be leased concurrently."
// (dotnetOptions) — MaxConcurrent.
func TestMigratingDotnetPermitLimitNoQueue(t *testing.T) {
	b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 3, MaxWait: 0})
	for i := range 3 {
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatalf("permit %d of PermitLimit 3: %v (%s)", i+1, err, dotnetOptions)
		}
	}
	if err := b.Acquire(t.Context()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("a fourth with QueueLimit 0: %v, want ErrFull at once", err)
	}
	b.ReleaseN(3)
}

// "These amounts of resources can never be acquired": a request for more
// permits than PermitLimit throws ArgumentOutOfRangeException at once,
// queued or not (dotnetLimiter) — AcquireN and TryAcquireN fail at once with
// ErrTooMany, a rejection that is not ErrFull. (.NET grants a request for 0
// permits when one is free; watertight refuses n < 1 with ErrInvalidN.)
func TestMigratingDotnetPermitCountAboveLimit(t *testing.T) {
	b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 2, MaxWait: -1})
	if err := b.AcquireN(t.Context(), 3); !errors.Is(err, bulkhead.ErrTooMany) || errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("AcquireN(3) of 2: %v, want ErrTooMany at once (%s)", err, dotnetLimiter)
	}
	if b.TryAcquireN(3) {
		t.Error("TryAcquireN(3) of 2 granted")
	}
	if err := b.AcquireN(t.Context(), 0); !errors.Is(err, bulkhead.ErrInvalidN) {
		t.Errorf("AcquireN(0): %v, want ErrInvalidN", err)
	}
}

// Polly v8's AddConcurrencyLimiter(permitLimit, queueLimit = 0), and its
// default limiter: "ConcurrencyLimiterOptions.PermitLimit defaults to 1000.
// ConcurrencyLimiterOptions.QueueLimit defaults to 0." (pollyOptions) —
// MaxConcurrent: 1000, MaxWait: 0; Polly's RateLimiterRejectedException is
// ErrFull.
func TestMigratingPollyConcurrencyLimiterDefaults(t *testing.T) {
	b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1000})
	for i := range 1000 {
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatalf("call %d of PermitLimit 1000: %v (%s)", i+1, err, pollyOptions)
		}
	}
	if err := b.Acquire(t.Context()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("call 1001 with QueueLimit 0: %v, want ErrFull", err)
	}
	b.ReleaseN(1000)
}

// A waiter whose cancellation token fires leaves the queue without a lease,
// and the permits go to the next (dotnetLimiter: CancelQueueState, and
// Release skipping a cancelled request) — a waiter whose context ends gets
// the context's error, and the next waiter is served.
func TestMigratingDotnetCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: -1, MaxWaiters: 2})
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		first := waiters(ctx, b, 1)
		second := waiters(t.Context(), b, 1)
		cancel()
		synctest.Wait()
		if err := <-first[0]; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
		b.Release()
		synctest.Wait()
		if err := <-second[0]; err != nil {
			t.Fatalf("next waiter: %v, want granted", err)
		}
		b.Release()
	})
}

// Resilience4j's bulkhead defaults: DEFAULT_MAX_CONCURRENT_CALLS = 25 and
// DEFAULT_MAX_WAIT_DURATION = Duration.ofSeconds(0) (r4jConfig) — the same
// as DefaultConfig: 25 permits and no waiting.
func TestMigratingResilience4jBulkheadDefaults(t *testing.T) {
	if got := bulkhead.DefaultConfig(); got.MaxConcurrent != 25 || got.MaxWait != 0 {
		t.Fatalf("DefaultConfig() = %+v, want 25 and no wait (%s)", got, r4jConfig)
	}
	b := mustBulkhead(t, bulkhead.Config{})
	for range 25 {
		if err := b.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Acquire(t.Context()); !errors.Is(err, bulkhead.ErrFull) {
		t.Errorf("call 26: %v, want ErrFull (BulkheadFullException)", err)
	}
	b.ReleaseN(25)
}

// maxWaitDuration: "If bulkhead has space available, entry is guaranteed and
// immediate. If bulkhead is full, calling threads will contest for space, if
// it becomes available." (r4jConfig) — MaxWait: maxWaitDuration (at
// millisecond precision there: Resilience4j waits toMillis()). And
// fairCallHandlingStrategyEnabled (true by default, a builder option, not a
// Spring property): "It guarantees the order of incoming requests (FIFO)"
// (r4jConfig) — QueueOrder: OldestFirst. Resilience4j does not bound the
// threads that wait: MaxWaiters: -1.
func TestMigratingResilience4jMaxWaitDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustBulkhead(t, bulkhead.Config{MaxConcurrent: 1, MaxWait: 500 * time.Millisecond, MaxWaiters: -1})
		start := time.Now()
		if err := b.Acquire(t.Context()); err != nil || time.Since(start) != 0 {
			t.Fatalf("with space: %v after %v, want immediate entry", err, time.Since(start))
		}
		res := waiters(t.Context(), b, 3)
		time.Sleep(200 * time.Millisecond)
		b.Release() // the oldest contender gets the space
		synctest.Wait()
		if got := served(res); len(got) != 1 || got[0] != nil {
			t.Fatalf("after a release at 200ms: %v, want the first waiter granted", got)
		}
		time.Sleep(300 * time.Millisecond) // 500ms: the others give up
		synctest.Wait()
		got := served(res)
		if !errors.Is(got[1], bulkhead.ErrFull) || !errors.Is(got[2], bulkhead.ErrFull) {
			t.Fatalf("at maxWaitDuration: %v, want the others refused with ErrFull (%s)", got, r4jConfig)
		}
		b.Release()
	})
}

// Resilience4j's thread-pool bulkhead: "if there is free thread from the
// thread pool or the queue is not yet full, it will be permitted, otherwise
// the thread pool will throw RejectedExecutionException which mean is not
// permitted" (r4jPool) — a bulkhead.Pool with Workers: maxThreadPoolSize and
// QueueSize: queueCapacity admits maxThreadPoolSize + queueCapacity tasks and
// refuses the next with ErrQueueFull. (With coreThreadPoolSize below
// maxThreadPoolSize, the JDK's ThreadPoolExecutor queues tasks before it
// starts threads beyond the core: it runs fewer at once than the Pool until
// the queue is full, and admits the same number.) queueCapacity 0 is a
// SynchronousQueue there ("queueCapacity == 0 ? new SynchronousQueue<>()"),
// QueueSize: -1 here.
func TestMigratingResilience4jThreadPoolBulkhead(t *testing.T) {
	for _, tc := range []struct{ workers, queue, admitted int }{
		{2, 3, 5},
		{3, -1, 3}, // queueCapacity 0
	} {
		synctest.Test(t, func(t *testing.T) {
			p, err := bulkhead.NewPool(bulkhead.PoolConfig{Workers: tc.workers, QueueSize: tc.queue})
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			defer func() {
				close(release)
				if err := p.Shutdown(t.Context()); err != nil {
					t.Error(err)
				}
			}()
			synctest.Wait() // the workers are up and idle
			var mu sync.Mutex
			ran := 0
			task := func(context.Context) {
				mu.Lock()
				ran++
				mu.Unlock()
				<-release
			}
			for i := range tc.admitted {
				if err := p.Submit(t.Context(), task); err != nil {
					t.Fatalf("%+v: task %d: %v, want permitted (%s)", tc, i+1, err, r4jPool)
				}
				synctest.Wait()
			}
			if err := p.Submit(t.Context(), task); !errors.Is(err, bulkhead.ErrQueueFull) {
				t.Errorf("%+v: task %d: %v, want ErrQueueFull (RejectedExecutionException)", tc, tc.admitted+1, err)
			}
			mu.Lock()
			if ran != tc.workers {
				t.Errorf("%+v: %d tasks running, want maxThreadPoolSize %d", tc, ran, tc.workers)
			}
			mu.Unlock()
		})
	}
	// DEFAULT_QUEUE_CAPACITY = 100 (r4jPoolConfig), as DefaultQueueSize; the
	// thread counts default to the processors there, to 10 workers here.
	if bulkhead.DefaultQueueSize != 100 {
		t.Errorf("DefaultQueueSize = %d, want 100 (%s)", bulkhead.DefaultQueueSize, r4jPoolConfig)
	}
}
