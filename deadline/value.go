package deadline

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Value returns what Inject would write: the configured header's value,
// Outgoing(ctx) in whole milliseconds (FormatMillis). ok is false, with a nil
// error, when ctx has no deadline: nothing is to be sent. When less than a
// millisecond is left after the margin, it returns an error wrapping
// ErrTooShort with the numbers, the same as Inject's.
//
// It is for a transport that builds each request's header itself and puts the
// value in a slice of its own (Inject overwrites a one-value slice it finds in
// place, which a header copied from a caller's must not share); the header's
// name is Config().Header. OutgoingMillis gives the number instead.
func (p *Propagator) Value(ctx context.Context) (v string, ok bool, err error) {
	ms, ok, err := p.OutgoingMillis(ctx)
	if !ok {
		return "", false, err
	}
	return strconv.FormatInt(ms, 10), true, nil
}

// OutgoingMillis is Value as a number: Outgoing(ctx) in whole milliseconds,
// at least 1 when ok. ok is false, with a nil error, when ctx has no deadline,
// and with an error wrapping ErrTooShort (Inject's) when less than a
// millisecond is left after the margin (MarginFor). It allocates nothing
// when ok.
func (p *Propagator) OutgoingMillis(ctx context.Context) (ms int64, ok bool, err error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false, nil
	}
	left := time.Until(dl)
	margin := p.MarginFor(left)
	d := min(left-margin, p.cfg.Max)
	if d < time.Millisecond {
		return 0, false, tooShort(left, margin)
	}
	return int64(d / time.Millisecond), true, nil
}

// tooShort is the error of a request that would be sent with less than a
// millisecond, left being the time left and margin the margin for it.
func tooShort(left, margin time.Duration) error {
	return fmt.Errorf("%w: %s left, nothing after the %v margin", ErrTooShort, human(left), margin.Round(time.Microsecond))
}
