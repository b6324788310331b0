package redisstore

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

func testRecord() idempotency.Record {
	return idempotency.Record{
		Fingerprint: "POST /pay sha256:abc",
		Status:      201,
		Header:      http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "X-Empty": {""}},
		Body:        []byte("{\"ok\":true}\x00\xff"),
		Created:     time.Date(2026, 11, 30, 12, 0, 0, 999999999, time.UTC),
	}
}

// equalRecords compares records by meaning: nil and empty bodies and
// headers are the same, times are compared as instants.
func equalRecords(a, b *idempotency.Record) bool {
	if a.Fingerprint != b.Fingerprint || a.Status != b.Status || !bytes.Equal(a.Body, b.Body) ||
		!a.Created.Equal(b.Created) || len(a.Header) != len(b.Header) {
		return false
	}
	for k, va := range a.Header {
		vb, ok := b.Header[k]
		if !ok || len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

func TestRecordRoundTrip(t *testing.T) {
	for _, rec := range []idempotency.Record{
		testRecord(),
		{},
		{Status: -1, Created: time.Unix(0, 0)},
		{Status: 200, Created: time.Unix(-1, 5)},
		{Status: 599, Fingerprint: strings.Repeat("f", 300), Body: bytes.Repeat([]byte{0}, 70000)},
	} {
		v := string(encodeRecord(&rec))
		c, err := decodeValue(v, 1000)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", rec, err)
		}
		if c.State != idempotency.Completed || c.Fingerprint != rec.Fingerprint || !equalRecords(c.Record, &rec) {
			t.Fatalf("round trip of %+v gave %+v", rec, c)
		}
	}
	// The zero time stays the zero time.
	c, _ := decodeValue(string(encodeRecord(&idempotency.Record{})), 1000)
	if !c.Record.Created.IsZero() || c.Record.Body != nil || c.Record.Header != nil {
		t.Fatalf("zero record decoded as %+v", *c.Record)
	}
}

func TestClaimValue(t *testing.T) {
	tok := newToken()
	if !isToken(tok) || tok == newToken() {
		t.Fatalf("newToken gave %q", tok)
	}
	for _, fp := range []string{"", "fp", "a:b:c", "12:34", "\x00\xff"} {
		v := encodeClaim(tok, 5000, fp)
		if !strings.HasPrefix(v, claimPrefix(tok)) {
			t.Fatalf("claim %q does not start with its prefix", v)
		}
		// The lock runs while the key's PTTL is above the lock's end, and
		// has ended from then on: the claim is Unknown.
		for pttl, want := range map[int64]idempotency.ClaimState{
			86_400_000: idempotency.InFlight, 5001: idempotency.InFlight,
			5000: idempotency.Unknown, 1: idempotency.Unknown, -1: idempotency.Unknown,
		} {
			c, err := decodeValue(v, pttl)
			if err != nil || c.State != want || c.Fingerprint != fp || c.Token != "" || c.Record != nil {
				t.Fatalf("decode(claim %q, PTTL %d) = %+v, %v; want %v", v, pttl, c, err, want)
			}
		}
	}
	// A claim with no time after its lock: in flight until Redis drops it.
	if c, err := decodeValue(encodeClaim(tok, 0, "fp"), 1); err != nil || c.State != idempotency.InFlight {
		t.Fatalf("decode(claim with lock end 0, PTTL 1) = %+v, %v; want in flight", c, err)
	}
	// An older version's claim reads in flight whatever its PTTL.
	if c, err := decodeValue(oldClaimTag+tok+":fp", 1); err != nil || c.State != idempotency.InFlight || c.Fingerprint != "fp" {
		t.Fatalf("decode(older claim) = %+v, %v; want in flight with fp", c, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := string(encodeRecord(&idempotency.Record{Status: 200, Fingerprint: "fp", Header: http.Header{"A": {"b"}}, Body: []byte("body")}))
	for _, tc := range []struct{ v, want string }{
		{"", "not written by redisstore"},
		{"{\"json\":1}", "not written by redisstore"},
		{"wt", "not written by redisstore"},
		{"wt:", "not written by redisstore"},
		{"wt12:c:x", `unsupported encoding version "wt12"`},
		{"wt1:", "unknown value kind"},
		{"wt1:c:", "malformed older claim"},
		{"wt1:c:" + strings.Repeat("a", 32), "malformed older claim"},
		{"wt1:c:" + strings.Repeat("a", 32) + "x", "malformed older claim"},
		{"wt1:c:" + strings.Repeat("g", 32) + ":", "malformed older claim"},
		{"wt1:l:", "malformed claim"},
		{"wt1:l:" + strings.Repeat("a", 32) + ":", "malformed claim"},
		{"wt1:l:" + strings.Repeat("a", 32) + ":fp", "malformed claim"},
		{"wt1:l:" + strings.Repeat("a", 32) + "::fp", "malformed claim"},
		{"wt1:l:" + strings.Repeat("a", 32) + ":-5:fp", "lock end \"-5\" is not a number"},
		{"wt1:l:" + strings.Repeat("a", 32) + ":99999999999999999999:fp", "malformed claim"},
		{"wt1:l:" + strings.Repeat("g", 32) + ":5:fp", "malformed claim"},
		{"wt1:r:", "bad or truncated status"},
		{good[:len(good)-1], "body length 4 is past the end"},
		{good + "\x00", "1 unexpected bytes after the body"},
		{recordTag + "\x00\x00\x00\xff\xff\xff\xff\x0f", "fingerprint length 4294967295 is past the end"},
		{recordTag + "\x00\x00\x00\x00\xff\xff\xff\xff\x0f", "header count 4294967295 is more than"},
		{recordTag + "\x00\x00\x80\x94\xeb\xdc\x03\x00\x00\x00", "created nanoseconds 1000000000 out of range"},
	} {
		_, err := decodeValue(tc.v, 1000)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeValue(%q) err = %v, want %q", tc.v, err, tc.want)
		}
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Nanosecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 1, time.Second: 1000} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}

// FuzzDecodeValue feeds arbitrary stored values to the decoder: it must
// never panic or allocate wildly, and whatever it accepts must encode back
// to a value that decodes to the same thing.
func FuzzDecodeValue(f *testing.F) {
	rec := testRecord()
	f.Add(string(encodeRecord(&rec)), int64(1000))
	f.Add(string(encodeRecord(&idempotency.Record{})), int64(1000))
	f.Add(encodeClaim(strings.Repeat("0", 32), 5000, "POST /x"), int64(6000))
	f.Add(encodeClaim(strings.Repeat("0", 32), 5000, "POST /x"), int64(5000))
	f.Add("wt1:c:"+strings.Repeat("0", 32)+":fp", int64(1))
	f.Add("wt1:r:\x00\x00\x00\x00\x02\x01a\x01\x01b\x01c\x00", int64(1000))
	f.Add("wt2:r:", int64(1000))
	f.Add("garbage", int64(-1))
	f.Fuzz(func(t *testing.T, v string, pttl int64) {
		c, err := decodeValue(v, pttl)
		if err != nil {
			if c.State != 0 {
				t.Fatalf("error %v with state %v", err, c.State)
			}
			return
		}
		switch c.State {
		case idempotency.InFlight, idempotency.Unknown:
			if c.Record != nil || !strings.HasSuffix(v, c.Fingerprint) {
				t.Fatalf("claim %q decoded as %+v", v, c)
			}
		case idempotency.Completed:
			again, err := decodeValue(string(encodeRecord(c.Record)), pttl)
			if err != nil || !equalRecords(again.Record, c.Record) || again.Fingerprint != c.Fingerprint {
				t.Fatalf("re-encoding %+v: %+v, %v", *c.Record, again, err)
			}
		default:
			t.Fatalf("state %v", c.State)
		}
	})
}

// FuzzRecordRoundTrip builds records from arbitrary parts: each must come
// back exactly.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("fp", 200, "Content-Type", "text/plain", []byte("hi"), int64(1764504000), int64(5))
	f.Add("", -7, "", "", []byte(nil), int64(-62135596800), int64(0))
	f.Fuzz(func(t *testing.T, fp string, status int, hk, hv string, body []byte, sec, nsec int64) {
		rec := idempotency.Record{Fingerprint: fp, Status: status, Header: http.Header{hk: {hv, hv + "2"}}, Body: body, Created: time.Unix(sec, nsec)}
		c, err := decodeValue(string(encodeRecord(&rec)), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if !equalRecords(c.Record, &rec) {
			t.Fatalf("%+v came back as %+v", rec, *c.Record)
		}
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	rec := testRecord()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = encodeRecord(&rec)
		}
	})
}

func BenchmarkDecodeRecord(b *testing.B) {
	rec := testRecord()
	v := string(encodeRecord(&rec))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := decodeValue(v, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}
