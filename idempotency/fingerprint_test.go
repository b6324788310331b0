package idempotency_test

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/watertight-go/watertight/idempotency"
)

func TestFingerprint(t *testing.T) {
	fp := idempotency.Fingerprint("POST", "/charges?x=1", []byte(`{"amount":100}`))
	if !strings.HasPrefix(fp, idempotency.FingerprintPrefix) || len(fp) != len(idempotency.FingerprintPrefix)+43 {
		t.Fatalf("Fingerprint = %q: wrong shape", fp)
	}
	// The documented encoding.
	in := append([]byte{4}, "POST"...)
	in = append(in, 12)
	in = append(in, "/charges?x=1"...)
	in = append(in, `{"amount":100}`...)
	sum := sha256.Sum256(in)
	if want := "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:]); fp != want {
		t.Fatalf("Fingerprint = %q, want %q", fp, want)
	}
	if fp != idempotency.Fingerprint("POST", "/charges?x=1", []byte(`{"amount":100}`)) {
		t.Fatal("Fingerprint is not deterministic")
	}
	// Each part counts, and the boundaries between parts count.
	others := [][3]string{
		{"PUT", "/charges?x=1", `{"amount":100}`},
		{"post", "/charges?x=1", `{"amount":100}`},
		{"POST", "/charges?x=2", `{"amount":100}`},
		{"POST", "/charges?x=1", `{"amount":101}`},
		{"POST", "/charges?x=1", `{"amount": 100}`},
		{"POST", "/charges?x=1{", `"amount":100}`},
		{"POST/", "charges?x=1", `{"amount":100}`},
		{"", "POST/charges?x=1", `{"amount":100}`},
	}
	for _, o := range others {
		if idempotency.Fingerprint(o[0], o[1], []byte(o[2])) == fp {
			t.Errorf("Fingerprint%q equals the original's", o)
		}
	}
	// A nil body and an empty body are the same request.
	if idempotency.Fingerprint("POST", "/", nil) != idempotency.Fingerprint("POST", "/", []byte{}) {
		t.Error("nil and empty bodies differ")
	}
	// A path of 128 bytes or more takes a two-byte length.
	long := strings.Repeat("p", 200)
	if idempotency.Fingerprint("POST", long, []byte("b")) == idempotency.Fingerprint("POST", long+"b", nil) {
		t.Error("long path boundary is ambiguous")
	}
}
