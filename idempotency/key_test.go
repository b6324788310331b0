package idempotency_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/idempotency"
)

func TestNewKeyIsARandomUUIDv4(t *testing.T) {
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool)
	for range 10000 {
		k := idempotency.NewKey()
		if !uuid4.MatchString(k) {
			t.Fatalf("NewKey() = %q, not a version 4 UUID", k)
		}
		if seen[k] {
			t.Fatalf("NewKey() repeated %q", k)
		}
		seen[k] = true
		if got, err := idempotency.ParseKey(idempotency.FormatKey(k)); err != nil || got != k {
			t.Fatalf("ParseKey(FormatKey(%q)) = %q, %v", k, got, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	const uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	ok := []struct{ in, want string }{
		{`"` + uuid + `"`, uuid}, // the draft's form
		{uuid, uuid},             // leniently, unquoted
		{`  "` + uuid + "\"\t", uuid},
		{" \t" + uuid + " ", uuid},
		{`"a b"`, "a b"}, // spaces are fine inside quotes
		{`"q\"uote\\back"`, `q"uote\back`},
		{`"~!#$%&'()*+,-./:;<=>?@[]^_{|}` + "`" + `"`, "~!#$%&'()*+,-./:;<=>?@[]^_{|}`"},
		{`"k";a`, "k"}, // parameters are valid Structured-Field syntax, ignored
		{`"k";a=1;b="x\"y";c=?0;d=:aGk=:;e=tok/en:x;f=-1.5;*g`, "k"},
		{`"k"; a=1`, "k"},
		{`abc;def`, "abc;def"}, // an unquoted key is taken whole
		{`a\b`, `a\b`},
		{`"` + strings.Repeat("x", 255) + `"`, strings.Repeat("x", 255)},
		{strings.Repeat("y", 255), strings.Repeat("y", 255)},
		{`"` + strings.Repeat(`\"`, 255) + `"`, strings.Repeat(`"`, 255)}, // the limit counts the key, not the escapes
	}
	for _, tc := range ok {
		got, err := idempotency.ParseKey(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	bad := []struct {
		in   string
		want error
		says string
	}{
		{"", idempotency.ErrKeyEmpty, "empty"},
		{"  \t ", idempotency.ErrKeyEmpty, "empty"},
		{`""`, idempotency.ErrKeyEmpty, "quoted string is empty"},
		{`"` + strings.Repeat("x", 256) + `"`, idempotency.ErrKeyTooLong, "longer than 255"},
		{strings.Repeat("y", 256), idempotency.ErrKeyTooLong, "256 bytes long, more than 255"},
		{`"abc`, idempotency.ErrKeySyntax, "no closing quote"},
		{`"abc\`, idempotency.ErrKeySyntax, "lone backslash"},
		{`"a\b"`, idempotency.ErrKeySyntax, "backslash may only escape"},
		{"\"a\x00b\"", idempotency.ErrKeySyntax, "byte 0x00"},
		{"\"a\nb\"", idempotency.ErrKeySyntax, "byte 0x0A"},
		{"\"é\"", idempotency.ErrKeySyntax, "printable ASCII"},
		{"\"a\x7fb\"", idempotency.ErrKeySyntax, "byte 0x7F"},
		{"a\x01b", idempotency.ErrKeySyntax, "printable ASCII"},
		{"ключ", idempotency.ErrKeySyntax, "printable ASCII"},
		{"a b", idempotency.ErrKeySyntax, "cannot contain spaces"},
		{"a,b", idempotency.ErrKeySyntax, "more than one key"},
		{"a, b", idempotency.ErrKeySyntax, "more than one key"},
		{`a"b`, idempotency.ErrKeySyntax, "cannot contain '\"'"},
		{`"a", "b"`, idempotency.ErrKeySyntax, "more than one item"},
		{`"a","b"`, idempotency.ErrKeySyntax, "more than one item"},
		{`"a"b`, idempotency.ErrKeySyntax, "after the closing quote"},
		{`"a" b`, idempotency.ErrKeySyntax, "after the closing quote"},
		{`"a";`, idempotency.ErrKeySyntax, "parameter"},
		{`"a";A=1`, idempotency.ErrKeySyntax, "lowercase"},
		{`"a";x=`, idempotency.ErrKeySyntax, "invalid empty"},
		{`"a";x=1234567890123456`, idempotency.ErrKeySyntax, "integer"},
		{`"a";x=1.`, idempotency.ErrKeySyntax, "number"},
		{`"a";x=1.2345`, idempotency.ErrKeySyntax, "decimal"},
		{`"a";x="unterminated`, idempotency.ErrKeySyntax, "string"},
		{`"a";x=:bad!:`, idempotency.ErrKeySyntax, "byte sequence"},
		{`"a";x=?2`, idempotency.ErrKeySyntax, "boolean"},
		{`"a";x=@`, idempotency.ErrKeySyntax, "parameter"},
	}
	for _, tc := range bad {
		got, err := idempotency.ParseKey(tc.in)
		if got != "" || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseKey(%q) = %q, %v; want an error matching %v that says %q", tc.in, got, err, tc.want, tc.says)
			continue
		}
		if !strings.HasPrefix(err.Error(), "idempotency: ") {
			t.Errorf("ParseKey(%q): error %q lacks the package prefix", tc.in, err)
		}
		if strings.ContainsAny(err.Error(), "\x00\n\x01\x7f") {
			t.Errorf("ParseKey(%q): error %q echoes a control character", tc.in, err)
		}
	}
}

func TestParseKeyMax(t *testing.T) {
	if k, err := idempotency.ParseKeyMax(`"abcd"`, 4); err != nil || k != "abcd" {
		t.Fatalf("ParseKeyMax(4) of 4 bytes = %q, %v", k, err)
	}
	for _, v := range []string{`"abcde"`, "abcde"} {
		if _, err := idempotency.ParseKeyMax(v, 4); !errors.Is(err, idempotency.ErrKeyTooLong) || !strings.Contains(err.Error(), "4") {
			t.Fatalf("ParseKeyMax(%q, 4) = %v, want ErrKeyTooLong naming the limit", v, err)
		}
	}
	long := strings.Repeat("z", 1000)
	if k, err := idempotency.ParseKeyMax(long, 0); !errors.Is(err, idempotency.ErrKeyTooLong) || k != "" {
		t.Fatalf("ParseKeyMax(_, 0) takes the default limit: got %q, %v", k, err)
	}
	if k, err := idempotency.ParseKeyMax(long, 1000); err != nil || k != long {
		t.Fatalf("ParseKeyMax(_, 1000) = %v", err)
	}
}

func TestFormatKey(t *testing.T) {
	for in, want := range map[string]string{
		"abc":         `"abc"`,
		`q"b\`:        `"q\"b\\"`,
		"a b":         `"a b"`,
		"tab\there":   `"tab?here"`,
		"ünï":         `"??n??"`,
		"":            `""`,
		"8e03978e-40": `"8e03978e-40"`,
	} {
		if got := idempotency.FormatKey(in); got != want {
			t.Errorf("FormatKey(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestKeyMissingIsARejection(t *testing.T) {
	if !watertight.IsRejection(idempotency.ErrKeyMissing) {
		t.Fatal("ErrKeyMissing is not a rejection")
	}
	if !watertight.IsSaturation(idempotency.ErrFull) {
		t.Fatal("ErrFull is not a saturation")
	}
}
