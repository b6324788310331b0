package watertighthttp

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/watertight-go/watertight"
)

// ProxyErrorHandler is an ErrorHandler for httputil.ReverseProxy in front of
// a Transport. The proxy's default answers every error with 502 Bad Gateway,
// which its callers would retry and which loses the "overloaded, don't
// retry" signal; this one answers
//
//   - a rejection (an open breaker, a full bulkhead, no time left to send)
//     or an error that carries the overloaded signal (retries exhausted or
//     refused by the budget): 503 Service Unavailable with HeaderOverloaded:
//     true, so that the proxy's callers do not retry;
//   - a deadline that passed: 504 Gateway Timeout;
//   - a caller that went away (its context cancelled): nothing is written,
//     as nobody reads it;
//   - anything else: 502 Bad Gateway, as the default does.
//
// The body is one line that says what happened.
func ProxyErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case r.Context().Err() != nil && errors.Is(r.Context().Err(), context.Canceled):
		return
	case watertight.IsRejection(err) || watertight.IsOverloaded(err):
		w.Header().Set(HeaderOverloaded, "true")
		proxyError(w, http.StatusServiceUnavailable, "overloaded, do not retry: "+err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		proxyError(w, http.StatusGatewayTimeout, "upstream did not answer in time: "+err.Error())
	default:
		proxyError(w, http.StatusBadGateway, "upstream failed: "+err.Error())
	}
}

func proxyError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	msg = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, msg)
	_, _ = w.Write([]byte("watertight: proxy: " + msg + "\n"))
}
