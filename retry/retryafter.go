package retry

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// The HTTP-date formats of RFC 9110 §5.6.7: the preferred IMF-fixdate and
// the two obsolete ones a recipient must accept.
var httpDateLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",  // IMF-fixdate
	"Monday, 02-Jan-06 15:04:05 GMT", // obsolete RFC 850
	"Mon Jan _2 15:04:05 2006",       // obsolete asctime
}

// maxRetryAfterSeconds bounds the delay-seconds form before it is turned
// into a Duration, so that no value can overflow; a policy caps the wait
// much lower anyway (Config.MaxDelay).
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ErrRetryAfterSyntax is wrapped by ParseRetryAfter's errors.
var ErrRetryAfterSyntax = errors.New("retry: malformed Retry-After")

// ParseRetryAfter parses the value of an HTTP Retry-After header (RFC 9110
// §10.2.3): either delay-seconds, a non-negative decimal integer, or an
// HTTP-date, which is turned into the time left after now (zero if it has
// passed). Leading and trailing spaces are ignored. A value too large for a
// time.Duration is clamped to the largest one: callers cap the wait with
// their own maximum (go-retryablehttp once slept 484289 hours on a server's
// word). Anything else — a negative or fractional number, a date in another
// format, an empty value — returns an error wrapping ErrRetryAfterSyntax
// that quotes the value.
func ParseRetryAfter(value string, now time.Time) (time.Duration, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, fmt.Errorf("%w: empty value", ErrRetryAfterSyntax)
	}
	if isDigits(v) {
		var secs int64
		for i := 0; i < len(v); i++ {
			if secs > (maxRetryAfterSeconds-int64(v[i]-'0'))/10 {
				return time.Duration(math.MaxInt64), nil
			}
			secs = secs*10 + int64(v[i]-'0')
		}
		return time.Duration(secs) * time.Second, nil
	}
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return max(t.Sub(now), 0), nil
		}
	}
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return 0, fmt.Errorf("%w: %q is neither delay-seconds (a non-negative integer) nor an HTTP-date such as %q", ErrRetryAfterSyntax, v, "Sun, 06 Nov 1994 08:49:37 GMT")
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}
