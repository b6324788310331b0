package watertightprom_test

// These tests wire the Collector as the Listener of real protections and
// check that the events they emit land in the documented metrics, under the
// same name and key labels as the snapshot metrics.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

func TestBreakerRegistryEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCollector(t, watertightprom.Config{})
		r, err := circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{
			Name: "hosts", WindowSize: 4, MinCalls: 2, OpenDuration: time.Second, OpenJitter: -1, Listener: c,
		}})
		if err != nil {
			t.Fatal(err)
		}
		c.AddBreakerRegistry("hosts", r)
		b, _ := r.Get("eu")
		fail(b, 2)
		b.Allow() // rejected
		time.Sleep(time.Second)
		synctest.Wait()
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_circuit_transitions_total{from="closed",key="eu",name="hosts",reason="failure_rate",to="open"}`: 1,
			`watertight_circuit_transitions_total{from="open",key="eu",name="hosts",reason="timer",to="half-open"}`:     1,
			`watertight_circuit_state{key="eu",name="hosts",state="half-open"}`:                                         1,
			`watertight_circuit_rejected_total{key="eu",name="hosts"}`:                                                  1,
			`watertight_events_total{event="rejected",name="hosts",reason="open",source="circuit"}`:                     1,
		})
	})
}

func TestRetryEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCollector(t, watertightprom.Config{})
		bo, _ := backoff.New(backoff.Config{Base: time.Millisecond, Jitter: backoff.Constant})
		p, err := retry.New(retry.Config{Name: "payments", MaxAttempts: 3, Backoff: bo, Listener: c})
		if err != nil {
			t.Fatal(err)
		}
		transient := retry.MarkTransient(errBoom)
		ctx := context.Background()
		fn := func(context.Context) (int, error) { return 0, transient }
		if _, err := retry.Do(retry.Idempotent(ctx), p, fn); !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("Do = %v, want exhausted", err)
		}
		if _, err := retry.Do(ctx, p, fn); !errors.Is(err, retry.ErrNotIdempotent) {
			t.Fatalf("Do = %v, want not idempotent", err)
		}
		got := scrape(t, c)
		want(t, got, map[string]float64{
			`watertight_retry_scheduled_total{key="",name="payments"}`:                       2,
			`watertight_retry_exhausted_total{key="",name="payments"}`:                       1,
			`watertight_retry_skipped_total{key="",name="payments",reason="not_idempotent"}`: 1,
		})
	})
}

func TestHandlerShedEvents(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	h, err := watertighthttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}), watertighthttp.HandlerConfig{
		Name: "api", MaxConcurrent: 1, MaxQueue: -1, Listener: c,
		Route: func(*http.Request) string { return "items" },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	first := make(chan error, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	<-entered // the route is full
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second request: %s, want 503", resp.Status)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	want(t, scrape(t, c), map[string]float64{
		`watertight_shed_total{key="items",name="api",reason="route_full"}`: 1,
	})
}

// Bad client input through a real Handler on 127.0.0.1, with the Collector
// as its Listener: every malformed timeout header (warned about by the
// Handler's own Propagator, which logs one line) and every unknown
// criticality is counted in watertight_bad_input_total.
func TestHandlerBadInput(t *testing.T) {
	c := newCollector(t, watertightprom.Config{})
	h, err := watertighthttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), watertighthttp.HandlerConfig{
		Name: "api", Listener: c, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	const n = 50
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set(watertighthttp.HeaderTimeout, []string{"soon", "-1", "1.5"}[i%3])
		if i%10 == 0 {
			req.Header.Set(watertighthttp.HeaderCriticality, "urgent")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("request %d: %s, want 204 (bad input is ignored)", i, resp.Status)
		}
	}
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`watertight_bad_input_total{header="X-Request-Timeout-Ms",name="api",reason="malformed"}`:          n,
		`watertight_bad_input_total{header="X-Criticality",name="api",reason="unknown_criticality"}`:       n / 10,
		`watertight_events_total{event="bad_input",name="api",reason="malformed",source="deadline"}`:       n,
		`watertight_events_total{event="bad_input",name="api",reason="unknown_criticality",source="http"}`: n / 10,
	})
	absent(t, got, `watertight_shed_total`)
}
