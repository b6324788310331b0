package watertighthttp_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watertighthttp"
)

type windowsAlg struct {
	mu   sync.Mutex
	next float64
	seen []limit.Window
}

func (a *windowsAlg) Name() string { return "windows" }
func (a *windowsAlg) Update(w limit.Window) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, w)
	return a.next
}

// With TransportConfig.Limiters each key's attempts pass an adaptive
// limit: measured per attempt, an attempt timeout a drop, and the limit it
// learns bounds the key's attempts in flight.
func TestTransportLimiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &windowsAlg{next: 1}
		lims, err := limit.NewRegistry(limit.RegistryConfig{Config: limit.Config{
			InitialLimit: 4, WindowSamples: 3, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg },
		}})
		if err != nil {
			t.Fatal(err)
		}
		hold := make(chan struct{})
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch r.URL.Path {
			case "/slow":
				time.Sleep(10 * time.Millisecond)
			case "/stall":
				<-r.Context().Done()
				return nil, r.Context().Err()
			case "/hold":
				<-hold
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
			Base: base, Limiters: lims, AttemptTimeout: 50 * time.Millisecond,
			Key: func(*http.Request) string { return "api" },
		})
		if err != nil {
			t.Fatal(err)
		}
		do := func(path string) error {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://api.example"+path, nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		_ = do("/slow")
		_ = do("/slow")
		_ = do("/stall") // the attempt timeout ends it: a drop
		if len(alg.seen) != 1 {
			t.Fatalf("windows %d, want 1", len(alg.seen))
		}
		if w := alg.seen[0]; w.Limit != 4 || w.Samples != 2 || w.Drops != 1 || w.MinLatency != 10*time.Millisecond {
			t.Fatalf("window %+v", w)
		}
		done := make(chan error)
		go func() { done <- do("/hold") }()
		synctest.Wait()
		if err := do("/"); !errors.Is(err, limit.ErrLimited) {
			t.Fatalf("a second attempt at the learnt limit of 1: %v, want limit.ErrLimited", err)
		}
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
