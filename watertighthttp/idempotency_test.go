package watertighthttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
	"pgregory.net/rapid"
)

// ---- helpers ---------------------------------------------------------------

const idemKey = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`

// idemApp is a payments endpoint: every run makes a charge with a new id,
// counted per Idempotency-Key.
type idemApp struct {
	mu      sync.Mutex
	runs    map[string]int // by key
	charges atomic.Int64
	status  int // answer with this status (0: 201)
}

func newIdemApp() *idemApp { return &idemApp{runs: make(map[string]int)} }

func (a *idemApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := IdempotencyKeyFrom(r.Context())
	a.mu.Lock()
	a.runs[key]++
	a.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	id := a.charges.Add(1)
	w.Header().Set("X-Charge-Id", strconv.FormatInt(id, 10))
	w.Header().Add("Set-Cookie", "a=1")
	w.Header().Add("Set-Cookie", "b=2")
	status := a.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	w.Header().Set("X-After-WriteHeader", "ignored") // as net/http ignores it
	fmt.Fprintf(w, `{"charge":%d,"request":%q}`, id, body)
}

func (a *idemApp) runsOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

func mustIdem(t testing.TB, next http.Handler, cfg IdempotencyConfig) http.Handler {
	t.Helper()
	if cfg.Scope == nil {
		cfg.Scope = SharedScope
	}
	if cfg.Logger == nil {
		cfg.Logger = hQuietLogger()
	}
	h, err := NewIdempotencyHandler(next, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// idemServer serves next behind the middleware on 127.0.0.1.
func idemServer(t *testing.T, next http.Handler, cfg IdempotencyConfig) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(mustIdem(t, next, cfg))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic tests
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// idemSend sends a request with the Idempotency-Key values keys.
func idemSend(ctx context.Context, c *http.Client, method, url, body string, keys []string, hdr ...string) hResp {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return hResp{err: err}
	}
	for _, k := range keys {
		req.Header.Add(HeaderIdempotencyKey, k)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return hResp{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return hResp{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

func idemPost(t *testing.T, c *http.Client, url, key, body string, hdr ...string) hResp {
	t.Helper()
	var keys []string
	if key != "" {
		keys = []string{key}
	}
	r := idemSend(context.Background(), c, http.MethodPost, url, body, keys, hdr...)
	if r.err != nil {
		t.Fatalf("POST %s: %v", url, r.err)
	}
	return r
}

type idemProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks an answer of the middleware's own.
func wantProblem(t *testing.T, r hResp, status int, retryAfter bool, detailHas ...string) idemProblem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %q)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q", r.header.Get("Cache-Control"))
	}
	if got := r.header.Get("Retry-After"); (got == "1") != retryAfter {
		t.Errorf("Retry-After = %q, want present: %v", got, retryAfter)
	}
	if r.header.Get(HeaderOverloaded) != "" {
		t.Errorf("%s is set on an idempotency answer", HeaderOverloaded)
	}
	var p idemProblem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q is not a problem: %v", r.body, err)
	}
	if p.Status != status || p.Title == "" {
		t.Errorf("problem = %+v", p)
	}
	for _, s := range detailHas {
		if !strings.Contains(p.Detail, s) {
			t.Errorf("detail %q does not say %q", p.Detail, s)
		}
	}
	return p
}

// sameAnswer fails unless b is a replay of a.
func sameAnswer(t *testing.T, a, b hResp) {
	t.Helper()
	if a.status != b.status || a.body != b.body || a.header.Get("X-Charge-Id") != b.header.Get("X-Charge-Id") ||
		a.header.Get("Content-Type") != b.header.Get("Content-Type") ||
		strings.Join(a.header.Values("Set-Cookie"), ";") != strings.Join(b.header.Values("Set-Cookie"), ";") {
		t.Fatalf("answers differ:\n%d %v %q\n%d %v %q", a.status, a.header, a.body, b.status, b.header, b.body)
	}
	if b.header.Get(HeaderIdempotentReplayed) != "true" {
		t.Fatalf("the second answer is not marked replayed: %v", b.header)
	}
}

// events collects events.
type idemEvents struct {
	mu sync.Mutex
	ev []watertight.Event
}

func (e *idemEvents) OnEvent(ev watertight.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *idemEvents) find(kind watertight.EventKind, errIs error) (watertight.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.ev {
		if ev.Kind == kind && (errIs == nil || errors.Is(ev.Err, errIs)) {
			return ev, true
		}
	}
	return watertight.Event{}, false
}

// spyStore wraps a store and reports each claim's answer.
type spyStore struct {
	idempotency.Store
	claimed func(idempotency.Claim)
}

func (s *spyStore) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (idempotency.Claim, error) {
	c, err := s.Store.Claim(ctx, key, fp, lockTTL, ttl)
	if err == nil && s.claimed != nil {
		s.claimed(c)
	}
	return c, err
}

// brokenStore fails: Claim when claimErr is set, Complete and Release when
// their errors are.
type brokenStore struct {
	idempotency.Store
	claimErr, completeErr, releaseErr error
	claims, releases                  atomic.Int64
}

func (s *brokenStore) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (idempotency.Claim, error) {
	s.claims.Add(1)
	if s.claimErr != nil {
		return idempotency.Claim{}, s.claimErr
	}
	return s.Store.Claim(ctx, key, fp, lockTTL, ttl)
}

func (s *brokenStore) Complete(ctx context.Context, key, token string, rec idempotency.Record, ttl time.Duration) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

func (s *brokenStore) Release(ctx context.Context, key, token string) error {
	s.releases.Add(1)
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, key, token)
}

func newMem(t testing.TB) *idempotency.MemoryStore {
	s, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- the basic cycle -------------------------------------------------------------

func TestIdempotencyRunsOnceAndReplays(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	srv := idemServer(t, app, IdempotencyConfig{Listener: ev, Name: "payments"})
	c := hNewClient(t)

	first := idemPost(t, c, srv.URL+"/charges", idemKey, `{"amount":100}`)
	if first.status != http.StatusCreated || first.header.Get(HeaderIdempotentReplayed) != "" {
		t.Fatalf("first answer: %d %v", first.status, first.header)
	}
	if first.header.Get("X-After-WriteHeader") != "" {
		t.Fatal("a header set after WriteHeader reached the client")
	}
	if ct := first.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Fatalf("Content-Type = %q, want what net/http sniffs", ct)
	}
	second := idemPost(t, c, srv.URL+"/charges", idemKey, `{"amount":100}`)
	sameAnswer(t, first, second)
	// The bare form of the same key is the same key.
	third := idemPost(t, c, srv.URL+"/charges", strings.Trim(idemKey, `"`), `{"amount":100}`)
	sameAnswer(t, first, third)
	if n := app.charges.Load(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	if app.runsOf("8e03978e-40d5-43e8-bc93-6894a57f9324") != 1 {
		t.Fatal("the handler did not see its key on the context")
	}
	e, ok := ev.find(watertight.EventReplayed, nil)
	if !ok || e.Source != "idempotency" || e.Name != "payments" || e.Key != "POST /charges" || !strings.Contains(e.Reason, "201") {
		t.Fatalf("replay event = %+v, %v", e, ok)
	}
	// Another key is another operation.
	if r := idemPost(t, c, srv.URL+"/charges", `"other"`, `{"amount":100}`); r.status != 201 || r.body == first.body {
		t.Fatalf("another key: %d %q", r.status, r.body)
	}
}

func TestIdempotencyKeyOptionalOrRequired(t *testing.T) {
	app := newIdemApp()
	srv := idemServer(t, app, IdempotencyConfig{
		Required: func(r *http.Request) bool { return r.URL.Path == "/charges" },
	})
	c := hNewClient(t)
	// Optional: runs each time, no deduplication.
	for range 2 {
		if r := idemPost(t, c, srv.URL+"/notes", "", "x"); r.status != 201 {
			t.Fatalf("optional route: %d", r.status)
		}
	}
	if app.charges.Load() != 2 {
		t.Fatalf("%d runs, want 2", app.charges.Load())
	}
	p := wantProblem(t, idemPost(t, c, srv.URL+"/charges", "", "x"), http.StatusBadRequest, false,
		"requires an Idempotency-Key", `Idempotency-Key: "`, "same key on every retry")
	if p.Title != "Idempotency-Key is missing" {
		t.Fatalf("title %q", p.Title)
	}
	if app.charges.Load() != 2 {
		t.Fatal("a request without a required key ran")
	}
	// Methods other than POST and PATCH pass through, key or not.
	for range 2 {
		r := idemSend(context.Background(), c, http.MethodPut, srv.URL+"/charges", "x", []string{idemKey})
		if r.err != nil || r.status != 201 || r.header.Get(HeaderIdempotentReplayed) != "" {
			t.Fatalf("PUT: %+v", r)
		}
	}
	if app.charges.Load() != 4 {
		t.Fatalf("%d runs, want 4", app.charges.Load())
	}
	// PATCH is handled.
	for range 2 {
		if r := idemSend(context.Background(), c, http.MethodPatch, srv.URL+"/charges", "x", []string{idemKey}); r.err != nil || r.status != 201 {
			t.Fatalf("PATCH: %+v", r)
		}
	}
	if app.charges.Load() != 5 {
		t.Fatalf("%d runs, want 5", app.charges.Load())
	}
}

func TestIdempotencyBadKeys(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	srv := idemServer(t, app, IdempotencyConfig{MaxKeyLength: 16, Listener: ev, DocURL: "https://api.example/idempotency"})
	c := hNewClient(t)
	for _, tc := range []struct {
		keys []string
		says string
	}{
		{[]string{`"` + strings.Repeat("k", 17) + `"`}, "longer than 16 bytes"},
		{[]string{strings.Repeat("k", 17)}, "more than 16"},
		{[]string{`"ключ"`}, "printable ASCII"},
		{[]string{`""`}, "empty"},
		{[]string{`"a"`, `"b"`}, "2 Idempotency-Key header fields"},
		{[]string{`"a", "b"`}, "more than one"},
		{[]string{`"open`}, "no closing quote"},
	} {
		r := idemSend(context.Background(), c, http.MethodPost, srv.URL+"/charges", "x", tc.keys)
		if r.err != nil {
			t.Fatal(r.err)
		}
		p := wantProblem(t, r, http.StatusBadRequest, false, tc.says)
		if p.Type != "https://api.example/idempotency" || r.header.Get("Link") != `<https://api.example/idempotency>; rel="describedby"` {
			t.Errorf("problem type %q, Link %q", p.Type, r.header.Get("Link"))
		}
	}
	if app.charges.Load() != 0 {
		t.Fatal("a request with a bad key ran")
	}
	if e, ok := ev.find(watertight.EventRejected, idempotency.ErrInvalidKey); !ok || !watertight.IsRejection(e.Err) {
		t.Fatalf("no rejection event for a bad key: %+v", e)
	}
}

// Control characters cannot be sent by Go's client: the middleware is
// called directly.
func TestIdempotencyControlCharacterKey(t *testing.T) {
	app := newIdemApp()
	h := mustIdem(t, app, IdempotencyConfig{})
	for _, v := range []string{"\"a\x00b\"", "a\x01b", "\"a\x7f\""} {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
		req.Header.Set(HeaderIdempotencyKey, v)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "printable ASCII") || strings.ContainsAny(rec.Body.String(), "\x00\x01\x7f") {
			t.Fatalf("key %q: %d %q", v, rec.Code, rec.Body)
		}
	}
	if app.charges.Load() != 0 {
		t.Fatal("ran")
	}
}

func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	srv := idemServer(t, app, IdempotencyConfig{Listener: ev})
	c := hNewClient(t)
	if r := idemPost(t, c, srv.URL+"/charges", idemKey, `{"amount":100}`); r.status != 201 {
		t.Fatal(r.status)
	}
	for _, tc := range []struct{ path, body string }{
		{"/charges", `{"amount":999}`},
		{"/charges?currency=eur", `{"amount":100}`},
		{"/refunds", `{"amount":100}`},
		{"/charges", ``},
	} {
		p := wantProblem(t, idemPost(t, c, srv.URL+tc.path, idemKey, tc.body), http.StatusUnprocessableEntity, false, "different request", "nothing was done")
		if p.Title != "Idempotency-Key is already used" {
			t.Fatalf("title %q", p.Title)
		}
	}
	if app.charges.Load() != 1 {
		t.Fatalf("%d charges, want 1", app.charges.Load())
	}
	if _, ok := ev.find(watertight.EventRejected, idempotency.ErrMismatch); !ok {
		t.Fatal("no ErrMismatch event")
	}
}

func TestIdempotencyInFlightConflict(t *testing.T) {
	b := hNewBlocker()
	srv := idemServer(t, b, IdempotencyConfig{})
	c := hNewClient(t)
	done := make(chan hResp)
	go func() {
		done <- idemSend(context.Background(), c, http.MethodPost, srv.URL+"/charges?id=1", "x", []string{idemKey})
	}()
	<-b.started
	wantProblem(t, idemPost(t, c, srv.URL+"/charges?id=1", idemKey, "x"), http.StatusConflict, true, "still being processed", "same key")
	// The same key with another request while in flight: 422, not 409.
	wantProblem(t, idemPost(t, c, srv.URL+"/charges?id=1", idemKey, "y"), http.StatusUnprocessableEntity, false)
	close(b.release)
	first := <-done
	if first.err != nil || first.status != 200 {
		t.Fatalf("first: %+v", first)
	}
	again := idemPost(t, c, srv.URL+"/charges?id=1", idemKey, "x")
	if again.body != first.body || again.header.Get(HeaderIdempotentReplayed) != "true" {
		t.Fatalf("after completion: %+v", again)
	}
	if b.ran.Load() != 1 {
		t.Fatalf("ran %d times", b.ran.Load())
	}
}

func TestIdempotencyWaitInFlightReplays(t *testing.T) {
	b := hNewBlocker()
	waiting := make(chan struct{}, 100)
	store := &spyStore{Store: newMem(t), claimed: func(c idempotency.Claim) {
		if c.State == idempotency.InFlight {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}}
	srv := idemServer(t, b, IdempotencyConfig{Store: store, WaitInFlight: true, MaxWait: time.Minute})
	c := hNewClient(t)
	first, second := make(chan hResp), make(chan hResp)
	go func() {
		first <- idemSend(context.Background(), c, http.MethodPost, srv.URL+"/charges?id=1", "x", []string{idemKey})
	}()
	<-b.started
	go func() {
		second <- idemSend(context.Background(), c, http.MethodPost, srv.URL+"/charges?id=1", "x", []string{idemKey})
	}()
	<-waiting // the duplicate found the key in flight and waits
	<-waiting // and polled at least once
	close(b.release)
	r1, r2 := <-first, <-second
	if r1.err != nil || r2.err != nil || r1.status != 200 || r2.status != 200 || r1.body != r2.body || r2.header.Get(HeaderIdempotentReplayed) != "true" {
		t.Fatalf("first %+v\nsecond %+v", r1, r2)
	}
	if b.ran.Load() != 1 {
		t.Fatalf("ran %d times", b.ran.Load())
	}
}

// A waiting duplicate gives up after MaxWait with 409; on the fake clock.
func TestIdempotencyWaitInFlightGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := mustIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			io.WriteString(w, "done")
		}), IdempotencyConfig{WaitInFlight: true, MaxWait: 3 * time.Second, LockTTL: time.Minute})
		serve := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
			req.Header.Set(HeaderIdempotencyKey, idemKey)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		firstDone := make(chan *httptest.ResponseRecorder)
		go func() { firstDone <- serve() }()
		synctest.Wait()
		start := time.Now()
		rec := serve()
		if rec.Code != http.StatusConflict || time.Since(start) != 3*time.Second {
			t.Fatalf("duplicate: %d after %v, want 409 after MaxWait (3s)", rec.Code, time.Since(start))
		}
		if !strings.Contains(rec.Body.String(), "waited") {
			t.Fatalf("body %q", rec.Body)
		}
		// The request's own deadline bounds the wait too.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("x"))
		req.Header.Set(HeaderIdempotencyKey, idemKey)
		start = time.Now()
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusConflict || time.Since(start) != time.Second {
			t.Fatalf("duplicate with a 1s deadline: %d after %v", rec.Code, time.Since(start))
		}
		close(release)
		if r := <-firstDone; r.Code != 200 || r.Body.String() != "done" {
			t.Fatalf("first: %d %q", r.Code, r.Body)
		}
		if r := serve(); r.Code != 200 || r.Header().Get(HeaderIdempotentReplayed) != "true" {
			t.Fatalf("after: %d %v", r.Code, r.Header())
		}
	})
}

// A claim whose owner died (it never completes) reads Unknown after
// LockTTL: the retries get 409 until then, then 500 "outcome unknown" —
// none runs — until the claim's ttl, and then exactly one runs. A waiting
// retry (WaitInFlight) gets the unknown answer too.
func TestIdempotencyDeadOwnerUnknown(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newMem(t)
				var runs atomic.Int64
				h := mustIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					w.WriteHeader(201)
				}), IdempotencyConfig{Store: store, LockTTL: 10 * time.Second, WaitInFlight: wait, MaxWait: 30 * time.Second})
				// A process claimed the key and died.
				fp := idempotency.Fingerprint(http.MethodPost, "/charges", []byte("x"))
				if c, err := store.Claim(context.Background(), idempotency.ScopedKey("", "k"), fp, 10*time.Second, time.Hour); err != nil || c.State != idempotency.Claimed {
					t.Fatal(c, err)
				}
				serve := func() int {
					req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
					req.Header.Set(HeaderIdempotencyKey, `"k"`)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					return rec.Code
				}
				start := time.Now()
				if !wait {
					time.Sleep(10*time.Second - time.Millisecond)
					if code := serve(); code != http.StatusConflict {
						t.Fatalf("before LockTTL: %d, want 409", code)
					}
					time.Sleep(time.Millisecond)
				}
				// Many retries at once: none runs, all are told the outcome
				// is unknown.
				burst := func() (created, unknown, conflict int) {
					codes := make(chan int, 10)
					var wg sync.WaitGroup
					for range 10 {
						wg.Go(func() { codes <- serve() })
					}
					wg.Wait()
					close(codes)
					for code := range codes {
						switch code {
						case 201:
							created++
						case http.StatusInternalServerError:
							unknown++
						case http.StatusConflict:
							conflict++
						default:
							t.Fatalf("retry: %d", code)
						}
					}
					return created, unknown, conflict
				}
				if created, unknown, conflict := burst(); created != 0 || unknown != 10 || conflict != 0 || runs.Load() != 0 {
					t.Fatalf("after LockTTL: %d created, %d unknown, %d runs; want 0, 10, 0", created, unknown, runs.Load())
				}
				if wait && time.Since(start) < 10*time.Second {
					t.Fatalf("waiting retries answered after %v, before LockTTL", time.Since(start))
				}
				// The claim's ttl (an hour) over: the key is free, one runs.
				// The others of the burst replay its result, or, without
				// WaitInFlight, may find it still running (409): the burst's
				// goroutines really run in parallel.
				time.Sleep(time.Hour - time.Since(start))
				created, unknown, conflict := burst()
				if created < 1 || unknown != 0 || created+conflict != 10 || (wait && conflict != 0) || runs.Load() != 1 {
					t.Fatalf("after the claim's ttl: %d created, %d unknown, %d in flight (409), %d runs; want one run, the rest replays (or 409 without WaitInFlight)", created, unknown, conflict, runs.Load())
				}
				if code := serve(); code != 201 || runs.Load() != 1 {
					t.Fatalf("after the burst: %d, %d runs; want the replayed 201, 1 run", code, runs.Load())
				}
			})
		})
	}
}

func TestIdempotencyScopes(t *testing.T) {
	app := newIdemApp()
	srv := idemServer(t, app, IdempotencyConfig{Scope: ScopeHeader("authorization")})
	c := hNewClient(t)
	alice := idemPost(t, c, srv.URL+"/charges", idemKey, "x", "Authorization", "Bearer alice")
	bob := idemPost(t, c, srv.URL+"/charges", idemKey, "x", "Authorization", "Bearer bob")
	if alice.status != 201 || bob.status != 201 || alice.body == bob.body || bob.header.Get(HeaderIdempotentReplayed) != "" {
		t.Fatalf("bob read alice's response, or did not run:\n%+v\n%+v", alice, bob)
	}
	sameAnswer(t, alice, idemPost(t, c, srv.URL+"/charges", idemKey, "x", "Authorization", "Bearer alice"))
	sameAnswer(t, bob, idemPost(t, c, srv.URL+"/charges", idemKey, "x", "Authorization", "Bearer bob"))
	anon := idemPost(t, c, srv.URL+"/charges", idemKey, "x")
	if anon.body == alice.body || anon.body == bob.body {
		t.Fatal("an anonymous caller read a scoped response")
	}
	if app.charges.Load() != 3 {
		t.Fatalf("%d charges, want 3", app.charges.Load())
	}

	_, err := NewIdempotencyHandler(app, IdempotencyConfig{})
	if err == nil || !strings.Contains(err.Error(), "IdempotencyConfig.Scope must be set") || !strings.Contains(err.Error(), "SharedScope") {
		t.Fatalf("no Scope: %v", err)
	}
}

func TestScopedKeyIsInjective(t *testing.T) {
	seen := map[string][2]string{}
	for _, p := range [][2]string{{"", "a/b"}, {"a", "b"}, {"a/", "b"}, {"", "ab"}, {"ab", ""}, {"x", "a/b"}, {"x/a", "b"}} {
		k := idempotency.ScopedKey(p[0], p[1])
		if q, dup := seen[k]; dup {
			t.Fatalf("scopedKey%q = scopedKey%q", p, q)
		}
		seen[k] = p
		if !strings.HasSuffix(k, "/"+p[1]) || strings.Contains(k, p[0]+"/") && p[0] != "" {
			t.Fatalf("scopedKey%q = %q: the scope must be hashed", p, k)
		}
	}
}

// ---- failures ---------------------------------------------------------------------

func TestIdempotencyStoreDownFailsClosed(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	store := &brokenStore{Store: newMem(t), claimErr: down}
	srv := idemServer(t, app, IdempotencyConfig{Store: store, Listener: ev,
		FailOpen: func(r *http.Request) bool { return r.URL.Path == "/likes" }})
	c := hNewClient(t)
	for range 3 {
		p := wantProblem(t, idemPost(t, c, srv.URL+"/charges", idemKey, "x"), http.StatusServiceUnavailable, true,
			"nothing was done", "safe to retry the request with the same Idempotency-Key")
		if strings.Contains(p.Detail, "6379") {
			t.Fatal("the store's error reached the client")
		}
	}
	if app.charges.Load() != 0 {
		t.Fatal("the handler ran while the store was down")
	}
	e, ok := ev.find(watertight.EventRejected, idempotency.ErrStoreUnavailable)
	if !ok || !errors.Is(e.Err, down) {
		t.Fatalf("rejection event = %+v", e)
	}
	// A route marked safe fails open: it runs, without deduplication.
	for range 2 {
		if r := idemPost(t, c, srv.URL+"/likes", idemKey, "x"); r.status != 201 {
			t.Fatalf("fail open: %d", r.status)
		}
	}
	if app.charges.Load() != 2 {
		t.Fatalf("fail open ran %d times, want 2", app.charges.Load())
	}
	if _, ok := ev.find(watertight.EventFallbackUsed, down); !ok {
		t.Fatal("no fail-open event")
	}
	// Back up: the same key runs once.
	store.claimErr = nil // no request in flight: no race
	first := idemPost(t, c, srv.URL+"/charges", idemKey, "x")
	sameAnswer(t, first, idemPost(t, c, srv.URL+"/charges", idemKey, "x"))
	if app.charges.Load() != 3 {
		t.Fatalf("%d charges, want 3", app.charges.Load())
	}
}

// The store fails after the handler ran: the client still gets its answer,
// the failure is reported, and the claim is not released: a retry does not
// run the handler again.
func TestIdempotencyStoreFailsOnComplete(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	store := &brokenStore{Store: newMem(t), completeErr: errors.New("i/o timeout")}
	srv := idemServer(t, app, IdempotencyConfig{Store: store, Listener: ev})
	c := hNewClient(t)
	if r := idemPost(t, c, srv.URL+"/charges", idemKey, "x"); r.status != 201 || !strings.Contains(r.body, `"charge":1`) {
		t.Fatalf("answer: %+v", r)
	}
	e, ok := ev.find(watertight.EventStateChange, nil)
	if !ok || e.From != "claimed" || e.To != "unsaved" || e.Err == nil || !strings.Contains(e.Reason, "could not keep") {
		t.Fatalf("event = %+v", e)
	}
	if store.releases.Load() != 0 {
		t.Fatal("the claim was released after the handler ran")
	}
	wantProblem(t, idemPost(t, c, srv.URL+"/charges", idemKey, "x"), http.StatusConflict, true, "still being processed")
	if app.charges.Load() != 1 {
		t.Fatalf("%d charges, want 1", app.charges.Load())
	}
}

// A handler that panicked may have done its work: its key is marked
// "outcome unknown", and a retry is told so, never run.
func TestIdempotencyPanicMarksUnknown(t *testing.T) {
	var runs atomic.Int64
	ev := &idemEvents{}
	srv := idemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(201)
	}), IdempotencyConfig{Listener: ev})
	c := hNewClient(t)
	if r := idemSend(context.Background(), c, http.MethodPost, srv.URL+"/charges", "x", []string{idemKey}); r.err == nil {
		t.Fatalf("the panicking request got an answer: %+v", r)
	}
	r := idemPost(t, c, srv.URL+"/charges", idemKey, "x")
	wantProblem(t, r, http.StatusInternalServerError, false, "may have been applied", "GET it", "NEW Idempotency-Key")
	if r.header.Get("Idempotency-Outcome") != "unknown" {
		t.Fatalf("Idempotency-Outcome = %q, want unknown", r.header.Get("Idempotency-Outcome"))
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", runs.Load())
	}
	if e, ok := ev.find(watertight.EventStateChange, nil); !ok || !strings.Contains(e.Reason, "panicked") {
		t.Fatalf("event = %+v", e)
	}
}

// The panic goes on, unchanged, after the key is marked; nothing is
// released.
func TestIdempotencyPanicPropagates(t *testing.T) {
	store := &brokenStore{Store: newMem(t)}
	h := mustIdem(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }), IdempotencyConfig{Store: store})
	req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
	req.Header.Set(HeaderIdempotencyKey, idemKey)
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if store.releases.Load() != 0 {
		t.Fatal("released after a panic")
	}
	c, err := store.Claim(context.Background(), idempotency.ScopedKey("", "8e03978e-40d5-43e8-bc93-6894a57f9324"), "", time.Minute, time.Hour)
	if err != nil || c.State != idempotency.Completed || !idempotency.IsUnknownRecord(c.Record) {
		t.Fatalf("after a panic the key holds %+v, %v; want the outcome-unknown marker", c, err)
	}
}

func TestIdempotencyLargeResponseStreamedNotStored(t *testing.T) {
	var runs atomic.Int64
	ev := &idemEvents{}
	big := bytes.Repeat([]byte("0123456789"), 500) // 5000 bytes
	srv := idemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		for i := 0; i < len(big); i += 700 {
			w.Write(big[i:min(i+700, len(big))])
			w.(http.Flusher).Flush()
		}
	}), IdempotencyConfig{MaxResponseBytes: 1000, Listener: ev})
	c := hNewClient(t)
	r := idemPost(t, c, srv.URL+"/export", idemKey, "x")
	if r.status != 200 || r.body != string(big) || r.header.Get(HeaderIdempotentReplayed) != "" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("request: %d, %d bytes, %v", r.status, len(r.body), r.header)
	}
	// Not stored, and not run again: the retry is told the outcome is
	// unknown.
	r = idemPost(t, c, srv.URL+"/export", idemKey, "x")
	wantProblem(t, r, http.StatusInternalServerError, false, "may have been applied")
	if r.header.Get("Idempotency-Outcome") != "unknown" {
		t.Fatalf("Idempotency-Outcome = %q, want unknown", r.header.Get("Idempotency-Outcome"))
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1: a response too large to store marks the key unknown", runs.Load())
	}
	if e, ok := ev.find(watertight.EventStateChange, nil); !ok || e.To != "unknown" || !strings.Contains(e.Reason, "MaxResponseBytes") {
		t.Fatalf("event = %+v", e)
	}
}

func TestIdempotencyRequestTooLarge(t *testing.T) {
	app := newIdemApp()
	srv := idemServer(t, app, IdempotencyConfig{MaxRequestBytes: 10})
	c := hNewClient(t)
	wantProblem(t, idemPost(t, c, srv.URL+"/charges", idemKey, strings.Repeat("x", 11)), http.StatusRequestEntityTooLarge, false, "at most 10 bytes")
	// Without a Content-Length (chunked), the limit holds too.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", io.MultiReader(strings.NewReader(strings.Repeat("x", 6)), strings.NewReader(strings.Repeat("y", 6))))
	req.Header.Set(HeaderIdempotencyKey, idemKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d", resp.StatusCode)
	}
	if r := idemPost(t, c, srv.URL+"/charges", idemKey, strings.Repeat("x", 10)); r.status != 201 || !strings.Contains(r.body, "xxxxxxxxxx") {
		t.Fatalf("at the limit: %+v", r)
	}
	if app.charges.Load() != 1 {
		t.Fatal(app.charges.Load())
	}
}

// Errors are stored and replayed by default; a handler (or Release) can
// release its key instead.
func TestIdempotencyErrorsStoredUnlessReleased(t *testing.T) {
	app := newIdemApp()
	app.status = http.StatusInternalServerError
	srv := idemServer(t, app, IdempotencyConfig{})
	c := hNewClient(t)
	first := idemPost(t, c, srv.URL+"/charges", idemKey, "x")
	sameAnswer(t, first, idemPost(t, c, srv.URL+"/charges", idemKey, "x"))
	if first.status != 500 || app.charges.Load() != 1 {
		t.Fatalf("status %d, %d runs", first.status, app.charges.Load())
	}

	var runs atomic.Int64
	srv = idemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.URL.Path == "/self" {
			if !ReleaseIdempotencyKey(r.Context()) {
				t.Error("ReleaseIdempotencyKey: not under a claim")
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}), IdempotencyConfig{Release: func(r *http.Request, status int) bool { return r.URL.Path == "/policy" && status == 503 }})
	for _, path := range []string{"/self", "/policy"} {
		runs.Store(0)
		for range 2 {
			if r := idemPost(t, c, srv.URL+path, `"`+path+`"`, "x"); r.status != 503 || r.header.Get(HeaderIdempotentReplayed) != "" {
				t.Fatalf("%s: %+v", path, r)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("%s: %d runs, want 2 (released)", path, runs.Load())
		}
	}
	if ReleaseIdempotencyKey(context.Background()) {
		t.Fatal("ReleaseIdempotencyKey outside a claim reported true")
	}
}

// The handler's context ends before its claim could expire.
func TestIdempotencyHandlerStopsBeforeLockExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var took time.Duration
		var cause error
		h := mustIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			<-r.Context().Done()
			took, cause = time.Since(start), context.Cause(r.Context())
			w.WriteHeader(http.StatusGatewayTimeout)
		}), IdempotencyConfig{LockTTL: 10 * time.Second})
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
		req.Header.Set(HeaderIdempotencyKey, idemKey)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if took != 9*time.Second || !errors.Is(cause, idempotency.ErrLockExpiring) {
			t.Fatalf("handler ended after %v with %v; want 9s and ErrLockExpiring", took, cause)
		}
	})
}

// ---- what is stored --------------------------------------------------------------

func TestIdempotencyStoredHeaders(t *testing.T) {
	h := http.Header{
		"Connection":        {"close, X-Hop"},
		"X-Hop":             {"1"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Content-Length":    {"99"},
		"Date":              {"Mon, 02 Jan 2006 15:04:05 GMT"},
		"Trailer":           {"X-Sum"},
		"Trailer:X-Late":    {"1"},
		"Content-Type":      {"application/json"},
		"Location":          {"/charges/1"},
		"Set-Cookie":        {"a=1", "b=2"},
	}
	got := storedHeader(h)
	want := http.Header{"Content-Type": {"application/json"}, "Location": {"/charges/1"}, "Set-Cookie": {"a=1", "b=2"}}
	if !sameHeader(got, want) {
		t.Fatalf("storedHeader = %v, want %v", got, want)
	}
}

func sameHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// Statuses without a body, handlers that write nothing, an early hint and
// trailers.
func TestIdempotencyResponseShapes(t *testing.T) {
	app := http.NewServeMux()
	app.HandleFunc("/empty", func(http.ResponseWriter, *http.Request) {})
	app.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("Write after 204: %v", err)
		}
	})
	app.HandleFunc("/hint", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "<p>ok</p>")
	})
	app.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "data")
		w.Header().Set("X-Sum", "42")
	})
	srv := idemServer(t, app, IdempotencyConfig{})
	c := hNewClient(t)
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{{"/empty", 200, ""}, {"/nocontent", 204, ""}, {"/hint", 202, "<p>ok</p>"}, {"/trailer", 200, "data"}} {
		a := idemPost(t, c, srv.URL+tc.path, `"`+tc.path+`"`, "")
		b := idemPost(t, c, srv.URL+tc.path, `"`+tc.path+`"`, "")
		if a.status != tc.status || a.body != tc.body || b.status != tc.status || b.body != tc.body || b.header.Get(HeaderIdempotentReplayed) != "true" {
			t.Fatalf("%s: first %d %q, replay %d %q %v", tc.path, a.status, a.body, b.status, b.body, b.header)
		}
		if tc.path == "/hint" && (a.header.Get("Content-Type") != "text/html" || b.header.Get("Content-Type") != "text/html") {
			t.Fatalf("%s: %v / %v", tc.path, a.header, b.header)
		}
	}
}

// ---- many duplicates, two instances -------------------------------------------

// 1,000 concurrent POSTs — 100 keys, 10 each — spread over two server
// instances that share one store: each key's handler runs exactly once,
// and every client gets the same answer for its key.
func TestIdempotencyConcurrentDuplicatesTwoInstances(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			const keys, dup = 100, 10
			store := newMem(t)
			app := newIdemApp()
			// Every handler waits until all keys have started (or a
			// while), so that duplicates really find their key in flight.
			var started atomic.Int64
			allStarted := make(chan struct{})
			gated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if started.Add(1) == keys {
					close(allStarted)
				}
				select {
				case <-allStarted:
				case <-time.After(5 * time.Second):
				}
				app.ServeHTTP(w, r)
			})
			// StoreTimeout: on a loaded machine (2 cores, -race), a goroutine
			// may wait seconds for a CPU between its timer and its call.
			cfg := IdempotencyConfig{Store: store, WaitInFlight: wait, MaxWait: 40 * time.Second, StoreTimeout: time.Minute, Scope: ScopeHeader("X-Tenant"),
				Listener: watertight.ListenerFunc(func(e watertight.Event) {
					if e.Kind == watertight.EventRejected && errors.Is(e.Err, idempotency.ErrStoreUnavailable) {
						t.Errorf("store error: %v", e.Err)
					}
				})}
			srvs := []*httptest.Server{idemServer(t, gated, cfg), idemServer(t, gated, cfg)}
			tr := &http.Transport{MaxIdleConnsPerHost: 200}
			t.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}

			answers := make([][]hResp, keys)
			for k := range answers {
				answers[k] = make([]hResp, dup)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for i := range keys * dup {
				k, d := i%keys, i/keys
				wg.Go(func() {
					url := srvs[i%2].URL + "/charges"
					key := idempotency.FormatKey(fmt.Sprint("key-", k))
					for {
						r := idemSend(ctx, c, http.MethodPost, url, fmt.Sprint("amount=", k), []string{key}, "X-Tenant", "t1")
						if r.err == nil && r.status == http.StatusConflict && !wait {
							// The client's side of 409: retry later, same key.
							time.Sleep(time.Duration(5+i%10) * time.Millisecond)
							continue
						}
						answers[k][d] = r
						return
					}
				})
			}
			wg.Wait()
			for k := range keys {
				if n := app.runsOf(fmt.Sprint("key-", k)); n != 1 {
					t.Errorf("key %d ran %d times, want 1", k, n)
				}
				replayed := 0
				for d, r := range answers[k] {
					if r.err != nil || r.status != http.StatusCreated {
						t.Fatalf("key %d, request %d: %v %d %q", k, d, r.err, r.status, r.body)
					}
					if r.body != answers[k][0].body || r.header.Get("X-Charge-Id") != answers[k][0].header.Get("X-Charge-Id") {
						t.Fatalf("key %d: answers differ: %q vs %q", k, r.body, answers[k][0].body)
					}
					if !strings.Contains(r.body, fmt.Sprintf(`"request":"amount=%d"`, k)) {
						t.Fatalf("key %d got another key's answer: %q", k, r.body)
					}
					if r.header.Get(HeaderIdempotentReplayed) == "true" {
						replayed++
					}
				}
				if replayed != dup-1 {
					t.Errorf("key %d: %d replays, want %d", k, replayed, dup-1)
				}
			}
			if n := app.charges.Load(); n != keys {
				t.Fatalf("%d charges, want %d", n, keys)
			}
			if st := store.Stats(); st.Claims != 0 || st.Entries != keys {
				t.Fatalf("store after the run: %+v", st)
			}
		})
	}
}

// ---- client side -----------------------------------------------------------------

func TestEnsureIdempotencyKey(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://example.invalid/charges", strings.NewReader("x"))
	req.Header.Set("X-Other", "1")
	r2 := EnsureIdempotencyKey(req)
	v := r2.Header.Get(HeaderIdempotencyKey)
	key, err := idempotency.ParseKey(v)
	if err != nil || !strings.HasPrefix(v, `"`) {
		t.Fatalf("header %q: %v", v, err)
	}
	if ck, ok := retry.IdempotencyKey(r2.Context()); !ok || ck != key || !retry.IsIdempotent(r2.Context()) {
		t.Fatalf("context key %q, %v; want %q", ck, ok, key)
	}
	if req.Header.Get(HeaderIdempotencyKey) != "" || r2.Header.Get("X-Other") != "1" {
		t.Fatal("the caller's request was changed, or the copy lost a header")
	}
	if EnsureIdempotencyKey(r2) != r2 {
		t.Fatal("a request with a key got another")
	}
	if EnsureIdempotencyKey(req).Header.Get(HeaderIdempotencyKey) == v {
		t.Fatal("two operations got the same key")
	}
	ctxReq := req.WithContext(retry.WithIdempotencyKey(context.Background(), "from-ctx"))
	if got := EnsureIdempotencyKey(ctxReq).Header.Get(HeaderIdempotencyKey); got != `"from-ctx"` {
		t.Fatalf("context key: header %q", got)
	}
}

// End to end: the response to the first attempt is lost after the charge
// was made; the Transport retries the POST because it carries a key, and
// the server replays the result instead of charging again.
func TestIdempotencyEndToEndLostResponse(t *testing.T) {
	app := newIdemApp()
	idem := mustIdem(t, app, IdempotencyConfig{Scope: SharedScope})
	var attempts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 {
			// Run the request, then lose the response: the connection
			// drops before the client reads it.
			idem.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
			return
		}
		idem.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tr, err := NewTransport(TransportConfig{Base: &http.Transport{}, Retry: retry.Config{Backoff: idemFastBackoff(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.base.(*http.Transport).CloseIdleConnections() })
	c := &http.Client{Transport: tr}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
	resp, err := c.Do(EnsureIdempotencyKey(req))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get(HeaderIdempotentReplayed) != "true" || !strings.Contains(string(body), `"charge":1`) {
		t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, body)
	}
	if attempts.Load() != 2 || app.charges.Load() != 1 {
		t.Fatalf("%d attempts, %d charges; want 2 and 1", attempts.Load(), app.charges.Load())
	}
}

func idemFastBackoff(t *testing.T) *backoff.Backoff {
	t.Helper()
	b, err := backoff.New(backoff.Config{Base: time.Millisecond, Cap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIdempotencyConfigErrors(t *testing.T) {
	app := newIdemApp()
	for _, tc := range []struct {
		cfg  IdempotencyConfig
		says string
	}{
		{IdempotencyConfig{Scope: SharedScope, TTL: -1}, "IdempotencyConfig.TTL must be >= 0"},
		{IdempotencyConfig{Scope: SharedScope, LockTTL: -time.Second}, "IdempotencyConfig.LockTTL must be >= 0"},
		{IdempotencyConfig{Scope: SharedScope, MaxWait: -time.Second}, "IdempotencyConfig.MaxWait must be >= 0"},
		{IdempotencyConfig{Scope: SharedScope, MaxKeyLength: -1}, "IdempotencyConfig.MaxKeyLength must be >= 0"},
		{IdempotencyConfig{Scope: SharedScope, Methods: []string{"POST", ""}}, "IdempotencyConfig.Methods"},
	} {
		if _, err := NewIdempotencyHandler(app, tc.cfg); err == nil || !strings.HasPrefix(err.Error(), "watertighthttp: ") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.says)
		}
	}
	if _, err := NewIdempotencyHandler(nil, IdempotencyConfig{Scope: SharedScope}); err == nil {
		t.Error("nil next accepted")
	}
}

// ---- fuzz --------------------------------------------------------------------------

// Any header value and body: a key that does not parse gets 400 and runs
// nothing; one that does runs once, replays the same answer, and refuses
// another body with 422.
func FuzzIdempotencyRequest(f *testing.F) {
	f.Add(idemKey, []byte(`{"amount":1}`), []byte(`{"amount":2}`))
	f.Add("bare-token", []byte{}, []byte{0})
	f.Add(`"a\"b"`, []byte("x"), []byte("x "))
	f.Add(`""`, []byte("x"), []byte("y"))
	f.Add("\"a\x00\"", []byte("x"), []byte("y"))
	f.Add(`"k";p=1`, []byte("x"), []byte("y"))
	f.Add(strings.Repeat("k", 300), []byte("x"), []byte("y"))
	f.Fuzz(func(t *testing.T, key string, body, other []byte) {
		var runs atomic.Int64
		h := mustIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		}), IdempotencyConfig{})
		serve := func(b []byte) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/p", bytes.NewReader(b))
			req.Header[HeaderIdempotencyKey] = []string{key}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		first := serve(body)
		if _, err := idempotency.ParseKey(key); err != nil {
			if first.Code != 400 || runs.Load() != 0 {
				t.Fatalf("bad key %q: %d, %d runs", key, first.Code, runs.Load())
			}
			return
		}
		if first.Code != 200 || !bytes.Equal(first.Body.Bytes(), body) || runs.Load() != 1 {
			t.Fatalf("key %q: %d %q, %d runs", key, first.Code, first.Body, runs.Load())
		}
		again := serve(body)
		if again.Code != 200 || !bytes.Equal(again.Body.Bytes(), body) || again.Header().Get(HeaderIdempotentReplayed) != "true" || runs.Load() != 1 {
			t.Fatalf("replay: %d %q, %d runs", again.Code, again.Body, runs.Load())
		}
		if !bytes.Equal(body, other) {
			if r := serve(other); r.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
				t.Fatalf("other body: %d, %d runs", r.Code, runs.Load())
			}
		}
	})
}

func FuzzScopedKey(f *testing.F) {
	f.Add("", "a/b", "a", "b")
	f.Add("tenant", "k", "tenant", "k")
	f.Add("x/", "y", "x", "/y")
	f.Fuzz(func(t *testing.T, s1, k1, s2, k2 string) {
		same := s1 == s2 && k1 == k2
		if (idempotency.ScopedKey(s1, k1) == idempotency.ScopedKey(s2, k2)) != same {
			t.Fatalf("idempotency.ScopedKey(%q, %q) vs idempotency.ScopedKey(%q, %q): equal %v, want %v", s1, k1, s2, k2, !same, same)
		}
	})
}

// ---- benchmarks ------------------------------------------------------------------

func benchIdem(b *testing.B) (http.Handler, func(key string) *http.Request) {
	h := mustIdem(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"ch_1","amount":100,"currency":"eur","status":"succeeded"}`)
	}), IdempotencyConfig{Logger: slog.New(slog.DiscardHandler), Store: func() idempotency.Store {
		s, _ := idempotency.NewMemoryStore(idempotency.MemoryConfig{MaxEntries: -1, MaxBytes: -1})
		return s
	}()})
	body := []byte(`{"amount":100,"currency":"eur","source":"tok_visa"}`)
	return h, func(key string) *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/charges", bytes.NewReader(body))
		req.Header.Set(HeaderIdempotencyKey, key)
		return req
	}
}

// The same request and handler without the middleware, for comparison.
func BenchmarkIdempotencyBaseline(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"ch_1","amount":100,"currency":"eur","status":"succeeded"}`)
	})
	_, newReq := benchIdem(b)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq(idemKey))
		if rec.Code != 201 {
			b.Fatal(rec.Code)
		}
	}
}

// A retry of a completed request: parse, fingerprint, claim, replay.
func BenchmarkIdempotencyReplay(b *testing.B) {
	h, newReq := benchIdem(b)
	h.ServeHTTP(httptest.NewRecorder(), newReq(idemKey))
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq(idemKey))
		if rec.Code != 201 {
			b.Fatal(rec.Code)
		}
	}
}

// A first request: claim, run, buffer, complete.
func BenchmarkIdempotencyFirstRequest(b *testing.B) {
	h, newReq := benchIdem(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq(strconv.Itoa(i)))
		if rec.Code != 201 {
			b.Fatal(rec.Code)
		}
	}
}

func BenchmarkIdempotencyReplayParallel(b *testing.B) {
	h, newReq := benchIdem(b)
	h.ServeHTTP(httptest.NewRecorder(), newReq(idemKey))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, newReq(idemKey))
			if rec.Code != 201 {
				b.Fatal(rec.Code)
			}
		}
	})
}

// ---- example ---------------------------------------------------------------------

func ExampleNewIdempotencyHandler() {
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++ // one payment made
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, charges)
	})
	h, err := NewIdempotencyHandler(pay, IdempotencyConfig{
		// Keys are per caller: here the API key header.
		Scope:    ScopeHeader("X-Api-Key"),
		Required: func(r *http.Request) bool { return true },
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// The client: one key for this payment, sent on every attempt.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
	req.Header.Set("X-Api-Key", "k_live_1")
	req = EnsureIdempotencyKey(req)
	for range 2 { // the second attempt stands for a retry after a lost response
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get(HeaderIdempotentReplayed) == "true")
		req.Body, _ = req.GetBody()
	}
	fmt.Println("charges:", charges)
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 201 {"charge":"ch_1"} replayed: false
	// 201 {"charge":"ch_1"} replayed: true
	// charges: 1
}

// ---- model: at most once per key ---------------------------------------------------

// faultyStore wraps a store and fails its calls as planned: the i-th call
// (Claim, Complete or Release, in the order they arrive) fails before its
// operation took effect (plan 1), or after (plan 2: the operation is done,
// and the caller is told it failed).
type faultyStore struct {
	idempotency.Store
	mu   sync.Mutex
	plan []int
	n    int
}

var errFaulty = errors.New("faulty store: connection reset")

func (s *faultyStore) fault() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= len(s.plan) {
		return 0
	}
	s.n++
	return s.plan[s.n-1]
}

func (s *faultyStore) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (idempotency.Claim, error) {
	f := s.fault()
	if f == 1 {
		return idempotency.Claim{}, errFaulty
	}
	c, err := s.Store.Claim(ctx, key, fp, lockTTL, ttl)
	if f == 2 {
		return idempotency.Claim{}, errFaulty
	}
	return c, err
}

func (s *faultyStore) Complete(ctx context.Context, key, token string, rec idempotency.Record, ttl time.Duration) error {
	f := s.fault()
	if f == 1 {
		return errFaulty
	}
	err := s.Store.Complete(ctx, key, token, rec, ttl)
	if f == 2 {
		return errFaulty
	}
	return err
}

func (s *faultyStore) Release(ctx context.Context, key, token string) error {
	f := s.fault()
	if f == 1 {
		return errFaulty
	}
	err := s.Store.Release(ctx, key, token)
	if f == 2 {
		return errFaulty
	}
	return err
}

// modelStep is one request of a scenario.
type modelStep struct {
	key      int           // which key
	at       time.Duration // when it is sent, from the start
	work     time.Duration // how long its handler runs (ignoring its context)
	panics   bool          // the handler panics after its work
	tooLarge bool          // the handler's response outgrows MaxResponseBytes
}

// The middleware's promise, checked over random scenarios: concurrent
// requests and retries with a few keys, a store that fails at every step
// (claim, save, release, lookup; before or after the operation took
// effect), handlers that outlive their lock, panic, or answer too much, on
// synctest's clock. Whatever happens, each key's handler runs at most once
// while the key is remembered (TTL), and every answer is one the middleware
// documents.
func TestIdempotencyModelAtMostOnce(t *testing.T) {
	const lockTTL = 10 * time.Second
	rapid.Check(t, func(rt *rapid.T) {
		keys := rapid.IntRange(1, 3).Draw(rt, "keys")
		wait := rapid.Bool().Draw(rt, "WaitInFlight")
		steps := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) modelStep {
			return modelStep{
				key:      rapid.IntRange(0, keys-1).Draw(rt, "key"),
				at:       time.Duration(rapid.IntRange(0, 40).Draw(rt, "at")) * time.Second,
				work:     time.Duration(rapid.IntRange(0, 15).Draw(rt, "work")) * time.Second,
				panics:   rapid.IntRange(0, 9).Draw(rt, "panics") == 0,
				tooLarge: rapid.IntRange(0, 9).Draw(rt, "tooLarge") == 0,
			}
		}), 1, 12).Draw(rt, "steps")
		plan := rapid.SliceOfN(rapid.IntRange(0, 5), 0, 40).Draw(rt, "faults")
		for i, f := range plan {
			plan[i] = max(0, f-3) // 0 (no fault) most often, then 1 or 2
		}
		var failure string
		synctest.Test(t, func(t *testing.T) {
			failure = runModel(t, lockTTL, wait, keys, steps, plan)
		})
		if failure != "" {
			rt.Fatal(failure)
		}
	})
}

// runModel plays a scenario and returns what went wrong, or "".
func runModel(t *testing.T, lockTTL time.Duration, wait bool, keys int, steps []modelStep, plan []int) string {
	store := &faultyStore{Store: newMem(t), plan: plan}
	runs := make([]atomic.Int64, keys)
	h := mustIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		step := r.Context().Value(modelStepKey{}).(modelStep)
		runs[step.key].Add(1)
		time.Sleep(step.work)
		if step.panics {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
		if step.tooLarge {
			w.Write(bytes.Repeat([]byte("x"), 200))
		}
	}), IdempotencyConfig{Store: store, LockTTL: lockTTL, TTL: time.Hour, WaitInFlight: wait, MaxResponseBytes: 100})
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() {
			time.Sleep(step.at)
			req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
			req = req.WithContext(context.WithValue(req.Context(), modelStepKey{}, step))
			req.Header.Set(HeaderIdempotencyKey, strconv.Quote(fmt.Sprint("key-", step.key)))
			rec := httptest.NewRecorder()
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(rec, req)
			}()
			switch rec.Code {
			case http.StatusCreated, http.StatusConflict, http.StatusServiceUnavailable:
			case http.StatusInternalServerError:
				if rec.Header().Get("Idempotency-Outcome") != "unknown" {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("step %d: 500 without Idempotency-Outcome: unknown", i))
					mu.Unlock()
				}
			case http.StatusOK: // a panic before the answer: the recorder's default
			default:
				mu.Lock()
				bad = append(bad, fmt.Sprintf("step %d: unexpected status %d: %s", i, rec.Code, rec.Body))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k := range runs {
		if n := runs[k].Load(); n > 1 {
			bad = append(bad, fmt.Sprintf("key %d: the handler ran %d times", k, n))
		}
	}
	return strings.Join(bad, "; ")
}

type modelStepKey struct{}

// forgottenStore answers every Claim with Forgotten.
type forgottenStore struct{ idempotency.Store }

func (forgottenStore) Claim(context.Context, string, string, time.Duration, time.Duration) (idempotency.Claim, error) {
	return idempotency.Claim{State: idempotency.Forgotten}, nil
}

// A key whose result the store dropped early is answered 410 with
// Idempotency-Outcome: forgotten, and nothing runs.
func TestIdempotencyForgotten(t *testing.T) {
	app := newIdemApp()
	ev := &idemEvents{}
	srv := idemServer(t, app, IdempotencyConfig{Store: forgottenStore{newMem(t)}, Listener: ev})
	r := idemPost(t, hNewClient(t), srv.URL+"/charges", idemKey, "x")
	wantProblem(t, r, http.StatusGone, false, "too old", "nothing was done")
	if r.header.Get("Idempotency-Outcome") != "forgotten" {
		t.Fatalf("Idempotency-Outcome = %q, want forgotten", r.header.Get("Idempotency-Outcome"))
	}
	if app.charges.Load() != 0 {
		t.Fatal("a forgotten key ran")
	}
	if _, ok := ev.find(watertight.EventRejected, idempotency.ErrForgotten); !ok {
		t.Fatal("no rejection event with ErrForgotten")
	}
}
