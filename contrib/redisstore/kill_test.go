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

// killOutcome is what a key's requests ended with.
type killOutcome struct {
	status  int
	outcome string // Idempotency-Outcome
}

// definitive reports whether a retry with the key would get the same answer
// again: a result (fresh or replayed), or "outcome unknown".
func (o killOutcome) definitive() bool {
	return o.status == http.StatusCreated || o.status == http.StatusInternalServerError && o.outcome == idempotency.OutcomeUnknown
}

// Issue 23: Redis killed (kill -9) for 3 s under 50 clients posting keyed
// requests through the HTTP middleware, then started again on the same
// port with its append-only file (appendfsync always: what Redis
// acknowledged survives). Every key is then retried until its answer is
// definitive. No key's handler runs twice; keys whose handler ran while
// Redis died end "outcome unknown" (500), the others with their 201.
func TestHTTPRedisKill9NeverTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a redis-server for about 10 s")
	}
	srv := startOwnRedis(t, "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir())
	const storeTimeout = 300 * time.Millisecond
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, DialTimeout: storeTimeout,
		ReadTimeout: storeTimeout, WriteTimeout: storeTimeout, DialerRetries: 1, PoolSize: 64, DisableIdentity: true})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, redisstore.Config{KeyPrefix: "kill9:"})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idempotency.ParseKey(r.Header.Get(watertighthttp.HeaderIdempotencyKey))
		mu.Lock()
		runs[key]++
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the charge takes a moment: some are under way when Redis dies
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge":"`+key+`"}`)
	})
	const lockTTL = 2 * time.Second
	h, err := watertighthttp.NewIdempotencyHandler(app, watertighthttp.IdempotencyConfig{
		Store: store, Scope: watertighthttp.SharedScope, LockTTL: lockTTL, TTL: time.Hour,
		StoreTimeout: storeTimeout, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	t.Cleanup(web.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	send := func(key string) killOutcome {
		req, _ := http.NewRequest(http.MethodPost, web.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, idempotency.FormatKey(key))
		resp, err := hc.Do(req)
		if err != nil {
			return killOutcome{}
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return killOutcome{resp.StatusCode, resp.Header.Get(idempotency.HeaderOutcome)}
	}

	// The load: 50 clients, each posting new keys one after the other (at
	// most 80 each), until stopped.
	const clients, perClient = 50, 80
	keys := make([][]string, clients)
	stop := make(chan struct{})
	var sent, unavailable atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("c%d-%d", c, i)
				keys[c] = append(keys[c], key)
				if o := send(key); o.status == http.StatusServiceUnavailable {
					unavailable.Add(1)
				}
				sent.Add(1)
				time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
			}
		})
	}
	eventually(t, 10*time.Second, "no load before the kill", func() bool { return sent.Load() >= 500 })
	srv.kill()
	killedAt := sent.Load()
	time.Sleep(3 * time.Second) // the outage itself: Redis stays dead this long
	srv.start()
	eventually(t, 10*time.Second, "no request succeeded after Redis restarted", func() bool {
		return send(fmt.Sprint("probe-", time.Now().UnixNano())).status == http.StatusCreated
	})
	time.Sleep(500 * time.Millisecond) // load on the restarted Redis for a moment
	close(stop)
	wg.Wait()

	// Every client retries each of its keys until the answer is definitive
	// (bounded).
	final := map[string]killOutcome{}
	var fmu sync.Mutex
	deadline := time.Now().Add(lockTTL + 10*time.Second)
	for _, ks := range keys {
		wg.Go(func() {
			for _, key := range ks {
				for {
					o := send(key)
					if o.definitive() {
						fmu.Lock()
						final[key] = o
						fmu.Unlock()
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("key %s: still %d (outcome %q) after the retries", key, o.status, o.outcome)
						return
					}
					time.Sleep(50 * time.Millisecond) // a client's retry delay
				}
			}
		})
	}
	wg.Wait()

	twice, unknown, created := 0, 0, 0
	mu.Lock()
	for key, o := range final {
		if n := runs[key]; n > 1 {
			twice++
			t.Errorf("key %s: the handler ran %d times", key, n)
		}
		switch o.status {
		case http.StatusCreated:
			created++
			if runs[key] != 1 {
				t.Errorf("key %s: 201 but the handler ran %d times", key, runs[key])
			}
		default:
			unknown++
		}
	}
	mu.Unlock()
	t.Logf("%d keys (%d sent before the kill), %d requests answered 503 during the outage; "+
		"final: %d created, %d outcome unknown, %d ran twice", len(final), killedAt, unavailable.Load(), created, unknown, twice)
	if unknown == len(final) {
		t.Fatal("every key ended unknown: the store never worked")
	}
}
