package deadline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ErrSyntax is wrapped by every error of ParseMillis and ParseGRPCTimeout:
// errors.Is(err, ErrSyntax) holds for a malformed value. The error quotes the
// value and says what was expected.
var ErrSyntax = errors.New("deadline: malformed timeout value")

// maxQuoted is how many bytes of a bad value an error or a log line quotes;
// header values come from the network and may be long.
const maxQuoted = 64

// quote returns v quoted for an error message, cut to maxQuoted bytes.
func quote(v string) string {
	if len(v) > maxQuoted {
		return strconv.Quote(v[:maxQuoted]) + "..."
	}
	return strconv.Quote(v)
}

func syntaxError(v, want string) error {
	return fmt.Errorf("%w %s: %s", ErrSyntax, quote(v), want)
}

// trimOWS removes the optional white space (spaces and horizontal tabs) HTTP
// allows around a field value.
func trimOWS(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// scale returns n·unit, or the largest Duration when that overflows.
func scale(n uint64, unit time.Duration) time.Duration {
	if n > uint64(math.MaxInt64/int64(unit)) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// digits returns the value of s, all ASCII digits, saturating at
// math.MaxUint64; ok is false when s is empty or holds anything else.
func digits(s string) (n uint64, ok bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			n = math.MaxUint64
		} else {
			n = n*10 + d
		}
	}
	return n, true
}

// ParseMillis parses the relative-milliseconds form used by DefaultHeader and
// by Envoy's x-envoy-expected-rq-timeout-ms, such as "250": a non-negative
// decimal integer of milliseconds, with no sign, no fraction and no spaces
// inside (spaces and tabs around it are trimmed; leading zeros are allowed).
// A value too large for a time.Duration (about 292 years) gives the largest
// Duration, not an error. Errors wrap ErrSyntax.
func ParseMillis(v string) (time.Duration, error) {
	d, want := parseMillis(v)
	if want != "" {
		return 0, syntaxError(v, want)
	}
	return d, nil
}

// parseMillis is ParseMillis without the error: want says what was
// expected, "" when v is well formed. It allocates nothing, so that a flood
// of malformed values costs no garbage (the error is made only for a log
// line).
func parseMillis(v string) (d time.Duration, want string) {
	s := trimOWS(v)
	n, ok := digits(s)
	if !ok {
		if s == "" {
			return 0, "want a non-negative integer of milliseconds, got an empty value"
		}
		return 0, "want a non-negative integer of milliseconds (digits only)"
	}
	return scale(n, time.Millisecond), ""
}

// ParseGRPCTimeout parses gRPC's grpc-timeout header, such as "100m", "5S" or
// "1H": 1 to 8 ASCII digits followed by one unit letter, H (hours), M
// (minutes), S (seconds), m (milliseconds), u (microseconds) or n
// (nanoseconds), as the gRPC over HTTP/2 protocol defines it. Spaces and tabs
// around the value are trimmed. Eight digits of hours overflow a
// time.Duration and give the largest Duration. Errors wrap ErrSyntax.
func ParseGRPCTimeout(v string) (time.Duration, error) {
	d, want := parseGRPCTimeout(v)
	if want != "" {
		return 0, syntaxError(v, want)
	}
	return d, nil
}

// parseGRPCTimeout is ParseGRPCTimeout without the error, as parseMillis.
func parseGRPCTimeout(v string) (d time.Duration, want string) {
	const form = "want 1 to 8 digits followed by a unit H, M, S, m, u or n"
	s := trimOWS(v)
	if len(s) < 2 {
		return 0, form
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, form
	}
	num := s[:len(s)-1]
	if len(num) > 8 {
		return 0, "want at most 8 digits before the unit"
	}
	n, ok := digits(num)
	if !ok {
		return 0, form
	}
	return scale(n, unit), ""
}

// FormatMillis formats d for the header: whole milliseconds, rounded down,
// never negative ("0" for anything below 1ms).
func FormatMillis(d time.Duration) string {
	if d < time.Millisecond {
		return "0"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10)
}
