package redisstore_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/watertight-go/watertight/contrib/redisstore"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/watertighthttp"
)

// payments is a payment endpoint behind the idempotency middleware, run as
// several instances that share one Redis: it counts how often each key's
// operation really ran, across instances.
type payments struct {
	charges atomic.Int64 // every charge made, to number them
	mu      sync.Mutex
	runs    map[string]int // idempotency key → times the handler ran
}

func newPayments() *payments { return &payments{runs: map[string]int{}} }

func (p *payments) ran(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[key]
}

// instance starts one server instance whose middleware keeps its keys in
// Redis through client, and closes it when the test ends.
func (p *payments) instance(t *testing.T, name string, client redis.UniversalClient, prefix string, cfg watertighthttp.IdempotencyConfig) *httptest.Server {
	t.Helper()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idempotency.ParseKey(r.Header.Get(watertighthttp.HeaderIdempotencyKey))
		p.mu.Lock()
		p.runs[key]++
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the charge takes a moment: duplicates overlap it
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d,"by":%q}`, p.charges.Add(1), name)
	})
	store, err := redisstore.New(client, redisstore.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = store
	cfg.Scope = watertighthttp.SharedScope
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := watertighthttp.NewIdempotencyHandler(app, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status   int
	body     string
	replayed bool
	retry    string
}

func post(t *testing.T, c *http.Client, url, key string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(`{"amount":100}`))
	if err != nil {
		t.Error(err)
		return response{}
	}
	req.Header.Set(watertighthttp.HeaderIdempotencyKey, idempotency.FormatKey(key))
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return response{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b), resp.Header.Get(watertighthttp.HeaderIdempotentReplayed) == "true", resp.Header.Get("Retry-After")}
}

func httpClient(t *testing.T) *http.Client {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 30 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// 1,000 concurrent duplicate POSTs (100 keys × 10) spread over two server
// instances that share one Redis: each key's operation runs exactly once,
// and every client gets the same answer for its key.
func TestHTTPDuplicatesAcrossInstances(t *testing.T) {
	addr := redisAddr(t)
	ca, cb := newClient(t, addr, timeout), newClient(t, addr, timeout)
	prefix := freshPrefix(t, ca)
	p := newPayments()
	cfg := watertighthttp.IdempotencyConfig{WaitInFlight: true, MaxWait: 20 * time.Second, StoreTimeout: timeout}
	instances := []*httptest.Server{p.instance(t, "a", ca, prefix, cfg), p.instance(t, "b", cb, prefix, cfg)}
	client := httpClient(t)

	const keys, dups = 100, 10
	answers := make([][]response, keys)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range keys {
		answers[k] = make([]response, dups)
		for i := range dups {
			wg.Go(func() {
				<-start
				answers[k][i] = post(t, client, instances[(k+i)%2].URL, fmt.Sprint("pay-", k))
			})
		}
	}
	close(start)
	wg.Wait()

	replays := 0
	for k := range keys {
		key := fmt.Sprint("pay-", k)
		if n := p.ran(key); n != 1 {
			t.Errorf("key %s: the payment ran %d times, want exactly once", key, n)
		}
		first := answers[k][0]
		for i, a := range answers[k] {
			if a.status != http.StatusCreated || a.body != first.body {
				t.Errorf("key %s client %d: %d %s; want the same 201 as everyone (%d %s)", key, i, a.status, a.body, first.status, first.body)
			}
			if a.replayed {
				replays++
			}
		}
	}
	if want := keys * (dups - 1); replays != want {
		t.Errorf("%d replayed answers, want %d (all but one per key)", replays, want)
	}
	if n := p.charges.Load(); n != keys {
		t.Errorf("%d charges made, want %d", n, keys)
	}
}

// Redis killed mid-test: requests fail closed with the clear 503 and
// nothing runs; when Redis is back the same instances serve again, each
// key's operation runs once, and a retry gets the replay.
func TestHTTPRedisKilled(t *testing.T) {
	srv := startOwnRedis(t)
	newCtxClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, DialTimeout: outageTimeout,
			ReadTimeout: outageTimeout, WriteTimeout: outageTimeout, DialerRetries: 2, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	p := newPayments()
	cfg := watertighthttp.IdempotencyConfig{StoreTimeout: outageTimeout}
	instances := []*httptest.Server{
		p.instance(t, "a", newCtxClient(), "http:", cfg),
		p.instance(t, "b", newCtxClient(), "http:", cfg),
	}
	client := httpClient(t)

	if r := post(t, client, instances[0].URL, "before"); r.status != http.StatusCreated || p.ran("before") != 1 {
		t.Fatalf("before the outage: %+v, ran %d times", r, p.ran("before"))
	}

	srv.kill()
	const n = 20
	for i := range n {
		key := fmt.Sprint("during-", i)
		start := time.Now()
		r := post(t, client, instances[i%2].URL, key)
		if r.status != http.StatusServiceUnavailable || r.retry != "1" || !strings.Contains(r.body, "safe to retry") {
			t.Fatalf("%s with Redis down: %d (Retry-After %q) %s; want 503, Retry-After: 1, safe to retry", key, r.status, r.retry, r.body)
		}
		if took := time.Since(start); took > prompt {
			t.Fatalf("%s with Redis down took %v, want under %v", key, took, prompt)
		}
	}
	// A retry of the request that ran before the outage cannot be checked
	// either: it fails closed too, and does not run again.
	if r := post(t, client, instances[1].URL, "before"); r.status != http.StatusServiceUnavailable {
		t.Fatalf("retry of an earlier key with Redis down: %d %s, want 503", r.status, r.body)
	}
	p.mu.Lock()
	ran := len(p.runs)
	p.mu.Unlock()
	if ran != 1 || p.ran("before") != 1 {
		t.Fatalf("with Redis down the handler ran: %v", p.runs)
	}

	srv.start()
	for _, in := range instances { // each instance's client reconnects by itself
		eventually(t, 10*time.Second, "the service did not resume after Redis restarted", func() bool {
			return post(t, client, in.URL, "during-0").status == http.StatusCreated
		})
	}
	for i := range n {
		key := fmt.Sprint("during-", i)
		first := post(t, client, instances[i%2].URL, key) // the client's retry after its 503
		again := post(t, client, instances[(i+1)%2].URL, key)
		if first.status != http.StatusCreated || again.status != http.StatusCreated || !again.replayed || again.body != first.body {
			t.Fatalf("%s after Redis came back: %+v then %+v; want 201 then the same 201 replayed", key, first, again)
		}
		if got := p.ran(key); got != 1 {
			t.Fatalf("%s ran %d times, want once", key, got)
		}
	}
}
