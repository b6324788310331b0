package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// The value stored under a key is one of
//
//	wt1:l:<token>:<lock end>:<fingerprint>   a claim: 32 hex digits of token, the lock's end, then the fingerprint as is
//	wt1:r:<record>                           a completed record, in the binary layout below
//	wt1:c:<token>:<fingerprint>              a claim written by an older version of the store
//
// A claim's Redis key lives for the result TTL; its lock ends when the key's
// PTTL has come down to the lock's end, a decimal number of milliseconds
// (the result TTL less the lock TTL): from then on the claim reads Unknown
// and its token owns nothing. An older version's claim (wt1:c:) lived only
// for its lock TTL and reads InFlight until Redis drops it.
//
// "wt1" is the encoding's version: a later layout gets another number, and
// this one refuses values it does not know instead of misreading them.
//
// A record is, in order, with varints as in encoding/binary:
//
//	varint   status
//	varint   created, Unix seconds
//	uvarint  created, nanoseconds within the second (< 1e9)
//	string   fingerprint
//	uvarint  number of header names, then for each:
//	           string name, uvarint number of values, each value a string
//	string   body
//
// where a string is a uvarint length followed by that many bytes. Nothing
// may follow the body. Bytes are kept as they are (no UTF-8 assumption), so
// any header value and body replay exactly.
const (
	claimTag    = "wt1:l:"
	oldClaimTag = "wt1:c:"
	recordTag   = "wt1:r:"
)

// encodeClaim returns the value of a claim held by token for a request with
// fingerprint fp, whose lock ends when the key's PTTL is down to lockEnd
// milliseconds.
func encodeClaim(token string, lockEnd int64, fp string) string {
	return claimPrefix(token) + strconv.FormatInt(lockEnd, 10) + ":" + fp
}

// claimPrefix returns the start of every claim value held by token: what
// the Complete and Release scripts compare.
func claimPrefix(token string) string {
	return claimTag + token + ":"
}

// encodeRecord returns the value that stores rec.
func encodeRecord(rec *idempotency.Record) []byte {
	n := len(recordTag) + 3*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + len(rec.Fingerprint) + len(rec.Body) + binary.MaxVarintLen64
	for k, vs := range rec.Header {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, recordTag...)
	b = binary.AppendVarint(b, int64(rec.Status))
	b = binary.AppendVarint(b, rec.Created.Unix())
	b = binary.AppendUvarint(b, uint64(rec.Created.Nanosecond()))
	b = appendString(b, rec.Fingerprint)
	b = binary.AppendUvarint(b, uint64(len(rec.Header)))
	for k, vs := range rec.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(rec.Body)))
	b = append(b, rec.Body...)
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeValue decodes a stored value whose Redis key has pttl milliseconds
// left (Redis's PTTL): a claim gives State InFlight with the claim's
// fingerprint while pttl is above its lock's end and Unknown after, a record
// gives State Completed with the record. The error says what is wrong with a
// value it cannot decode.
func decodeValue(v string, pttl int64) (idempotency.Claim, error) {
	switch {
	case strings.HasPrefix(v, claimTag):
		rest := v[len(claimTag):]
		if len(rest) < tokenLen+1 || rest[tokenLen] != ':' || !isToken(rest[:tokenLen]) {
			return idempotency.Claim{}, errors.New("malformed claim: want wt1:l:<32 hex digits>:<lock end>:<fingerprint>")
		}
		rest = rest[tokenLen+1:]
		i := strings.IndexByte(rest, ':')
		if i < 1 || i > 19 {
			return idempotency.Claim{}, errors.New("malformed claim: want wt1:l:<32 hex digits>:<lock end>:<fingerprint>")
		}
		lockEnd, err := strconv.ParseUint(rest[:i], 10, 63)
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("malformed claim: lock end %q is not a number of milliseconds", rest[:i])
		}
		c := idempotency.Claim{State: idempotency.InFlight, Fingerprint: rest[i+1:]}
		if pttl <= int64(lockEnd) {
			c.State = idempotency.Unknown
		}
		return c, nil
	case strings.HasPrefix(v, oldClaimTag):
		rest := v[len(claimTag):]
		if len(rest) < tokenLen+1 || rest[tokenLen] != ':' || !isToken(rest[:tokenLen]) {
			return idempotency.Claim{}, errors.New("malformed older claim: want wt1:c:<32 hex digits>:<fingerprint>")
		}
		return idempotency.Claim{State: idempotency.InFlight, Fingerprint: rest[tokenLen+1:]}, nil
	case strings.HasPrefix(v, recordTag):
		rec, err := decodeRecord([]byte(v[len(recordTag):]))
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("malformed record: %w", err)
		}
		return idempotency.Claim{State: idempotency.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
	case strings.HasPrefix(v, "wt1:"):
		return idempotency.Claim{}, fmt.Errorf("unknown value kind %q (want wt1:l:, wt1:r: or wt1:c:)", prefixOf(v, 6))
	}
	if ver, ok := version(v); ok {
		return idempotency.Claim{}, fmt.Errorf("unsupported encoding version %q: written by another version of redisstore", ver)
	}
	return idempotency.Claim{}, fmt.Errorf("not written by redisstore (starts %q)", prefixOf(v, 16))
}

// version returns the "wt<digits>" that starts v, if it starts so and a
// colon follows.
func version(v string) (string, bool) {
	if !strings.HasPrefix(v, "wt") {
		return "", false
	}
	i := 2
	for i < len(v) && i < 12 && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == 2 || i >= len(v) || v[i] != ':' {
		return "", false
	}
	return v[:i], true
}

func prefixOf(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// decoder reads the record layout from b; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad or truncated " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad or truncated " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-prefixed run of bytes, aliasing d.b.
func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%s length %d is past the end (%d bytes left)", what, n, len(d.b)))
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// count reads a number of elements that each take at least one more byte,
// so a corrupt count cannot make the decoder allocate more than the value
// could hold.
func (d *decoder) count(what string) int {
	n := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%s %d is more than the %d bytes left", what, n, len(d.b)))
		return 0
	}
	return int(n)
}

// decodeRecord decodes the record layout. The record's Body aliases b.
func decodeRecord(b []byte) (*idempotency.Record, error) {
	d := decoder{b: b}
	status := d.varint("status")
	sec := d.varint("created seconds")
	nsec := d.uvarint("created nanoseconds")
	fp := d.bytes("fingerprint")
	nh := d.count("header count")
	var h http.Header
	if nh > 0 {
		h = make(http.Header, nh)
	}
	for i := 0; i < nh && d.err == nil; i++ {
		k := string(d.bytes("header name"))
		nv := d.count("header value count")
		if d.err != nil {
			break
		}
		vs := make([]string, nv)
		for j := range vs {
			vs[j] = string(d.bytes("header value"))
		}
		h[k] = vs
	}
	body := d.bytes("body")
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case len(d.b) != 0:
		return nil, fmt.Errorf("%d unexpected bytes after the body", len(d.b))
	case status < math.MinInt || status > math.MaxInt:
		return nil, fmt.Errorf("status %d out of range", status)
	case nsec >= 1e9:
		return nil, fmt.Errorf("created nanoseconds %d out of range", nsec)
	}
	if len(body) == 0 {
		body = nil
	}
	return &idempotency.Record{
		Fingerprint: string(fp),
		Status:      int(status),
		Header:      h,
		Body:        body,
		Created:     time.Unix(sec, int64(nsec)),
	}, nil
}
