package deadline_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

// TestValueMatchesInject checks that Value returns what Inject writes, and
// the same error when too little time is left.
func TestValueMatchesInject(t *testing.T) {
	p, err := deadline.New(deadline.Config{Margin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	if v, ok, err := p.Value(context.Background()); v != "" || ok || err != nil {
		t.Fatalf("no deadline: Value = %q, %v, %v; want \"\", false, nil", v, ok, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, ok, err := p.Value(ctx)
	if !ok || err != nil {
		t.Fatalf("Value = %q, %v, %v; want a value", v, ok, err)
	}
	h := http.Header{}
	if err := p.Inject(ctx, h); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := p.OutgoingMillis(ctx); !ok || err != nil || n <= 0 || n > 9900 {
		t.Fatalf("OutgoingMillis = %d, %v, %v; want a number of ms in (0, 9900]", n, ok, err)
	}
	if n, ok, err := p.OutgoingMillis(context.Background()); n != 0 || ok || err != nil {
		t.Fatalf("no deadline: OutgoingMillis = %d, %v, %v; want 0, false, nil", n, ok, err)
	}
	ms, perr := strconv.Atoi(v)
	injected, ierr := strconv.Atoi(h.Get(deadline.DefaultHeader))
	if perr != nil || ierr != nil || ms <= 0 || ms > 9900 || injected > ms || ms-injected > 1000 {
		t.Fatalf("Value %q, Inject %q; want the same number of ms, at most 9900", v, h.Get(deadline.DefaultHeader))
	}

	short, cancel2 := context.WithTimeout(context.Background(), 1500*time.Microsecond)
	defer cancel2()
	v, ok, err = p.Value(short)
	if v != "" || ok || !errors.Is(err, deadline.ErrTooShort) {
		t.Fatalf("1.5ms left: Value = %q, %v, %v; want deadline.ErrTooShort", v, ok, err)
	}
	if n, ok, merr := p.OutgoingMillis(short); n != 0 || ok || !errors.Is(merr, deadline.ErrTooShort) {
		t.Fatalf("1.5ms left: OutgoingMillis = %d, %v, %v; want deadline.ErrTooShort", n, ok, merr)
	}
	ierr = p.Inject(short, http.Header{})
	if !errors.Is(ierr, deadline.ErrTooShort) {
		t.Fatalf("Inject = %v, want deadline.ErrTooShort", ierr)
	}
	// The numbers differ by the clock reads; the words are the same.
	const want = "deadline: too little time left for the work: "
	if got := err.Error(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " left, nothing after the 1ms margin") {
		t.Fatalf("Value's error %q, want it to read like Inject's %q", got, ierr)
	}
}

func TestValueAllocs(t *testing.T) {
	p, err := deadline.New(deadline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	// One allocation: the formatted string.
	if n := testing.AllocsPerRun(100, func() { p.Value(ctx) }); n > 1 {
		t.Fatalf("Value: %v allocations, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { p.OutgoingMillis(ctx) }); n != 0 {
		t.Fatalf("OutgoingMillis: %v allocations, want none", n)
	}
}
