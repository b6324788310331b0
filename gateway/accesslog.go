package gateway

import (
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// maxErrorLines bounds the access-log lines of failed requests (status
// 500 and above, always logged) per route and second.
const maxErrorLines = 10

// accessLog logs a sample of a route's requests, and its failed requests
// up to maxErrorLines a second.
type accessLog struct {
	log    *slog.Logger
	route  string
	rate   float64
	second atomic.Int64 // the Unix second errors are counted in
	errors atomic.Int64 // error lines logged in that second
}

// done logs the request r, served through x since start, if it is
// sampled or failed.
func (a *accessLog) done(x *exchange, r *http.Request, start time.Time) {
	status := x.status
	if status == 0 {
		status = http.StatusOK
	}
	if status >= 500 {
		if !a.errorAllowed(start) {
			return
		}
	} else if a.rate <= 0 || rand.Float64() >= a.rate {
		return
	}
	a.log.Info("access", "route", a.route, "method", r.Method, "path", r.URL.Path,
		"status", status, "bytes", x.bytes, "duration", time.Since(start), "client", r.RemoteAddr)
}

// errorAllowed reports whether one more error line fits in now's second.
func (a *accessLog) errorAllowed(now time.Time) bool {
	sec := now.Unix()
	if old := a.second.Load(); old != sec && a.second.CompareAndSwap(old, sec) {
		a.errors.Store(0)
	}
	return a.errors.Add(1) <= maxErrorLines
}
