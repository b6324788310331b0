package idempotency

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxKeyLength is the longest key ParseKey accepts, in bytes (after
// removing the quotes and escapes of a Structured-Field String). Stripe and
// most APIs that take an Idempotency-Key use the same limit.
const DefaultMaxKeyLength = 255

// Errors of ParseKey and ParseKeyMax. Each returned error wraps one of them
// and says, in words, what was wrong with the value; compare with errors.Is.
var (
	// ErrKeyEmpty: the header is present but holds no key (blank, or "").
	ErrKeyEmpty = errors.New("idempotency: Idempotency-Key is empty")
	// ErrKeyTooLong: the key is longer than the limit.
	ErrKeyTooLong = errors.New("idempotency: Idempotency-Key is too long")
	// ErrKeySyntax: the value is neither a Structured-Field String nor a
	// bare run of visible ASCII characters: a control character, a byte
	// outside ASCII, an unterminated string, a bad escape, text after the
	// string, or several keys.
	ErrKeySyntax = errors.New("idempotency: Idempotency-Key is malformed")
)

// NewKey returns a new random idempotency key: a version 4 UUID
// ("8e03978e-40d5-43e8-bc93-6894a57f9324"), 122 random bits from
// crypto/rand, as the draft recommends. It cannot be guessed, so a key
// alone never lets one caller reach another's stored result (the server
// scopes keys by caller as well).
//
// Make one key per logical operation (one payment, one order) and send the
// same key on every attempt of that operation. A new key for a retry makes
// the retry a new operation, which is exactly what idempotency keys exist to
// prevent.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // never fails (crypto/rand, Go >= 1.24)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// FormatKey returns key as the value of an Idempotency-Key header: a
// Structured-Field String (RFC 8941 §3.3.3), that is the key in double
// quotes with '"' and '\' escaped by a backslash. key must be printable
// ASCII (0x20 to 0x7E), as ParseKey returns and NewKey makes; any other
// byte is replaced by '?' so that the header stays valid.
func FormatKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ParseKey reads the value of an Idempotency-Key header with the default
// length limit (DefaultMaxKeyLength); see ParseKeyMax.
func ParseKey(headerValue string) (string, error) {
	return ParseKeyMax(headerValue, DefaultMaxKeyLength)
}

// ParseKeyMax reads the value of an Idempotency-Key header and returns the
// key, at most maxLen bytes long (maxLen <= 0 means DefaultMaxKeyLength).
//
// The draft (draft-ietf-httpapi-idempotency-key-header) makes the header a
// Structured-Field Item whose value is a String (RFC 8941):
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// ParseKeyMax follows RFC 8941's parsing of an Item: spaces around the
// value are ignored; inside the quotes, printable ASCII (0x20 to 0x7E) is
// allowed, and '"' and '\' must be escaped with a backslash; parameters
// after the string (`;name=value`) are valid Structured-Field syntax and
// are checked and ignored (the draft defines none).
//
// Leniently, it also accepts the key without quotes, as many clients send
// it (Stripe's documentation shows it so):
//
//	Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
//
// An unquoted key is everything between the surrounding spaces, and must be
// visible ASCII (0x21 to 0x7E) with no space, no '"' and no ',' (a comma is
// what a client that sent the header twice produces). The quoted and
// unquoted forms of the same key are the same key.
//
// The error, which wraps ErrKeyEmpty, ErrKeyTooLong or ErrKeySyntax, says
// what was wrong in words fit to send back to the client: its message
// quotes no part of the value.
func ParseKeyMax(headerValue string, maxLen int) (string, error) {
	if maxLen <= 0 {
		maxLen = DefaultMaxKeyLength
	}
	v := strings.Trim(headerValue, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: send a key such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"", ErrKeyEmpty)
	}
	if v[0] != '"' {
		return parseBare(v, maxLen)
	}
	// An sf-string: find its end and check it, counting the key's bytes;
	// unescape only when it has escapes.
	n, escapes := 0, false
	i := 1
	for ; ; i++ {
		if i >= len(v) {
			return "", fmt.Errorf("%w: the quoted string has no closing quote", ErrKeySyntax)
		}
		c := v[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			i++
			if i >= len(v) {
				return "", fmt.Errorf("%w: the quoted string ends in a lone backslash", ErrKeySyntax)
			}
			if c = v[i]; c != '"' && c != '\\' {
				return "", fmt.Errorf("%w: in a quoted string, a backslash may only escape '\"' or '\\' (found one before %s)", ErrKeySyntax, describeByte(c))
			}
			escapes = true
		} else if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: the key may hold only printable ASCII characters, found %s at byte %d", ErrKeySyntax, describeByte(c), i)
		}
		if n++; n > maxLen {
			return "", fmt.Errorf("%w: the key is longer than %d bytes", ErrKeyTooLong, maxLen)
		}
	}
	if err := checkParams(v[i+1:]); err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("%w: the quoted string is empty; send a key such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"", ErrKeyEmpty)
	}
	if !escapes {
		return v[1:i], nil
	}
	b := make([]byte, 0, n)
	for j := 1; j < i; j++ {
		if v[j] == '\\' {
			j++
		}
		b = append(b, v[j])
	}
	return string(b), nil
}

// parseBare checks an unquoted key (already trimmed, not empty).
func parseBare(v string, maxLen int) (string, error) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == ' ' || c == '\t':
			return "", fmt.Errorf("%w: an unquoted key cannot contain spaces; send the key as a quoted string", ErrKeySyntax)
		case c == ',':
			return "", fmt.Errorf("%w: the value holds more than one key (a comma); send exactly one Idempotency-Key", ErrKeySyntax)
		case c == '"':
			return "", fmt.Errorf("%w: an unquoted key cannot contain '\"'; send the key as a quoted string with the quote escaped", ErrKeySyntax)
		case c < 0x21 || c > 0x7e:
			return "", fmt.Errorf("%w: the key may hold only printable ASCII characters, found %s at byte %d", ErrKeySyntax, describeByte(c), i)
		}
	}
	if len(v) > maxLen {
		return "", fmt.Errorf("%w: the key is %d bytes long, more than %d", ErrKeyTooLong, len(v), maxLen)
	}
	return v, nil
}

// checkParams checks what follows the closing quote of an sf-string:
// optional spaces, then zero or more parameters (RFC 8941 §3.1.2):
// ";" *SP key [ "=" bare-item ], and nothing else.
func checkParams(s string) error {
	for {
		if s == "" {
			return nil
		}
		if s[0] != ';' {
			if strings.HasPrefix(strings.TrimLeft(s, " \t"), ",") {
				return fmt.Errorf("%w: the value holds more than one item (a comma); send exactly one Idempotency-Key", ErrKeySyntax)
			}
			return fmt.Errorf("%w: unexpected text after the closing quote", ErrKeySyntax)
		}
		s = strings.TrimLeft(s[1:], " ")
		// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
		if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
			return fmt.Errorf("%w: a parameter after the key must start with a lowercase letter or '*'", ErrKeySyntax)
		}
		j := 1
		for j < len(s) && isKeyChar(s[j]) {
			j++
		}
		s = s[j:]
		if s != "" && s[0] == '=' {
			n, err := bareItemLen(s[1:])
			if err != nil {
				return err
			}
			s = s[1+n:]
		}
	}
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*'
}

// bareItemLen returns the length of the bare item (RFC 8941 §3.3) that s
// starts with: a number, a string, a token, a byte sequence or a boolean.
func bareItemLen(s string) (int, error) {
	bad := func(what string) (int, error) {
		return 0, fmt.Errorf("%w: a parameter after the key has an invalid %s value", ErrKeySyntax, what)
	}
	if s == "" {
		return bad("empty")
	}
	switch c := s[0]; {
	case c == '-' || c >= '0' && c <= '9':
		j := 0
		if c == '-' {
			j = 1
		}
		start, dot := j, -1
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' && dot < 0) {
			if s[j] == '.' {
				dot = j
			}
			j++
		}
		digits := j - start
		switch {
		case digits == 0 || dot == j-1:
			return bad("number")
		case dot < 0 && digits > 15:
			return bad("integer")
		case dot >= 0 && (dot-start > 12 || j-dot-1 > 3):
			return bad("decimal")
		}
		return j, nil
	case c == '"':
		for j := 1; j < len(s); j++ {
			switch d := s[j]; {
			case d == '"':
				return j + 1, nil
			case d == '\\':
				j++
				if j >= len(s) || s[j] != '"' && s[j] != '\\' {
					return bad("string")
				}
			case d < 0x20 || d > 0x7e:
				return bad("string")
			}
		}
		return bad("string")
	case c == ':':
		for j := 1; j < len(s); j++ {
			d := s[j]
			if d == ':' {
				return j + 1, nil
			}
			if !(d >= 'A' && d <= 'Z' || d >= 'a' && d <= 'z' || d >= '0' && d <= '9' || d == '+' || d == '/' || d == '=') {
				return bad("byte sequence")
			}
		}
		return bad("byte sequence")
	case c == '?':
		if len(s) >= 2 && (s[1] == '0' || s[1] == '1') {
			return 2, nil
		}
		return bad("boolean")
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		j := 1
		for j < len(s) && isTokenChar(s[j]) {
			j++
		}
		return j, nil
	}
	return bad("parameter")
}

// isTokenChar reports whether c is a tchar, ':' or '/' (RFC 8941 sf-token).
func isTokenChar(c byte) bool {
	if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// describeByte names c for an error message without echoing a control
// character or a byte outside ASCII.
func describeByte(c byte) string {
	if c >= 0x21 && c <= 0x7e {
		return strconv.QuoteRune(rune(c))
	}
	if c == ' ' {
		return "a space"
	}
	return fmt.Sprintf("byte 0x%02X", c)
}
