package watertighthttp_test

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// h2cServer serves handler over HTTP/2 in clear on 127.0.0.1, as a gRPC
// server speaks; it returns the server's address and an HTTP/2 client
// transport for it.
func h2cServer(t *testing.T, handler http.HandlerFunc) (string, *http.Transport) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return ln.Addr().String(), tr
}

// grpcAnswer writes a trailers-only gRPC answer with code (and a pushback
// when push is not empty).
func grpcAnswer(w http.ResponseWriter, code int, push string) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Grpc-Status", strconv.Itoa(code))
	if push != "" {
		w.Header().Set("Grpc-Retry-Pushback-Ms", push)
	}
	w.WriteHeader(http.StatusOK)
}

func grpcCall(t *testing.T, tr http.RoundTripper, addr string, idempotent bool) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/pkg.Service/Method", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if idempotent {
		req = req.WithContext(retry.Idempotent(req.Context()))
	}
	return tr.RoundTrip(req)
}

// With GRPC, the status of a trailers-only answer is judged as gRPC's:
// UNAVAILABLE is retried (for a call marked idempotent only), NOT_FOUND is
// not; the time left goes as grpc-timeout.
func TestGRPCStatusAndTimeout(t *testing.T) {
	var calls atomic.Int64
	var timeouts atomic.Value
	addr, base := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		timeouts.Store(r.Header.Get("Grpc-Timeout"))
		switch r.Header.Get("X-Want") {
		case "not-found":
			grpcAnswer(w, 5, "")
		default:
			if n%2 == 1 {
				grpcAnswer(w, 14, "") // UNAVAILABLE, then OK
				return
			}
			grpcAnswer(w, 0, "")
		}
	})
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
		Base: base, GRPC: true, Timeout: 2 * time.Second,
		Retry: retry.Config{MaxAttempts: 3, Backoff: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := grpcCall(t, tr, addr, true)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := resp.Header.Get("Grpc-Status"); st != "0" || calls.Load() != 2 {
		t.Fatalf("an idempotent call answered UNAVAILABLE then OK: status %s after %d calls, want 0 after 2", st, calls.Load())
	}
	to := timeouts.Load().(string)
	if !strings.HasSuffix(to, "m") {
		t.Fatalf("grpc-timeout %q, want milliseconds", to)
	}
	if ms, _ := strconv.Atoi(strings.TrimSuffix(to, "m")); ms <= 0 || ms > 2000 {
		t.Fatalf("grpc-timeout %q, want the time left of 2s", to)
	}
	calls.Store(0)
	resp, err = grpcCall(t, tr, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := resp.Header.Get("Grpc-Status"); st != "14" || calls.Load() != 1 {
		t.Fatalf("a call not marked idempotent: status %s after %d calls, want 14 after 1", st, calls.Load())
	}
}

func TestClassifyGRPCStatus(t *testing.T) {
	for _, c := range []struct {
		code      int
		o         watertight.Outcome
		transient bool
	}{
		{0, watertight.Success, false}, {14, watertight.Failure, true}, {4, watertight.Failure, true},
		{13, watertight.Failure, false}, {8, watertight.Failure, false}, {5, watertight.Ignored, false},
		{1, watertight.Ignored, false}, {16, watertight.Ignored, false}, {2, watertight.Failure, false},
	} {
		if o, tr := watertighthttp.ClassifyGRPCStatus(c.code); o != c.o || tr != c.transient {
			t.Errorf("code %d: %v %v, want %v %v", c.code, o, tr, c.o, c.transient)
		}
	}
}

// A negative pushback says not to retry: the answer carries the
// overloaded signal and is not retried.
func TestGRPCPushback(t *testing.T) {
	var calls atomic.Int64
	addr, base := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		grpcAnswer(w, 14, "-1")
	})
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: base, GRPC: true, Retry: retry.Config{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := grpcCall(t, tr, addr, true)
	var se *watertighthttp.StatusError
	if err != nil && !errors.As(err, &se) {
		t.Fatal(err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if calls.Load() != 1 {
		t.Fatalf("a negative pushback: %d calls, want 1", calls.Load())
	}
}
