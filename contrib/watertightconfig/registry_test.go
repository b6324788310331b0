package watertightconfig

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

const regV1 = `
breakers:
  payment: {min_calls: 5, window_size: 10}
  catalog: {}
bulkheads:
  payment: {max_concurrent: 2}
retries:
  payment: {max_attempts: 2, budget: shared}
  catalog: {idempotent: true}
budgets:
  shared: {ratio: 20%}
timeouts:
  payment: {timeout: 2s}
`

func newReg(t *testing.T, src string, opts Options) *Registry {
	t.Helper()
	r, err := NewRegistry(mustParse(t, src), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryLookups(t *testing.T) {
	r := newReg(t, regV1, Options{})
	b, err := r.Breaker("payment")
	if err != nil || b.Name() != "payment" {
		t.Fatalf("Breaker: %v, %v", b, err)
	}
	if k, err := r.Bulkhead("payment"); err != nil || k.Snapshot().MaxConcurrent != 2 {
		t.Errorf("Bulkhead: %+v, %v", k, err)
	}
	if p, err := r.Retry("payment"); err != nil || p == nil {
		t.Errorf("Retry: %v", err)
	}
	bud, err := r.Budget("shared")
	if err != nil || bud.Config().Ratio != 0.2 || bud.Config().Name != "shared" {
		t.Errorf("Budget: %+v, %v", bud.Config(), err)
	}
	rc, err := r.RetryConfig("payment")
	if err != nil || rc.Budget != bud || rc.MaxAttempts != 2 || rc.Backoff == nil || rc.Name != "payment" {
		t.Errorf("RetryConfig: %+v, %v", rc, err)
	}
	if rc, _ := r.RetryConfig("catalog"); rc.Budget != nil || !rc.Idempotent {
		t.Errorf("catalog RetryConfig %+v", rc)
	}
	if to, err := r.Timeout("payment"); err != nil || to.Duration() != 2*time.Second {
		t.Errorf("Timeout: %v", err)
	}
	if r.File().Breakers["payment"].Config.MinCalls != 5 {
		t.Error("File")
	}

	for _, tc := range []struct {
		err  error
		want string
	}{
		{second(r.Breaker("nope")), `config: no such instance: no breaker named "nope" (have: catalog, payment)`},
		{second(r.Bulkhead("nope")), `config: no such instance: no bulkhead named "nope" (have: payment)`},
		{second(r.Retry("nope")), `config: no such instance: no retry policy named "nope" (have: catalog, payment)`},
		{second(r.RetryConfig("nope")), `config: no such instance: no retry policy named "nope" (have: catalog, payment)`},
		{second(r.Budget("nope")), `config: no such instance: no budget named "nope" (have: shared)`},
		{second(r.Timeout("nope")), `config: no such instance: no timeout named "nope" (have: payment)`},
		{second(r.CircuitRegistry("nope")), `config: no such instance: no breaker named "nope" (have: catalog, payment)`},
		{second(r.BulkheadRegistry("nope")), `config: no such instance: no bulkhead named "nope" (have: payment)`},
	} {
		if !errors.Is(tc.err, ErrNotFound) || tc.err.Error() != tc.want {
			t.Errorf("got %v, want %s", tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestRegistryOptions(t *testing.T) {
	var events []watertight.Event
	var mu sync.Mutex
	var hooked []string
	r := newReg(t, regV1, Options{
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}),
		Breaker: func(name string, c *circuit.Config) {
			hooked = append(hooked, "breaker "+name)
			if c.Listener == nil {
				t.Error("Listener not set before the hook")
			}
		},
		Retry: func(name string, c *retry.Config) {
			hooked = append(hooked, "retry "+name)
			if c.Backoff == nil {
				t.Error("Backoff not set before the hook")
			}
		},
	})
	slices.Sort(hooked)
	if want := []string{"breaker catalog", "breaker payment", "retry catalog", "retry payment"}; !slices.Equal(hooked, want) {
		t.Errorf("hooks %q", hooked)
	}
	b, _ := r.Breaker("payment")
	b.ForceOpen()
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0].Kind != watertight.EventStateChange || events[0].Name != "payment" {
		t.Errorf("events %+v", events)
	}
}

// Reload keeps unchanged instances — the same objects, with their state —
// rebuilds changed ones and drops removed ones.
func TestReload(t *testing.T) {
	r := newReg(t, regV1, Options{})
	payment, _ := r.Breaker("payment")
	catalog, _ := r.Breaker("catalog")
	payment.ForceOpen()
	catalog.ForceOpen()
	keyed, _ := r.CircuitRegistry("payment")
	hostBreaker, _ := keyed.Get("host-a")
	hostBreaker.ForceOpen()
	bud, _ := r.Budget("shared")
	pRetry, _ := r.Retry("payment")
	cRetry, _ := r.Retry("catalog")

	v2 := strings.NewReplacer(
		"catalog: {}\n", "catalog: {min_calls: 7}\n", // changed
		"  payment: {max_concurrent: 2}\n", "  payment: {max_concurrent: 2}\n  search: {}\n", // added
		"timeouts:\n  payment: {timeout: 2s}\n", "", // removed
		"budgets:\n  shared: {ratio: 20%}", "budgets:\n  shared: {ratio: 20%, max_tokens: 5}", // changed: the retry using it is rebuilt
	).Replace(regV1)
	ch, err := r.Reload(mustParse(t, v2))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bulkheads.search"}; !slices.Equal(ch.Added, want) {
		t.Errorf("Added %q", ch.Added)
	}
	if want := []string{"breakers.catalog", "budgets.shared", "retries.payment"}; !slices.Equal(ch.Changed, want) {
		t.Errorf("Changed %q", ch.Changed)
	}
	if want := []string{"budgets.shared", "retries.payment"}; !slices.Equal(ch.Rebuilt, want) {
		t.Errorf("Rebuilt %q, want the budget and the retry on it; the breaker is reconfigured in place", ch.Rebuilt)
	}
	if want := []string{"timeouts.payment"}; !slices.Equal(ch.Removed, want) {
		t.Errorf("Removed %q", ch.Removed)
	}
	if want := []string{"breakers.payment", "bulkheads.payment", "retries.catalog"}; !slices.Equal(ch.Kept, want) {
		t.Errorf("Kept %q", ch.Kept)
	}
	if got, want := ch.String(), "added bulkheads.search; changed breakers.catalog, budgets.shared, retries.payment; removed timeouts.payment; 3 unchanged"; got != want {
		t.Errorf("String %q", got)
	}

	if b, _ := r.Breaker("payment"); b != payment || b.State() != circuit.ForcedOpen {
		t.Errorf("unchanged breaker: %p (was %p), %v", b, payment, b.State())
	}
	if k, _ := r.CircuitRegistry("payment"); k != keyed {
		t.Error("unchanged breaker's keyed registry rebuilt")
	} else if hb, _ := k.Get("host-a"); hb != hostBreaker || hb.State() != circuit.ForcedOpen {
		t.Error("keyed breaker lost its state")
	}
	if b, _ := r.Breaker("catalog"); b != catalog || b.State() != circuit.ForcedOpen || r.File().Breakers["catalog"].Config.MinCalls != 7 {
		t.Errorf("changed breaker: %p (was %p), %v; want the same breaker, still forced open", b, catalog, b.State())
	}
	if b, _ := r.Budget("shared"); b == bud || b.Config().MaxTokens != 5 {
		t.Error("changed budget not rebuilt")
	}
	rc, _ := r.RetryConfig("payment")
	if p, _ := r.Retry("payment"); p == pRetry || rc.Budget == bud {
		t.Error("retry on a rebuilt budget not rebuilt")
	}
	if p, _ := r.Retry("catalog"); p != cRetry {
		t.Error("unchanged retry rebuilt")
	}
	if _, err := r.Timeout("payment"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed timeout: %v", err)
	}
	if _, err := r.Bulkhead("search"); err != nil {
		t.Error(err)
	}

	// Reloading the same file changes nothing.
	ch, err = r.Reload(mustParse(t, v2))
	if err != nil || len(ch.Added)+len(ch.Changed)+len(ch.Removed) != 0 || len(ch.Kept) != 7 {
		t.Errorf("same file: %v, %v", ch, err)
	}
	// A change to a field without effect is no change.
	ch, err = r.Reload(mustParse(t, strings.Replace(v2, "catalog: {min_calls: 7}", "catalog: {min_calls: 7}\n  timed: {window_type: time}", 1)))
	if err != nil || !slices.Equal(ch.Added, []string{"breakers.timed"}) {
		t.Fatalf("%v, %v", ch, err)
	}
	timed, _ := r.Breaker("timed")
	ch, err = r.Reload(mustParse(t, strings.Replace(v2, "catalog: {min_calls: 7}", "catalog: {min_calls: 7}\n  timed: {window_type: time}\ndefaults:\n  breakers: {window_size: 77}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{"breakers.catalog"}) || !slices.Contains(ch.Kept, "breakers.timed") {
		t.Errorf("window_size in the defaults: %v", ch)
	}
	if b, _ := r.Breaker("timed"); b != timed {
		t.Error("a time-window breaker rebuilt for a change of window_size")
	}
}

// An invalid file is refused whole: the old configuration and its objects
// stay.
func TestReloadFromInvalidKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(regV1)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := r.Breaker("catalog")

	// catalog changes (valid), payment's bulkhead breaks: nothing applies.
	write(strings.Replace(strings.Replace(regV1, "catalog: {}", "catalog: {min_calls: 3}", 1), "max_concurrent: 2", "max_concurrent: -2", 1))
	ch, err := r.ReloadFrom(path)
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(err.Error(), "c.yaml:6: bulkheads.payment.max_concurrent: must be > 0, got -2") {
		t.Fatalf("got %v", err)
	}
	if len(ch.Kept)+len(ch.Changed) != 0 {
		t.Errorf("changes %v", ch)
	}
	if r.File() != f {
		t.Error("File replaced")
	}
	if b, _ := r.Breaker("catalog"); b != before || r.File().Breakers["catalog"].Config.MinCalls != circuit.DefaultMinCalls {
		t.Error("catalog changed")
	}
	if _, err := r.ReloadFrom(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}

	// A File the packages refuse (made by hand) is refused whole too.
	bad := *f
	x := f.Bulkheads["payment"]
	x.Config.MaxConcurrent = -1
	bad.Bulkheads = map[string]Bulkhead{"x": x}
	if _, err := r.Reload(&bad); err == nil || !strings.Contains(err.Error(), "bulkheads.x") {
		t.Errorf("hand-made bad file: %v", err)
	}
	if r.File() != f {
		t.Error("File replaced by a refused one")
	}
}

// Readers never wait for, nor see half of, a reload.
func TestReloadConcurrentReaders(t *testing.T) {
	a := mustParse(t, regV1)
	b := mustParse(t, strings.Replace(regV1, "catalog: {}", "catalog: {min_calls: 9}", 1))
	r, err := NewRegistry(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, n := range []string{"payment", "catalog"} {
					br, err := r.Breaker(n)
					if err != nil || br == nil {
						t.Errorf("Breaker(%s): %v", n, err)
						return
					}
					p, err := br.Allow()
					if err == nil {
						p.Done(watertight.Success)
					}
				}
				if _, err := r.RetryConfig("payment"); err != nil {
					t.Error(err)
					return
				}
				if k, err := r.CircuitRegistry("catalog"); err != nil || k == nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var rw sync.WaitGroup
	for i := range 2 {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for j := range 100 {
				f := a
				if (i+j)%2 == 1 {
					f = b
				}
				if _, err := r.Reload(f); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	rw.Wait()
	stop.Store(true)
	wg.Wait()
	if _, err := r.Breaker("payment"); err != nil {
		t.Error(err)
	}
}

// TransportConfig wires named instances into the HTTP client Transport:
// the retry policy's attempts and the breaker's thresholds apply.
func TestTransportConfig(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	r := newReg(t, `
breakers:
  upstream: {window_size: 4, min_calls: 4, failure_rate_threshold: 50%, open_duration: 1h}
bulkheads:
  upstream: {max_concurrent: 3}
retries:
  upstream:
    max_attempts: 2
    backoff: {jitter: constant, base: 1ms}
`, Options{})
	tc, err := r.TransportConfig(TransportNames{Breaker: "upstream", Bulkhead: "upstream", Retry: "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	if tc.Retry.MaxAttempts != 2 || tc.Breakers == nil || tc.Bulkheads == nil {
		t.Fatalf("%+v", tc)
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tc.Base = base
	tr, err := watertighthttp.NewTransport(tc)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	get := func() (*http.Response, error) {
		resp, err := client.Get(srv.URL)
		if resp != nil {
			resp.Body.Close()
		}
		return resp, err
	}
	// Two calls of two attempts: four failures open the breaker.
	for range 2 {
		if resp, err := get(); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%v, %v", resp, err)
		}
	}
	if hits.Load() != 4 {
		t.Errorf("%d attempts, want 4 (2 calls × max_attempts 2)", hits.Load())
	}
	if _, err := get(); !errors.Is(err, circuit.ErrOpen) {
		t.Errorf("third call: %v, want the breaker open", err)
	}
	keyed, _ := r.CircuitRegistry("upstream")
	// The host's breaker (which counts failures to connect) and the
	// endpoint's, which the 503s opened.
	if s := keyed.Snapshots(); len(s) != 2 || s[1].State != circuit.Open {
		t.Errorf("snapshots %+v", s)
	}

	// No names: no breaker, no bulkhead, no retries.
	tc, err = r.TransportConfig(TransportNames{})
	if err != nil || tc.Breakers != nil || tc.Bulkheads != nil || tc.Retry.MaxAttempts != 1 {
		t.Errorf("%+v, %v", tc, err)
	}
	for _, n := range []TransportNames{{Breaker: "x"}, {Bulkhead: "x"}, {Retry: "x"}} {
		if _, err := r.TransportConfig(n); !errors.Is(err, ErrNotFound) {
			t.Errorf("%+v: %v", n, err)
		}
	}
}

func TestWatchChannel(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(regV1), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(mustParse(t, regV1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sig := make(chan os.Signal)
	got := make(chan error)
	cleaned := false
	ctx, cancel := context.WithCancel(context.Background())
	stop := watch(ctx, r, path, func(_ Changes, err error) { got <- err }, sig, func() { cleaned = true })
	sig <- syscall.SIGHUP
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("breakers: {a: {min_calls: -1}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sig <- syscall.SIGHUP
	if err := <-got; err == nil || !strings.Contains(err.Error(), "min_calls") {
		t.Errorf("invalid file: %v", err)
	}
	if _, err := r.Breaker("payment"); err != nil {
		t.Error("old configuration lost")
	}
	cancel() // ctx ends the watch; stop still waits for it
	stop()
	stop()
	if !cleaned {
		t.Error("cleanup not run")
	}
}

// A real SIGHUP reloads.
func TestWatchSIGHUP(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(regV1), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(mustParse(t, regV1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(regV1, "catalog: {}", "catalog: {min_calls: 4}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ch  Changes
		err error
	}
	got := make(chan result, 1)
	stop := WatchSIGHUP(context.Background(), r, path, func(ch Changes, err error) { got <- result{ch, err} })
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Skip("cannot signal self:", err)
	}
	res := <-got
	if res.err != nil || !slices.Equal(res.ch.Changed, []string{"breakers.catalog"}) {
		t.Errorf("%v, %v", res.ch, res.err)
	}
	if r.File().Breakers["catalog"].Config.MinCalls != 4 {
		t.Error("not reloaded")
	}
}

// A hedging policy takes the budget, breaker and bulkhead it names, and is
// rebuilt when one of them is.
func TestHedge(t *testing.T) {
	src := `
breakers: {reads: {}, other: {}}
bulkheads: {reads: {max_concurrent: 4}}
budgets: {hedging: {ratio: 5%}}
hedges:
  reads: {percentile: 90%, budget: hedging, breaker: reads, bulkhead: reads, idempotent: true}
  fixed: {percentile: off, delay: 50ms, max_hedges: 2}
`
	var hooked []string
	r := newReg(t, src, Options{Hedge: func(name string, c *hedge.Config) {
		hooked = append(hooked, name)
		if name == "reads" && (c.Budget == nil || c.Breaker == nil || c.Bulkhead == nil) {
			t.Errorf("hook before the references are set: %+v", c)
		}
	}})
	slices.Sort(hooked)
	if !slices.Equal(hooked, []string{"fixed", "reads"}) {
		t.Errorf("hooked %q", hooked)
	}
	reads, err := r.Hedge("reads")
	if err != nil {
		t.Fatal(err)
	}
	c := reads.Config()
	br, _ := r.Breaker("reads")
	bh, _ := r.Bulkhead("reads")
	bud, _ := r.Budget("hedging")
	if c.Breaker != br || c.Bulkhead != bh || c.Budget != bud || c.Percentile != 0.9 || !c.Idempotent || c.Name != "reads" {
		t.Errorf("reads %+v", c)
	}
	fixed, _ := r.Hedge("fixed")
	if c := fixed.Config(); c.Delay != 50*time.Millisecond || c.Percentile != 0 || c.MaxHedges != 2 {
		t.Errorf("fixed %+v", c)
	}
	if _, err := r.Hedge("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `no hedging policy named "nope" (have: fixed, reads)`) {
		t.Errorf("%v", err)
	}

	// The breaker it names changes: it is reconfigured in place, so the
	// policy keeps it and is not rebuilt.
	ch, err := r.Reload(mustParse(t, strings.Replace(src, "reads: {}", "reads: {min_calls: 3}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{"breakers.reads"}) || len(ch.Rebuilt) != 0 {
		t.Errorf("changed %q, rebuilt %q", ch.Changed, ch.Rebuilt)
	}
	nreads, _ := r.Hedge("reads")
	nbr, _ := r.Breaker("reads")
	if nreads != reads || nreads.Config().Breaker != nbr || nbr != br {
		t.Error("hedge or breaker rebuilt for a breaker reconfigured in place")
	}
	// The budget it names changes: the budget is rebuilt, and the policy
	// on it.
	ch, err = r.Reload(mustParse(t, strings.Replace(strings.Replace(src, "reads: {}", "reads: {min_calls: 3}", 1), "ratio: 5%", "ratio: 6%", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Rebuilt, []string{"budgets.hedging", "hedges.reads"}) {
		t.Errorf("rebuilt %q", ch.Rebuilt)
	}
	nreads, _ = r.Hedge("reads")
	nbud, _ := r.Budget("hedging")
	if nreads == reads || nreads.Config().Budget != nbud || nbud == bud {
		t.Error("hedge not rebuilt on the new budget")
	}
	src = strings.Replace(src, "ratio: 5%", "ratio: 6%", 1)
	if f, _ := r.Hedge("fixed"); f != fixed {
		t.Error("unchanged hedge rebuilt")
	}
	// Another breaker changes: the policy stays.
	ch, _ = r.Reload(mustParse(t, strings.Replace(strings.Replace(src, "reads: {}", "reads: {min_calls: 3}", 1), "other: {}", "other: {min_calls: 4}", 1)))
	if h, _ := r.Hedge("reads"); h != nreads || !slices.Equal(ch.Changed, []string{"breakers.other"}) {
		t.Errorf("changes %v", ch)
	}
}

func TestNilFile(t *testing.T) {
	if _, err := NewRegistry(nil, Options{}); err == nil {
		t.Error("NewRegistry(nil) accepted")
	}
	r := newReg(t, regV1, Options{})
	if _, err := r.Reload(nil); err == nil {
		t.Error("Reload(nil) accepted")
	}
	if _, err := r.Breaker("payment"); err != nil {
		t.Error(err)
	}
}
