package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/watertight-go/watertight"
)

func TestClassify(t *testing.T) {
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	withCause, cancelCause := context.WithCancelCause(bg)
	cancelCause(errors.New("shutting down"))
	expired, cancelExpired := context.WithTimeout(bg, -1)
	defer cancelExpired()

	plain := errors.New("connection refused")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want watertight.Outcome
	}{
		{"nil", bg, nil, watertight.Success},
		{"nil in a cancelled ctx", cancelled, nil, watertight.Success},
		{"plain", bg, plain, watertight.Failure},
		{"plain, nil ctx", nil, plain, watertight.Failure},
		{"wrapped plain", bg, fmt.Errorf("call: %w", plain), watertight.Failure},
		{"marked ignored", bg, watertight.Mark(plain, watertight.Ignored), watertight.Ignored},
		{"marked failure", bg, watertight.Mark(context.Canceled, watertight.Failure), watertight.Failure},
		{"marked success", bg, watertight.Mark(plain, watertight.Success), watertight.Success},
		{"wrapped mark", bg, fmt.Errorf("x: %w", watertight.Mark(plain, watertight.Ignored)), watertight.Ignored},
		{"mark wins over rejection", bg, watertight.Mark(watertight.NewRejection("r"), watertight.Failure), watertight.Failure},
		{"marked in a cancelled ctx", cancelled, watertight.Mark(plain, watertight.Failure), watertight.Failure},
		{"rejection", bg, watertight.NewRejection("circuit: open"), watertight.Ignored},
		{"wrapped rejection", bg, fmt.Errorf("x: %w", watertight.NewRejection("r")), watertight.Ignored},
		{"saturation", bg, watertight.NewSaturation("bulkhead: full"), watertight.Saturated},
		{"wrapped saturation", bg, fmt.Errorf("x: %w", watertight.NewSaturation("s")), watertight.Saturated},
		{"user rejection", bg, userRejection{true}, watertight.Ignored},
		{"user non-rejection", bg, userRejection{false}, watertight.Failure},
		{"canceled", bg, context.Canceled, watertight.Ignored},
		{"wrapped canceled", bg, fmt.Errorf("get: %w", context.Canceled), watertight.Ignored},
		{"plain in a cancelled ctx", cancelled, plain, watertight.Ignored},
		{"plain in a ctx cancelled with a cause", withCause, plain, watertight.Ignored},
		{"deadline", bg, context.DeadlineExceeded, watertight.Failure},
		{"wrapped deadline", bg, fmt.Errorf("get: %w", context.DeadlineExceeded), watertight.Failure},
		{"plain in an expired ctx", expired, plain, watertight.Failure},
		{"deadline in an expired ctx", expired, context.DeadlineExceeded, watertight.Failure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watertight.Classify(tc.ctx, tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestMark(t *testing.T) {
	if err := watertight.Mark(nil, watertight.Failure); err != nil {
		t.Errorf("Mark(nil) = %v, want nil", err)
	}
	err := watertight.Mark(errBoom, watertight.Ignored)
	if err.Error() != "boom" {
		t.Errorf("Error() = %q, want %q", err.Error(), "boom")
	}
	if !errors.Is(err, errBoom) || errors.Unwrap(err) != errBoom {
		t.Error("Mark does not wrap its error")
	}
	var m interface{ Outcome() watertight.Outcome }
	if !errors.As(err, &m) || m.Outcome() != watertight.Ignored {
		t.Error("the marked error does not report its outcome")
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[watertight.Outcome]string{
		watertight.Success:    "success",
		watertight.Failure:    "failure",
		watertight.Ignored:    "ignored",
		watertight.Saturated:  "saturated",
		watertight.Outcome(9): "outcome(9)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(o), got, want)
		}
	}
	var zero watertight.Outcome
	if zero != watertight.Success {
		t.Error("the zero Outcome is not Success")
	}
}

// userRejection is a user's own error type marked as a rejection.
type userRejection struct{ rejection bool }

func (userRejection) Error() string     { return "user rejection" }
func (u userRejection) Rejection() bool { return u.rejection }

// userSaturation also marks saturation.
type userSaturation struct{ rejection, saturation bool }

func (userSaturation) Error() string      { return "user saturation" }
func (u userSaturation) Rejection() bool  { return u.rejection }
func (u userSaturation) Saturation() bool { return u.saturation }

func TestIsRejection(t *testing.T) {
	rej := watertight.NewRejection("circuit: open")
	sat := watertight.NewSaturation("bulkhead: full")
	for _, tc := range []struct {
		name           string
		err            error
		rej, saturated bool
	}{
		{"nil", nil, false, false},
		{"plain", errBoom, false, false},
		{"rejection", rej, true, false},
		{"wrapped rejection", fmt.Errorf("a: %w", fmt.Errorf("b: %w", rej)), true, false},
		{"joined rejection", errors.Join(errBoom, rej), true, false},
		{"saturation", sat, true, true},
		{"wrapped saturation", fmt.Errorf("a: %w", sat), true, true},
		{"marked saturation", watertight.Mark(sat, watertight.Failure), true, true},
		{"user rejection", userRejection{true}, true, false},
		{"wrapped user rejection", fmt.Errorf("a: %w", userRejection{true}), true, false},
		{"user non-rejection", userRejection{false}, false, false},
		{"user saturation", userSaturation{true, true}, true, true},
		{"user saturation that is no rejection", userSaturation{false, true}, false, false},
		{"user rejection without saturation", userSaturation{true, false}, true, false},
		{"canceled", context.Canceled, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watertight.IsRejection(tc.err); got != tc.rej {
				t.Errorf("IsRejection(%v) = %v, want %v", tc.err, got, tc.rej)
			}
			if got := watertight.IsSaturation(tc.err); got != tc.saturated {
				t.Errorf("IsSaturation(%v) = %v, want %v", tc.err, got, tc.saturated)
			}
		})
	}
}

func TestNewRejection(t *testing.T) {
	a, b := watertight.NewRejection("same"), watertight.NewRejection("same")
	if a == b || errors.Is(a, b) {
		t.Error("two rejections with the same text are the same error")
	}
	if a.Error() != "same" {
		t.Errorf("Error() = %q", a.Error())
	}
	if s := watertight.NewSaturation("full"); s.Error() != "full" {
		t.Errorf("Error() = %q", s.Error())
	}
}
