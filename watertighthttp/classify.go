package watertighthttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/retry"
)

// ClassifyStatus returns how an HTTP answer with status code counts:
//
//   - 1xx, 2xx and 3xx: Success, not transient;
//   - 429 Too Many Requests: Failure (the dependency cannot serve now), transient;
//   - any other 4xx: Ignored (the caller's own error, which says nothing
//     about the dependency), not transient;
//   - 502, 503 and 504: Failure, transient;
//   - any other 5xx (500 included): Failure, not transient;
//   - anything else (a code outside 100–599): Failure, not transient.
func ClassifyStatus(code int) (o watertight.Outcome, transient bool) {
	switch {
	case code >= 100 && code < 400:
		return watertight.Success, false
	case code == http.StatusTooManyRequests:
		return watertight.Failure, true
	case code >= 400 && code < 500:
		return watertight.Ignored, false
	case code == http.StatusBadGateway, code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		return watertight.Failure, true
	}
	return watertight.Failure, false
}

// IsOverloadedResponse reports whether resp carries the "overloaded, don't
// retry" signal: HeaderOverloaded or HeaderEnvoyOverloaded with the value
// "true" (case ignored). A nil resp reports false.
//
// The Transport never retries such a response and returns it as it is, with
// the header kept, so that a server that relays it passes the signal on to
// its own callers. The Transport also sets HeaderOverloaded on a response it
// returns after its retries were exhausted or refused by the retry budget:
// this layer already retried, so the layers above must not.
func IsOverloadedResponse(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	return headerTrue(resp.Header, HeaderOverloaded) || headerTrue(resp.Header, HeaderEnvoyOverloaded)
}

func headerTrue(h http.Header, name string) bool {
	for _, v := range h.Values(name) {
		if strings.EqualFold(strings.TrimSpace(v), "true") {
			return true
		}
	}
	return false
}

// StatusError is the error of an attempt whose HTTP answer was not a
// success (see ClassifyStatus). It carries the response, whose body is
// unread. Its methods tell the protections how it counts: Outcome for a
// circuit breaker (watertight.Classify), Transient for a retry policy
// (retry.IsTransient), Overloaded for watertight.IsOverloaded.
//
// Transport.RoundTrip does not return it: when the final answer is an HTTP
// response, RoundTrip returns the response with a nil error. It is seen by a
// custom circuit.Config.Classify or retry.Config.Retryable, and in
// retry.Event.Err.
type StatusError struct {
	// Response is the attempt's response.
	Response *http.Response

	discarded bool
	grpc      int  // a gRPC answer's status code plus one; 0: an HTTP status
	noRetry   bool // a gRPC pushback asked not to retry
}

// Error returns, for example, "watertighthttp: HTTP 503 Service Unavailable".
func (e *StatusError) Error() string {
	if e.grpc > 0 {
		s := "watertighthttp: gRPC status " + strconv.Itoa(e.grpc-1)
		if m := e.Response.Header.Get(HeaderGRPCMessage); m != "" {
			s += ": " + m
		}
		if e.noRetry {
			s += " (overloaded)"
		}
		return s
	}
	s := "watertighthttp: HTTP " + e.Response.Status
	if e.Response.Status == "" {
		s = "watertighthttp: HTTP " + strconv.Itoa(e.Response.StatusCode)
	}
	if IsOverloadedResponse(e.Response) {
		s += " (overloaded)"
	}
	return s
}

// Outcome returns the status's outcome (ClassifyStatus).
func (e *StatusError) Outcome() watertight.Outcome {
	if e.grpc > 0 {
		o, _ := ClassifyGRPCStatus(e.grpc - 1)
		return o
	}
	o, _ := ClassifyStatus(e.Response.StatusCode)
	return o
}

// Transient reports whether the status is worth retrying (ClassifyStatus)
// and the response does not carry the overloaded signal.
func (e *StatusError) Transient() bool {
	if e.grpc > 0 {
		_, t := ClassifyGRPCStatus(e.grpc - 1)
		return t && !e.noRetry && !IsOverloadedResponse(e.Response)
	}
	_, t := ClassifyStatus(e.Response.StatusCode)
	return t && !IsOverloadedResponse(e.Response)
}

// Overloaded reports whether the response carries the "overloaded, don't
// retry" signal (IsOverloadedResponse).
func (e *StatusError) Overloaded() bool { return e.noRetry || IsOverloadedResponse(e.Response) }

// maxDrain bounds how much of a discarded response's body is read before it
// is closed: enough to let a small body be read to its end, so that the
// connection goes back to the pool, without reading a large one.
const maxDrain = 64 << 10

// discard drains (up to maxDrain bytes) and closes the response's body, once.
func (e *StatusError) discard() {
	if e == nil || e.discarded {
		return
	}
	e.discarded = true
	drain(e.Response)
}

// buffer reads the response's body (up to maxDrain bytes) into memory and
// closes it, so that the connection goes back to the pool while the
// response, handed to the caller inside an error, keeps a readable body.
func (e *StatusError) buffer() {
	if e == nil || e.discarded || e.Response.Body == nil {
		return
	}
	e.discarded = true
	b, _ := io.ReadAll(io.LimitReader(e.Response.Body, maxDrain))
	e.Response.Body.Close()
	e.Response.Body = io.NopCloser(bytes.NewReader(b))
}

func drain(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	io.CopyN(io.Discard, resp.Body, maxDrain)
	resp.Body.Close()
}

// statusError turns an HTTP answer into the attempt's error: nil for a
// success, a *StatusError otherwise, marked with the server's Retry-After
// (retry.After) when the status is transient and the header is well formed.
func statusError(resp *http.Response) error {
	o, transient := ClassifyStatus(resp.StatusCode)
	if o == watertight.Success {
		return nil
	}
	se := &StatusError{Response: resp}
	if transient && !IsOverloadedResponse(resp) {
		if v := resp.Header.Get("Retry-After"); v != "" {
			if d, err := retry.ParseRetryAfter(v, time.Now()); err == nil {
				return retry.After(se, d)
			}
		}
	}
	return se
}

// transportError marks an error of the inner transport (no HTTP answer) as
// transient when it is worth retrying: a timeout, a refused, reset or closed
// connection, a failure to dial. A cancellation by the caller and errors
// that will not change on retry (a malformed URL, an unsupported scheme, a
// bad certificate) are left as they are.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return err
	}
	if transientTransport(err) {
		return retry.MarkTransient(err)
	}
	return err
}

func transientTransport(err error) bool {
	if retry.IsTransient(err) || errors.Is(err, io.EOF) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTemporary || dns.IsTimeout
	}
	// net/http's own words for a connection lost before the answer.
	msg := err.Error()
	return strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "server closed") ||
		strings.Contains(msg, "transport connection broken")
}
