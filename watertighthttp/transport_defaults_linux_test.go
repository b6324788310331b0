//go:build linux

package watertighthttp_test

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// unansweredAddr returns the address of a listener whose accept queue is
// full and never drained: Linux drops the SYNs of any further connection, so
// a dial to it hangs until the dialer gives up, as with a host that does not
// answer.
func unansweredAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the accept queue: dial until a dial hangs.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue never filled")
	return ""
}

// With Base nil, a dial to a host that does not answer fails after the
// Transport's connect timeout (DefaultConnectTimeout, 500 ms), not after
// http.DefaultTransport's 30 s or the request's own deadline.
func TestDefaultConnectTimeout(t *testing.T) {
	addr := unansweredAddr(t)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Retry: retry.Config{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	took := time.Since(start)
	if resp != nil {
		resp.Body.Close()
	}
	var op *net.OpError
	if err == nil || ctx.Err() != nil || !errors.As(err, &op) || op.Op != "dial" || !op.Timeout() {
		t.Fatalf("err = %v after %v (ctx: %v); want a dial timeout before the request's deadline", err, took, ctx.Err())
	}
	if took < watertighthttp.DefaultConnectTimeout/2 || took > 3*watertighthttp.DefaultConnectTimeout {
		t.Fatalf("the dial gave up after %v, want about %v", took, watertighthttp.DefaultConnectTimeout)
	}
	if !retry.IsTransient(err) {
		t.Fatalf("err = %v: a connect timeout must be transient", err)
	}
}

// ConnectTimeout sets the default base's dial timeout; it is refused with a
// Base of the caller's own.
func TestConnectTimeoutConfig(t *testing.T) {
	addr := unansweredAddr(t)
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{ConnectTimeout: 100 * time.Millisecond, Retry: retry.Config{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctxTimeout(t, 5*time.Second), http.MethodGet, "http://"+addr+"/", nil)
	start := time.Now()
	if _, err := tr.RoundTrip(req); err == nil || time.Since(start) > time.Second {
		t.Fatalf("err = %v after %v, want a dial timeout after about 100ms", err, time.Since(start))
	}
	if _, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{ConnectTimeout: time.Second, Base: http.DefaultTransport}); err == nil {
		t.Fatal("NewTransport accepted ConnectTimeout with a Base of the caller's own")
	}
}

// A HedgingTransport with Base nil dials with the same connect timeout as a
// Transport: a POST (not hedged, so it goes straight to the base) to a host
// that does not answer fails after HedgeConfig.ConnectTimeout, not after
// http.DefaultTransport's 30 s; a ConnectTimeout with a Base of the
// caller's own is refused.
func TestHedgingTransportConnectTimeout(t *testing.T) {
	addr := unansweredAddr(t)
	p, err := hedge.New(hedge.Config{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []time.Duration{0, 100 * time.Millisecond} {
		tr, err := watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Policy: p, ConnectTimeout: ct})
		if err != nil {
			t.Fatal(err)
		}
		want := ct
		if want == 0 {
			want = watertighthttp.DefaultConnectTimeout
		}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			ctx := ctxTimeout(t, 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+"/", nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			took := time.Since(start)
			if resp != nil {
				resp.Body.Close()
			}
			var op *net.OpError
			if err == nil || ctx.Err() != nil || !errors.As(err, &op) || op.Op != "dial" || !op.Timeout() {
				t.Fatalf("ConnectTimeout %v, %s: err = %v after %v (ctx: %v); want a dial timeout", ct, method, err, took, ctx.Err())
			}
			if took < want/2 || took > 3*want {
				t.Fatalf("ConnectTimeout %v, %s: the dial gave up after %v, want about %v", ct, method, took, want)
			}
		}
	}
	if _, err := watertighthttp.NewHedgingTransport(watertighthttp.HedgeConfig{Policy: p, ConnectTimeout: time.Second, Base: http.DefaultTransport}); err == nil {
		t.Fatal("NewHedgingTransport accepted ConnectTimeout with a Base of the caller's own")
	}
}
