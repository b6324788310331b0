package watertighthttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/watertighthttp"
)

func TestProxyErrorHandler(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		over   bool
	}{
		{circuit.ErrOpen, http.StatusServiceUnavailable, true},
		{fmt.Errorf("round trip: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, false},
		{errors.New("dial tcp: connection refused"), http.StatusBadGateway, false},
	} {
		rec := httptest.NewRecorder()
		watertighthttp.ProxyErrorHandler(rec, httptest.NewRequest(http.MethodGet, "/x", nil), tc.err)
		if rec.Code != tc.status || (rec.Header().Get(watertighthttp.HeaderOverloaded) == "true") != tc.over {
			t.Errorf("%v: status %d, overloaded %q", tc.err, rec.Code, rec.Header().Get(watertighthttp.HeaderOverloaded))
		}
		if body := rec.Body.String(); !strings.HasPrefix(body, "watertight: proxy: ") || strings.Count(body, "\n") != 1 {
			t.Errorf("body %q", body)
		}
	}
}

// A reverse proxy whose Transport's breaker is open answers 503 with the
// overloaded signal instead of ReverseProxy's default 502.
func TestReverseProxyWithOpenBreaker(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the upstream was called through an open breaker")
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	br, _ := breakers.Get(u.Host)
	br.ForceOpen()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: base, Breakers: breakers})
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = tr
	proxy.ErrorHandler = watertighthttp.ProxyErrorHandler
	front := httptest.NewServer(proxy)
	defer front.Close()
	resp, err := http.Get(front.URL + "/items")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !watertighthttp.IsOverloadedResponse(resp) || !strings.Contains(string(body), "circuit: open") {
		t.Fatalf("status %d, overloaded %v, body %q", resp.StatusCode, watertighthttp.IsOverloadedResponse(resp), body)
	}
	http.DefaultClient.CloseIdleConnections()
}
