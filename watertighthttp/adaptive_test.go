package watertighthttp

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight/limit"
)

// recordAlg is an Algorithm that records windows and answers next.
type recordAlg struct {
	mu   sync.Mutex
	next float64
	seen []limit.Window
}

func (a *recordAlg) Name() string { return "record" }
func (a *recordAlg) Update(w limit.Window) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, w)
	return a.next
}

// With HandlerConfig.Limit each route's limit is adaptive: the requests it
// admits are measured (a deadline that runs out inside the handler is a
// drop), and the limit the controller decides is the route's.
func TestHandlerAdaptiveLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &recordAlg{next: 2}
		var reasons []string
		var mu sync.Mutex
		hold := make(chan struct{})
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("do") {
			case "slow": // 30ms of work
				time.Sleep(30 * time.Millisecond)
			case "late": // runs past the request's deadline
				<-r.Context().Done()
			case "hold":
				<-hold
			}
		})
		wh, err := NewHandler(next, HandlerConfig{
			MaxConcurrent: 4, MaxQueue: -1,
			Limit: &limit.Config{WindowSamples: 3, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }},
			OnShed: func(_ *http.Request, reason error) {
				mu.Lock()
				reasons = append(reasons, reason.Error())
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		serveInBubble(wh, "/a?do=slow", nil)
		serveInBubble(wh, "/a?do=slow", nil)
		serveInBubble(wh, "/a?do=late", map[string]string{"Grpc-Timeout": "10m"})
		if len(alg.seen) != 1 {
			t.Fatalf("windows judged: %d, want 1", len(alg.seen))
		}
		if w := alg.seen[0]; w.Limit != 4 || w.Samples != 2 || w.Drops != 1 || w.MinLatency != 30*time.Millisecond {
			t.Fatalf("window %+v", w)
		}
		// The route's limit is now 2: two held requests fill it.
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); serveInBubble(wh, "/a?do=hold", nil) }()
		}
		synctest.Wait()
		if rec := serveInBubble(wh, "/a", nil); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "limit of 2 requests") {
			t.Fatalf("a third request at the adaptive limit of 2: %d %q", rec.Code, rec.Body.String())
		}
		close(hold)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(reasons) != 1 || !strings.Contains(reasons[0], "route") {
			t.Fatalf("shed reasons %v", reasons)
		}
	})
}

func TestHandlerAdaptiveLimitBadConfig(t *testing.T) {
	_, err := NewHandler(http.NotFoundHandler(), HandlerConfig{Limit: &limit.Config{MinLimit: 5, MaxLimit: 2}})
	if err == nil || !strings.Contains(err.Error(), "watertighthttp: HandlerConfig.Limit: limit: Config.MinLimit must be <= MaxLimit") {
		t.Fatalf("NewHandler: %v", err)
	}
}
