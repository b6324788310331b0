package watertight

import "errors"

// rejection is the error type behind NewRejection and NewSaturation.
type rejection struct {
	text       string
	saturation bool
}

func (e *rejection) Error() string { return e.text }

// Rejection reports that the error is a rejection; see IsRejection.
func (e *rejection) Rejection() bool { return true }

// Saturation reports whether the rejection marks a saturated resource.
func (e *rejection) Saturation() bool { return e.saturation }

// NewRejection returns an error that IsRejection recognises. Pattern packages
// use it for their sentinels (circuit.ErrOpen, ...): a rejection is a final
// answer given without calling the protected function, so it is never retried
// and never counts as a failure of the dependency.
//
// Each call returns a distinct error: compare with errors.Is against the
// package's sentinel.
func NewRejection(text string) error { return &rejection{text: text} }

// NewSaturation returns a rejection that also marks a saturated resource, such
// as a full bulkhead or a full queue. A circuit breaker configured to do so may
// count saturation toward tripping, as a signal of its own (Saturated),
// separate from dependency failures.
func NewSaturation(text string) error { return &rejection{text: text, saturation: true} }

// IsRejection reports whether err, or any error it wraps, is a rejection: an
// answer given by a protection without calling the protected function (an
// open circuit, a full bulkhead, an exhausted budget, a deadline too short to
// start). Any error type with a method Rejection() bool that returns true
// counts, so users can mark their own.
func IsRejection(err error) bool {
	if err == nil {
		return false
	}
	var r interface{ Rejection() bool }
	return errors.As(err, &r) && r.Rejection()
}

// IsSaturation reports whether err, or any error it wraps, is a rejection that
// marks a saturated resource (see NewSaturation). Any error type with methods
// Rejection() bool and Saturation() bool that both return true counts.
func IsSaturation(err error) bool {
	if err == nil {
		return false
	}
	var r interface {
		Rejection() bool
		Saturation() bool
	}
	return errors.As(err, &r) && r.Rejection() && r.Saturation()
}

// ErrOverloaded is the "overloaded, don't retry" signal between layers: a
// dependency (or the layer below, which already retried) says that trying
// again would only add load. Retry policies treat an error that matches it
// (IsOverloaded) as final; the HTTP and gRPC adapters carry it on the wire.
var ErrOverloaded = errors.New("watertight: overloaded, do not retry")

// Overloaded returns err marked with the "overloaded, don't retry" signal:
// errors.Is(result, ErrOverloaded) holds and the result unwraps to err.
// Overloaded(nil) returns ErrOverloaded.
func Overloaded(err error) error {
	if err == nil {
		return ErrOverloaded
	}
	return &overloaded{err: err}
}

type overloaded struct{ err error }

func (e *overloaded) Error() string        { return e.err.Error() + " (overloaded, do not retry)" }
func (e *overloaded) Unwrap() error        { return e.err }
func (e *overloaded) Is(target error) bool { return target == ErrOverloaded }

// IsOverloaded reports whether err carries the "overloaded, don't retry"
// signal: it matches ErrOverloaded, or some error in its chain has a method
// Overloaded() bool that returns true (a retry package's exhausted error
// does, so that the layers above do not retry what this one already did).
func IsOverloaded(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrOverloaded) {
		return true
	}
	var o interface{ Overloaded() bool }
	return errors.As(err, &o) && o.Overloaded()
}
