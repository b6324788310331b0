package watertighthttp_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// codeEvents keeps "kind:code" of the events it gets.
type codeEvents struct {
	mu    sync.Mutex
	codes []string
}

func (c *codeEvents) OnEvent(e watertight.Event) {
	c.mu.Lock()
	c.codes = append(c.codes, e.Kind.String()+":"+e.Code)
	c.mu.Unlock()
}

func (c *codeEvents) expect(t *testing.T, want ...string) {
	t.Helper()
	c.mu.Lock()
	got := c.codes
	c.codes = nil
	c.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("codes\n got %q\nwant %q", got, want)
	}
}

// serve runs one request through h, with ctx and the headers given.
func serve(ctx context.Context, h http.Handler, target string, hdr ...string) int {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// blocker is a handler that blocks until released.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(http.ResponseWriter, *http.Request) {
	b.started <- struct{}{}
	<-b.release
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Every way the Handler sheds a request carries its code.
func TestHandlerShedCodes(t *testing.T) {
	bg := context.Background()
	t.Run("route", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			evs := &codeEvents{}
			b := newBlocker()
			h, err := watertighthttp.NewHandler(b, watertighthttp.HandlerConfig{MaxConcurrent: 1, MaxQueue: 1, Listener: evs, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { serve(bg, h, "/a") }) // runs
			<-b.started
			wg.Go(func() { serve(bg, h, "/a", watertighthttp.HeaderCriticality, "sheddable") }) // queued
			synctest.Wait()
			ctx, cancel := context.WithCancel(bg)
			wg.Go(func() { serve(ctx, h, "/a") }) // displaces the sheddable one, and is queued
			synctest.Wait()
			evs.expect(t, "shed:"+watertighthttp.CodeDisplaced)
			serve(bg, h, "/a") // the queue holds a critical request: full
			evs.expect(t, "shed:"+watertighthttp.CodeRouteFull)
			cancel() // the queued request gives up
			synctest.Wait()
			evs.expect(t, "shed:"+watertighthttp.CodeQueueGaveUp)
			close(b.release)
			wg.Wait()
		})
	})
	t.Run("deadline and bad input", func(t *testing.T) {
		evs := &codeEvents{}
		dl, err := deadline.New(deadline.Config{MinRemaining: time.Second, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		h, err := watertighthttp.NewHandler(http.NotFoundHandler(), watertighthttp.HandlerConfig{Deadline: dl, Listener: evs, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		serve(bg, h, "/a", watertighthttp.HeaderTimeout, "50")
		serve(bg, h, "/a", watertighthttp.HeaderCriticality, "urgent")
		evs.expect(t, "shed:"+watertighthttp.CodeDeadline, "bad_input:"+watertighthttp.CodeUnknownCriticality)
	})
	t.Run("clients", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			evs := &codeEvents{}
			b := newBlocker()
			h, err := watertighthttp.NewHandler(b, watertighthttp.HandlerConfig{
				Listener: evs, Logger: quiet(), MaxPerClient: 1, MaxClients: 1,
				Client: func(r *http.Request) string { return r.Header.Get("Client") },
			})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { serve(bg, h, "/a", "Client", "alice") })
			<-b.started
			serve(bg, h, "/a", "Client", "alice")                 // at her limit
			wg.Go(func() { serve(bg, h, "/a", "Client", "bob") }) // the table is full: bob takes the overflow's one place
			<-b.started
			serve(bg, h, "/a", "Client", "carol") // the overflow is at its limit
			evs.expect(t, "shed:"+watertighthttp.CodeClientLimit, "shed:"+watertighthttp.CodeClientOverflow)
			close(b.release)
			wg.Wait()
		})
	})
}

// A request the Transport cannot retry because its body cannot be sent
// again carries the code, in the watertight.Event and the retry.Event.
func TestTransportBodyNotReplayableCode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	evs := &codeEvents{}
	var typed []string
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Listener: evs, Retry: retry.Config{
		OnEvent: func(e retry.Event) { typed = append(typed, e.Code) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("x"))) // no GetBody
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	evs.expect(t, "retry_skipped:"+watertighthttp.CodeBodyNotReplayable)
	if !slices.Equal(typed, []string{watertighthttp.CodeBodyNotReplayable}) {
		t.Fatalf("retry.Event codes %q", typed)
	}
}
