package deadline_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/watertighthttp"
)

// The default margin is a tenth of the time left, between 1ms and 100ms.
func TestMarginScales(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _ := quiet()
		p := mustNew(t, cfg)
		for _, tc := range []struct {
			left, margin time.Duration
			sent         string // "" when refused
		}{
			{time.Minute, 100 * time.Millisecond, "59900"},
			{5 * time.Second, 100 * time.Millisecond, "4900"},
			{time.Second, 100 * time.Millisecond, "900"},
			{999 * time.Millisecond, 99900 * time.Microsecond, "899"},
			{150 * time.Millisecond, 15 * time.Millisecond, "135"},
			{101 * time.Millisecond, 10100 * time.Microsecond, "90"},
			{100 * time.Millisecond, 10 * time.Millisecond, "90"},
			{50 * time.Millisecond, 5 * time.Millisecond, "45"},
			{10 * time.Millisecond, time.Millisecond, "9"},
			{5 * time.Millisecond, time.Millisecond, "4"},
			{2 * time.Millisecond, time.Millisecond, "1"},
			{2*time.Millisecond - time.Nanosecond, time.Millisecond, ""},
			{500 * time.Microsecond, time.Millisecond, ""},
		} {
			if m := p.MarginFor(tc.left); m != tc.margin {
				t.Errorf("MarginFor(%v) = %v, want %v", tc.left, m, tc.margin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.left)
			v, ok, err := p.Value(ctx)
			h := http.Header{}
			ierr := p.Inject(ctx, h)
			cancel()
			if tc.sent == "" {
				if ok || !errors.Is(err, deadline.ErrTooShort) || !errors.Is(ierr, deadline.ErrTooShort) || len(h) != 0 {
					t.Errorf("%v left: Value = %q, %v, %v; Inject = %v, %v; want ErrTooShort", tc.left, v, ok, err, ierr, h)
				}
				continue
			}
			if v != tc.sent || !ok || err != nil || ierr != nil || h.Get(deadline.DefaultHeader) != tc.sent {
				t.Errorf("%v left: Value = %q, %v, %v; Inject = %v, %v; want %s", tc.left, v, ok, err, ierr, h, tc.sent)
			}
		}
		// An expired context fails fast too, with the numbers.
		ctx, cancel := context.WithTimeout(context.Background(), -3*time.Millisecond)
		defer cancel()
		_, _, err := p.OutgoingMillis(ctx)
		if !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Fatalf("expired: %v, want ErrTooShort", err)
		}
		if got, want := err.Error(), "deadline: too little time left for the work: -3ms left, nothing after the 1ms margin"; got != want {
			t.Errorf("err = %q, want %q", got, want)
		}
	})
}

// Margin bounds the margin above and, below MarginFloor, is the margin;
// MarginFraction changes the share; a negative one keeps Margin always.
func TestMarginConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg          deadline.Config
		left, margin time.Duration
	}{
		{deadline.Config{Margin: 20 * time.Millisecond}, 150 * time.Millisecond, 15 * time.Millisecond},
		{deadline.Config{Margin: 20 * time.Millisecond}, time.Second, 20 * time.Millisecond},
		{deadline.Config{Margin: 500 * time.Microsecond}, 2 * time.Millisecond, 500 * time.Microsecond},
		{deadline.Config{Margin: -1}, 2 * time.Millisecond, 0},
		{deadline.Config{Margin: -1}, time.Hour, 0},
		{deadline.Config{MarginFraction: 0.25}, 100 * time.Millisecond, 25 * time.Millisecond},
		{deadline.Config{MarginFraction: 0.25}, time.Second, 100 * time.Millisecond},
		{deadline.Config{MarginFraction: -1}, 50 * time.Millisecond, 100 * time.Millisecond},
		{deadline.Config{MarginFraction: 1e-300}, time.Second, time.Millisecond},
		{deadline.Config{Margin: 1 << 62, MarginFraction: 1e-3}, time.Hour, 3600 * time.Millisecond},
	} {
		cfg := tc.cfg
		p := mustNew(t, cfg)
		if m := p.MarginFor(tc.left); m != tc.margin {
			t.Errorf("%+v: MarginFor(%v) = %v, want %v", tc.cfg, tc.left, m, tc.margin)
		}
	}
	for _, f := range []float64{1, 1.5, nan()} {
		if _, err := deadline.New(deadline.Config{MarginFraction: f}); err == nil || !strings.HasPrefix(err.Error(), "deadline: Config.MarginFraction must be below 1") {
			t.Errorf("MarginFraction %v: err %v, want one naming the field", f, err)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

// End to end through the Transport: with the default configuration, short
// deadlines reach a server on 127.0.0.1 that answers at once, and get its
// answer; truly too little time fails fast without sending. A fixed 100ms
// margin refused the first four without sending them.
func TestTransportShortDeadlinesAreSent(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a late request, after its client timed out, must not block
		case seen <- r.Header.Get(deadline.DefaultHeader):
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{Base: srv.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	get := func(budget time.Duration) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	// Connect first, without a deadline: the budgets below are for the request.
	warm, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	if resp, err := client.Do(warm); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	<-seen
	for _, budget := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 101 * time.Millisecond, 150 * time.Millisecond} {
		resp, err := get(budget)
		// A machine busy enough (-race, CI) to stall a goroutine for the
		// whole budget makes a sent request time out on the wire; that is
		// not the defect under test (a refusal before sending, which fails
		// at once), so such a timeout gets two more tries.
		for try := 1; try < 3 && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, deadline.ErrTooShort); try++ {
			t.Logf("%v deadline: try %d timed out on the wire (%v); once more", budget, try, err)
			select {
			case <-seen:
			default:
			}
			resp, err = get(budget)
		}
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%v deadline: %v, %v; want the server's 204", budget, resp, err)
		}
		ms, err := strconv.Atoi(<-seen)
		if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > budget-budget/10 {
			t.Fatalf("%v deadline: the server was sent %dms (%v); want in (0, %v]", budget, ms, err, budget-budget/10)
		}
	}
	for _, budget := range []time.Duration{500 * time.Microsecond, -time.Millisecond} {
		if _, err := get(budget); !errors.Is(err, deadline.ErrTooShort) || !watertight.IsRejection(err) {
			t.Fatalf("%v deadline: err = %v; want deadline.ErrTooShort", budget, err)
		}
	}
	select {
	case v := <-seen:
		t.Fatalf("a request with too little time was sent (%q)", v)
	default:
	}
}
