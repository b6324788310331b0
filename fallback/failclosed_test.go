package fallback_test

import (
	"context"
	"errors"
	"testing"

	"github.com/watertight-go/watertight/fallback"
)

func TestFailClosed(t *testing.T) {
	ctx := context.Background()
	errAuthz := errors.New("authz: connection refused")
	for _, tc := range []struct {
		name      string
		allowed   bool
		err       error
		wantAllow bool
	}{
		{"allowed", true, nil, true},
		{"denied", false, nil, false},
		{"check failed", false, errAuthz, false},
		// A check that says yes but also fails is not trusted.
		{"allowed with an error", true, errAuthz, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allowed, err := fallback.FailClosed(ctx, func(context.Context) (bool, error) { return tc.allowed, tc.err })
			if allowed != tc.wantAllow {
				t.Fatalf("allowed = %v, want %v", allowed, tc.wantAllow)
			}
			if tc.err == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, fallback.ErrCheckFailed) || !errors.Is(err, tc.err) {
				t.Fatalf("err = %v; want it to match ErrCheckFailed and the check's error", err)
			}
			if want := "fallback: check failed, denied (fail closed): authz: connection refused"; err.Error() != want {
				t.Fatalf("message %q, want %q", err, want)
			}
		})
	}
}

func TestFailClosedDoneContext(t *testing.T) {
	cause := errors.New("request abandoned")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	called := false
	allowed, err := fallback.FailClosed(ctx, func(context.Context) (bool, error) { called = true; return true, nil })
	if allowed || called {
		t.Fatalf("allowed = %v, called = %v; want a denial without a check", allowed, called)
	}
	if !errors.Is(err, fallback.ErrCheckFailed) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want ErrCheckFailed and the context's cause", err)
	}
}

// A panic in the check goes on to the caller: FailClosed returns nothing,
// so nothing can read as "allowed".
func TestFailClosedPanicGoesOn(t *testing.T) {
	defer func() {
		if recover() != "boom" {
			t.Error("the check's panic did not reach the caller")
		}
	}()
	fallback.FailClosed(context.Background(), func(context.Context) (bool, error) { panic("boom") })
	t.Error("FailClosed returned after the check panicked")
}
