package deadline_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight-go/watertight/deadline"
)

// The margin rule, for any configuration and any time left: the margin lies
// between its floor and Margin; more time left never gives a smaller margin
// nor less time sent; and what is sent always leaves the callee's deadline
// before the caller's (strictly, unless there is no margin).
func TestMarginProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		margin := time.Duration(rapid.Int64Range(-1, int64(time.Minute)).Draw(t, "margin"))
		fraction := rapid.Float64Range(-0.5, 0.99).Draw(t, "fraction")
		p, err := deadline.New(deadline.Config{Margin: margin, MarginFraction: fraction})
		if err != nil {
			t.Fatal(err)
		}
		cfg := p.Config()
		floor := min(deadline.MarginFloor, cfg.Margin)
		a := time.Duration(rapid.Int64Range(-int64(time.Second), int64(time.Hour)).Draw(t, "left"))
		b := a + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "more"))
		ma, mb := p.MarginFor(a), p.MarginFor(b)
		for _, m := range []time.Duration{ma, mb} {
			if m < floor || m > cfg.Margin {
				t.Fatalf("margin %v outside [%v, %v] (%+v)", m, floor, cfg.Margin, cfg)
			}
			if cfg.Margin > 0 && m <= 0 {
				t.Fatalf("no margin with Margin %v", cfg.Margin)
			}
		}
		if cfg.MarginFraction < 0 && (ma != cfg.Margin || mb != cfg.Margin) {
			t.Fatalf("fixed rule: margins %v, %v, want %v", ma, mb, cfg.Margin)
		}
		if mb < ma {
			t.Fatalf("MarginFor(%v) = %v < MarginFor(%v) = %v", b, mb, a, ma)
		}
		if b-mb < a-ma {
			t.Fatalf("more time left sends less: %v - %v < %v - %v", b, mb, a, ma)
		}
	})
}

// What OutgoingMillis sends is the time left less MarginFor, capped by Max,
// in whole milliseconds, or ErrTooShort when that is below 1ms; Value and
// Inject agree with it. The times left are drawn by rapid (with a fixed
// seed, since rapid.Check cannot run in a bubble) and tried in a bubble,
// where the clock stands still between the reads.
func TestOutgoingMillisProperty(t *testing.T) {
	gen := rapid.SliceOfN(rapid.OneOf(
		rapid.Int64Range(-int64(time.Second), int64(3*time.Millisecond)),
		rapid.Int64Range(0, int64(2*time.Second)),
		rapid.Int64Range(0, int64(10*time.Minute)),
	), 500, 500)
	lefts := gen.Example(1)
	synctest.Test(t, func(t *testing.T) {
		p, err := deadline.New(deadline.Config{Max: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range lefts {
			left := time.Duration(n)
			ctx, cancel := context.WithTimeout(context.Background(), left)
			ms, ok, err := p.OutgoingMillis(ctx)
			v, vok, verr := p.Value(ctx)
			h := http.Header{}
			ierr := p.Inject(ctx, h)
			cancel()
			sent := min(left-p.MarginFor(left), time.Minute)
			if sent < time.Millisecond {
				if ok || vok || !errors.Is(err, deadline.ErrTooShort) || !errors.Is(verr, deadline.ErrTooShort) || !errors.Is(ierr, deadline.ErrTooShort) || len(h) != 0 {
					t.Fatalf("%v left: %d, %v, %v; want ErrTooShort everywhere", left, ms, ok, err)
				}
				continue
			}
			want := int64(sent / time.Millisecond)
			if !ok || err != nil || ms != want || ms < 1 {
				t.Fatalf("%v left: OutgoingMillis = %d, %v, %v; want %d", left, ms, ok, err, want)
			}
			if s := strconv.FormatInt(want, 10); !vok || verr != nil || v != s || ierr != nil || h.Get(deadline.DefaultHeader) != s {
				t.Fatalf("%v left: Value = %q, Inject = %v %v; want %s", left, v, ierr, h, s)
			}
		}
	})
}
