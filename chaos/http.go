package chaos

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// DefaultStatus is the HTTP status a Handler answers an injected error with
// when Rule.Status is zero: 503 Service Unavailable.
const DefaultStatus = http.StatusServiceUnavailable

// HeaderInjected is set on every response that an injected fault produced
// or delayed, with the fault's kind as value ("error", "result" or
// "latency"), so that nobody mistakes a game day's failures for real ones.
const HeaderInjected = "X-Chaos-Injected"

// Response is a replacement HTTP answer, for Rule.Result of a rule used by
// Transport or Handler.
type Response struct {
	// Status is the status code. Zero means 200 OK.
	Status int
	// Header holds the response's headers; it may be nil.
	Header http.Header
	// Body is the response's body; it may be empty.
	Body []byte
}

func (r *Response) status() int {
	if r.Status == 0 {
		return http.StatusOK
	}
	return r.Status
}

// asResponse returns the replacement result as a *Response, or an error that
// says what it is instead.
func asResponse(key string, result any) (*Response, error) {
	switch r := result.(type) {
	case Response:
		return &r, nil
	case *Response:
		if r != nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("chaos: the Rule.Result for key %q is a %T, not a chaos.Response", key, result)
}

// HostKey is the default key function of Transport: the request's host
// (req.URL.Host), so that rules name dependencies ("payments.internal:443").
func HostKey(req *http.Request) string { return req.URL.Host }

// RouteKey is the default key function of Handler: the ServeMux pattern
// that matched (r.Pattern) when a ServeMux set it — which is the case when
// Handler wraps a handler registered on the mux, not the mux itself — else
// the method and path ("GET /api/prices").
func RouteKey(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.Path
}

// Transport returns an http.RoundTripper that injects inj's faults into the
// requests it sends through base (http.DefaultTransport if nil), by the key
// that key returns (HostKey if nil). An injected latency waits before the
// request is sent and ends early with the request context's error (the
// response of a delayed request carries HeaderInjected "latency"); an
// injected error is returned from RoundTrip without sending anything, as a
// transport failure would be; a replacement result (a Response) is returned
// as the response, with HeaderInjected set, without sending anything. A
// Transport around a nil or disabled inj costs one atomic load per request.
func Transport(base http.RoundTripper, inj *Injector, key func(*http.Request) string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if key == nil {
		key = HostKey
	}
	return &transport{base: base, inj: inj, key: key}
}

type transport struct {
	base http.RoundTripper
	inj  *Injector
	key  func(*http.Request) string
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.inj.Enabled() {
		return t.base.RoundTrip(req)
	}
	key := t.key(req)
	f := t.inj.decide(key, true)
	if f.none() {
		return t.base.RoundTrip(req)
	}
	if err := wait(req.Context(), f.Latency); err != nil {
		closeBody(req)
		return nil, err
	}
	if f.Err != nil {
		closeBody(req)
		return nil, f.Err
	}
	if f.Replace {
		closeBody(req)
		r, err := asResponse(key, f.Result)
		if err != nil {
			return nil, err
		}
		return r.http(req), nil
	}
	resp, err := t.base.RoundTrip(req)
	if resp != nil {
		if resp.Header == nil {
			resp.Header = make(http.Header)
		}
		resp.Header.Set(HeaderInjected, "latency")
	}
	return resp, err
}

// closeBody closes a request body that will not be sent: a RoundTripper
// must close it, even on errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// http builds the *http.Response for req.
func (r *Response) http(req *http.Request) *http.Response {
	h := r.Header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Set(HeaderInjected, "result")
	code := r.status()
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(r.Body)),
		ContentLength: int64(len(r.Body)),
		Request:       req,
	}
}

// Handler returns an http.Handler that injects inj's faults into the
// requests next serves, by the key that key returns (RouteKey if nil). An
// injected latency waits before next runs (ending early if the request's
// context ends; next then runs with that context); an injected error
// answers Rule.Status (503 by default) with the error's message, without
// running next; a replacement result (a Response) is written as the answer,
// without running next. Responses a fault produced or delayed carry
// HeaderInjected. A Handler around a nil or disabled inj costs one atomic
// load per request.
func Handler(next http.Handler, inj *Injector, key func(*http.Request) string) http.Handler {
	if key == nil {
		key = RouteKey
	}
	return &handler{next: next, inj: inj, key: key}
}

type handler struct {
	next http.Handler
	inj  *Injector
	key  func(*http.Request) string
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.inj.Enabled() {
		h.next.ServeHTTP(w, r)
		return
	}
	key := h.key(r)
	f := h.inj.decide(key, true)
	if f.none() {
		h.next.ServeHTTP(w, r)
		return
	}
	wait(r.Context(), f.Latency)
	switch {
	case f.Err != nil:
		w.Header().Set(HeaderInjected, "error")
		http.Error(w, f.Err.Error(), f.Status)
	case f.Replace:
		resp, err := asResponse(key, f.Result)
		if err != nil {
			w.Header().Set(HeaderInjected, "result")
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for k, vs := range resp.Header {
			w.Header()[k] = append([]string(nil), vs...)
		}
		w.Header().Set(HeaderInjected, "result")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
		w.WriteHeader(resp.status())
		w.Write(resp.Body)
	default:
		w.Header().Set(HeaderInjected, "latency")
		h.next.ServeHTTP(w, r)
	}
}
