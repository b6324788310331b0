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

func (a *accessLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
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
			"status", status, "bytes", sw.bytes, "duration", time.Since(start), "client", r.RemoteAddr)
	})
}

// errorAllowed reports whether one more error line fits in now's second.
func (a *accessLog) errorAllowed(now time.Time) bool {
	sec := now.Unix()
	if old := a.second.Load(); old != sec && a.second.CompareAndSwap(old, sec) {
		a.errors.Store(0)
	}
	return a.errors.Add(1) <= maxErrorLines
}

// statusWriter records the status and the bytes of an answer. Unwrap lets
// http.ResponseController reach the connection (flushes, an Upgrade's
// hijack).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 || w.status < 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap returns the ResponseWriter it wraps.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the answer, for handlers that assert http.Flusher.
func (w *statusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }
