package watertighthttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/watertighthttp"
)

// flakyStore is a memory store whose Claim or Complete fail on demand.
type flakyStore struct {
	*idempotency.MemoryStore
	failClaim, failComplete bool
}

var errStoreDown = errors.New("store down")

func (s *flakyStore) Claim(ctx context.Context, key, fp string, lockTTL, ttl time.Duration) (idempotency.Claim, error) {
	if s.failClaim {
		return idempotency.Claim{}, errStoreDown
	}
	return s.MemoryStore.Claim(ctx, key, fp, lockTTL, ttl)
}

func (s *flakyStore) Complete(ctx context.Context, key, token string, rec idempotency.Record, ttl time.Duration) error {
	if s.failComplete {
		return errStoreDown
	}
	return s.MemoryStore.Complete(ctx, key, token, rec, ttl)
}

// errReader fails every Read.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// post sends a POST with the Idempotency-Key values given (none for none).
func post(h http.Handler, body string, keys ...string) int {
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	for _, k := range keys {
		req.Header.Add(watertighthttp.HeaderIdempotencyKey, k)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// Every answer of the idempotency middleware that is an event carries its
// code from package idempotency.
func TestIdempotencyEventCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		store := &flakyStore{MemoryStore: mem}
		evs := &codeEvents{}
		gate := make(chan struct{})
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("do") {
			case "wait":
				<-gate
			case "big":
				_, _ = w.Write([]byte(strings.Repeat("x", 100)))
				return
			}
			if r.Header.Get("Release") != "" {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		var failOpen bool
		h, err := watertighthttp.NewIdempotencyHandler(next, watertighthttp.IdempotencyConfig{
			Store: store, Scope: watertighthttp.SharedScope, Listener: evs, Logger: quiet(), MaxRequestBytes: 10, MaxResponseBytes: 50,
			Required: func(*http.Request) bool { return true },
			FailOpen: func(*http.Request) bool { return failOpen },
			Release:  func(_ *http.Request, status int) bool { return status == http.StatusServiceUnavailable },
		})
		if err != nil {
			t.Fatal(err)
		}
		post(h, "a")
		post(h, "a", `"k1"`, `"k2"`)
		post(h, "a", "not quoted")
		post(h, strings.Repeat("a", 11), `"k1"`)
		req := httptest.NewRequest(http.MethodPost, "/orders", errReader{})
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k1"`)
		h.ServeHTTP(httptest.NewRecorder(), req)
		evs.expect(t, "rejected:"+idempotency.CodeKeyMissing, "rejected:"+idempotency.CodeInvalidKey, "rejected:"+idempotency.CodeInvalidKey,
			"rejected:"+idempotency.CodeRequestTooLarge, "rejected:"+idempotency.CodeBodyUnreadable)

		post(h, "a", `"k1"`) // runs
		post(h, "b", `"k1"`) // another request under the same key
		post(h, "a", `"k1"`) // replayed: an event without a code
		evs.expect(t, "rejected:"+idempotency.CodeMismatch, "replayed:")

		var wg sync.WaitGroup
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodPost, "/orders?do=wait", strings.NewReader("a"))
			req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k2"`)
			h.ServeHTTP(httptest.NewRecorder(), req)
		})
		synctest.Wait()
		req = httptest.NewRequest(http.MethodPost, "/orders?do=wait", strings.NewReader("a"))
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k2"`)
		h.ServeHTTP(httptest.NewRecorder(), req)
		close(gate)
		wg.Wait()
		evs.expect(t, "rejected:"+idempotency.CodeInFlight)

		req = httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("a"))
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k3"`)
		req.Header.Set("Release", "yes")
		h.ServeHTTP(httptest.NewRecorder(), req)
		evs.expect(t, "state_change:"+idempotency.CodeReleased)

		req = httptest.NewRequest(http.MethodPost, "/orders?do=big", strings.NewReader("a"))
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k4"`)
		h.ServeHTTP(httptest.NewRecorder(), req) // too large to keep: outcome unknown
		req = httptest.NewRequest(http.MethodPost, "/orders?do=big", strings.NewReader("a"))
		req.Header.Set(watertighthttp.HeaderIdempotencyKey, `"k4"`)
		h.ServeHTTP(httptest.NewRecorder(), req)
		evs.expect(t, "state_change:"+idempotency.CodeNotStored, "rejected:"+idempotency.CodeOutcomeUnknown)

		store.failComplete = true
		post(h, "a", `"k5"`)
		store.failComplete, store.failClaim = false, true
		post(h, "a", `"k6"`)
		failOpen = true
		post(h, "a", `"k6"`)
		evs.expect(t, "state_change:"+idempotency.CodeStoreFailed, "rejected:"+idempotency.CodeStoreUnavailable, "fallback_used:"+idempotency.CodeFailOpen)
	})
}
