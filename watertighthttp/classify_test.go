package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/retry"
)

func TestClassifyStatus(t *testing.T) {
	tests := []struct {
		code      int
		outcome   watertight.Outcome
		transient bool
	}{
		{100, watertight.Success, false},
		{200, watertight.Success, false},
		{204, watertight.Success, false},
		{301, watertight.Success, false},
		{304, watertight.Success, false},
		{400, watertight.Ignored, false},
		{401, watertight.Ignored, false},
		{404, watertight.Ignored, false},
		{409, watertight.Ignored, false},
		{422, watertight.Ignored, false},
		{429, watertight.Failure, true},
		{499, watertight.Ignored, false},
		{500, watertight.Failure, false},
		{501, watertight.Failure, false},
		{502, watertight.Failure, true},
		{503, watertight.Failure, true},
		{504, watertight.Failure, true},
		{505, watertight.Failure, false},
		{599, watertight.Failure, false},
		{0, watertight.Failure, false},
		{600, watertight.Failure, false},
	}
	for _, tt := range tests {
		o, tr := ClassifyStatus(tt.code)
		if o != tt.outcome || tr != tt.transient {
			t.Errorf("ClassifyStatus(%d) = %v, %v; want %v, %v", tt.code, o, tr, tt.outcome, tt.transient)
		}
	}
}

func statusResp(code int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Header: h, Body: http.NoBody}
}

// TestStatusErrorOutcome checks how an attempt's HTTP answer reaches the
// breaker (watertight.Classify) and the retry policy (retry.IsTransient).
func TestStatusErrorOutcome(t *testing.T) {
	tests := []struct {
		name       string
		resp       *http.Response
		success    bool
		outcome    watertight.Outcome
		transient  bool
		overloaded bool
		retryAfter time.Duration // -1: none
	}{
		{"200", statusResp(200), true, watertight.Success, false, false, -1},
		{"302", statusResp(302), true, watertight.Success, false, false, -1},
		{"404", statusResp(404), false, watertight.Ignored, false, false, -1},
		{"404 with Retry-After", statusResp(404, "Retry-After", "3"), false, watertight.Ignored, false, false, -1},
		{"429", statusResp(429), false, watertight.Failure, true, false, -1},
		{"429 Retry-After", statusResp(429, "Retry-After", "2"), false, watertight.Failure, true, false, 2 * time.Second},
		{"500", statusResp(500), false, watertight.Failure, false, false, -1},
		{"502", statusResp(502), false, watertight.Failure, true, false, -1},
		{"503 Retry-After", statusResp(503, "Retry-After", "7"), false, watertight.Failure, true, false, 7 * time.Second},
		{"503 Retry-After date passed", statusResp(503, "Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), false, watertight.Failure, true, false, 0},
		{"503 Retry-After malformed", statusResp(503, "Retry-After", "soon"), false, watertight.Failure, true, false, -1},
		{"503 overloaded", statusResp(503, HeaderOverloaded, "true", "Retry-After", "1"), false, watertight.Failure, false, true, -1},
		{"503 envoy overloaded", statusResp(503, HeaderEnvoyOverloaded, "TRUE"), false, watertight.Failure, false, true, -1},
		{"503 overloaded false", statusResp(503, HeaderOverloaded, "false"), false, watertight.Failure, true, false, -1},
		{"504", statusResp(504), false, watertight.Failure, true, false, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := statusError(tt.resp)
			if (err == nil) != tt.success {
				t.Fatalf("statusError = %v, want success %v", err, tt.success)
			}
			if got := watertight.Classify(context.Background(), err); got != tt.outcome {
				t.Errorf("outcome %v, want %v", got, tt.outcome)
			}
			if got := retry.IsTransient(err); got != tt.transient {
				t.Errorf("transient %v, want %v", got, tt.transient)
			}
			if got := watertight.IsOverloaded(err); got != tt.overloaded {
				t.Errorf("overloaded %v, want %v", got, tt.overloaded)
			}
			d, ok := retry.RetryAfter(err)
			if want := tt.retryAfter >= 0; ok != want || (ok && d != tt.retryAfter) {
				t.Errorf("RetryAfter = %v, %v; want %v", d, ok, tt.retryAfter)
			}
			var se *StatusError
			if err != nil && (!errors.As(err, &se) || se.Response != tt.resp) {
				t.Errorf("error %v does not carry the response", err)
			}
		})
	}
}

func TestStatusErrorMessage(t *testing.T) {
	if got := (&StatusError{Response: statusResp(503, HeaderOverloaded, "true")}).Error(); got != "watertighthttp: HTTP 503 Service Unavailable (overloaded)" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&StatusError{Response: &http.Response{StatusCode: 500}}).Error(); got != "watertighthttp: HTTP 500" {
		t.Errorf("Error() = %q", got)
	}
}

func TestIsOverloadedResponse(t *testing.T) {
	tests := []struct {
		resp *http.Response
		want bool
	}{
		{nil, false},
		{statusResp(503), false},
		{statusResp(200, HeaderOverloaded, "true"), true},
		{statusResp(503, HeaderOverloaded, " True "), true},
		{statusResp(503, HeaderOverloaded, "1"), false},
		{statusResp(503, HeaderEnvoyOverloaded, "true"), true},
		{statusResp(503, HeaderOverloaded, "false", HeaderOverloaded, "true"), true},
	}
	for i, tt := range tests {
		if got := IsOverloadedResponse(tt.resp); got != tt.want {
			t.Errorf("%d: IsOverloadedResponse = %v, want %v", i, got, tt.want)
		}
	}
}

func TestTransportErrorClassification(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		err       error
		transient bool
		outcome   watertight.Outcome
	}{
		{"EOF", live, fmt.Errorf("read: %w", io.EOF), true, watertight.Failure},
		{"unexpected EOF", live, io.ErrUnexpectedEOF, true, watertight.Failure},
		{"refused", live, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, watertight.Failure},
		{"reset", live, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, watertight.Failure},
		{"timeout", live, context.DeadlineExceeded, true, watertight.Failure},
		{"server closed", live, errors.New("http: server closed idle connection"), true, watertight.Failure},
		{"dns not found", live, &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, false, watertight.Failure},
		{"dns temporary", live, &net.DNSError{Err: "try again", Name: "x", IsTemporary: true}, true, watertight.Failure},
		{"unsupported scheme", live, errors.New(`unsupported protocol scheme "ftp"`), false, watertight.Failure},
		{"caller cancelled", cancelled, context.Canceled, false, watertight.Ignored},
		{"after the caller's deadline", cancelled, io.EOF, false, watertight.Ignored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := transportError(tt.ctx, tt.err)
			if !errors.Is(err, tt.err) {
				t.Fatalf("transportError lost the error: %v", err)
			}
			if got := retry.IsTransient(err); got != tt.transient {
				t.Errorf("transient %v, want %v", got, tt.transient)
			}
			if got := watertight.Classify(tt.ctx, err); got != tt.outcome {
				t.Errorf("outcome %v, want %v", got, tt.outcome)
			}
		})
	}
}

func TestIdempotentMethod(t *testing.T) {
	for m, want := range map[string]bool{
		"": true, "GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true,
		"POST": false, "PATCH": false, "CONNECT": false, "get": false,
	} {
		if got := idempotentMethod(m); got != want {
			t.Errorf("idempotentMethod(%q) = %v, want %v", m, got, want)
		}
	}
}
