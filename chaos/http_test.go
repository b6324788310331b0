package chaos_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/chaos"
)

// server starts a real server on 127.0.0.1 that counts its requests and
// answers "real".
func server(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "real")
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// client returns a client whose transport is chaos over a transport of its
// own, closed at the end of the test.
func client(t *testing.T, inj *chaos.Injector, key func(*http.Request) string) *http.Client {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: chaos.Transport(base, inj, key)}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body), nil
}

func TestTransport(t *testing.T) {
	srv, hits := server(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	inj := mustNew(t, chaos.Config{Rules: map[string]chaos.Rule{host: {ErrorRate: 1}}})
	c := client(t, inj, nil)

	// Off by default: the request goes through.
	if _, body, err := get(t, c, srv.URL); err != nil || body != "real" {
		t.Fatalf("disabled: %q, %v", body, err)
	}
	inj.Enable()
	_, _, err := get(t, c, srv.URL)
	if !errors.Is(err, chaos.ErrInjected) {
		t.Fatalf("error rule: %v, want ErrInjected", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("err %T is not the client's *url.Error: the transport error should look like one", err)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("server hit %d times, want 1 (the injected request was not sent)", n)
	}

	// A replacement response.
	if err := inj.SetRule(host, chaos.Rule{ResultRate: 1, Result: chaos.Response{
		Status: http.StatusTooManyRequests,
		Header: http.Header{"Retry-After": {"3"}},
		Body:   []byte("slow down"),
	}}); err != nil {
		t.Fatal(err)
	}
	resp, body, err := get(t, c, srv.URL)
	if err != nil || resp.StatusCode != 429 || resp.Status != "429 Too Many Requests" || body != "slow down" ||
		resp.Header.Get("Retry-After") != "3" || resp.Header.Get(chaos.HeaderInjected) != "result" || resp.ContentLength != 9 {
		t.Fatalf("result rule: %+v, %q, %v", resp, body, err)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("server hit %d times, want still 1", n)
	}
	// A *Response works too; a zero status is 200.
	inj.SetRule(host, chaos.Rule{ResultRate: 1, Result: &chaos.Response{Body: []byte("canned")}})
	if resp, body, err := get(t, c, srv.URL); err != nil || resp.StatusCode != 200 || body != "canned" {
		t.Fatalf("*Response: %v, %q, %v", resp, body, err)
	}
	// A result that is not a Response is an error.
	inj.SetRule(host, chaos.Rule{ResultRate: 1, Result: 42})
	if _, _, err := get(t, c, srv.URL); err == nil || !strings.Contains(err.Error(), `the Rule.Result for key "`+host+`" is a int, not a chaos.Response`) {
		t.Fatalf("wrong result type: %v", err)
	}
	// Other hosts are not touched; neither is this one once disabled.
	inj.SetRule("elsewhere:80", chaos.Rule{ErrorRate: 1})
	inj.DeleteRule(host)
	if _, body, err := get(t, c, srv.URL); err != nil || body != "real" {
		t.Fatalf("no rule for the host: %q, %v", body, err)
	}
	inj.SetRule(host, chaos.Rule{ErrorRate: 1})
	inj.Disable()
	if _, body, err := get(t, c, srv.URL); err != nil || body != "real" {
		t.Fatalf("disabled at run time: %q, %v", body, err)
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("server hit %d times, want 3", n)
	}
}

// A key function scopes faults to a path.
func TestTransportKeyFunc(t *testing.T) {
	srv, _ := server(t)
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{"/broken": {ErrorRate: 1}}})
	c := client(t, inj, func(r *http.Request) string { return r.URL.Path })
	if _, _, err := get(t, c, srv.URL+"/broken"); !errors.Is(err, chaos.ErrInjected) {
		t.Fatalf("/broken: %v", err)
	}
	if _, body, err := get(t, c, srv.URL+"/fine"); err != nil || body != "real" {
		t.Fatalf("/fine: %q, %v", body, err)
	}
}

// closeRecorder is a request body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An injected error or result closes the request body, as a RoundTripper
// must; latency waits on the virtual clock and honours the context.
func TestTransportBodyAndLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent atomic.Int64
		var sentAt time.Time
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			sentAt = time.Now()
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{
			"fail":   {ErrorRate: 1},
			"result": {ResultRate: 1, Result: chaos.Response{}},
			"slow":   {LatencyRate: 1, Latency: 3 * time.Second},
		}})
		rt := chaos.Transport(base, inj, nil)
		req := func(ctx context.Context, host string) (*http.Request, *closeRecorder) {
			body := &closeRecorder{Reader: strings.NewReader("payload")}
			r, err := http.NewRequestWithContext(ctx, "POST", "http://"+host+"/", body)
			if err != nil {
				t.Fatal(err)
			}
			return r, body
		}
		for _, host := range []string{"fail", "result"} {
			r, body := req(context.Background(), host)
			resp, err := rt.RoundTrip(r)
			if resp != nil {
				resp.Body.Close()
			}
			if !body.closed.Load() {
				t.Errorf("%s: request body not closed", host)
			}
			if (host == "fail") != (err != nil) {
				t.Errorf("%s: err = %v", host, err)
			}
		}
		start := time.Now()
		r, _ := req(context.Background(), "slow")
		if resp, err := rt.RoundTrip(r); err != nil || resp.StatusCode != 200 || resp.Header.Get(chaos.HeaderInjected) != "latency" {
			t.Fatalf("slow: %v, %v", resp, err)
		}
		if d := sentAt.Sub(start); d != 3*time.Second {
			t.Fatalf("sent after %v, want the 3s injected", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, body := req(ctx, "slow")
		if _, err := rt.RoundTrip(r); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow under a 1s deadline: %v", err)
		}
		if !body.closed.Load() {
			t.Error("request cut short by its deadline: body not closed")
		}
		if n := sent.Load(); n != 1 {
			t.Fatalf("base sent %d requests, want 1", n)
		}
	})
}

func TestHandler(t *testing.T) {
	inj := mustNew(t, chaos.Config{Enabled: true})
	var ran atomic.Int64
	prices := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		io.WriteString(w, "prices")
	})
	mux := http.NewServeMux()
	// Wrapping the registered handler: the key is the mux pattern.
	mux.Handle("GET /prices/{sku}", chaos.Handler(prices, inj, nil))
	mux.Handle("GET /other", prices)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: base}

	if err := inj.SetRule("GET /prices/{sku}", chaos.Rule{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	resp, body, err := get(t, c, srv.URL+"/prices/42")
	if err != nil || resp.StatusCode != 503 || resp.Header.Get(chaos.HeaderInjected) != "error" || body != "chaos: injected fault\n" {
		t.Fatalf("error rule: %v, %q, %v", resp, body, err)
	}
	inj.SetRule("GET /prices/{sku}", chaos.Rule{ErrorRate: 1, Status: 500, Err: errors.New("database on fire")})
	resp, body, _ = get(t, c, srv.URL+"/prices/42")
	if resp.StatusCode != 500 || body != "database on fire\n" {
		t.Fatalf("custom status: %d %q", resp.StatusCode, body)
	}
	inj.SetRule("GET /prices/{sku}", chaos.Rule{ResultRate: 1, Result: chaos.Response{
		Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"price":0}`),
	}})
	resp, body, _ = get(t, c, srv.URL+"/prices/42")
	if resp.StatusCode != 200 || body != `{"price":0}` || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get(chaos.HeaderInjected) != "result" {
		t.Fatalf("result rule: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	inj.SetRule("GET /prices/{sku}", chaos.Rule{ResultRate: 1, Result: "not a response"})
	resp, body, _ = get(t, c, srv.URL+"/prices/42")
	if resp.StatusCode != 500 || !strings.Contains(body, "is a string, not a chaos.Response") {
		t.Fatalf("wrong result type: %d %q", resp.StatusCode, body)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("handler ran %d times under injected faults", n)
	}
	// A route without a rule runs; so does this one once disabled.
	if _, body, _ := get(t, c, srv.URL+"/other"); body != "prices" {
		t.Fatalf("other route: %q", body)
	}
	inj.Disable()
	if resp, body, _ := get(t, c, srv.URL+"/prices/42"); body != "prices" || resp.Header.Get(chaos.HeaderInjected) != "" {
		t.Fatalf("disabled: %q %v", body, resp.Header)
	}
	if s := inj.Snapshot(); s.Errors != 2 || s.Results != 2 {
		t.Fatalf("Snapshot = %+v", s)
	}
}

// Wrapping the whole mux, the key is the method and path.
func TestHandlerRouteKeyWithoutPattern(t *testing.T) {
	inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{"POST /orders": {ErrorRate: 1}}})
	h := chaos.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), inj, nil)
	for _, tc := range []struct {
		method string
		code   int
	}{{"POST", 503}, {"GET", 200}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, "/orders", nil))
		if w.Code != tc.code {
			t.Errorf("%s /orders: %d, want %d", tc.method, w.Code, tc.code)
		}
	}
}

func TestHandlerLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := mustNew(t, chaos.Config{Enabled: true, Rules: map[string]chaos.Rule{"GET /": {LatencyRate: 1, Latency: 2 * time.Second}}})
		var ranAt time.Time
		var ctxErr error
		h := chaos.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ranAt = time.Now()
			ctxErr = r.Context().Err()
			io.WriteString(w, "ok")
		}), inj, nil)
		start := time.Now()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if d := ranAt.Sub(start); d != 2*time.Second || w.Body.String() != "ok" || w.Header().Get(chaos.HeaderInjected) != "latency" {
			t.Fatalf("ran after %v, body %q, header %v", d, w.Body, w.Header())
		}
		// The client gives up during the latency: the wait ends, and the
		// handler runs with the ended context, as it would in production.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start = time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if d := ranAt.Sub(start); d != 500*time.Millisecond || ctxErr == nil {
			t.Fatalf("ran after %v with ctx err %v; want 500ms and a done context", d, ctxErr)
		}
	})
}
