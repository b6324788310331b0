package watertighthttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// tenantOf is the tests' TransportConfig.ShardKey: the X-Tenant header.
func tenantOf(r *http.Request) string { return r.Header.Get("X-Tenant") }

// poisonPool is a pool of real servers on 127.0.0.1 where a request of
// the tenant "poison" kills the host it reaches: that request and every
// later one to the host, whoever sends it, get a 503. reached records
// which hosts each tenant's requests reached.
type poisonPool struct {
	*pool
	dead    []atomic.Bool
	mu      sync.Mutex
	reached map[string]map[int]int
}

func newPoisonPool(t *testing.T, n int) *poisonPool {
	p := &poisonPool{dead: make([]atomic.Bool, n), reached: map[string]map[int]int{}}
	p.pool = newPool(t, n, balance.Config{Name: "catalog"}, func(i int, w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant")
		p.mu.Lock()
		if p.reached[tenant] == nil {
			p.reached[tenant] = map[int]int{}
		}
		p.reached[tenant][i]++
		p.mu.Unlock()
		if tenant == "poison" {
			p.dead[i].Store(true)
		}
		if p.dead[i].Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	return p
}

// hostsReached returns the indexes of the hosts tenant's requests reached.
func (p *poisonPool) hostsReached(tenant string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var is []int
	for i := range p.reached[tenant] {
		is = append(is, i)
	}
	slices.Sort(is)
	return is
}

// deadHosts returns the indexes of the hosts a poison request killed.
func (p *poisonPool) deadHosts() []int {
	var is []int
	for i := range p.dead {
		if p.dead[i].Load() {
			is = append(is, i)
		}
	}
	return is
}

// shardIndexes returns the indexes of tenant's shard of size hosts.
func shardIndexes(b *balance.Balancer, tenant string, size int) []int {
	s := b.Shard(tenant, balance.ShardConfig{Size: size})
	var is []int
	for _, h := range s.Hosts() {
		is = append(is, h.Index())
	}
	return is
}

// getAs sends a GET for tenant through tr: the status, or the error.
func getAs(tr http.RoundTripper, tenant string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://catalog.upstream/items/1", nil)
	req.Header.Set("X-Tenant", tenant)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A tenant whose requests kill the hosts they reach (a poison tenant)
// reaches only the two hosts of its shard of eight: they die and are
// ejected, and its next request fails with balance.ErrShardDown, a
// rejection, without reaching any host. Of 60 other tenants, those whose
// shard is not all dead lose no request (a retry goes to the shard's other
// host, and ejection takes the dead one out); those whose shard is both
// dead hosts (1 in 28) lose every request. Without shards, the same poison
// requests kill hosts all over the pool.
func TestShardPoisonTenantReachesOnlyItsShard(t *testing.T) {
	const n, size = 8, 2
	p := newPoisonPool(t, n)
	tr := p.transport(t, watertighthttp.TransportConfig{
		ShardKey: tenantOf, ShardSize: size, MaxEndpoints: -1,
		Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond},
	})
	shard := shardIndexes(p.bal, "poison", size)
	down := false
	for i := 0; i < 20 && !down; i++ {
		code, err := getAs(tr, "poison")
		switch {
		case errors.Is(err, balance.ErrShardDown):
			if !watertight.IsRejection(err) {
				t.Fatalf("ErrShardDown is not a rejection: %v", err)
			}
			down = true
		case err != nil:
			t.Fatalf("poison request %d: %v", i, err)
		case code == http.StatusOK:
			t.Fatalf("poison request %d: 200 from a host it should have killed", i)
		}
	}
	if !down {
		t.Fatal("20 poison requests and its shard was never down")
	}
	if got := p.hostsReached("poison"); !slices.Equal(got, shard) {
		t.Fatalf("the poison tenant reached hosts %v; its shard is %v", got, shard)
	}
	if got := p.deadHosts(); !slices.Equal(got, shard) {
		t.Fatalf("dead hosts %v, want the poison tenant's shard %v", got, shard)
	}
	for _, i := range shard {
		if s := p.snapshot(i); !s.Ejected {
			t.Fatalf("host %d of the poison shard not ejected: %+v", i, s)
		}
	}
	hits := p.hits[shard[0]].Load() + p.hits[shard[1]].Load()
	if _, err := getAs(tr, "poison"); !errors.Is(err, balance.ErrShardDown) || p.hits[shard[0]].Load()+p.hits[shard[1]].Load() != hits {
		t.Fatalf("a poison request after its shard is down: %v, and it reached a host", err)
	}
	lost := 0
	for k := range 60 {
		tenant := fmt.Sprintf("tenant-%d", k)
		own := shardIndexes(p.bal, tenant, size)
		allDead := !slices.ContainsFunc(own, func(i int) bool { return !slices.Contains(shard, i) })
		if allDead {
			lost++
		}
		for range 5 {
			code, err := getAs(tr, tenant)
			if allDead && !errors.Is(err, balance.ErrShardDown) {
				t.Fatalf("%s, whose shard %v is the poison's: %d %v, want ErrShardDown", tenant, own, code, err)
			}
			if !allDead && (err != nil || code != http.StatusOK) {
				t.Fatalf("%s, shard %v, poison shard %v: %d %v", tenant, own, shard, code, err)
			}
		}
		for _, i := range p.hostsReached(tenant) {
			if !slices.Contains(own, i) {
				t.Fatalf("%s reached host %d outside its shard %v", tenant, i, own)
			}
		}
	}
	t.Logf("poison shard %v; %d of 60 tenants had the same shard (1 in 28 expected: 2.1)", shard, lost)
	for i, s := range p.bal.Snapshot().Hosts {
		if s.InFlight != 0 {
			t.Fatalf("host %d: %d in flight after every answer was read", i, s.InFlight)
		}
	}

	// The same poison requests without shards.
	whole := newPoisonPool(t, n)
	wtr := whole.transport(t, watertighthttp.TransportConfig{MaxEndpoints: -1, Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond}})
	for range 10 {
		getAs(wtr, "poison")
	}
	if dead := whole.deadHosts(); len(dead) <= size {
		t.Fatalf("without shards, 10 poison requests killed only %v", dead)
	} else {
		t.Logf("without shards, 10 poison requests killed hosts %v", dead)
	}
}

// With ShardSpill, a tenant whose shard is all ejected goes on to the rest
// of the pool: the isolation is traded for availability, and a poison
// tenant's requests reach hosts outside its shard.
func TestShardSpill(t *testing.T) {
	const n, size = 8, 2
	p := newPoisonPool(t, n)
	tr := p.transport(t, watertighthttp.TransportConfig{
		ShardKey: tenantOf, ShardSize: size, ShardSpill: true, MaxEndpoints: -1,
		Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond},
	})
	shard := shardIndexes(p.bal, "poison", size)
	for i := range 15 {
		if _, err := getAs(tr, "poison"); err != nil {
			t.Fatalf("poison request %d, spilling: %v", i, err)
		}
	}
	outside := slices.DeleteFunc(p.hostsReached("poison"), func(i int) bool { return slices.Contains(shard, i) })
	if len(outside) == 0 {
		t.Fatalf("spilling, the poison tenant reached only its shard %v", shard)
	}
	for _, i := range shard {
		if !p.snapshot(i).Ejected {
			t.Fatalf("host %d of the shard not ejected before the spill", i)
		}
	}
	t.Logf("spilling, the poison tenant of shard %v reached %v outside it", shard, outside)
}

// Within a shard, a retry avoids the host of the failed attempt: with one
// host of a tenant's shard failing every request (ejection off), every GET
// succeeds on its second attempt at most, and no request leaves the shard
// of DefaultShardSize (ShardSize zero) hosts.
func TestShardRetriesAvoidTheLastHost(t *testing.T) {
	const n = 8
	var failing atomic.Int64
	failing.Store(-1)
	p := newPool(t, n, balance.Config{ConsecutiveErrors: -1}, func(i int, w http.ResponseWriter, r *http.Request) {
		if int64(i) == failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	tr := p.transport(t, watertighthttp.TransportConfig{
		ShardKey: tenantOf, MaxEndpoints: -1,
		Retry: retry.Config{MaxAttempts: 2, MaxDelay: time.Microsecond},
	})
	shard := shardIndexes(p.bal, "acme", watertighthttp.DefaultShardSize)
	failing.Store(int64(shard[0]))
	for i := range 100 {
		if code, err := getAs(tr, "acme"); err != nil || code != http.StatusOK {
			t.Fatalf("GET %d: %d %v (the retry went to the failing host again?)", i, code, err)
		}
	}
	for i := range n {
		if got := p.hits[i].Load(); got > 0 && !slices.Contains(shard, i) {
			t.Fatalf("host %d outside the shard %v got %d requests", i, shard, got)
		}
	}
	if got := p.hits[shard[0]].Load(); got < 10 {
		t.Fatalf("the failing host got %d of 100 first attempts: the retries were not tested", got)
	}
}

// A host of the shard whose breaker is open is passed over for the other;
// when both are open, the request fails with the breaker's rejection, or
// with ShardSpill goes to the rest of the pool.
func TestShardPassesOverOpenBreakers(t *testing.T) {
	const n, size = 6, 2
	p := newPool(t, n, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	breakers, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := watertighthttp.TransportConfig{ShardKey: tenantOf, ShardSize: size, Breakers: breakers, MaxEndpoints: -1}
	tr := p.transport(t, cfg)
	cfg.ShardSpill = true
	spill := p.transport(t, cfg)
	shard := shardIndexes(p.bal, "acme", size)
	open := func(i int) {
		b, err := breakers.Get(p.hosts[i])
		if err != nil {
			t.Fatal(err)
		}
		b.ForceOpen()
	}
	open(shard[0])
	for i := range 50 {
		if code, err := getAs(tr, "acme"); err != nil || code != http.StatusOK {
			t.Fatalf("GET %d with one breaker of the shard open: %d %v", i, code, err)
		}
	}
	if got := p.hits[shard[1]].Load(); got != 50 {
		t.Fatalf("the shard's closed host got %d of 50", got)
	}
	open(shard[1])
	if _, err := getAs(tr, "acme"); !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("both breakers of the shard open: %v, want circuit.ErrOpen", err)
	}
	for i := range 20 {
		if code, err := getAs(spill, "acme"); err != nil || code != http.StatusOK {
			t.Fatalf("spilling GET %d: %d %v", i, code, err)
		}
	}
	outside := int64(0)
	for i := range n {
		if !slices.Contains(shard, i) {
			outside += p.hits[i].Load()
		}
	}
	if outside != 20 {
		t.Fatalf("spilling: %d of 20 requests went outside the shard", outside)
	}
	if s := p.bal.Snapshot(); s.Ejected != 0 {
		t.Fatalf("refusals ejected hosts: %+v", s)
	}
}

// The empty key is the whole pool: a request without the tenant header
// may reach any host.
func TestShardEmptyKeyIsTheWholePool(t *testing.T) {
	p := newPool(t, 4, balance.Config{}, func(i int, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := p.transport(t, watertighthttp.TransportConfig{ShardKey: tenantOf, ShardSize: 1, MaxEndpoints: -1})
	for range 200 {
		if code, err := getAs(tr, ""); err != nil || code != http.StatusOK {
			t.Fatalf("%d %v", code, err)
		}
	}
	for i := range 4 {
		if p.hits[i].Load() == 0 {
			t.Fatalf("host %d got none of 200 requests without a tenant: %v", i, p.hits)
		}
	}
}

func TestShardConfigErrors(t *testing.T) {
	bal, err := balance.New(balance.Config{Hosts: []string{"a:80", "b:80", "c:80"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  watertighthttp.TransportConfig
		want string
	}{
		{"key without balancer", watertighthttp.TransportConfig{ShardKey: tenantOf}, "ShardKey needs a Balancer"},
		{"size without key", watertighthttp.TransportConfig{Balancer: bal, ShardSize: 2}, "ShardSize (2) needs ShardKey"},
		{"spill without key", watertighthttp.TransportConfig{Balancer: bal, ShardSpill: true}, "ShardSpill needs ShardKey"},
		{"negative size", watertighthttp.TransportConfig{Balancer: bal, ShardKey: tenantOf, ShardSize: -1}, "ShardSize must be from 1 to 32 hosts (balance.MaxShardSize), or 0 for 2, got -1"},
		{"size too large", watertighthttp.TransportConfig{Balancer: bal, ShardKey: tenantOf, ShardSize: 33}, "got 33"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := watertighthttp.NewTransport(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewTransport = %v, want an error saying %q", err, c.want)
			}
		})
	}
	// The pool's size or more is the whole pool: valid.
	if _, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Balancer: bal, ShardKey: tenantOf, ShardSize: 32}); err != nil {
		t.Fatal(err)
	}
}
