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
// millisecond is left after the margin.
func (p *Propagator) OutgoingMillis(ctx context.Context) (ms int64, ok bool, err error) {
	d, ok := p.Outgoing(ctx)
	if !ok {
		return 0, false, nil
	}
	if d < time.Millisecond {
		left := d + p.cfg.Margin
		return 0, false, fmt.Errorf("%w: %s left, nothing after the %v margin", ErrTooShort, human(left), p.cfg.Margin)
	}
	return int64(d / time.Millisecond), true, nil
}
