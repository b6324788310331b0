package watertightgrpc

import (
	"math"
	"time"
)

// maxPushbackMillis is the largest number of milliseconds a time.Duration
// holds.
const maxPushbackMillis = math.MaxInt64 / int64(time.Millisecond)

// ParsePushback parses a value of the grpc-retry-pushback-ms trailer
// (MetadataPushback), as gRFC A6 defines it. A non-negative decimal integer
// of milliseconds ("0", "250") gives that delay and retry true: the server
// asks to be retried after it. Anything else gives retry false, "do not
// retry": a negative value ("-1", which the server interceptors send), and
// a malformed one (empty, a sign '+', a fraction, a unit, spaces inside),
// which A6 says to treat the same way. Spaces and tabs around the value are
// trimmed. A value too large for a time.Duration gives the largest one; a
// retry policy caps the wait with its MaxDelay anyway.
func ParsePushback(v string) (d time.Duration, retry bool) {
	s := trimOWS(v)
	if s == "" {
		return 0, false
	}
	var n int64
	over := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false // a negative value, or a malformed one
		}
		d := int64(c - '0')
		if over || n > (maxPushbackMillis-d)/10 {
			over = true // keep reading: a malformed tail still fails
			continue
		}
		n = n*10 + d
	}
	if over {
		return math.MaxInt64, true
	}
	return time.Duration(n) * time.Millisecond, true
}

// trimOWS removes the spaces and horizontal tabs around v.
func trimOWS(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}
