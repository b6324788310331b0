package watertighthttp

import (
	"context"
	"errors"
	"strings"
)

// Criticality is how much a request matters, as in the Google SRE book
// ("Handling Overload"): under saturation, requests of lower criticality are
// shed first. The values are ordered, so they compare with < and >: Sheddable
// < SheddablePlus < Critical < CriticalPlus. The zero value is Critical, the
// default of a request that says nothing.
type Criticality int

// The four criticalities of the SRE book, lowest first.
const (
	// Sheddable requests may be shed at any sign of overload: batch jobs,
	// prefetches; they are retried later.
	Sheddable Criticality = -2
	// SheddablePlus requests may see partial unavailability; they are
	// retried later (batch work a user waits for, eventually).
	SheddablePlus Criticality = -1
	// Critical is the default: a failure is visible to a user.
	Critical Criticality = 0
	// CriticalPlus requests are the most important: serious user-visible
	// impact if they fail.
	CriticalPlus Criticality = 1
)

// ErrBadCriticality is returned by ParseCriticality for a string that names
// no criticality.
var ErrBadCriticality = errors.New("watertighthttp: unknown criticality")

// String returns the wire form of c: "critical-plus", "critical",
// "sheddable-plus" or "sheddable". A value outside the four constants prints
// as "critical", the value a receiver would take it for.
func (c Criticality) String() string {
	switch c {
	case CriticalPlus:
		return "critical-plus"
	case SheddablePlus:
		return "sheddable-plus"
	case Sheddable:
		return "sheddable"
	default:
		return "critical"
	}
}

// ParseCriticality parses the wire form of a criticality (the value of
// HeaderCriticality). It ignores case and surrounding spaces and accepts an
// underscore for the dash ("CRITICAL_PLUS", gRPC's spelling). Any other
// string, the empty one included, is an error matching ErrBadCriticality,
// and the returned value is then Critical, the default.
func ParseCriticality(s string) (Criticality, error) {
	t := strings.TrimSpace(s)
	if len(t) > len("sheddable-plus") {
		return Critical, &badCriticalityError{s: s}
	}
	t = strings.ReplaceAll(strings.ToLower(t), "_", "-")
	switch t {
	case "critical-plus":
		return CriticalPlus, nil
	case "critical":
		return Critical, nil
	case "sheddable-plus":
		return SheddablePlus, nil
	case "sheddable":
		return Sheddable, nil
	}
	return Critical, &badCriticalityError{s: s}
}

type badCriticalityError struct{ s string }

func (e *badCriticalityError) Error() string {
	s := e.s
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return ErrBadCriticality.Error() + " " + shedQuote(s) + ` (want "critical-plus", "critical", "sheddable-plus" or "sheddable")`
}

func (e *badCriticalityError) Unwrap() error { return ErrBadCriticality }

// shedQuote quotes s for an error message or a log line.
func shedQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r == '\uFFFD':
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

type criticalityKey struct{}

// WithCriticality returns a copy of ctx that carries c. The Handler sets it
// from the incoming HeaderCriticality; the Transport forwards the
// criticality it finds with CriticalityFrom.
func WithCriticality(ctx context.Context, c Criticality) context.Context {
	return context.WithValue(ctx, criticalityKey{}, c)
}

// CriticalityFrom returns the criticality ctx carries and true, or Critical
// and false when it carries none.
func CriticalityFrom(ctx context.Context) (Criticality, bool) {
	c, ok := ctx.Value(criticalityKey{}).(Criticality)
	if !ok {
		return Critical, false
	}
	return c, true
}
