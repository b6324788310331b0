package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCatalog(t *testing.T) {
	rec := httptest.NewRecorder()
	catalog("catalog-1").ServeHTTP(rec, httptest.NewRequest("GET", "/catalog/items/1", nil))
	if got := rec.Body.String(); !strings.Contains(got, `"served_by": "catalog-1"`) || !strings.Contains(got, `"/catalog/items/1"`) {
		t.Fatalf("catalog: %q", got)
	}
}

func TestRecommendationsStall(t *testing.T) {
	rec := httptest.NewRecorder()
	recommendations(func() bool { return false }).ServeHTTP(rec, httptest.NewRequest("GET", "/recommendations", nil))
	if !strings.Contains(rec.Body.String(), `"items"`) {
		t.Fatalf("healthy: %q", rec.Body.String())
	}
	// Stalled: nothing until the caller gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	rec = httptest.NewRecorder()
	recommendations(func() bool { return true }).ServeHTTP(rec, httptest.NewRequest("GET", "/recommendations", nil).WithContext(ctx))
	if b, _ := io.ReadAll(rec.Body); len(b) != 0 || rec.Code != http.StatusOK {
		t.Fatalf("stalled: %d %q", rec.Code, b)
	}
}
