package watertightprom

import (
	"errors"
	"fmt"
	"testing"

	"github.com/watertight-go/watertight"
	"pgregory.net/rapid"
)

// marker is an error with a Rejection method that says v.
type marker struct{ v bool }

func (m marker) Error() string   { return fmt.Sprintf("marker(%v)", m.v) }
func (m marker) Rejection() bool { return m.v }

// asRejection converts to a rejection through an As method only.
type asRejection struct{}

func (asRejection) Error() string { return "as" }
func (asRejection) As(target any) bool {
	if p, ok := target.(*interface{ Rejection() bool }); ok {
		*p = marker{true}
		return true
	}
	return false
}

// errTree draws an error chain: plain errors, markers, As converters,
// wrapped (%w) and joined errors, nested.
func errTree(t *rapid.T, depth int) error {
	n := 4
	if depth < 3 {
		n = 7
	}
	switch rapid.IntRange(0, n-1).Draw(t, "node") {
	case 0:
		return errors.New("plain")
	case 1:
		return marker{rapid.Bool().Draw(t, "v")}
	case 2:
		return asRejection{}
	case 3:
		return watertight.NewSaturation("full")
	case 4:
		return fmt.Errorf("wrapped: %w", errTree(t, depth+1))
	case 5:
		k := rapid.IntRange(0, 3).Draw(t, "k")
		errs := make([]error, k)
		for i := range errs {
			errs[i] = errTree(t, depth+1)
		}
		return errors.Join(errs...)
	default:
		return fmt.Errorf("two: %w, %w", errTree(t, depth+1), errTree(t, depth+1))
	}
}

// isRejection answers as watertight.IsRejection does, for any chain.
func TestIsRejectionMatchesWatertight(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		err := errTree(t, 0)
		if got, want := isRejection(err), watertight.IsRejection(err); got != want {
			t.Fatalf("isRejection(%v) = %v, watertight.IsRejection = %v", err, got, want)
		}
	})
	if isRejection(nil) {
		t.Error("isRejection(nil) = true")
	}
}

func TestIsRejectionAllocatesNothing(t *testing.T) {
	errs := []error{errors.New("plain"), fmt.Errorf("x: %w", watertight.NewSaturation("full")), errors.Join(errors.New("a"), marker{true})}
	if n := testing.AllocsPerRun(100, func() {
		for _, e := range errs {
			isRejection(e)
		}
	}); n != 0 {
		t.Errorf("isRejection allocates %v times", n)
	}
}
