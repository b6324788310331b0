package watertightgrpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/contrib/watertightgrpc"
	"github.com/watertight-go/watertight/limit"
)

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

// With ServerConfig.Limit each method's limit is adaptive: unary calls are
// measured around the handler (an overloaded answer is a drop), and the
// limit the controller decides is the method's.
func TestServerAdaptiveLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &recordAlg{next: 1}
		icpt := serverInterceptor(t, watertightgrpc.ServerConfig{MaxConcurrent: 3, MaxQueue: -1,
			Limit: &limit.Config{WindowSamples: 3, MinWindow: -1, Algorithm: func() limit.Algorithm { return alg }}})
		slow := func(context.Context, any) (any, error) { time.Sleep(20 * time.Millisecond); return "ok", nil }
		overloaded := func(context.Context, any) (any, error) {
			return nil, watertight.Overloaded(errors.New("busy"))
		}
		_ = newRequest(context.Background(), methodCall).run(icpt, slow)
		_ = newRequest(context.Background(), methodCall).run(icpt, slow)
		_ = newRequest(context.Background(), methodCall).run(icpt, overloaded)
		if len(alg.seen) != 1 {
			t.Fatalf("windows %d, want 1", len(alg.seen))
		}
		if w := alg.seen[0]; w.Limit != 3 || w.Samples != 2 || w.Drops != 1 || w.MinLatency != 20*time.Millisecond {
			t.Fatalf("window %+v", w)
		}
		// The method's limit is now 1.
		b := newBlocker()
		done := make(chan error)
		go func() { done <- newRequest(context.Background(), methodCall).run(icpt, b.handler) }()
		<-b.entered
		r := newRequest(context.Background(), methodCall)
		err := r.run(icpt, b.handler)
		wantShed(t, r, err, codes.ResourceExhausted)
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestServerAdaptiveLimitBadConfig(t *testing.T) {
	_, err := watertightgrpc.UnaryServerInterceptor(watertightgrpc.ServerConfig{Limit: &limit.Config{MinLimit: 5, MaxLimit: 2}})
	if err == nil || !strings.Contains(err.Error(), "watertightgrpc: ServerConfig.Limit: limit: Config.MinLimit must be <= MaxLimit") {
		t.Fatalf("%v", err)
	}
}
