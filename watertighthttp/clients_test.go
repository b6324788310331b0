package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight"
)

// hClientHeader carries a test request's client identity.
const hClientHeader = "X-Test-Client"

// hClientID is the Client function of the per-client tests.
func hClientID(r *http.Request) string { return r.Header.Get(hClientHeader) }

// hCheckClientShed checks a per-client rejection: 429, the overloaded
// signal, Retry-After: 1, one line that names the limit and not the client.
func hCheckClientShed(t *testing.T, r hResp, limit int, client string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 (body %q)", r.status, r.body)
	}
	if got := r.header.Get(HeaderOverloaded); got != "true" {
		t.Errorf("%s = %q, want \"true\"", HeaderOverloaded, got)
	}
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	want := fmt.Sprintf("watertight: shed: this client already has %s in flight, its limit\n", plural(limit, "request"))
	if r.body != want {
		t.Errorf("body %q, want %q", r.body, want)
	}
	if strings.Contains(r.body, client) || strings.Contains(fmt.Sprint(r.header), client) {
		t.Errorf("the answer names the client %q: %q %v", client, r.body, r.header)
	}
}

func TestHandlerClientLimit(t *testing.T) {
	b := hNewBlocker()
	var shed []error
	var events []watertight.Event
	var mu sync.Mutex
	srv, _ := hNewServer(t, b, HandlerConfig{
		Client: hClientID, MaxPerClient: 2,
		OnShed: func(r *http.Request, reason error) {
			mu.Lock()
			defer mu.Unlock()
			shed = append(shed, reason)
		},
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}),
	})
	client := hNewClient(t)
	const alice = "alice-secret-key"
	as := map[string]string{hClientHeader: alice}
	results := make(chan hResp, 10)
	for _, id := range []string{"1", "2"} {
		go func() { results <- hGet(context.Background(), client, srv.URL+"/a?id="+id, as) }()
	}
	<-b.started
	<-b.started

	// Alice's third request, on another route, finds her at her limit.
	hCheckClientShed(t, hGet(context.Background(), client, srv.URL+"/b?id=3", as), 2, alice)
	mu.Lock()
	if len(shed) != 1 || !errors.Is(shed[0], ErrClientLimit) || !watertight.IsSaturation(shed[0]) {
		t.Errorf("OnShed got %v, want one ErrClientLimit, a saturation", shed)
	}
	if len(events) != 1 || events[0].Kind != watertight.EventShed || !errors.Is(events[0].Err, ErrClientLimit) ||
		events[0].Key != "GET /b" || strings.Contains(fmt.Sprint(events[0]), alice) {
		t.Errorf("events %+v, want one EventShed for GET /b with ErrClientLimit, not naming the client", events)
	}
	mu.Unlock()

	// Another client, and requests without an identity, are not limited by
	// Alice's count.
	go func() {
		results <- hGet(context.Background(), client, srv.URL+"/a?id=4", map[string]string{hClientHeader: "bob"})
	}()
	if id := <-b.started; id != "4" {
		t.Fatalf("started %q, want Bob's 4", id)
	}
	for _, id := range []string{"5", "6", "7"} {
		go func() { results <- hGet(context.Background(), client, srv.URL+"/a?id="+id, nil) }()
		<-b.started
	}

	// One of Alice's finishing makes room for one more.
	b.release <- struct{}{}
	if r := <-results; r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	go func() { results <- hGet(context.Background(), client, srv.URL+"/a?id=8", as) }()
	<-b.started
	hCheckClientShed(t, hGet(context.Background(), client, srv.URL+"/a?id=9", as), 2, alice)

	close(b.release)
	for range 6 {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request: %v %d %q", r.err, r.status, r.body)
		}
	}
	if n := b.ran.Load(); n != 7 {
		t.Fatalf("handler ran %d times, want 7 (the two rejected never ran)", n)
	}
}

// Issue 23: once MaxClients clients are busy, the clients beyond them share
// one overflow count limited like one client, instead of going unlimited
// (a client reached 16 in flight against a limit of 2). Four busy clients
// hold a table of four; ten more clients, three requests each, together
// get two requests in: the other 28 get 429, overloaded, with
// ErrClientOverflow, and the admissions are counted.
func TestHandlerClientOverflow(t *testing.T) {
	b := hNewBlocker()
	var mu sync.Mutex
	var shed []error
	var events []watertight.Event
	srv, h := hNewServer(t, b, HandlerConfig{
		Client: hClientID, MaxPerClient: 2, MaxClients: 4,
		OnShed: func(r *http.Request, reason error) {
			mu.Lock()
			defer mu.Unlock()
			shed = append(shed, reason)
		},
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}),
	})
	release := sync.OnceFunc(func() { close(b.release) })
	t.Cleanup(release) // before the server's Close, even when the test fails
	client := hNewClient(t)
	results := make(chan hResp, 50)
	for i := range 4 {
		go func() {
			results <- hGet(context.Background(), client, srv.URL+"/a?id=busy", map[string]string{hClientHeader: fmt.Sprint("busy-", i)})
		}()
		<-b.started
	}

	const clients, each = 10, 3
	for i := range clients * each {
		go func() {
			results <- hGet(context.Background(), client, srv.URL+"/a?id=new", map[string]string{hClientHeader: fmt.Sprint("new-", i%clients)})
		}()
	}
	started, refused := 0, 0
	for started+refused < clients*each {
		select {
		case <-b.started:
			started++
		case r := <-results:
			if r.err != nil || r.status != http.StatusTooManyRequests || r.header.Get(HeaderOverloaded) != "true" || r.header.Get("Retry-After") != "1" {
				t.Fatalf("a refused newcomer got %v %d %v %q; want 429, overloaded, Retry-After: 1", r.err, r.status, r.header, r.body)
			}
			if strings.Contains(r.body, "new-") {
				t.Errorf("the answer names the client: %q", r.body)
			}
			refused++
		}
	}
	if started != 2 {
		t.Fatalf("the clients beyond a full table of busy ones had %d requests in flight together, want 2 (MaxPerClient)", started)
	}
	if got := h.clients.Overflowed(); got != 2 {
		t.Errorf("Overflowed = %d, want 2", got)
	}
	mu.Lock()
	if len(shed) != refused || len(events) != refused {
		t.Errorf("OnShed %d times, %d events; want %d", len(shed), len(events), refused)
	}
	for i, e := range events {
		if !errors.Is(shed[i], ErrClientOverflow) || !watertight.IsSaturation(shed[i]) || errors.Is(shed[i], ErrClientLimit) ||
			e.Kind != watertight.EventShed || !errors.Is(e.Err, ErrClientOverflow) || e.Key != "GET /a" || strings.Contains(fmt.Sprint(e), "new-") {
			t.Fatalf("shed %v, event %+v; want ErrClientOverflow, a saturation, for GET /a, not naming the client", shed[i], e)
		}
	}
	mu.Unlock()

	release()
	for range 4 + 2 {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request: %v %d %q", r.err, r.status, r.body)
		}
	}
	// The table has idle clients again: a newcomer gets a count of its own.
	if r := hGet(context.Background(), client, srv.URL+"/a?id=later", map[string]string{hClientHeader: "later"}); r.status != http.StatusOK {
		t.Fatalf("a newcomer once the table is idle: %d %q", r.status, r.body)
	}
	<-b.started
	if got := h.clients.Overflowed(); got != 2 {
		t.Errorf("Overflowed = %d after the table emptied, want still 2", got)
	}
}

// A request waiting in a route's queue counts against its client, and a
// request the client limit rejects never joins the queue.
func TestHandlerClientLimitCountsQueued(t *testing.T) {
	b := hNewBlocker()
	srv, h := hNewServer(t, b, HandlerConfig{Client: hClientID, MaxPerClient: 2, MaxConcurrent: 1, MaxQueue: 5})
	queued := make(chan string, 10)
	h.routes.setQueuedHook(func(route string) { queued <- route })
	client := hNewClient(t)
	as := map[string]string{hClientHeader: "alice"}
	results := make(chan hResp, 3)
	go func() { results <- hGet(context.Background(), client, srv.URL+"/a?id=1", as) }()
	<-b.started
	go func() { results <- hGet(context.Background(), client, srv.URL+"/a?id=2", as) }()
	<-queued
	hCheckClientShed(t, hGet(context.Background(), client, srv.URL+"/a?id=3", as), 2, "alice")
	select {
	case r := <-queued:
		t.Fatalf("the rejected request joined the queue of %q", r)
	default:
	}
	close(b.release)
	for range 2 {
		if r := <-results; r.status != http.StatusOK {
			t.Fatalf("status %d", r.status)
		}
	}
}

// The Transport honours the 429's overloaded signal: one attempt, the
// response returned as it is.
func TestTransportDoesNotRetryClientLimit(t *testing.T) {
	b := hNewBlocker()
	srv, _ := hNewServer(t, b, HandlerConfig{Client: hClientID, MaxPerClient: 1})
	client := hNewClient(t)
	as := map[string]string{hClientHeader: "alice"}
	done := make(chan hResp, 1)
	go func() { done <- hGet(context.Background(), client, srv.URL+"/a?id=1", as) }()
	<-b.started

	tr, err := NewTransport(TransportConfig{Base: client.Transport})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/a?id=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(hClientHeader, "alice")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !IsOverloadedResponse(resp) {
		t.Fatalf("status %d, overloaded %v; want 429 with the signal", resp.StatusCode, IsOverloadedResponse(resp))
	}
	close(b.release)
	<-done
	if n := b.ran.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestHandlerClientConfig(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := NewHandler(http.NotFoundHandler(), HandlerConfig{Client: hClientID, MaxPerClient: n})
		if err == nil || !strings.Contains(err.Error(), "HandlerConfig.MaxPerClient") {
			t.Errorf("MaxPerClient %d: error %v, want one naming HandlerConfig.MaxPerClient", n, err)
		}
	}
	wh, err := NewHandler(http.NotFoundHandler(), HandlerConfig{MaxPerClient: 3})
	if err != nil || wh.(*handler).clients != nil {
		t.Fatalf("MaxPerClient without Client: %v, table %v; want no per-client limit", err, wh.(*handler).clients)
	}
}

// TestHandlerClientLimitRace sends many concurrent requests of three
// clients, four goroutines each: a client never has more than MaxPerClient
// running, every request gets 200 or 429, and afterwards every count is
// back to zero. With a table of two clients, the third shares the overflow
// count: a client never has more than twice MaxPerClient running (one
// moving from the overflow count to one of its own may briefly hold both).
func TestHandlerClientLimitRace(t *testing.T) {
	for _, maxClients := range []int{0, 2} {
		t.Run(fmt.Sprint("maxClients=", maxClients), func(t *testing.T) {
			const maxPer = 2
			var mu sync.Mutex
			running := map[string]int{}
			var over, overTwice atomic.Bool
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := hClientID(r)
				mu.Lock()
				running[id]++
				if running[id] > maxPer {
					over.Store(true)
				}
				if running[id] > 2*maxPer {
					overTwice.Store(true)
				}
				mu.Unlock()
				for range 10 { // let the others run meanwhile
					runtime.Gosched()
				}
				mu.Lock()
				running[id]--
				mu.Unlock()
			})
			srv, h := hNewServer(t, next, HandlerConfig{Client: hClientID, MaxPerClient: maxPer, MaxClients: maxClients})
			client := hNewClient(t)
			var wg sync.WaitGroup
			var bad, limited atomic.Int64
			for g := range 12 {
				wg.Go(func() {
					hdr := map[string]string{hClientHeader: fmt.Sprint("c", g%3)}
					for range 25 {
						r := hGet(context.Background(), client, srv.URL+"/x", hdr)
						switch {
						case r.err != nil:
							bad.Add(1)
						case r.status == http.StatusTooManyRequests:
							limited.Add(1)
						case r.status != http.StatusOK:
							bad.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if maxClients == 0 && over.Load() {
				t.Error("a client had more than MaxPerClient requests running")
			}
			if overTwice.Load() {
				t.Error("a client had more than twice MaxPerClient requests running")
			}
			if n := bad.Load(); n != 0 {
				t.Errorf("%d requests failed or got neither 200 nor 429", n)
			}
			t.Logf("%d of 300 requests limited", limited.Load())
			h.clients.Range(func(id string, n int64) bool {
				if n > 0 {
					t.Errorf("client %s: count %d after all requests, want 0", id, n)
				}
				return true
			})
		})
	}
}

// A client may have one request in the Handler at a time: a second one
// sent while the first runs is refused with 429; another client's is not.
func ExampleNewHandler_perClient() {
	var h http.Handler
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			// While Alice's first request runs, she and Bob send another.
			for _, who := range []string{"alice", "bob"} {
				req := httptest.NewRequest(http.MethodGet, "/second", nil)
				req.Header.Set("X-Api-Client", who)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				fmt.Printf("%s's second: %d %s", who, rec.Code, rec.Body.String())
			}
		}
		fmt.Fprintln(w, "served")
	}), HandlerConfig{
		Client:       func(r *http.Request) string { return r.Header.Get("X-Api-Client") },
		MaxPerClient: 1,
	})
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/first", nil)
	req.Header.Set("X-Api-Client", "alice")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Printf("alice's first: %d %s", rec.Code, rec.Body.String())
	// Output:
	// alice's second: 429 watertight: shed: this client already has 1 request in flight, its limit
	// bob's second: 200 served
	// alice's first: 200 served
}
