package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/idempotency"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`""`, "", " ", `"a\"b\\c"`, `"a\b"`, `"abc`, `"abc\`, `"k";a=1;b="x";c=?1;d=:YQ==:;e=tok;f=-1.5`,
		`"a", "b"`, "a,b", "a b", "\"a\x00\"", "é", `"a";`, `"a";x=1.`, `"a";x=12345678901234567`,
		strings.Repeat("x", 256), `"` + strings.Repeat(`\\`, 300) + `"`, "\t\"k\" ",
	} {
		f.Add(s, 0)
	}
	f.Add("abcdef", 3)
	f.Fuzz(func(t *testing.T, v string, maxLen int) {
		if maxLen > 1<<16 || maxLen < -1 {
			maxLen = 0
		}
		limit := maxLen
		if limit <= 0 {
			limit = idempotency.DefaultMaxKeyLength
		}
		k, err := idempotency.ParseKeyMax(v, maxLen)
		if err != nil {
			if k != "" {
				t.Fatalf("ParseKeyMax(%q) = %q with error %v", v, k, err)
			}
			if !errors.Is(err, idempotency.ErrKeyEmpty) && !errors.Is(err, idempotency.ErrKeyTooLong) && !errors.Is(err, idempotency.ErrKeySyntax) {
				t.Fatalf("ParseKeyMax(%q): error %v matches no sentinel", v, err)
			}
			for i := 0; i < len(err.Error()); i++ {
				if c := err.Error()[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("ParseKeyMax(%q): error %q holds byte 0x%02x", v, err, c)
				}
			}
			return
		}
		if k == "" || len(k) > limit {
			t.Fatalf("ParseKeyMax(%q, %d) = %q: length %d outside [1, %d]", v, maxLen, k, len(k), limit)
		}
		for i := 0; i < len(k); i++ {
			if c := k[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("ParseKeyMax(%q) = %q: byte 0x%02x is not printable ASCII", v, k, c)
			}
		}
		// The canonical form reads back as the same key, and so does the
		// key alone when it has no character that needs quoting.
		if k2, err := idempotency.ParseKeyMax(idempotency.FormatKey(k), maxLen); err != nil || k2 != k {
			t.Fatalf("ParseKeyMax(FormatKey(%q)) = %q, %v", k, k2, err)
		}
		if !strings.ContainsAny(k, " \",") {
			if k2, err := idempotency.ParseKeyMax(k, maxLen); err != nil || k2 != k {
				t.Fatalf("ParseKeyMax(%q) unquoted = %q, %v", k, k2, err)
			}
		}
		// A quoted value holds the key; an unquoted one is the key.
		tv := strings.Trim(v, " \t")
		if tv[0] != '"' && tv != k {
			t.Fatalf("ParseKeyMax(%q) = %q, want the trimmed value", v, k)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/charges", []byte(`{"amount":1}`), "POST", "/charges", []byte(`{"amount":2}`))
	f.Add("POST", "/ab", []byte("c"), "POST", "/a", []byte("bc"))
	f.Add("POST/", "x", []byte{}, "POST", "/x", []byte(nil))
	f.Add("", "", []byte{0}, "", "\x00", []byte{})
	f.Add("PATCH", strings.Repeat("/", 127), []byte("x"), "PATCH", strings.Repeat("/", 128), []byte(""))
	f.Fuzz(func(t *testing.T, m1, p1 string, b1 []byte, m2, p2 string, b2 []byte) {
		f1, f2 := idempotency.Fingerprint(m1, p1, b1), idempotency.Fingerprint(m2, p2, b2)
		same := m1 == m2 && p1 == p2 && string(b1) == string(b2)
		if same != (f1 == f2) {
			t.Fatalf("Fingerprint(%q, %q, %q) = %s and Fingerprint(%q, %q, %q) = %s", m1, p1, b1, f1, m2, p2, b2, f2)
		}
		if !strings.HasPrefix(f1, idempotency.FingerprintPrefix) || len(f1) != len(idempotency.FingerprintPrefix)+43 {
			t.Fatalf("Fingerprint = %q: wrong shape", f1)
		}
	})
}
