package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
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

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// session is the dashboard served on 127.0.0.1 and open in a tab, with
// what the page wrote to its console and every request it made.
type session struct {
	t   *testing.T
	ctx context.Context
	url string

	mu       sync.Mutex
	problems []string // console errors, exceptions, browser log errors
	requests []string // every URL the page asked for
}

// open serves d on a real server on 127.0.0.1 and opens it in a new tab;
// both are closed when the test ends.
func open(t *testing.T, d *dashboard.Dashboard) *session {
	t.Helper()
	// Mounted as a program would: under a prefix, on 127.0.0.1.
	srv := httptest.NewServer(http.StripPrefix("/dashboard", d))
	t.Cleanup(func() {
		d.Close() // ends the page's stream: Server.Close waits for it
		srv.Close()
	})
	ctx := newTab(t)
	tabCtx, cancel := context.WithCancel(ctx)
	s := &session{t: t, ctx: ctx, url: srv.URL + "/dashboard/"}
	console := chromedp.Console(tabCtx)
	requests := chromedp.Events(tabCtx, network.RequestWillBeSent)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() || (m.Source == "security" && m.Type != chromedp.ConsoleInfo) {
				s.mu.Lock()
				s.problems = append(s.problems, m.String())
				s.mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			s.mu.Lock()
			s.requests = append(s.requests, ev.Request.URL)
			s.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url)); err != nil {
		t.Fatal(err)
	}
	return s
}

// poll waits until the JavaScript expression is true in the page.
func (s *session) poll(what, expr string, timeout time.Duration) {
	s.t.Helper()
	if _, err := chromedp.Run(s.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		s.t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

// eval evaluates a JavaScript expression in the page into v.
func eval[T any](s *session, expr string) T {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		s.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// card is the selector of the card of a row.
func card(id string) string {
	return `document.querySelector('article.card[data-id=` + jsString(id) + `]')`
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// live waits for the page to be connected and to show n cards.
func (s *session) live(n int) {
	s.t.Helper()
	s.poll(fmt.Sprintf("the page live with %d cards", n),
		fmt.Sprintf(`document.querySelector('#conn').dataset.conn === 'live' && document.querySelectorAll('article.card').length === %d`, n), 10*time.Second)
}

// checkClean fails the test if the page wrote an error or asked for
// anything but its own server.
func (s *session) checkClean() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		s.t.Errorf("console: %s", p)
	}
	base := strings.TrimSuffix(s.url, "dashboard/")
	for _, u := range s.requests {
		if !strings.HasPrefix(u, base) && !strings.HasPrefix(u, "data:") {
			s.t.Errorf("the page asked for %s: it must load nothing from elsewhere", u)
		}
	}
	if len(s.requests) == 0 {
		s.t.Error("no request seen: the request listener saw nothing")
	}
}

// One protection of every kind, a state change and shed calls: the page
// loads with no console error, asks for nothing but its own server, and
// shows every card with a state word, the timeline and the reasons.
func TestPageLoadsWithoutErrors(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 200 * time.Millisecond, Title: "shop"}))
	br := must(circuit.New(circuit.Config{Name: "payments", Listener: d}))
	reg := must(circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{Name: "hosts", Listener: d}}))
	must(reg.Get("api-1:8080"))
	must(reg.Get("api-2:8080"))
	pool := must(bulkhead.NewPool(bulkhead.PoolConfig{Name: "mail", Workers: 2}))
	defer pool.Shutdown(context.Background())
	set.AddBreaker(br)
	set.AddBreakerRegistry("hosts", reg)
	set.AddBulkhead(must(bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 8})))
	set.AddPool(pool)
	set.AddBudget("retries", must(budget.New(budget.Config{})))
	set.AddThrottler("throttle", must(budget.NewThrottler(budget.ThrottleConfig{})))
	set.AddConcurrency("retry-slots", must(budget.NewConcurrency(budget.ConcurrencyConfig{})))
	set.AddHedge(must(hedge.New(hedge.Config{Name: "lookup", Delay: time.Millisecond})))
	set.AddLimiter(must(limit.New(limit.Config{Name: "api"})))
	set.AddBalancer(must(balance.New(balance.Config{Name: "backends", Hosts: []string{"a:1", "b:1"}})))
	const cards = 11

	s := open(t, d)
	s.live(cards)
	br.ForceOpen()
	d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Code: "route_full"})
	s.poll("the timeline shows the change", `[...document.querySelectorAll('#timeline li')].some(li => li.dataset.to === 'forced-open' && li.textContent.includes('payments'))`, 5*time.Second)
	s.poll("the reasons table shows the shed call", `[...document.querySelectorAll('#reasons tbody tr')].some(tr => tr.dataset.code === 'route_full')`, 5*time.Second)

	if title := must(chromedp.Run(s.ctx, chromedp.Title())); title != "shop · dashboard" {
		t.Errorf("title %q", title)
	}
	// Readable without colour: every card says its state in words.
	empty := eval[[]string](s, `[...document.querySelectorAll('article.card')].filter(c => !c.querySelector('.state').textContent.trim()).map(c => c.dataset.id)`)
	if len(empty) > 0 {
		t.Errorf("cards without a state word: %v", empty)
	}
	kinds := eval[[]string](s, `[...document.querySelectorAll('details.kind')].map(d => d.dataset.kind)`)
	if want := []string{"circuit", "bulkhead", "pool", "budget", "throttler", "concurrency", "hedge", "limiter", "balancer"}; !slices.Equal(kinds, want) {
		t.Errorf("sections %v, want %v", kinds, want)
	}
	s.checkClean()
}

// A breaker forced open shows as open within 2 s at the default interval
// (one sample a second), in words and with its code; one that trips on its
// own shows the rule that tripped it.
func TestBreakerOpenShownWithin2s(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set})) // DefaultInterval: 1 s
	forced := must(circuit.New(circuit.Config{Name: "payments", Listener: d}))
	tripped := must(circuit.New(circuit.Config{Name: "recommendation", WindowSize: 4, MinCalls: 4, OpenDuration: time.Minute, Listener: d}))
	set.AddBreaker(forced)
	set.AddBreaker(tripped)
	s := open(t, d)
	s.live(2)
	s.poll("payments shown closed", card("circuit/payments/")+`.querySelector('.state').textContent === 'closed'`, 5*time.Second)

	start := time.Now()
	forced.ForceOpen()
	fail := errors.New("down")
	for range 4 {
		circuit.Call(context.Background(), tripped, func(context.Context) (int, error) { return 0, fail })
	}
	s.poll("payments shown open", card("circuit/payments/")+`.dataset.level === 'bad' && `+card("circuit/payments/")+`.querySelector('.state').textContent === 'forced-open'`, 2*time.Second)
	s.poll("recommendation shown open", card("circuit/recommendation/")+`.querySelector('.state').textContent === 'open'`, 2*time.Second-time.Since(start))
	t.Logf("shown open %v after ForceOpen", time.Since(start).Round(time.Millisecond))

	why := eval[string](s, card("circuit/recommendation/")+`.querySelector('.why').textContent`)
	if !strings.Contains(why, "tripped by "+circuit.CodeFailureRate) || !strings.Contains(why, "half-open in") {
		t.Errorf("recommendation says %q, want the rule that tripped it (%s) and the time until half-open", why, circuit.CodeFailureRate)
	}
	if why := eval[string](s, card("circuit/payments/")+`.querySelector('.why').textContent`); !strings.Contains(why, circuit.CodeManual) {
		t.Errorf("payments says %q, want its code %s", why, circuit.CodeManual)
	}
	s.checkClean()
}

// A bulkhead's in-use number follows the load: N permits taken show N,
// given back show 0.
func TestBulkheadInUseFollowsLoad(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 100 * time.Millisecond}))
	bh := must(bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 10}))
	set.AddBulkhead(bh)
	s := open(t, d)
	s.live(1)
	inUse := card("bulkhead/search/") + `.querySelector('dd[data-f="in_use"]').textContent`
	s.poll("0 in use", inUse+` === '0'`, 5*time.Second)
	for _, n := range []int{1, 4, 7} {
		if err := bh.AcquireN(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		s.poll(fmt.Sprintf("%d in use", n), inUse+` === '`+fmt.Sprint(n)+`'`, 5*time.Second)
		bh.ReleaseN(n)
		s.poll("0 in use after the release", inUse+` === '0'`, 5*time.Second)
	}
	// Full and refusing: the card says so in words.
	if err := bh.AcquireN(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	defer bh.ReleaseN(10)
	bh.TryAcquire()
	s.poll("the full bulkhead shown rejecting", card("bulkhead/search/")+`.querySelector('.state').textContent === 'rejecting'`, 5*time.Second)
	s.checkClean()
}

// A partitioned bulkhead shows a card per partition under the bulkhead's
// name; a partition's card follows what it holds and borrows, and the
// filter finds it by the partition's name.
func TestPartitionedCards(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 100 * time.Millisecond}))
	p := must(bulkhead.NewPartitioned(bulkhead.PartitionedConfig{
		Name:          "api",
		MaxConcurrent: 8,
		Partitions:    []bulkhead.PartitionConfig{{Name: "free", Weight: 1}, {Name: "paid", Weight: 3}},
		Default:       "free",
		Reserve:       -1,
	}))
	set.AddPartitioned(p)
	set.AddBulkhead(must(bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 4})))
	s := open(t, d)
	s.live(3)
	s.poll("the partitions grouped under api", `(() => { const g = document.querySelector('details.kind[data-kind="bulkhead"] .group[data-group="api"]');
		return g && g.querySelector('h3.group-name').textContent === 'api (2)' &&
			[...g.querySelectorAll('article.card')].map(c => c.querySelector('h3.name').textContent).join() === 'free,paid'; })()`, 5*time.Second)
	free := card("bulkhead/api/free")
	fieldOf := func(c, f string) string { return c + `.querySelector('dd[data-f="` + f + `"]').textContent` }
	s.poll("free's guarantee", fieldOf(free, "guaranteed")+` === '2'`, 5*time.Second)
	s.poll("paid's guarantee", fieldOf(card("bulkhead/api/paid"), "guaranteed")+` === '6'`, 5*time.Second)

	idx := p.Index("free")
	for range 5 { // its guarantee (2) and three borrowed
		if err := p.Acquire(context.Background(), idx); err != nil {
			t.Fatal(err)
		}
	}
	s.poll("free shown borrowing 3", fieldOf(free, "in_use")+` === '5' && `+fieldOf(free, "borrowed")+` === '3' && `+
		free+`.querySelector('.state').textContent === 'borrowing'`, 5*time.Second)
	for range 5 {
		p.Release(idx)
	}
	s.poll("free shown idle again", fieldOf(free, "in_use")+` === '0' && `+fieldOf(free, "borrowed")+` === '0'`, 5*time.Second)

	if err := chromedp.Do(s.ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "paid")); err != nil {
		t.Fatal(err)
	}
	s.poll("the filter finds the partition by its name", `document.querySelector('#shown').textContent === '1 of 3 shown' &&
		[...document.querySelectorAll('article.card')].filter(c => !c.hidden && c.offsetParent !== null).map(c => c.dataset.id).join() === 'bulkhead/api/paid'`, 5*time.Second)
	s.checkClean()
}

// The filter box and "problems only" at 200 protections.
func TestFilter(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 250 * time.Millisecond}))
	var open5 []string
	for i := range 120 {
		b := must(circuit.New(circuit.Config{Name: fmt.Sprintf("dep-%03d", i), Listener: d}))
		if i%25 == 0 {
			b.ForceOpen()
			open5 = append(open5, "circuit/"+b.Name()+"/")
		}
		set.AddBreaker(b)
	}
	for i := range 80 {
		set.AddBulkhead(must(bulkhead.New(bulkhead.Config{Name: fmt.Sprintf("route-%02d", i), MaxConcurrent: 4})))
	}
	s := open(t, d)
	s.live(200)

	visible := func() []string {
		return eval[[]string](s, `[...document.querySelectorAll('article.card')].filter(c => !c.hidden && c.offsetParent !== null).map(c => c.dataset.id)`)
	}
	setFilter := func(text string) {
		t.Helper()
		if err := chromedp.Do(s.ctx, chromedp.Evaluate[chromedp.Void](`(() => { const f = document.querySelector('#filter'); f.value = ''; f.dispatchEvent(new Event('input')); })()`)); err != nil {
			t.Fatal(err)
		}
		if text != "" {
			if err := chromedp.Do(s.ctx, chromedp.SendKeys(chromedp.CSS("#filter"), text)); err != nil {
				t.Fatal(err)
			}
		}
	}

	setFilter("dep-01")
	s.poll("10 shown for dep-01", `document.querySelector('#shown').textContent === '10 of 200 shown'`, 5*time.Second)
	for _, id := range visible() {
		if !strings.Contains(id, "dep-01") {
			t.Errorf("%s shown for the filter dep-01", id)
		}
	}
	setFilter("forced-open")
	s.poll("the 5 forced open", `document.querySelector('#shown').textContent === '5 of 200 shown'`, 5*time.Second)
	if got := visible(); !slices.Equal(got, open5) {
		t.Errorf("shown for forced-open: %v, want %v", got, open5)
	}
	setFilter("route 7") // every word must match: route-07, route-17 ... route-70..79
	s.poll("route 7", `document.querySelector('#shown').textContent === '17 of 200 shown'`, 5*time.Second)
	setFilter("")
	if err := chromedp.Do(s.ctx, chromedp.Click(chromedp.CSS("#problems"))); err != nil {
		t.Fatal(err)
	}
	s.poll("problems only", `document.querySelector('#shown').textContent === '5 of 200 shown'`, 5*time.Second)
	if err := chromedp.Do(s.ctx, chromedp.Click(chromedp.CSS("#problems"))); err != nil {
		t.Fatal(err)
	}
	s.poll("all 200 again", `document.querySelector('#shown').textContent === '' && [...document.querySelectorAll('article.card')].every(c => !c.hidden)`, 5*time.Second)
	s.checkClean()
}
