package watertighthttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

// A hedge's pick (a request whose context says which hosts its other
// attempts went to) stays in the tenant's shard, goes to the shard's host
// not in use when the balancer would rather pick the one in use, and leaves
// nothing counted in flight on the host it passed over.
func TestShardHedgePick(t *testing.T) {
	const n = 6
	var hits [n]atomic.Int64
	var addrs []string
	base := &http.Transport{}
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		addrs = append(addrs, u.Host)
	}
	t.Cleanup(base.CloseIdleConnections)
	bal, err := balance.New(balance.Config{Hosts: addrs, SlowFactor: -1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTransport(TransportConfig{Base: base, Balancer: bal, ShardKey: func(r *http.Request) string { return "acme" }, ShardSize: 2, MaxEndpoints: -1})
	if err != nil {
		t.Fatal(err)
	}
	shard := bal.Shard("acme", balance.ShardConfig{Size: 2})
	in := shard.Hosts()
	used, busy := in[0], in[1]
	// busy has calls in flight from other requests, so the balancer
	// prefers used, which an attempt of this request went to already.
	var held []*balance.Host
	for range 10 {
		held = append(held, bal.Next(func(h *balance.Host) bool { return h != busy }))
	}
	send := func(inUse ...*balance.Host) {
		t.Helper()
		ctx := &hostsInUse{Context: context.Background(), hosts: inUse}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://catalog.upstream/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for range 20 {
		send(used)
	}
	if got := hits[busy.Index()].Load(); got != 20 {
		t.Fatalf("20 hedges with %s in use: %d went to the shard's other host", used.Addr(), got)
	}
	if got := used.InFlight(); got != 0 {
		t.Fatalf("the host passed over has %d calls in flight, want 0", got)
	}
	// Both hosts of the shard in use: the hedge stays in the shard.
	for range 20 {
		send(used, busy)
	}
	if got := hits[used.Index()].Load() + hits[busy.Index()].Load(); got != 40 {
		t.Fatalf("hedges with the whole shard in use: %d of 40 stayed in it", got)
	}
	for _, h := range held {
		h.Done(watertight.Ignored, 0)
	}
	for _, s := range bal.Snapshot().Hosts {
		if s.InFlight != 0 {
			t.Fatalf("host %s: %d in flight after every answer was read", s.Addr, s.InFlight)
		}
	}
}
