package dashboard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func field(r row, k string) string {
	for i := 0; i+1 < len(r.Fields); i += 2 {
		if r.Fields[i] == k {
			return r.Fields[i+1]
		}
	}
	return "<none>"
}

func rowByID(t *testing.T, f *frame, id string) row {
	t.Helper()
	for _, r := range f.Rows {
		if r.ID == id {
			return r
		}
	}
	var ids []string
	for _, r := range f.Rows {
		ids = append(ids, r.ID)
	}
	t.Fatalf("no row %q in %v", id, ids)
	return row{}
}

// One protection of every kind, in known states: each row says what the
// page must show of it.
func TestRowsOfEveryKind(t *testing.T) {
	set := new(watch.Set)
	d := must(New(Config{Sources: set}))
	defer d.Close()

	br := must(circuit.New(circuit.Config{Name: "payments", Listener: d}))
	reg := must(circuit.NewRegistry(circuit.RegistryConfig{Config: circuit.Config{Name: "hosts", Listener: d}}))
	hostA := must(reg.Get("a:80"))
	must(reg.Get("b:80"))
	bh := must(bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 2}))
	pool := must(bulkhead.NewPool(bulkhead.PoolConfig{Name: "mail", Workers: 1, QueueSize: 4}))
	bud := must(budget.New(budget.Config{MaxTokens: 1}))
	thr := must(budget.NewThrottler(budget.ThrottleConfig{}))
	con := must(budget.NewConcurrency(budget.ConcurrencyConfig{}))
	hp := must(hedge.New(hedge.Config{Name: "lookup", Delay: time.Millisecond}))
	lim := must(limit.New(limit.Config{Name: "api"}))
	bal := must(balance.New(balance.Config{Name: "backends", Hosts: []string{"a:1", "b:1", "c:1"}}))
	set.AddBreaker(br)
	set.AddBreakerRegistry("hosts", reg)
	set.AddBulkhead(bh)
	set.AddPool(pool)
	set.AddBudget("retries", bud)
	set.AddThrottler("throttle", thr)
	set.AddConcurrency("retry-slots", con)
	set.AddHedge(hp)
	set.AddLimiter(lim)
	set.AddBalancer(bal)

	s := newSampler(d)
	t0 := time.Now()
	s.sample(t0, 0)

	// Now change them.
	br.ForceOpen()
	hostA.ForceOpen()
	if err := bh.AcquireN(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	defer bh.ReleaseN(2)
	if bh.TryAcquire() {
		t.Fatal("TryAcquire on a full bulkhead succeeded")
	}
	block := make(chan struct{})
	started := make(chan struct{})
	if err := pool.Submit(context.Background(), func(context.Context) { close(started); <-block }); err != nil {
		t.Fatal(err)
	}
	<-started
	defer func() { close(block); pool.Shutdown(context.Background()) }()
	for bud.Withdraw() {
	}
	for _, h := range bal.Hosts() {
		if h.Addr() == "a:1" {
			for range 5 {
				h.Done(watertight.Failure, time.Millisecond)
			}
		}
	}

	f := s.sample(t0.Add(time.Second), 0)

	r := rowByID(t, f, "circuit/payments/")
	if r.State != "forced-open" || r.Level != "bad" || r.Code != circuit.CodeManual || r.Max != 100 {
		t.Errorf("breaker: %+v, want forced-open, bad, code %q", r, circuit.CodeManual)
	}
	if ra := rowByID(t, f, "circuit/hosts/a:80"); ra.State != "forced-open" || ra.Code != circuit.CodeManual || ra.Name != "a:80" || ra.Group != "hosts" {
		t.Errorf("registry breaker a:80: %+v, want forced-open with its registry's event code", ra)
	}
	if rb := rowByID(t, f, "circuit/hosts/b:80"); rb.State != "closed" || rb.Level != "ok" || rb.Code != "" {
		t.Errorf("registry breaker b:80: %+v, want closed", rb)
	}

	r = rowByID(t, f, "bulkhead/search/")
	if field(r, "in_use") != "2" || field(r, "max") != "2" || field(r, "rejected_s") != "1.0" || r.State != "rejecting" || r.Level != "bad" {
		t.Errorf("bulkhead: %+v, want 2 in use of 2, 1.0 rejected/s, rejecting", r)
	}
	if r.Values != [2]float64{2, 0} || r.Max != 2 {
		t.Errorf("bulkhead chart: %v max %v, want [2 0] max 2", r.Values, r.Max)
	}

	r = rowByID(t, f, "pool/mail/")
	if field(r, "busy") != "1" || field(r, "workers") != "1" || field(r, "queue") != "4" || r.State != "busy" {
		t.Errorf("pool: %+v, want 1 busy of 1, queue 4", r)
	}

	r = rowByID(t, f, "budget/retries/")
	if field(r, "refused") != "1" || r.State != "refusing" || r.Level != "bad" {
		t.Errorf("budget: %+v, want 1 refused, refusing", r)
	}

	r = rowByID(t, f, "balancer/backends/")
	if field(r, "hosts") != "3" || field(r, "ejected") != "1" || r.State != "ejecting" || r.Level != "warn" ||
		!strings.Contains(field(r, "ejected_hosts"), "a:1 ("+balance.ReasonConsecutiveErrors+")") {
		t.Errorf("balancer: %+v, want 1 of 3 ejected: a:1 (consecutive_errors)", r)
	}

	for id, want := range map[string]string{
		"throttler/throttle/": "ok", "concurrency/retry-slots/": "ok", "hedge/lookup/": "on", "limiter/api/": "idle",
	} {
		if r := rowByID(t, f, id); r.State != want || r.Level != "ok" {
			t.Errorf("%s: state %q level %q, want %q, ok", id, r.State, r.Level, want)
		}
	}
	if r := rowByID(t, f, "limiter/api/"); field(r, "limit") == "<none>" || field(r, "in_flight") != "0" {
		t.Errorf("limiter: %+v, want its limit and 0 in flight", r)
	}

	// Rows are by kind, in the order of watch's kinds, then by name.
	var kinds []string
	for _, r := range f.Rows {
		if len(kinds) == 0 || kinds[len(kinds)-1] != r.Kind {
			kinds = append(kinds, r.Kind)
		}
	}
	if got := strings.Join(kinds, " "); got != "circuit bulkhead pool budget throttler concurrency hedge limiter balancer" {
		t.Errorf("kinds in order %q", got)
	}
}

// A partitioned bulkhead shows one row per partition, in the bulkhead's
// group with the partition's name (as a registry's key): in use against its
// guarantee, what it borrows, its queue and its rejections, and a state
// word that says when it borrows, is full or refuses.
func TestPartitionedRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set := new(watch.Set)
		d := must(New(Config{Sources: set}))
		defer d.Close()
		p := must(bulkhead.NewPartitioned(bulkhead.PartitionedConfig{
			Name:          "api",
			MaxConcurrent: 4,
			Partitions:    []bulkhead.PartitionConfig{{Name: "paid", Weight: 3}, {Name: "free", Weight: 1}},
			Default:       "free",
			Reserve:       -1, // lend every free permit
			MaxWait:       -1, // wait until the caller's context ends
		}))
		set.AddPartitioned(p)
		free, paid := p.Index("free"), p.Index("paid")
		ctx := context.Background()

		s := newSampler(d)
		t0 := time.Now()
		f := s.sample(t0, 0)
		for _, id := range []string{"bulkhead/api/free", "bulkhead/api/paid"} {
			if r := rowByID(t, f, id); r.State != "idle" || r.Level != "ok" || r.Kind != "bulkhead" || r.Group != "api" {
				t.Errorf("%s at first: %+v, want idle, ok, kind bulkhead, group api", id, r)
			}
		}
		// Rows by name within the group, whatever the partitions' order.
		if len(f.Rows) != 2 || f.Rows[0].Name != "free" || f.Rows[1].Name != "paid" {
			t.Fatalf("rows %+v, want free then paid", f.Rows)
		}

		// free takes its guarantee (1) and borrows two of paid's.
		for range 3 {
			if err := p.Acquire(ctx, free); err != nil {
				t.Fatal(err)
			}
		}
		f = s.sample(t0.Add(time.Second), 0)
		r := rowByID(t, f, "bulkhead/api/free")
		if r.State != "borrowing" || r.Level != "ok" || field(r, "in_use") != "3" || field(r, "guaranteed") != "1" ||
			field(r, "borrowed") != "2" || field(r, "waiting") != "0" || field(r, "admitted_s") != "3.0" {
			t.Errorf("free borrowing: %+v, want borrowing, 3 in use of 1 guaranteed, 2 borrowed, 3.0 admitted/s", r)
		}
		if r.Values != [2]float64{3, 0} || r.Max != 1 {
			t.Errorf("free chart: %v max %v, want [3 0] max 1 (its guarantee)", r.Values, r.Max)
		}
		if r := rowByID(t, f, "bulkhead/api/paid"); r.State != "idle" || field(r, "guaranteed") != "3" || field(r, "in_use") != "0" {
			t.Errorf("paid: %+v, want idle, 0 in use of 3 guaranteed", r)
		}

		// paid takes the last permit and is refused the next; a call of free
		// queues.
		if err := p.Acquire(ctx, paid); err != nil {
			t.Fatal(err)
		}
		if p.TryAcquire(paid) {
			t.Fatal("TryAcquire with every permit held succeeded")
		}
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- p.Acquire(wctx, free) }()
		synctest.Wait()
		f = s.sample(t0.Add(2*time.Second), 0)
		if r := rowByID(t, f, "bulkhead/api/paid"); r.State != "rejecting" || r.Level != "bad" || field(r, "rejected_s") != "1.0" || field(r, "in_use") != "1" {
			t.Errorf("paid refused: %+v, want rejecting, bad, 1.0 rejected/s, 1 in use", r)
		}
		if r := rowByID(t, f, "bulkhead/api/free"); r.State != "full" || r.Level != "warn" || field(r, "waiting") != "1" || r.Values != [2]float64{3, 1} {
			t.Errorf("free queueing: %+v, want full, warn, 1 waiting, chart [3 1]", r)
		}

		cancel()
		if err := <-errc; err == nil {
			t.Fatal("cancelled Acquire succeeded")
		}
		for range 3 {
			p.Release(free)
		}
		p.Release(paid)
		f = s.sample(t0.Add(3*time.Second), 0)
		for _, id := range []string{"bulkhead/api/free", "bulkhead/api/paid"} {
			if r := rowByID(t, f, id); r.State != "idle" || field(r, "borrowed") != "0" || field(r, "waiting") != "0" {
				t.Errorf("%s after the releases: %+v, want idle, nothing borrowed or waiting", id, r)
			}
		}
	})
}

// An open breaker's row shows the rule that tripped it, from its state
// change's Code, and when it goes half-open; without the event (the
// Dashboard is not its listener) the rule comes from the snapshot.
func TestBreakerTripRow(t *testing.T) {
	set := new(watch.Set)
	d := must(New(Config{Sources: set}))
	defer d.Close()
	listened := must(circuit.New(circuit.Config{Name: "listened", WindowSize: 2, MinCalls: 2, OpenDuration: time.Hour, OpenJitter: -1, Listener: d}))
	silent := must(circuit.New(circuit.Config{Name: "silent", WindowSize: 2, MinCalls: 2, OpenDuration: time.Hour}))
	set.AddBreaker(listened)
	set.AddBreaker(silent)
	fail := errors.New("down")
	for _, b := range []*circuit.Breaker{listened, silent} {
		for range 2 {
			circuit.Call(context.Background(), b, func(context.Context) (int, error) { return 0, fail })
		}
	}
	now := time.Now()
	f := newSampler(d).sample(now, 0)
	r := rowByID(t, f, "circuit/listened/")
	if r.State != "open" || r.Code != circuit.CodeFailureRate || !strings.Contains(r.Why, "failure rate") {
		t.Errorf("listened: %+v, want open, code %q and the reason", r, circuit.CodeFailureRate)
	}
	if left := time.UnixMilli(r.Until).Sub(now); left < 59*time.Minute || left > time.Hour {
		t.Errorf("listened: half-open in %v, want about an hour", left)
	}
	r = rowByID(t, f, "circuit/silent/")
	if r.State != "open" || r.Code != circuit.RuleFailureRate.String() || r.Until != 0 {
		t.Errorf("silent: %+v, want open, the snapshot's rule, no time", r)
	}
	if len(f.Changes) != 1 || f.Changes[0].Name != "listened" || f.Changes[0].To != "open" {
		t.Errorf("changes %+v, want the listened breaker's opening", f.Changes)
	}
}

// The timeline ring keeps the last Config.Timeline changes, numbered, and
// the breakers it remembers are bounded.
func TestChangeLogBounds(t *testing.T) {
	var c changeLog
	c.init(3)
	for i := range 5 {
		c.record(watertight.Event{Kind: watertight.EventStateChange, Source: "balance", Name: "b", Key: string(rune('a' + i)), From: "active", To: "ejected"})
	}
	got, seq := c.since(0)
	if seq != 5 || len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 5 {
		t.Fatalf("since(0) = %+v, %d; want seq 3..5 of 5", got, seq)
	}
	if got, _ := c.since(4); len(got) != 1 || got[0].Key != "e" {
		t.Errorf("since(4) = %+v, want the fifth", got)
	}
	if got := c.upTo(4); len(got) != 2 || got[1].Seq != 4 {
		t.Errorf("upTo(4) = %+v, want 3 and 4", got)
	}
	for i := range maxTracked + 10 {
		c.record(watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", Name: "r", Key: string(rune(i)), To: "open"})
	}
	if n := len(c.last); n > maxTracked {
		t.Errorf("%d breakers remembered, want at most %d", n, maxTracked)
	}
	var none changeLog
	none.init(0)
	none.record(watertight.Event{Kind: watertight.EventStateChange, Source: "circuit", To: "open"})
	if got, seq := none.since(0); len(got) != 0 || seq != 1 {
		t.Errorf("no timeline: %+v, %d; want nothing kept, seq 1", got, seq)
	}
}

// Reason series are bounded; events past the bound are counted apart.
func TestReasonsBounded(t *testing.T) {
	var r reasonCounts
	r.init()
	for i := range maxReasons + 5 {
		r.count(watertight.Event{Kind: watertight.EventShed, Source: "x", Code: string(rune(i))})
	}
	if len(r.m) != maxReasons || r.overflow.Load() != 5 {
		t.Errorf("%d series, %d overflow; want %d and 5", len(r.m), r.overflow.Load(), maxReasons)
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{pct(0), "0%"}, {pct(2.345), "2.3%"}, {pct(62.5), "62%"}, {pct(100), "100%"},
		{perSec(0), "0"}, {perSec(0.25), "0.2"}, {perSec(12.6), "13"},
		{num(3), "3"}, {num(2.55), "2.5"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
