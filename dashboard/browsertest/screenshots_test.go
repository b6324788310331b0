package browsertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

// TestScreenshots writes docs/dashboard-light.png and dashboard-dark.png
// into $WATERTIGHT_SCREENSHOTS (scripts/screenshots.sh): a shop whose
// recommendation service stalls, seen for 15 seconds.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("WATERTIGHT_SCREENSHOTS")
	if dir == "" {
		t.Skip("set WATERTIGHT_SCREENSHOTS=DIR to write the dashboard's pictures there (bash scripts/screenshots.sh)")
	}
	set := new(watch.Set)
	// Charts span 20 s at 5 samples a second: the picture's minutes.
	d := must(dashboard.New(dashboard.Config{Sources: set, Title: "storefront", Interval: 200 * time.Millisecond, History: 20 * time.Second}))
	sc := newScene(t, d, set)
	defer sc.close()
	s := open(t, d)
	s.live(sc.cards)
	// The scene plays on while the pictures are taken, so both show it
	// live; it stalls the recommendation service 4 s in.
	ctx, stop := context.WithCancel(context.Background())
	played := make(chan struct{})
	go func() {
		defer close(played)
		sc.play(ctx, 4*time.Second)
	}()
	defer func() { stop(); <-played }()
	// Let 22 s of it fill the charts: this waits for the scene, it does not
	// synchronise with anything.
	<-time.After(22 * time.Second)

	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(png))
	}
	shot("dashboard-light.png")
	dark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
		})
		return err
	})
	if err := chromedp.Do(s.ctx, dark); err != nil {
		t.Fatal(err)
	}
	s.poll("the dark theme", `getComputedStyle(document.body).backgroundColor === 'rgb(13, 17, 23)'`, 5*time.Second)
	shot("dashboard-dark.png")
	s.checkClean()
}

// scene is a storefront's protections, driven through a stall of its
// recommendation service.
type scene struct {
	t     *testing.T
	d     *dashboard.Dashboard
	cards int

	breakers map[string]*circuit.Breaker
	hosts    *circuit.Registry
	bulk     map[string]*bulkhead.Bulkhead
	held     map[string]int
	pool     *bulkhead.Pool
	release  chan struct{}
	retries  *budget.Budget
	throttle *budget.Throttler
	search   *hedge.Policy
	api      *limit.Limiter
	permits  []limit.Permit
	backends *balance.Balancer
}

func newScene(t *testing.T, d *dashboard.Dashboard, set *watch.Set) *scene {
	sc := &scene{t: t, d: d, breakers: map[string]*circuit.Breaker{}, bulk: map[string]*bulkhead.Bulkhead{}, held: map[string]int{}, release: make(chan struct{})}
	for _, name := range []string{"catalog", "payment", "recommendation", "inventory", "search"} {
		cfg := circuit.Config{Name: name, WindowSize: 20, MinCalls: 10, OpenDuration: 30 * time.Second, OpenJitter: -1, Listener: d}
		if name == "inventory" {
			cfg.OpenDuration = 2 * time.Second
			cfg.HalfOpenCalls = 3
		}
		sc.breakers[name] = must(circuit.New(cfg))
		set.AddBreaker(sc.breakers[name])
	}
	sc.hosts = must(circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{Name: "upstream", ConsecutiveFailures: 3, OpenDuration: time.Minute, Listener: d}}))
	for i := 1; i <= 4; i++ {
		must(sc.hosts.Get(fmt.Sprintf("app-%d:8080", i)))
	}
	set.AddBreakerRegistry("upstream", sc.hosts)
	for name, size := range map[string]int{"workers": 100, "catalog": 20, "payment": 20, "recommendation": 10} {
		sc.bulk[name] = must(bulkhead.New(bulkhead.Config{Name: name, MaxConcurrent: size, Listener: d}))
		set.AddBulkhead(sc.bulk[name])
	}
	sc.pool = must(bulkhead.NewPool(bulkhead.PoolConfig{Name: "emails", Workers: 2, QueueSize: 8}))
	set.AddPool(sc.pool)
	sc.retries = must(budget.New(budget.Config{Ratio: 0.1, MaxTokens: 5, Listener: d}))
	set.AddBudget("retries", sc.retries)
	sc.throttle = must(budget.NewThrottler(budget.ThrottleConfig{}))
	set.AddThrottler("recommendation-throttle", sc.throttle)
	sc.search = must(hedge.New(hedge.Config{Name: "search", Delay: time.Millisecond, Idempotent: true}))
	set.AddHedge(sc.search)
	sc.api = must(limit.New(limit.Config{Name: "api"}))
	set.AddLimiter(sc.api)
	sc.backends = must(balance.New(balance.Config{Name: "backends", Hosts: []string{"app-1:8080", "app-2:8080", "app-3:8080", "app-4:8080"}, Listener: d}))
	set.AddBalancer(sc.backends)
	sc.cards = 5 + 4 + 4 + 1 + 1 + 1 + 1 + 1 + 1
	return sc
}

// hold sets the permits held in bulkhead name to n.
func (sc *scene) hold(name string, n int) {
	b := sc.bulk[name]
	n = max(0, min(n, b.Snapshot().MaxConcurrent))
	if d := n - sc.held[name]; d > 0 {
		if err := b.AcquireN(context.Background(), d); err != nil {
			sc.t.Fatal(err)
		}
	} else if d < 0 {
		b.ReleaseN(-d)
	}
	sc.held[name] = n
}

func (sc *scene) call(name string, err error) {
	circuit.Call(context.Background(), sc.breakers[name], func(context.Context) (int, error) { return 0, err })
}

// play drives the scene until ctx ends: healthy, then the recommendation
// service stalls after healthy.
func (sc *scene) play(ctx context.Context, healthy time.Duration) {
	stall := errors.New("recommendation: deadline exceeded")
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// The pool's two workers are busy for the whole scene, three tasks wait.
	for range 5 {
		sc.pool.Submit(ctx, func(context.Context) { <-sc.release })
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		since := time.Since(start)
		stalled := since > healthy
		f := min(1, (since-healthy).Seconds()/10) // how far the stall has gone, 0..1
		wave := math.Sin(float64(i) / 6)
		for _, name := range []string{"catalog", "payment", "search"} {
			sc.call(name, nil)
			sc.retries.Deposit()
		}
		if i%9 == 0 {
			sc.call("catalog", errors.New("catalog: 503"))
		}
		sc.hold("catalog", int(6+3*wave))
		sc.hold("payment", int(9+4*wave))
		if !stalled {
			sc.call("recommendation", nil)
			sc.hold("recommendation", int(4+2*wave))
			sc.hold("workers", int(35+8*wave))
		} else {
			sc.call("recommendation", stall) // opens, then rejects (EventRejected, code open)
			sc.hold("recommendation", 10)
			sc.bulk["recommendation"].TryAcquire() // full: rejected
			sc.hold("workers", int(70+20*f+6*wave))
			for range 1 + i%4 {
				sc.d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "storefront", Code: "route_full"})
			}
			if i%3 == 0 {
				sc.d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "storefront", Code: "deadline"})
			}
			for range 2 { // retries of the failed calls: the budget runs dry
				sc.retries.Withdraw()
			}
			if sc.throttle.Allow() == nil && i%3 == 0 {
				sc.throttle.Accepted()
			}
		}
		if i == 60 { // inventory trips, and is half-open with a trial in flight later on
			for range 10 {
				sc.call("inventory", errors.New("inventory: 500"))
			}
		}
		if i == 85 {
			sc.breakers["inventory"].Allow() // a trial that has not ended
		}
		if i == 90 { // one upstream host fails three times in a row
			b := must(sc.hosts.Get("app-3:8080"))
			for range 3 {
				circuit.Call(ctx, b, func(context.Context) (int, error) { return 0, errors.New("connection refused") })
			}
			for _, h := range sc.backends.Hosts() {
				if h.Addr() == "app-3:8080" {
					for range 5 {
						h.Done(watertight.Failure, time.Millisecond)
					}
				}
			}
		}
		hedge.Do(ctx, sc.search, func(ctx context.Context, attempt int) (int, error) {
			if attempt == 1 && i%2 == 0 {
				select {
				case <-time.After(5 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			return attempt, nil
		})
		want := int(12 + 6*wave)
		for len(sc.permits) < want {
			p, ok := sc.api.TryAcquire()
			if !ok {
				break
			}
			sc.permits = append(sc.permits, p)
		}
		for len(sc.permits) > want {
			sc.permits[len(sc.permits)-1].Done(5 * time.Millisecond)
			sc.permits = sc.permits[:len(sc.permits)-1]
		}
	}
}

func (sc *scene) close() {
	for name := range sc.held {
		sc.hold(name, 0)
	}
	for _, p := range sc.permits {
		p.Done(time.Millisecond)
	}
	close(sc.release)
	sc.pool.Shutdown(context.Background())
}
